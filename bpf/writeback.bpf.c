// SPDX-License-Identifier: GPL-2.0
/* Writeback and dirty throttling behind a traced thread's writes (issue 5, item 6), aggregated in
 * the kernel per backing device (bdi) of the filesystems under test and per workload phase:
 *
 *  - balance_dirty_pages pauses: the tracepoint fires in the dirtying task just before it sleeps
 *    in io_schedule_timeout(pause); the sleep itself is timed up to the task's next switch-in by
 *    syscalls.bpf.c's on_switch (pause_begin, pause_switch: bpf/shared_maps.h).
 *  - global_dirty_state: the global dirty thresholds each time the kernel computes them.
 *  - flusher work by reason: writeback_start/_written bracket one pass of wb_writeback() in the
 *    flusher's kworker; passes of one work item form a run; writeback_pages_written ends a
 *    wb_do_writeback() call with the pages it wrote.
 *  - inode writeback started by whom (sb_mark_inode_writeback: an inode gets its first folio under
 *    writeback), inodes written by the flusher (writeback_single_inode), folio writeback waits.
 *
 * Userspace (profiler/behind/writeback.py) names the bdis under test: "major:minor" of a disk, or a
 * filesystem's own bdi such as btrfs's "btrfs-N". Nothing of other devices is recorded. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "compat.h"
#include <bpf/bpf_tracing.h>
#include "fsprof.h"
#include "shared_maps.h"

char LICENSE[] SEC("license") = "GPL";

#define BDI_NAME_LEN 32         /* the tracepoints' char bdi[32] / name[32] */
#define BDEVFS_MAGIC 0x62646576 /* the bdev pseudo filesystem's s_magic (include/uapi/linux/magic.h) */
#define KBPS_SHIFT 2            /* the tracepoints' KBps(x): x << (PAGE_SHIFT - 10), 4 KiB pages */

/* Who ran an event (who ran the syscall: saved user registers' orig_ax, as in bpf/ext4.bpf.c). */
enum wb_who {
	WHO_SYSCALL = 0, /* a user thread inside syscall `nr` */
	WHO_USER = 1,    /* a user thread outside a syscall (a page fault of an mmap write) */
	WHO_FLUSHER = 2, /* the flusher: a kworker inside a wb_writeback() pass */
	WHO_KTHREAD = 3, /* another kernel thread (jbd2, a filesystem worker, ...) */
};

/* Inode-level events, by who ran them. */
enum inode_event {
	INODE_WB_STARTED = 0, /* sb_mark_inode_writeback: the inode's first folio went under writeback */
	INODE_WRITTEN = 1,    /* writeback_single_inode: one inode written (pages = its `wrote`) */
	FOLIO_WAITED = 2,     /* folio_wait_writeback: a thread waited for a folio under writeback */
};

struct bdi_name {
	char name[BDI_NAME_LEN];
};

/* The bdis under test: name -> id (1..), filled by userspace. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct bdi_name);
	__type(value, __u32);
} traced_bdis SEC(".maps");

/* bdi id -> the superblock (kernel dev_t) writing through it first, for its flusher's windows. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} bdi_sb SEC(".maps");

/* Superblocks under test: s_dev (kernel dev_t) -> the id of their bdi. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} traced_sbs SEC(".maps");

/* ---- dirty throttling ---- */

struct throttle_val {
	__u64 checks;                           /* tracepoint hits: pause <= 0 means the task was let go at once */
	__u64 sleeps;                           /* pause > 0: the task slept */
	__u64 planned_ms;                       /* sum of the planned pauses (ms, jiffy-granular) */
	__u64 dirtied;                          /* pages the tasks dirtied since their previous pause */
	__u64 last_ns;                          /* time of the newest hit, to pick the last figures across CPUs */
	__u64 limit_last, limit_min, limit_max; /* pages: hard limit (max of thresh and dirty_limit) */
	__u64 setpoint_last;                    /* pages: where the control line balances */
	__u64 dirty_last, dirty_min, dirty_max, dirty_sum; /* pages dirty + under writeback, globally */
	__u64 wb_dirty_last, wb_setpoint_last;             /* the same for this bdi's writeback */
	__u64 task_ratelimit_last, dirty_ratelimit_last;   /* KB/s the task may dirty at */
}; /* The pauses' sleeps and those not seen: pause_slept (bpf/shared_maps.h), by the same key. */

/* One value for all CPUs, with atomic adds (the pauses are few): per CPU, its values (4.9 KB while
 * they held the sleep histogram) made 5 MB per CPU, 320 MB on 64 CPUs, and 10 ms of every start on
 * 2. The "last" figures of two tasks pausing at the same instant can mix; each is one the kernel had. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct throttle_key);
	__type(value, struct throttle_val);
} throttle SEC(".maps");

/* ---- global dirty state ---- */

#define N_GDS_FIELDS \
	7              /* nr_dirty, nr_writeback, background_thresh, dirty_thresh, dirty_limit,
                          * nr_dirtied, nr_written: the tracepoint's fields, in its order */
#define N_GDS_RANGED 5 /* the first five also keep min and max */

struct dirty_state_val {
	__u64 count;
	__u64 first_ns, last_ns;
	__u64 first[N_GDS_FIELDS];
	__u64 last[N_GDS_FIELDS];
	__u64 min[N_GDS_RANGED];
	__u64 max[N_GDS_RANGED];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, MAX_PHASES);
	__type(key, __u32); /* phase */
	__type(value, struct dirty_state_val);
} dirty_state SEC(".maps");

/* ---- flusher work ---- */

struct work_key {
	__u16 bdi;
	__u16 phase;
	__u8 reason;    /* enum wb_reason (names from this kernel's tracepoint format) */
	__u8 integrity; /* sync_mode == WB_SYNC_ALL: a data-integrity pass (sync, syncfs) */
	__u16 pad;
};

struct work_val {
	__u64 queued;   /* writeback_queue: a work item queued (in the queuer's context) */
	__u64 executed; /* writeback_exec: a queued work item taken by the flusher */
	__u64 runs;     /* wb_writeback() calls: a queued item, or the flusher's own periodic /
	                    * background / start-all work */
	__u64 passes;   /* writeback_start -> writeback_written pairs */
	__u64 pages;    /* pages written: nr_pages at start minus nr_pages at written */
	__u64 run_ns;   /* from a run's first pass start to its last pass end */
	__u64 pass_max_ns;
	__u64 waits; /* writeback_wait: the flusher slept on an inode under writeback */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct work_key);
	__type(value, struct work_val);
} wb_work SEC(".maps");

/* Gaps between consecutive run starts of one (bdi, reason, cgroup writeback): the periodic
 * flusher's interval is the gap between its periodic runs. */
struct gap_key {
	__u16 bdi;
	__u16 phase;
	__u8 reason;
	__u8 pad[3];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 512);
	__type(key, struct gap_key);
	__type(value, struct hist);
} run_gaps SEC(".maps");

struct last_run_key {
	__u64 cgroup_ino; /* each cgroup's writeback (struct bdi_writeback) runs on its own */
	__u16 bdi;
	__u8 reason;
	__u8 pad[5];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct last_run_key);
	__type(value, __u64);
} last_run SEC(".maps");

/* A flusher kworker's state within one wb_do_writeback() call (one bdi_writeback), by tid. */
struct flusher_state {
	__u64 mark_ns; /* the current run's start, then each pass's end */
	__u64 pass_start_ns;
	__s64 start_nr_pages;
	__u16 bdi;
	__u16 phase;
	__u8 reason;
	__u8 integrity;
	__u8 in_pass;
	__u8 new_run; /* writeback_exec seen: the next pass starts a run */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct flusher_state);
} flushers SEC(".maps");

struct flush_key {
	__u16 bdi;
	__u16 phase;
};

struct flush_val {
	__u64 calls;            /* wb_do_writeback() calls that wrote for this bdi */
	__u64 pages;            /* writeback_pages_written: what those calls wrote */
	__u64 background_kicks; /* writeback_wake_background: a dirtier woke the flusher */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct flush_key);
	__type(value, struct flush_val);
} wb_flush SEC(".maps");

/* ---- inode events ---- */

struct inode_key {
	__u16 bdi;
	__u16 phase;
	__u8 event; /* enum inode_event */
	__u8 who;   /* enum wb_who */
	__u16 nr;
};

struct inode_val {
	__u64 count;
	__u64 pages;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct inode_key);
	__type(value, struct inode_val);
} inode_events SEC(".maps");

/* ---- helpers ---- */

/* The id of a bdi under test, 0 if not: the name the tracepoints record, strscpy_pad(name,
 * bdi_dev_name(bdi), 32). bdi_dev_name() is "(unknown)" for no bdi or one without a device (never
 * a bdi under test), else bdi->dev_name; strscpy_pad keeps at most 31 bytes and zeroes the rest,
 * as a string read into a zeroed key does, and as in the keys userspace writes. */
static __always_inline __u16 bdi_id(struct backing_dev_info *bdi)
{
	struct bdi_name key = {};
	__u32 *id;

	if (!bdi || !BPF_CORE_READ(bdi, dev))
		return 0;
	if (bpf_probe_read_kernel_str(key.name, BDI_NAME_LEN, &bdi->dev_name) < 0)
		return 0;
	id = bpf_map_lookup_elem(&traced_bdis, &key);
	return id ? *id : 0;
}

/* inode_to_bdi(): an inode of the bdev pseudo filesystem (sb_is_blkdev_sb(), a block device's own
 * page cache: buffer-head metadata of ext4 and jbd2) writes through its disk's bdi, any other inode
 * through its superblock's. blockdev_superblock is a variable BPF cannot name; it is the one
 * superblock with BDEVFS_MAGIC. I_BDEV(): the inode is the vfs_inode of a struct bdev_inode. No
 * inode: noop_backing_dev_info, "(unknown)", returned as NULL. */
#ifdef FSPROF_LEGACY
struct request_queue___bdi {
	struct backing_dev_info *backing_dev_info;
} __attribute__((preserve_access_index));
#endif

static __always_inline struct backing_dev_info *inode_bdi(struct inode *inode)
{
	struct super_block *sb;
	struct block_device *bdev;

	if (!inode)
		return NULL;
	/* inode is a BTF pointer (a tp_btf argument or a field of one): plain loads down to the bdi. */
	sb = inode->i_sb;
	if (!sb)
		return NULL;
	if (sb->s_magic == BDEVFS_MAGIC) {
		bdev = (struct block_device *)((__u64)inode - bpf_core_field_offset(struct bdev_inode, vfs_inode));
#ifndef FSPROF_LEGACY
		return BPF_CORE_READ(bdev, bd_disk, bdi);
#else
		/* 5.10: the disk's bdi is its queue's (gendisk.bdi came in 5.15) */
		struct request_queue___bdi *q = (void *)BPF_CORE_READ(bdev, bd_disk, queue);

		return q ? BPF_CORE_READ(q, backing_dev_info) : NULL;
#endif
	}
	return sb->s_bdi;
}

static __always_inline bool in_flusher_pass(__u32 tid)
{
	struct flusher_state *st = bpf_map_lookup_elem(&flushers, &tid);

	return st && st->in_pass;
}

/* Who runs the current event, and its syscall number if a user thread is inside one. */
static __always_inline __u8 current_who(__u16 *nr)
{
	struct task_struct *task = current_task();
	long sysnr;

	*nr = 0;
	if (CUR(task, flags) & PF_KTHREAD)
		return in_flusher_pass((__u32)bpf_get_current_pid_tgid()) ? WHO_FLUSHER : WHO_KTHREAD;
	sysnr = task_syscall_nr(task);
	if (sysnr >= 0 && sysnr < MAX_SYSCALL_NR) {
		*nr = sysnr;
		return WHO_SYSCALL;
	}
	return WHO_USER;
}

static __always_inline void keep_min_max(__u64 *lo, __u64 *hi, __u64 v, bool first)
{
	if (first || v < *lo)
		*lo = v;
	if (first || v > *hi)
		*hi = v;
}

/* ---- dirty throttling ---- */

/* 6.1's and 6.12's limit is global_dirty_limit() (compat.h). CONFIG_HZ, like global_wb_domain's
 * address, comes in the loader's kernel_flags (found once per boot): a __kconfig or __ksym would
 * make libbpf read the kernel config or kallsyms at every load. */
#define HZ_IF_UNKNOWN 250 /* Debian's and the host's CONFIG_HZ */

/* writeback:balance_dirty_pages: a task dirtying pages of this bdi is over its share of the dirty
 * limit. Fires in that task, with the pause it is about to sleep; pause <= 0: no sleep. */
SEC("tp_btf/balance_dirty_pages")
int BPF_PROG(on_balance_dirty_pages, struct bdi_writeback *wb)
{
	struct throttle_val *v;
	struct throttle_key key = {};
	static const struct throttle_val zero;
	struct bdp_event e = {};
	__u64 now = bpf_ktime_get_ns();
	struct kernel_flags *k = loader_flags();
	__u64 hz = k && k->hz ? k->hz : HZ_IF_UNKNOWN;
	bool first;

	key.bdi = bdi_id(BPF_CORE_READ(wb, bdi));
	if (!key.bdi)
		return 0;
	read_bdp_event(ctx, &e);
	key.phase = current_phase();
	key.who = current_who(&key.nr);
	v = lookup_or_init(&throttle, &key, &zero, DROP_WRITEBACK_FULL);
	if (!v)
		return 0;
#ifndef FSPROF_LEGACY
	first = __sync_fetch_and_add(&v->checks, 1) == 0;
#else
	/* No fetching add before 5.12: two CPUs meeting a new key at once may both take it as their
	 * first, and the one whose min and max go in second wins (the count is exact). */
	first = v->checks == 0;
	__sync_fetch_and_add(&v->checks, 1);
#endif
	__sync_fetch_and_add(&v->dirtied, e.dirtied);
	v->last_ns = now;
	v->limit_last = e.limit;
	v->setpoint_last = e.setpoint;
	v->dirty_last = e.dirty;
	__sync_fetch_and_add(&v->dirty_sum, e.dirty);
	v->wb_dirty_last = e.wb_dirty;
	v->wb_setpoint_last = e.wb_setpoint;
	v->task_ratelimit_last = e.task_ratelimit << KBPS_SHIFT;
	v->dirty_ratelimit_last = e.dirty_ratelimit << KBPS_SHIFT;
	keep_min_max(&v->limit_min, &v->limit_max, e.limit, first);
	keep_min_max(&v->dirty_min, &v->dirty_max, e.dirty, first);
	/* pause * 1000 / HZ ms is <= 0 exactly when pause is (HZ <= 1000) */
	if (e.pause <= 0)
		return 0;
	__sync_fetch_and_add(&v->sleeps, 1);
	__sync_fetch_and_add(&v->planned_ms, (__u64)e.pause * 1000 / hz);

	pause_begin(&key, now); /* its sleep is timed by syscalls.bpf.c's on_switch */
	return 0;
}

/* ---- global dirty state ---- */

/* writeback:global_dirty_state: the global dirty and background thresholds (pages), computed by
 * domain_dirty_limits() for the global domain: in balance_dirty_pages, the flusher's background
 * checks and readers of /proc/vmstat. Global: not per device.
 * A classic tracepoint on purpose: its raw arguments are the two thresholds only; the other five
 * fields are read from globals in TP_fast_assign (vm_node_stat[] through global_node_page_state(),
 * global_wb_domain.dirty_limit). No kernel's BTF has those variables, and the host's kallsyms does
 * not list them (no CONFIG_KALLSYMS_ALL), so a tp_btf program could not read them there. */
SEC("tracepoint/writeback/global_dirty_state")
int on_global_dirty_state(struct trace_event_raw_global_dirty_state *ctx)
{
	__u32 phase = current_phase();
	static const struct dirty_state_val zero;
	struct dirty_state_val *v = lookup_or_init(&dirty_state, &phase, &zero, DROP_WRITEBACK_FULL);
	__u64 now = bpf_ktime_get_ns();
	__u64 f[N_GDS_FIELDS] = { ctx->nr_dirty,    ctx->nr_writeback, ctx->background_thresh, ctx->dirty_thresh,
		                  ctx->dirty_limit, ctx->nr_dirtied,   ctx->nr_written };
	bool first;

	if (!v)
		return 0;
	first = v->count == 0;
	v->count++;
	if (first)
		v->first_ns = now;
	v->last_ns = now;
	for (int i = 0; i < N_GDS_FIELDS; i++) {
		if (first)
			v->first[i] = f[i];
		v->last[i] = f[i];
		if (i < N_GDS_RANGED)
			keep_min_max(&v->min[i], &v->max[i], f[i], first);
	}
	return 0;
}

/* ---- flusher work ---- */

/* The fields of a writeback_work_class event the programs use, as its TP_fast_assign fills them
 * from (wb, work); cgroup_ino is __trace_wb_assign_cgroup(wb) with CONFIG_CGROUP_WRITEBACK (set in
 * all three kernels): cgroup_ino(wb->memcg_css->cgroup), the cgroup's kernfs node id. */
struct work_event {
	__u64 cgroup_ino;
	__s64 nr_pages;
	__u16 bdi;
	__u8 reason;
	__u8 integrity; /* sync_mode == WB_SYNC_ALL */
};

static __always_inline void read_work_event(struct bdi_writeback *wb, struct wb_writeback_work *work,
                                            struct work_event *e)
{
	e->bdi = bdi_id(BPF_CORE_READ(wb, bdi));
	e->reason = BPF_CORE_READ(work, reason);
	e->integrity = BPF_CORE_READ(work, sync_mode) == bpf_core_enum_value(enum writeback_sync_modes, WB_SYNC_ALL);
	e->nr_pages = BPF_CORE_READ(work, nr_pages);
	e->cgroup_ino = BPF_CORE_READ(wb, memcg_css, cgroup, kn, id);
}

static __always_inline struct work_val *work_of(__u16 bdi, __u16 phase, __u8 reason, __u8 integrity)
{
	static const struct work_val zero;
	struct work_key key = { .bdi = bdi, .phase = phase, .reason = reason, .integrity = integrity };

	return lookup_or_init(&wb_work, &key, &zero, DROP_WRITEBACK_FULL);
}

/* writeback:writeback_queue: a work item is queued for a bdi's flusher (sync, syncfs, fs free
 * space, ...), in the queuer's context. */
SEC("tp_btf/writeback_queue")
int BPF_PROG(on_writeback_queue, struct bdi_writeback *wb, struct wb_writeback_work *work)
{
	struct work_event e;
	struct work_val *v;

	read_work_event(wb, work, &e);
	if (!e.bdi)
		return 0;
	v = work_of(e.bdi, current_phase(), e.reason, e.integrity);
	if (v)
		__sync_fetch_and_add(&v->queued, 1);
	return 0;
}

/* writeback:writeback_exec: the flusher takes a queued work item; the next pass starts its run. */
SEC("tp_btf/writeback_exec")
int BPF_PROG(on_writeback_exec, struct bdi_writeback *wb, struct wb_writeback_work *work)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct flusher_state *st;
	struct work_event e;
	struct work_val *v;

	read_work_event(wb, work, &e);
	if (!e.bdi)
		return 0;
	v = work_of(e.bdi, current_phase(), e.reason, e.integrity);
	if (v)
		__sync_fetch_and_add(&v->executed, 1);
	st = bpf_map_lookup_elem(&flushers, &tid);
	if (st)
		st->new_run = 1;
	return 0;
}

static __always_inline void record_run_gap(const struct work_event *e, struct flusher_state *st, __u64 now)
{
	struct last_run_key lk = { .cgroup_ino = e->cgroup_ino, .bdi = st->bdi, .reason = st->reason };
	struct gap_key gk = { .bdi = st->bdi, .phase = st->phase, .reason = st->reason };
	static const struct hist zero;
	__u64 *last = bpf_map_lookup_elem(&last_run, &lk);
	struct hist *h;

	if (last) {
		h = lookup_or_init(&run_gaps, &gk, &zero, DROP_WRITEBACK_FULL);
		if (h)
			hist_record(h, now - *last);
		*last = now;
	} else if (bpf_map_update_elem(&last_run, &lk, &now, BPF_ANY)) {
		count_drop(DROP_WRITEBACK_FULL);
	}
}

/* writeback:writeback_start: the flusher (its kworker, in wb_writeback()) starts a pass over a
 * bdi's dirty inodes for one work item; `reason` says why the work exists. A work item runs one
 * or more passes; a pass that follows writeback_exec, or a pass with another reason or sync mode,
 * starts a new run. */
SEC("tp_btf/writeback_start")
int BPF_PROG(on_writeback_start, struct bdi_writeback *wb, struct wb_writeback_work *work)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 now = bpf_ktime_get_ns();
	static const struct flusher_state fresh = { .new_run = 1 };
	struct flusher_state *st;
	struct work_event e;
	struct work_val *v;
	__u32 bdi_key, *sb;

	read_work_event(wb, work, &e);
	if (!e.bdi)
		return 0;
	st = lookup_or_init(&flushers, &tid, &fresh, DROP_WRITEBACK_FULL);
	if (!st)
		return 0;
	if (st->bdi != e.bdi || st->reason != e.reason || st->integrity != e.integrity)
		st->new_run = 1;
	st->bdi = e.bdi;
	st->reason = e.reason;
	st->integrity = e.integrity;
	st->phase = current_phase();
	st->pass_start_ns = now;
	st->start_nr_pages = e.nr_pages;
	st->in_pass = 1;
	/* The pass is a worker window of the superblock the bdi serves (worker_runs: its time and
	 * the requests it makes). */
	bdi_key = e.bdi;
	sb = bpf_map_lookup_elem(&bdi_sb, &bdi_key);
	if (sb && *sb)
		worker_begin(WORKER_FLUSHER, *sb, 0);
	if (!st->new_run)
		return 0;
	st->new_run = 0;
	st->mark_ns = now;
	v = work_of(e.bdi, st->phase, e.reason, e.integrity);
	if (v)
		__sync_fetch_and_add(&v->runs, 1);
	record_run_gap(&e, st, now);
	return 0;
}

/* writeback:writeback_written: the pass ends; nr_pages is what is left of the work's budget, so
 * the pass wrote (nr_pages at start - nr_pages now) pages. */
SEC("tp_btf/writeback_written")
int BPF_PROG(on_writeback_written, struct bdi_writeback *wb, struct wb_writeback_work *work)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct flusher_state *st = bpf_map_lookup_elem(&flushers, &tid);
	__s64 nr_pages = BPF_CORE_READ(work, nr_pages);
	__u64 now;
	struct worker_window *w;
	struct work_val *v;

	if (!st || !st->in_pass)
		return 0;
	now = bpf_ktime_get_ns();
	st->in_pass = 0;
	w = bpf_map_lookup_elem(&worker_windows, &tid);
	if (w && w->kind == WORKER_FLUSHER)
		worker_end();
	v = work_of(st->bdi, st->phase, st->reason, st->integrity);
	if (v) {
		__sync_fetch_and_add(&v->passes, 1);
		if (st->start_nr_pages > nr_pages)
			ADD_MAYBE_ZERO(&v->pages, st->start_nr_pages - nr_pages);
		ADD_MAYBE_ZERO(&v->run_ns, now - st->mark_ns);
		if (now - st->pass_start_ns > v->pass_max_ns)
			v->pass_max_ns = now - st->pass_start_ns;
	}
	st->mark_ns = now;
	return 0;
}

/* writeback:writeback_wait: the flusher found only inodes under writeback and sleeps on one. */
SEC("tp_btf/writeback_wait")
int BPF_PROG(on_writeback_wait, struct bdi_writeback *wb, struct wb_writeback_work *work)
{
	struct work_event e;
	struct work_val *v;

	read_work_event(wb, work, &e);
	if (!e.bdi)
		return 0;
	v = work_of(e.bdi, current_phase(), e.reason, e.integrity);
	if (v)
		__sync_fetch_and_add(&v->waits, 1);
	return 0;
}

/* writeback:writeback_pages_written: the flusher's wb_do_writeback() call (all its runs on one
 * bdi_writeback) wrote `pages` pages. Attributed to the bdi of that call's passes. */
SEC("tp_btf/writeback_pages_written")
int BPF_PROG(on_writeback_pages_written, long pages_written)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct flusher_state *st = bpf_map_lookup_elem(&flushers, &tid);
	static const struct flush_val zero;
	struct flush_key key;
	struct flush_val *v;

	if (!st)
		return 0; /* the call did not pass over a bdi under test */
	key.bdi = st->bdi;
	key.phase = current_phase();
	bpf_map_delete_elem(&flushers, &tid);
	v = lookup_or_init(&wb_flush, &key, &zero, DROP_WRITEBACK_FULL);
	if (v) {
		__sync_fetch_and_add(&v->calls, 1);
		ADD_MAYBE_ZERO(&v->pages, pages_written);
	}
	return 0;
}

/* writeback:writeback_wake_background: a dirtier (balance_dirty_pages) woke the flusher because
 * the background threshold is exceeded. */
SEC("tp_btf/writeback_wake_background")
int BPF_PROG(on_writeback_wake_background, struct bdi_writeback *wb)
{
	static const struct flush_val zero;
	struct flush_key key = { .bdi = bdi_id(BPF_CORE_READ(wb, bdi)), .phase = current_phase() };
	struct flush_val *v;

	if (!key.bdi)
		return 0;
	v = lookup_or_init(&wb_flush, &key, &zero, DROP_WRITEBACK_FULL);
	if (v)
		__sync_fetch_and_add(&v->background_kicks, 1);
	return 0;
}

/* ---- inode events ---- */

static __always_inline void count_inode_event(__u16 bdi, __u8 event, __u64 pages)
{
	static const struct inode_val zero;
	struct inode_key key = { .bdi = bdi, .phase = current_phase(), .event = event };
	struct inode_val *v;

	key.who = current_who(&key.nr);
	v = lookup_or_init(&inode_events, &key, &zero, DROP_WRITEBACK_FULL);
	if (v) {
		__sync_fetch_and_add(&v->count, 1);
		ADD_MAYBE_ZERO(&v->pages, pages);
	}
}

/* writeback:sb_mark_inode_writeback: an inode of superblock `dev` gets its first folio under
 * writeback, in the thread that starts the writeback: fsync/fdatasync/sync_file_range in a traced
 * thread, the flusher, or a filesystem thread. */
SEC("tp_btf/sb_mark_inode_writeback")
int BPF_PROG(on_sb_mark_inode_writeback, struct inode *inode)
{
	struct super_block *sb = inode ? inode->i_sb : NULL;
	__u32 dev = sb ? sb->s_dev : 0;
	__u32 *bdi = bpf_map_lookup_elem(&traced_sbs, &dev);

	if (bdi)
		count_inode_event(*bdi, INODE_WB_STARTED, 0);
	return 0;
}

/* writeback:writeback_single_inode: __writeback_single_inode() wrote one inode (the flusher's
 * writeback_sb_inodes, or sync_inode_metadata / write_inode_now in the caller's thread). */
SEC("tp_btf/writeback_single_inode")
int BPF_PROG(on_writeback_single_inode, struct inode *inode, struct writeback_control *wbc, unsigned long nr_to_write)
{
	__u16 bdi = bdi_id(inode_bdi(inode));

	/* the tracepoint's wrote: the budget given (nr_to_write) less what is left of it in wbc */
	if (bdi)
		count_inode_event(bdi, INODE_WRITTEN, nr_to_write - (wbc ? (unsigned long)wbc->nr_to_write : 0));
	return 0;
}

/* writeback:folio_wait_writeback: a thread waits for a folio to finish writeback (fsync's wait,
 * or a write to a folio still being written: stable pages). */
SEC("tp_btf/folio_wait_writeback")
int BPF_PROG(on_folio_wait_writeback, struct folio *folio, struct address_space *mapping)
{
	__u16 bdi = bdi_id(mapping ? inode_bdi(mapping->host) : NULL);

	if (bdi)
		count_inode_event(bdi, FOLIO_WAITED, 0);
	return 0;
}
