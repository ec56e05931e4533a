// SPDX-License-Identifier: GPL-2.0
/* Behind an XFS log force wait: log forces, the life of each in-core log buffer (iclog) from sync
 * to I/O completion, force waits, CIL pushes (as worker windows), log space reservation waits and
 * delayed allocation, aggregated per (superblock dev, phase) in the kernel.
 *
 * On this kernel (6.18) an fsync runs xfs_file_fsync -> xfs_log_force_seq -> xlog_cil_force_seq
 * (which queues the CIL push work and waits for it) -> xlog_force_lsn -> xlog_wait_on_iclog; the
 * iclog is written by xlog_sync (in whichever thread dropped its last reference: the fsync, or the
 * CIL push worker), completed by a kworker running xlog_ioend_work (xlog_state_done_syncing), and
 * its force waiters are woken in xlog_state_clean_iclog. docs/behind-xfs.md has the details. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "compat.h"
#include <bpf/bpf_tracing.h>
#include "fsprof.h"
#include "shared_maps.h"

char LICENSE[] SEC("license") = "GPL";

/* enum xlog_iclog_state: a force waiter sleeps unless the iclog is ACTIVE or DIRTY. */
#define XLOG_STATE_ACTIVE 0
#define XLOG_STATE_DIRTY 5
/* iclog->ic_flags */
#define XLOG_ICL_NEED_FLUSH (1u << 0)
#define XLOG_ICL_NEED_FUA (1u << 1)
/* A delalloc extent's startblock is a "null startblock": bits 17..51 all set (xfs_bmap.h). */
#define STARTBLOCKMASK (((1ULL << 35) - 1) << 17)

/* Histograms of xlog_hists (key.which). */
enum xfs_hist {
	XH_ICLOG_WRITE = 0, /* xlog_iclog_sync -> xlog_iclog_sync_done of one iclog */
	XH_CIL_PUSH = 1,    /* one xlog_cil_push_work run (workqueue_execute_start -> end) */
	XH_GRANT_SLEEP = 2, /* xfs_log_grant_sleep -> xfs_log_grant_wake in one thread */
	XH_LOG_WORKER = 3,  /* one xfs_log_worker run (the periodic log force / cover) */
};

/* Plain counters per (dev, phase): one value for all CPUs, atomic adds. */
struct xlog_counts {
	__u64 iclog_syncs;            /* xlog_iclog_sync: one per iclog write, what xs_log_writes counts */
	__u64 iclog_bytes;            /* bytes written per sync, as xlog_sync sizes them (xs_log_blocks * 512) */
	__u64 iclog_data_bytes;       /* ic_offset: log data in the iclog, without header and roundoff */
	__u64 iclog_flush;            /* syncs with XLOG_ICL_NEED_FLUSH (cache flush before the write) */
	__u64 iclog_fua;              /* syncs with XLOG_ICL_NEED_FUA */
	__u64 iclog_bio_writes;       /* xlog_iclog_write: xlog_write_iclog, the bio submission */
	__u64 sync_to_write_ns;       /* sync -> write: packing the iclog, waiting for its buffer */
	__u64 iclog_done;             /* xlog_iclog_sync_done: I/O completion seen by xlog_ioend_work */
	__u64 done_to_clean_ns;       /* sync_done -> clean: completion callbacks before waiters wake */
	__u64 iclog_cleans;           /* xlog_iclog_clean: ic_force_wait woken */
	__u64 iclog_force;            /* xlog_iclog_force: xfs_log_force looked at the head iclog */
	__u64 iclog_force_lsn;        /* xlog_iclog_force_lsn: iclogs stepped over looking for an LSN */
	__u64 iclog_switch;           /* xlog_iclog_switch: an iclog closed (WANT_SYNC) */
	__u64 iclog_release;          /* xlog_iclog_release: a reference dropped */
	__u64 iclog_syncing;          /* xlog_iclog_syncing: last reference gone, state SYNCING */
	__u64 iclog_activate;         /* xlog_iclog_activate: back to ACTIVE for reuse */
	__u64 force_wait_ns;          /* time force waiters slept, wait_on -> the iclog's clean (wakeup) */
	__u64 force_waits_woken;      /* sleeping waiters whose wakeup was seen */
	__u64 log_reserve;            /* xfs_log_reserve: a transaction's reservation */
	__u64 log_regrant;            /* xfs_log_regrant: a rolling transaction's write-head regrant */
	__u64 grant_sleep_reserve;    /* xfs_log_grant_sleep while reserving (reserve head) */
	__u64 grant_sleep_write;      /* xfs_log_grant_sleep while regranting (write head) */
	__u64 grant_sleep_kthread;    /* of the grant sleeps, those of kernel threads */
	__u64 grant_sleep_kthread_ns; /* and their time */
	__u64 grant_wake_up;          /* xfs_log_grant_wake_up: a waiter woken because space freed */
	__u64 cil_throttle;           /* xfs_log_cil_wait: a commit throttled by a full CIL */
	__u64 lost_iclog;             /* sync_done or clean of an iclog whose sync was not seen */
};

struct xfs_key {
	__u32 dev;
	__u16 phase;
	__u16 pad;
};

struct hist_key {
	__u32 dev;
	__u16 phase;
	__u16 which; /* enum xfs_hist */
};

/* A log force: the xfs_log_force tracepoint fires in xfs_log_force (lsn 0), xfs_log_force_seq
 * (lsn = the CIL sequence), and again inside them in xlog_cil_force_seq, and in xlog_cil_flush
 * (the AIL's push of the CIL). caller_ip (_RET_IP_ of the traced function) tells them apart in
 * userspace: see profiler/behind/xfs.py. */
struct force_key {
	__u32 dev;
	__u16 phase;
	__u16 nr;     /* the syscall of a process's thread (NO_SYSCALL for kernel threads) */
	__u8 seq;     /* lsn != 0: a force to a sequence, not to the head of the log */
	__u8 kthread; /* forced from a kernel thread (AIL, log worker, kworker), not a process */
	__u16 pad;
	__u32 pad2;
	__u64 caller_ip;
};

/* xlog_wait_on_iclog calls, by caller and whether the caller slept (xs_log_force_sleep). */
struct wait_key {
	__u32 dev;
	__u16 phase;
	__u16 nr;
	__u8 slept;
	__u8 kthread;
	__u16 pad;
	__u32 pad2;
	__u64 caller_ip;
};

enum alloc_event {
	AL_DELALLOC_RESERVE = 0, /* xfs_iomap_alloc with a null startblock: write-time reservation */
	AL_IOMAP_REAL = 1,       /* xfs_iomap_alloc with a real startblock (direct I/O, zeroing) */
	AL_WB_CONVERT = 2,       /* xfs_map_blocks_alloc: writeback converted delalloc to real */
	AL_WB_FOUND = 3,         /* xfs_map_blocks_found: writeback mapped an existing extent */
	AL_DELALLOC_ENOSPC = 4,  /* xfs_delalloc_enospc: a reservation failed, space being freed */
	AL_INACTIVE_QUEUED = 5,  /* xfs_inode_set_need_inactive: an inode queued for inodegc (by whom) */
	AL_INACTIVATING = 6,     /* xfs_inode_inactivating: an inode inactivated (its blocks freed), where */
};

struct alloc_key {
	__u32 dev;
	__u16 phase;
	__u16 nr;     /* the syscall that did it (e.g. fsync), NO_SYSCALL in a kernel thread */
	__u8 event;   /* enum alloc_event */
	__u8 kthread; /* done by a kernel thread (the flusher), not the workload's own call */
	__u16 pad;
};

struct alloc_val {
	__u64 count;
	__u64 blocks; /* filesystem blocks of the extent the tracepoint names */
};

/* One iclog between its sync and its clean (keyed by the iclog pointer). */
struct iclog_io {
	__u64 sync_ns;
	__u64 done_ns;
	__u32 dev;
	__u16 phase;
	__u16 pad;
};

/* Sleeping force waiters of one iclog: how many and the sum of their wait start times, so that
 * their total wait at the wakeup is n * now - sum. */
struct iclog_waiters {
	__u64 n;
	__u64 start_sum;
	__u32 dev;
	__u16 phase;
	__u16 pad;
};

/* A thread inside xfs_log_reserve / xfs_log_regrant, and its grant sleep if any. */
struct grant_state {
	__u64 sleep_ns;
	__u32 dev;
	__u16 phase;
	__u8 regrant;
	__u8 kthread;
};

/* Kernel addresses of the work functions that bracket XFS log work (userspace fills from kallsyms). */
struct xfs_cfg {
	__u64 cil_push_work;  /* xlog_cil_push_work: one CIL checkpoint push */
	__u64 log_worker;     /* xfs_log_worker: the periodic log force / log cover */
	__u64 inodegc_worker; /* xfs_inodegc_worker: inactivating the inodes queued on one CPU */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u8);
} xfs_devs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xfs_cfg);
} xfs_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct xfs_key);
	__type(value, struct xlog_counts);
} xlog_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 512); /* 4 histograms x 32 phases x 4 filesystems; 4.7 KiB each */
	__type(key, struct hist_key);
	__type(value, struct hist);
} xlog_hists SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct force_key);
	__type(value, __u64);
} log_forces SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct wait_key);
	__type(value, __u64);
} force_waits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct alloc_key);
	__type(value, struct alloc_val);
} xfs_alloc SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct iclog_io);
} iclog_io SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct iclog_waiters);
} iclog_waiters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct grant_state);
} grant_state SEC(".maps");

/* A struct hist is 4.7 KiB, too big for the BPF stack: new histograms are copied from this. */

static __always_inline bool traced_dev(__u32 dev)
{
	return bpf_map_lookup_elem(&xfs_devs, &dev) != NULL;
}

/* The syscall the current thread is in: orig_ax of its user registers (x86_64); NO_SYSCALL for a
 * kernel thread or outside a syscall (a page fault's orig_ax is -1). */
#define NO_SYSCALL 0xffff
static __always_inline __u16 current_syscall(__u8 kthread)
{
	long nr;

	if (kthread)
		return NO_SYSCALL;
	nr = task_syscall_nr(current_task());
	return nr >= 0 && nr < MAX_SYSCALL_NR ? nr : NO_SYSCALL;
}

/* 6.12's verifier takes a tp_btf argument as possibly NULL and refuses arithmetic on it (a CO-RE
 * read's field address) before a check: a NULL iclog has dev 0, which no run traces. */
static __always_inline __u32 iclog_dev(struct xlog_in_core *iclog)
{
	if (!iclog)
		return 0;
	return BPF_CORE_READ(iclog, ic_log, l_mp, m_super, s_dev);
}

/* The dev the XFS tracepoints record: mp->m_super->s_dev (xfs_log_force), log->l_mp->m_super->s_dev
 * (xfs_loggrant_class), VFS_I(ip)->i_sb->s_dev (xfs_imap_class, xfs_simple_io_class). NULL-checked
 * first for 6.12's verifier, as iclog_dev. */
static __always_inline __u32 mount_dev(struct xfs_mount *mp)
{
	if (!mp)
		return 0;
	return BPF_CORE_READ(mp, m_super, s_dev);
}

static __always_inline __u32 log_dev(struct xlog *log)
{
	if (!log)
		return 0;
	return BPF_CORE_READ(log, l_mp, m_super, s_dev);
}

/* ip is a BTF pointer (a tp_btf argument): plain loads, not probe reads. */
static __always_inline __u32 inode_dev(struct xfs_inode *ip)
{
	struct super_block *sb = ip ? ip->i_vnode.i_sb : NULL;

	return sb ? sb->s_dev : 0;
}

/* A call by a path that placed it on no filesystem (an absolute one) ran XFS's code: a lookup
 * that missed the dentry cache, a stat, a directory change or a setattr names the inode. */
#define PLACE_CALL(event)                                 \
	SEC("tp_btf/" #event)                             \
	int BPF_PROG(place_##event, struct xfs_inode *ip) \
	{                                                 \
		place_call(inode_dev(ip));                \
		return 0;                                 \
	}
PLACE_CALL(xfs_lookup)
PLACE_CALL(xfs_getattr)
PLACE_CALL(xfs_setattr)
PLACE_CALL(xfs_create)
PLACE_CALL(xfs_remove)
PLACE_CALL(xfs_rename)
PLACE_CALL(xfs_link)

#ifdef FSPROF_LEGACY
/* 5.10: the same as classic tracepoints (compat.h's tp_record), tp_place_<event>. */
#define TP_PLACE_CALL(event, field)                    \
	SEC("tracepoint/xfs/" #event)                  \
	int tp_place_##event(void *ctx)                \
	{                                              \
		struct tp_record r;                    \
		if (tp_record(ctx, &r, field, 1))      \
			place_call(tp_u32(&r, field)); \
		return 0;                              \
	}
TP_PLACE_CALL(xfs_lookup, TPF_XFS_LOOKUP_DEV)
TP_PLACE_CALL(xfs_getattr, TPF_XFS_GETATTR_DEV)
TP_PLACE_CALL(xfs_setattr, TPF_XFS_SETATTR_DEV)
TP_PLACE_CALL(xfs_create, TPF_XFS_CREATE_DEV)
TP_PLACE_CALL(xfs_remove, TPF_XFS_REMOVE_DEV)
TP_PLACE_CALL(xfs_rename, TPF_XFS_RENAME_DEV)
TP_PLACE_CALL(xfs_link, TPF_XFS_LINK_DEV)
#endif

static __always_inline struct xlog_counts *counts_of(__u32 dev, __u16 phase)
{
	struct xfs_key key = { .dev = dev, .phase = phase };
	struct xlog_counts zero = {};

	return lookup_or_init(&xlog_counts, &key, &zero, DROP_FS_FULL);
}

/* The counters of dev in the current phase. */
static __always_inline struct xlog_counts *counts_now(__u32 dev)
{
	return counts_of(dev, current_phase());
}

/* Records delta into dev's histogram `which` (XH_*) in phase. */
static __always_inline void xlog_hist_add(__u32 dev, __u16 phase, __u16 which, __u64 delta)
{
	struct hist_key key = { .dev = dev, .phase = phase, .which = which };

	hist_add(&xlog_hists, &key, delta, DROP_FS_FULL);
}

static __always_inline void count_u64(void *map, void *key)
{
	__u64 *n, zero = 0;

	n = lookup_or_init(map, key, &zero, DROP_FS_FULL);
	if (n)
		__sync_fetch_and_add(n, 1);
}

/* ---- Log forces ---------------------------------------------------------------------------- */

/* xfs_log_force (lsn 0: force the whole log), xfs_log_force_seq (lsn = CIL sequence: e.g. fsync),
 * xlog_cil_force_seq inside both, and xlog_cil_flush (AIL). Fires before anything is waited for. */
static __always_inline int log_force(__u32 dev, __u64 lsn, __u64 caller_ip)
{
	struct force_key key = { .dev = dev };

	if (!traced_dev(key.dev))
		return 0;
	key.phase = current_phase();
	key.seq = lsn != 0;
	key.kthread = in_kthread();
	key.nr = current_syscall(key.kthread);
	key.caller_ip = caller_ip;
	count_u64(&log_forces, &key);
	return 0;
}

SEC("tp_btf/xfs_log_force")
int BPF_PROG(on_log_force, struct xfs_mount *mp, xfs_lsn_t lsn, unsigned long caller_ip)
{
	return log_force(mount_dev(mp), lsn, caller_ip);
}

#ifdef FSPROF_LEGACY
/* 5.10: as a classic tracepoint (compat.h's tp_record), whose record holds the three. */
SEC("tracepoint/xfs/xfs_log_force")
int tp_xfs_log_force(void *ctx)
{
	struct tp_record r;

	if (!tp_record(ctx, &r, TPF_XFS_FORCE_DEV, 3))
		return 0;
	return log_force(tp_u32(&r, TPF_XFS_FORCE_DEV), tp_u64(&r, TPF_XFS_FORCE_LSN),
	                 tp_u64(&r, TPF_XFS_FORCE_CALLER));
}
#endif

/* ---- iclog life (tp_btf: the iclog pointer and its fields) --------------------------------- */

/* xlog_force_and_check_iclog / xfs_log_force: the head iclog examined by a force to the head. */
SEC("tp_btf/xlog_iclog_force")
int BPF_PROG(on_iclog_force, struct xlog_in_core *iclog, unsigned long caller_ip)
{
	__u32 dev = iclog_dev(iclog);
	struct xlog_counts *c;

	if (traced_dev(dev) && (c = counts_now(dev)))
		__sync_fetch_and_add(&c->iclog_force, 1);
	return 0;
}

/* xlog_force_lsn: each iclog passed over while looking for the one holding the forced LSN. */
SEC("tp_btf/xlog_iclog_force_lsn")
int BPF_PROG(on_iclog_force_lsn, struct xlog_in_core *iclog, unsigned long caller_ip)
{
	__u32 dev = iclog_dev(iclog);
	struct xlog_counts *c;

	if (traced_dev(dev) && (c = counts_now(dev)))
		__sync_fetch_and_add(&c->iclog_force_lsn, 1);
	return 0;
}

/* xlog_state_switch_iclogs: the iclog is closed to new writers (WANT_SYNC), full or forced. */
SEC("tp_btf/xlog_iclog_switch")
int BPF_PROG(on_iclog_switch, struct xlog_in_core *iclog, unsigned long caller_ip)
{
	__u32 dev = iclog_dev(iclog);
	struct xlog_counts *c;

	if (traced_dev(dev) && (c = counts_now(dev)))
		__sync_fetch_and_add(&c->iclog_switch, 1);
	return 0;
}

/* xlog_state_release_iclog: a writer drops its reference; the last one of a WANT_SYNC iclog syncs it. */
SEC("tp_btf/xlog_iclog_release")
int BPF_PROG(on_iclog_release, struct xlog_in_core *iclog, unsigned long caller_ip)
{
	__u32 dev = iclog_dev(iclog);
	struct xlog_counts *c;

	if (traced_dev(dev) && (c = counts_now(dev)))
		__sync_fetch_and_add(&c->iclog_release, 1);
	return 0;
}

/* xlog_state_release_iclog: state WANT_SYNC -> SYNCING, right before xlog_sync. */
SEC("tp_btf/xlog_iclog_syncing")
int BPF_PROG(on_iclog_syncing, struct xlog_in_core *iclog, unsigned long caller_ip)
{
	__u32 dev = iclog_dev(iclog);
	struct xlog_counts *c;

	if (traced_dev(dev) && (c = counts_now(dev)))
		__sync_fetch_and_add(&c->iclog_syncing, 1);
	return 0;
}

/* xlog_sync: the iclog goes to disk. The kernel counts xs_log_writes here and adds
 * BTOBB(roundup(l_iclog_hsize + ic_offset, l_iclog_roundoff)) to xs_log_blocks. */
SEC("tp_btf/xlog_iclog_sync")
int BPF_PROG(on_iclog_sync, struct xlog_in_core *iclog, unsigned long caller_ip)
{
	__u32 dev = iclog_dev(iclog);
	__u64 ptr = (__u64)iclog, now = bpf_ktime_get_ns();
	struct iclog_io io = { .sync_ns = now, .dev = dev };
	struct xlog_counts *c;
	__u32 offset, hsize, roundoff, flags, bytes;

	if (!traced_dev(dev))
		return 0;
	io.phase = current_phase();
	offset = BPF_CORE_READ(iclog, ic_offset);
	flags = BPF_CORE_READ(iclog, ic_flags);
	hsize = BPF_CORE_READ(iclog, ic_log, l_iclog_hsize);
	roundoff = BPF_CORE_READ(iclog, ic_log, l_iclog_roundoff);
	bytes = hsize + offset;
	if (roundoff)
		bytes = (bytes + roundoff - 1) / roundoff * roundoff;
	if (bpf_map_update_elem(&iclog_io, &ptr, &io, BPF_ANY))
		count_drop(DROP_FS_FULL);
	c = counts_of(dev, io.phase);
	if (!c)
		return 0;
	__sync_fetch_and_add(&c->iclog_syncs, 1);
	__sync_fetch_and_add(&c->iclog_bytes, bytes);
	__sync_fetch_and_add(&c->iclog_data_bytes, offset);
	if (flags & XLOG_ICL_NEED_FLUSH)
		__sync_fetch_and_add(&c->iclog_flush, 1);
	if (flags & XLOG_ICL_NEED_FUA)
		__sync_fetch_and_add(&c->iclog_fua, 1);
	return 0;
}

/* xlog_write_iclog: the bio is built and submitted (after the iclog's buffer semaphore). */
SEC("tp_btf/xlog_iclog_write")
int BPF_PROG(on_iclog_write, struct xlog_in_core *iclog, unsigned long caller_ip)
{
	__u32 dev = iclog_dev(iclog);
	__u64 ptr = (__u64)iclog;
	struct iclog_io *io;
	struct xlog_counts *c;

	if (!traced_dev(dev))
		return 0;
	io = bpf_map_lookup_elem(&iclog_io, &ptr);
	c = counts_of(dev, io ? io->phase : current_phase());
	if (!c)
		return 0;
	__sync_fetch_and_add(&c->iclog_bio_writes, 1);
	if (io)
		__sync_fetch_and_add(&c->sync_to_write_ns, bpf_ktime_get_ns() - io->sync_ns);
	return 0;
}

/* xlog_state_done_syncing, run by the xlog_ioend_work kworker after the bio completed. */
SEC("tp_btf/xlog_iclog_sync_done")
int BPF_PROG(on_iclog_sync_done, struct xlog_in_core *iclog, unsigned long caller_ip)
{
	__u32 dev = iclog_dev(iclog);
	__u64 ptr = (__u64)iclog, now = bpf_ktime_get_ns();
	struct iclog_io *io;
	struct xlog_counts *c;

	if (!traced_dev(dev))
		return 0;
	io = bpf_map_lookup_elem(&iclog_io, &ptr);
	if (!io || io->done_ns) {
		if ((c = counts_now(dev)))
			__sync_fetch_and_add(&c->lost_iclog, 1);
		return 0;
	}
	io->done_ns = now;
	xlog_hist_add(dev, io->phase, XH_ICLOG_WRITE, now - io->sync_ns);
	if ((c = counts_of(dev, io->phase)))
		__sync_fetch_and_add(&c->iclog_done, 1);
	return 0;
}

/* xlog_wait_on_iclog: a log force (or the CIL push) waits for this iclog and all before it to be
 * stable. It sleeps unless the iclog is ACTIVE or DIRTY (then xs_log_force_sleep counts it). */
SEC("tp_btf/xlog_iclog_wait_on")
int BPF_PROG(on_iclog_wait_on, struct xlog_in_core *iclog, unsigned long caller_ip)
{
	__u32 dev = iclog_dev(iclog), state;
	__u64 ptr = (__u64)iclog;
	struct wait_key key = { .dev = dev };
	struct iclog_waiters *w, fresh = {};

	if (!traced_dev(dev))
		return 0;
	state = BPF_CORE_READ(iclog, ic_state);
	key.phase = current_phase();
	key.slept = state != XLOG_STATE_ACTIVE && state != XLOG_STATE_DIRTY;
	key.kthread = in_kthread();
	key.nr = current_syscall(key.kthread);
	key.caller_ip = caller_ip;
	count_u64(&force_waits, &key);
	if (!key.slept)
		return 0;
	fresh.dev = dev;
	fresh.phase = key.phase;
	w = lookup_or_init(&iclog_waiters, &ptr, &fresh, DROP_FS_FULL);
	if (!w)
		return 0;
	__sync_fetch_and_add(&w->n, 1);
	__sync_fetch_and_add(&w->start_sum, bpf_ktime_get_ns());
	return 0;
}

/* xlog_state_clean_iclog: callbacks done, the iclog is DIRTY and ic_force_wait is woken right
 * after this tracepoint: the end of every force wait on it, and of its I/O's completion work. */
SEC("tp_btf/xlog_iclog_clean")
int BPF_PROG(on_iclog_clean, struct xlog_in_core *iclog, unsigned long caller_ip)
{
	__u32 dev = iclog_dev(iclog);
	__u64 ptr = (__u64)iclog, now = bpf_ktime_get_ns();
	struct iclog_io *io;
	struct iclog_waiters *w;
	struct xlog_counts *c;

	if (!traced_dev(dev))
		return 0;
	io = bpf_map_lookup_elem(&iclog_io, &ptr);
	if (io) {
		if (io->done_ns && (c = counts_of(dev, io->phase))) {
			__sync_fetch_and_add(&c->done_to_clean_ns, now - io->done_ns);
			__sync_fetch_and_add(&c->iclog_cleans, 1);
		}
		bpf_map_delete_elem(&iclog_io, &ptr);
	}
	w = bpf_map_lookup_elem(&iclog_waiters, &ptr);
	if (w) {
		if ((c = counts_of(dev, w->phase))) {
			__sync_fetch_and_add(&c->force_wait_ns, w->n * now - w->start_sum);
			__sync_fetch_and_add(&c->force_waits_woken, w->n);
		}
		bpf_map_delete_elem(&iclog_waiters, &ptr);
	}
	return 0;
}

/* xlog_state_activate_iclog: a DIRTY iclog is reset to ACTIVE and can take log data again. */
SEC("tp_btf/xlog_iclog_activate")
int BPF_PROG(on_iclog_activate, struct xlog_in_core *iclog, unsigned long caller_ip)
{
	__u32 dev = iclog_dev(iclog);
	struct xlog_counts *c;

	if (traced_dev(dev) && (c = counts_now(dev)))
		__sync_fetch_and_add(&c->iclog_activate, 1);
	return 0;
}

/* ---- Log space reservation ------------------------------------------------------------------ */

static __always_inline void grant_enter(__u32 dev, __u8 regrant)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct grant_state g = { .dev = dev, .phase = current_phase(), .regrant = regrant, .kthread = in_kthread() };
	struct xlog_counts *c;

	if (!traced_dev(dev))
		return;
	if ((c = counts_of(dev, g.phase))) {
		if (regrant)
			__sync_fetch_and_add(&c->log_regrant, 1);
		else
			__sync_fetch_and_add(&c->log_reserve, 1);
	}
	if (bpf_map_update_elem(&grant_state, &tid, &g, BPF_ANY))
		count_drop(DROP_FS_FULL);
}

/* xfs_log_reserve: a new transaction asks for log space (xs_try_logspace counts it too). */
SEC("tp_btf/xfs_log_reserve")
int BPF_PROG(on_log_reserve, struct xlog *log, struct xlog_ticket *tic)
{
	grant_enter(log_dev(log), 0);
	return 0;
}

/* xfs_log_regrant: a rolling transaction's ticket ran out of units and regrants (write head). */
SEC("tp_btf/xfs_log_regrant")
int BPF_PROG(on_log_regrant, struct xlog *log, struct xlog_ticket *tic)
{
	grant_enter(log_dev(log), 1);
	return 0;
}

static __always_inline void grant_exit(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	bpf_map_delete_elem(&grant_state, &tid);
}

SEC("tp_btf/xfs_log_reserve_exit")
int BPF_PROG(on_log_reserve_exit, struct xlog *log, struct xlog_ticket *tic)
{
	grant_exit();
	return 0;
}

SEC("tp_btf/xfs_log_regrant_exit")
int BPF_PROG(on_log_regrant_exit, struct xlog *log, struct xlog_ticket *tic)
{
	grant_exit();
	return 0;
}

/* xlog_grant_head_wait: no log space; the thread sleeps until the AIL moves the tail
 * (xs_sleep_logspace counts each sleep). May repeat in a loop until the space is there. */
static __always_inline int grant_sleep(__u32 dev)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct grant_state *g, fresh = { .dev = dev };
	struct xlog_counts *c;

	if (!traced_dev(dev))
		return 0;
	g = bpf_map_lookup_elem(&grant_state, &tid);
	if (!g) {
		/* Not seen entering (tracing started mid-reservation): time it anyway. */
		fresh.phase = current_phase();
		fresh.kthread = in_kthread();
		bpf_map_update_elem(&grant_state, &tid, &fresh, BPF_ANY);
		g = bpf_map_lookup_elem(&grant_state, &tid);
		if (!g) {
			count_drop(DROP_FS_FULL);
			return 0;
		}
	}
	g->sleep_ns = bpf_ktime_get_ns();
	if ((c = counts_of(dev, g->phase))) {
		if (g->regrant)
			__sync_fetch_and_add(&c->grant_sleep_write, 1);
		else
			__sync_fetch_and_add(&c->grant_sleep_reserve, 1);
		__sync_fetch_and_add(&c->grant_sleep_kthread, g->kthread);
	}
	return 0;
}

SEC("tp_btf/xfs_log_grant_sleep")
int BPF_PROG(on_grant_sleep, struct xlog *log, struct xlog_ticket *tic)
{
	return grant_sleep(log_dev(log));
}

/* The same thread back from schedule() in xlog_grant_head_wait. */
static __always_inline int grant_wake(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct grant_state *g = bpf_map_lookup_elem(&grant_state, &tid);
	struct xlog_counts *c;
	__u64 delta;

	if (!g || !g->sleep_ns)
		return 0;
	delta = bpf_ktime_get_ns() - g->sleep_ns;
	xlog_hist_add(g->dev, g->phase, XH_GRANT_SLEEP, delta);
	if (g->kthread && (c = counts_of(g->dev, g->phase)))
		__sync_fetch_and_add(&c->grant_sleep_kthread_ns, delta);
	g->sleep_ns = 0;
	return 0;
}

SEC("tp_btf/xfs_log_grant_wake")
int BPF_PROG(on_grant_wake, struct xlog *log, struct xlog_ticket *tic)
{
	return grant_wake();
}

/* xlog_grant_head_wake: space freed, a waiter is woken (runs in the waker: AIL, log I/O end). */
static __always_inline int grant_wake_up(__u32 dev)
{
	struct xlog_counts *c;

	if (traced_dev(dev) && (c = counts_now(dev)))
		__sync_fetch_and_add(&c->grant_wake_up, 1);
	return 0;
}

SEC("tp_btf/xfs_log_grant_wake_up")
int BPF_PROG(on_grant_wake_up, struct xlog *log, struct xlog_ticket *tic)
{
	return grant_wake_up(log_dev(log));
}

/* xlog_cil_push_background: the CIL is over its hard limit; the committing thread waits for the
 * push to start (xc_push_wait). */
static __always_inline int cil_wait(__u32 dev)
{
	struct xlog_counts *c;

	if (traced_dev(dev) && (c = counts_now(dev)))
		__sync_fetch_and_add(&c->cil_throttle, 1);
	return 0;
}

SEC("tp_btf/xfs_log_cil_wait")
int BPF_PROG(on_cil_wait, struct xlog *log, struct xlog_ticket *tic)
{
	return cil_wait(log_dev(log));
}

#ifdef FSPROF_LEGACY
/* 5.10: the log space events as classic tracepoints (compat.h's tp_record); the loggrant class's
 * records hold the dev. */
static __always_inline __u32 tp_dev(void *ctx, int field)
{
	struct tp_record r;

	return tp_record(ctx, &r, field, 1) ? tp_u32(&r, field) : 0;
}

SEC("tracepoint/xfs/xfs_log_reserve")
int tp_xfs_log_reserve(void *ctx)
{
	grant_enter(tp_dev(ctx, TPF_XFS_RESERVE_DEV), 0);
	return 0;
}

SEC("tracepoint/xfs/xfs_log_regrant")
int tp_xfs_log_regrant(void *ctx)
{
	grant_enter(tp_dev(ctx, TPF_XFS_REGRANT_DEV), 1);
	return 0;
}

SEC("tracepoint/xfs/xfs_log_reserve_exit")
int tp_xfs_log_reserve_exit(void *ctx)
{
	grant_exit();
	return 0;
}

SEC("tracepoint/xfs/xfs_log_regrant_exit")
int tp_xfs_log_regrant_exit(void *ctx)
{
	grant_exit();
	return 0;
}

SEC("tracepoint/xfs/xfs_log_grant_sleep")
int tp_xfs_log_grant_sleep(void *ctx)
{
	return grant_sleep(tp_dev(ctx, TPF_XFS_GRANT_SLEEP_DEV));
}

SEC("tracepoint/xfs/xfs_log_grant_wake")
int tp_xfs_log_grant_wake(void *ctx)
{
	return grant_wake();
}

SEC("tracepoint/xfs/xfs_log_grant_wake_up")
int tp_xfs_log_grant_wake_up(void *ctx)
{
	return grant_wake_up(tp_dev(ctx, TPF_XFS_GRANT_WAKE_UP_DEV));
}

SEC("tracepoint/xfs/xfs_log_cil_wait")
int tp_xfs_log_cil_wait(void *ctx)
{
	return cil_wait(tp_dev(ctx, TPF_XFS_CIL_WAIT_DEV));
}
#endif

/* ---- CIL push and log worker windows (workqueue tracepoints in the worker's own thread) ------ */

static __always_inline struct xfs_cfg *cfg(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&xfs_cfg, &zero);
}

/* The CIL context of a push work item: container_of(work, struct xfs_cil_ctx, push_work). */
static __always_inline __u32 cil_push_dev(void *work)
{
	struct xfs_cil_ctx *cil_ctx = work - bpf_core_field_offset(struct xfs_cil_ctx, push_work);

	return BPF_CORE_READ(cil_ctx, cil, xc_log, l_mp, m_super, s_dev);
}

/* The log of the log worker: container_of(work, struct xlog, l_work.work). */
static __always_inline __u32 log_worker_dev(void *work)
{
	struct xlog *log = work - bpf_core_field_offset(struct xlog, l_work);

	return BPF_CORE_READ(log, l_mp, m_super, s_dev);
}

/* A kworker starts a work item: xlog_cil_push_work (the CIL checkpoint that a log force queued
 * and waits for) or xfs_log_worker. The window lasts until the same thread ends the item. */
SEC("tp_btf/workqueue_execute_start")
int BPF_PROG(on_work_start, struct work_struct *work)
{
	struct xfs_cfg *conf = cfg();
	__u64 fn;
	__u32 dev;

	/* The classic 'function' field is work->func. Checked for NULL before the container_of
	 * arithmetic below (6.12's verifier). */
	if (!conf || !work)
		return 0;
	fn = (__u64)BPF_CORE_READ(work, func);
	if (!fn)
		return 0;
	if (fn == conf->cil_push_work) {
		dev = cil_push_dev(work);
		if (traced_dev(dev))
			worker_begin(WORKER_XFS_CIL_PUSH, dev, 0);
	} else if (fn == conf->log_worker) {
		dev = log_worker_dev(work);
		if (traced_dev(dev))
			worker_begin(WORKER_XFS_LOG_WORKER, dev, 0);
	}
	return 0;
}

/* Raw arguments (struct work_struct *work, work_func_t function). The item may be freed by now:
 * the classic 'function' field is the second argument (the worker's current_func, what
 * process_one_work called), not work->func. The verifier refuses a load of a function-pointer
 * argument ("arg1 type FUNC_PROTO is not a struct"), so it is copied out of the argument array. */
SEC("tp_btf/workqueue_execute_end")
int BPF_PROG(on_work_end, struct work_struct *work)
{
	struct xfs_cfg *conf = cfg();
	__u64 fn = 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct worker_window *w;
	__u32 dev;
	__u16 phase, which;
	__u64 start;

	bpf_probe_read_kernel(&fn, sizeof(fn), &ctx[1]);
	if (!conf || !fn)
		return 0;
	if (fn == conf->inodegc_worker) {
		w = bpf_map_lookup_elem(&worker_windows, &tid);
		if (w && w->kind == WORKER_XFS_INODEGC)
			worker_end();
		return 0;
	}
	if (fn != conf->cil_push_work && fn != conf->log_worker)
		return 0;
	w = bpf_map_lookup_elem(&worker_windows, &tid);
	if (!w || (w->kind != WORKER_XFS_CIL_PUSH && w->kind != WORKER_XFS_LOG_WORKER))
		return 0;
	dev = w->dev;
	phase = w->phase;
	which = w->kind == WORKER_XFS_CIL_PUSH ? XH_CIL_PUSH : XH_LOG_WORKER;
	start = worker_end();
	if (start)
		xlog_hist_add(dev, phase, which, bpf_ktime_get_ns() - start);
	return 0;
}

/* ---- Delayed allocation --------------------------------------------------------------------- */

static __always_inline void count_alloc(__u32 dev, __u8 event, __u64 blocks)
{
	struct alloc_key key = { .dev = dev, .event = event };
	struct alloc_val *v, zero = {};

	if (!traced_dev(dev))
		return;
	key.phase = current_phase();
	key.kthread = in_kthread();
	key.nr = current_syscall(key.kthread);
	v = lookup_or_init(&xfs_alloc, &key, &zero, DROP_FS_FULL);
	if (!v)
		return;
	__sync_fetch_and_add(&v->count, 1);
	ADD_MAYBE_ZERO(&v->blocks, blocks);
}

/* xfs_buffered_write_iomap_begin after xfs_bmapi_reserve_delalloc (null startblock: a delayed
 * allocation reserved at write time), or a real allocation (direct I/O, zeroing past EOF). */
SEC("tp_btf/xfs_iomap_alloc")
int BPF_PROG(on_iomap_alloc, struct xfs_inode *ip, xfs_off_t offset, ssize_t count, int whichfork,
             struct xfs_bmbt_irec *irec)
{
	/* As the classic fields: startblock and blockcount are 0 without an irec. */
	__u64 startblock = irec ? BPF_CORE_READ(irec, br_startblock) : 0;
	__u64 blockcount = irec ? BPF_CORE_READ(irec, br_blockcount) : 0;
	bool delalloc = (startblock & STARTBLOCKMASK) == STARTBLOCKMASK;

	count_alloc(inode_dev(ip), delalloc ? AL_DELALLOC_RESERVE : AL_IOMAP_REAL, blockcount);
	return 0;
}

/* xfs_map_blocks after xfs_bmapi_convert_delalloc: writeback (flusher or fsync) allocated real
 * blocks for a delalloc range. */
SEC("tp_btf/xfs_map_blocks_alloc")
int BPF_PROG(on_map_blocks_alloc, struct xfs_inode *ip, xfs_off_t offset, ssize_t count, int whichfork,
             struct xfs_bmbt_irec *irec)
{
	count_alloc(inode_dev(ip), AL_WB_CONVERT, irec ? BPF_CORE_READ(irec, br_blockcount) : 0);
	return 0;
}

/* xfs_map_blocks: writeback found the range already allocated. */
SEC("tp_btf/xfs_map_blocks_found")
int BPF_PROG(on_map_blocks_found, struct xfs_inode *ip, xfs_off_t offset, ssize_t count, int whichfork,
             struct xfs_bmbt_irec *irec)
{
	count_alloc(inode_dev(ip), AL_WB_FOUND, irec ? BPF_CORE_READ(irec, br_blockcount) : 0);
	return 0;
}

/* xfs_file_buffered_write: a delalloc reservation hit ENOSPC; XFS flushes and retries. */
SEC("tp_btf/xfs_delalloc_enospc")
int BPF_PROG(on_delalloc_enospc, struct xfs_inode *ip, xfs_off_t offset, ssize_t count)
{
	count_alloc(inode_dev(ip), AL_DELALLOC_ENOSPC, 0);
	return 0;
}

#ifdef FSPROF_LEGACY
/* 5.10: as classic tracepoints (compat.h's tp_record). The xfs_imap_class's records (iomap_alloc,
 * map_blocks_alloc, map_blocks_found: one layout) hold the irec's startblock and blockcount, 0
 * without one, as the tp_btf programs read them. */
static __always_inline int tp_imap(void *ctx, int kind)
{
	struct tp_record r;
	__u64 startblock;

	if (!tp_record(ctx, &r, TPF_XFS_IMAP_DEV, 3))
		return 0;
	startblock = tp_u64(&r, TPF_XFS_IMAP_STARTBLOCK);
	if (kind == AL_IOMAP_REAL && (startblock & STARTBLOCKMASK) == STARTBLOCKMASK)
		kind = AL_DELALLOC_RESERVE;
	count_alloc(tp_u32(&r, TPF_XFS_IMAP_DEV), kind, tp_u64(&r, TPF_XFS_IMAP_BLOCKCOUNT));
	return 0;
}

SEC("tracepoint/xfs/xfs_iomap_alloc")
int tp_xfs_iomap_alloc(void *ctx)
{
	return tp_imap(ctx, AL_IOMAP_REAL);
}

SEC("tracepoint/xfs/xfs_map_blocks_alloc")
int tp_xfs_map_blocks_alloc(void *ctx)
{
	return tp_imap(ctx, AL_WB_CONVERT);
}

SEC("tracepoint/xfs/xfs_map_blocks_found")
int tp_xfs_map_blocks_found(void *ctx)
{
	return tp_imap(ctx, AL_WB_FOUND);
}

SEC("tracepoint/xfs/xfs_delalloc_enospc")
int tp_xfs_delalloc_enospc(void *ctx)
{
	count_alloc(tp_dev(ctx, TPF_XFS_ENOSPC_DEV), AL_DELALLOC_ENOSPC, 0);
	return 0;
}
#endif

/* ---- Background inode inactivation (inodegc) -------------------------------------------------- */

/* xfs_inodegc_worker begins (a kworker of the xfs-inodegc workqueue; 6.1 fires this once it has
 * taken the CPU's queue, a few instructions in). Its window ends with the work item, in
 * on_work_end: the unlinked inodes' blocks are freed inside it, not in the unlink. */
SEC("tp_btf/xfs_inodegc_worker")
int BPF_PROG(on_inodegc_worker, struct xfs_mount *mp, unsigned int shrinker_hits)
{
	__u32 dev = mount_dev(mp);

	if (traced_dev(dev))
		worker_begin(WORKER_XFS_INODEGC, dev, 0);
	return 0;
}

/* An inode queued for inactivation: by the syscall that dropped its last reference (an unlink's,
 * or a close of an unlinked open file), or by a kernel thread. */
SEC("tp_btf/xfs_inode_set_need_inactive")
int BPF_PROG(on_need_inactive, struct xfs_inode *ip)
{
	count_alloc(inode_dev(ip), AL_INACTIVE_QUEUED, 0);
	return 0;
}

/* An inode inactivated: in the inodegc worker, or in the caller when inodegc is stopped. */
SEC("tp_btf/xfs_inode_inactivating")
int BPF_PROG(on_inactivating, struct xfs_inode *ip)
{
	count_alloc(inode_dev(ip), AL_INACTIVATING, 0);
	return 0;
}
