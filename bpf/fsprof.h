/* SPDX-License-Identifier: GPL-2.0 */
/* Types and helpers shared by fsprof's BPF programs. Userspace mirrors of these structs live in
 * profiler/trace/maps.py; the loader checks them field by field against the object's BTF, so a drift
 * fails loudly. */
#ifndef FSPROF_H
#define FSPROF_H

/* Kernels older than 5.11 (Debian 11's 5.10) lack task storage, bpf_get_current_task_btf,
 * bpf_task_pt_regs, fetching atomics and pointer arguments to global functions: the objects are
 * built a second time with FSPROF_LEGACY into build/legacy/, which the loader takes where task
 * storage is missing (docs/kernels.md, "5.10"). */
#include <bpf/bpf_core_read.h>
#ifdef FSPROF_LEGACY
#define FSPROF_IS_LEGACY 1
/* The current task (and 5.10's io_uring request, a tp_btf argument it does not type) as a plain
 * pointer: its fields are read with probe reads. */
#define current_task() ((struct task_struct *)bpf_get_current_task())
#define CUR(p, ...) BPF_CORE_READ(p, __VA_ARGS__)
#else
#define FSPROF_IS_LEGACY 0
/* The current task as a BTF pointer: its fields are plain loads. */
#define current_task() bpf_get_current_task_btf()
#define CUR(p, ...) (___arrow(p, __VA_ARGS__))
#endif

/* An atomic add whose addend is a literal 0 at some inlined call: clang turns that add into an
 * atomic OR, which kernels before 5.12 refuse, so the legacy build skips a zero addend. */
#ifdef FSPROF_LEGACY
#define ADD_MAYBE_ZERO(p, v)                         \
	do {                                         \
		__u64 v_ = (v);                      \
		if (v_)                              \
			__sync_fetch_and_add(p, v_); \
	} while (0)
#else
#define ADD_MAYBE_ZERO(p, v) __sync_fetch_and_add(p, v)
#endif

#define HIST_SLOTS 40 /* log2(ns) slots: 2^40 ns is about 18 minutes */
#define MAX_SYSCALL_NR 512
/* Latency histograms are linear-in-log: each power of two is cut into 2^FINE_SUB_BITS slots, so a
 * percentile read at a slot's midpoint is within 1/32 (3.1%) of the true value. Values below 16 ns
 * have a slot each; 2^40 ns (about 18 minutes) and above share the last slot. */
#define FINE_SUB_BITS 4
#define FINE_SLOTS ((40 - FINE_SUB_BITS + 1) << FINE_SUB_BITS)
#define MAX_STACK_DEPTH 64 /* filesystem stacks seen here are 20-45 frames deep */

/* Phase markers: a traced process calls prctl(FSPROF_PHASE_MAGIC, index) (workloads/phase.h and
 * workloads/common.py); no kernel defines this option, so it returns EINVAL and changes nothing. */
#define FSPROF_PHASE_MAGIC 0x66737072
#define MAX_PHASES 32

/* How a traced syscall names the filesystem it works on (profiler/trace/syscalls.py holds the table). */
enum dev_source {
	DEV_SRC_NONE = 0,       /* not traced */
	DEV_SRC_FD = 1,         /* args[0] is an fd */
	DEV_SRC_RET_FD = 2,     /* open/creat: args[0] is a path; the returned fd decides at exit */
	DEV_SRC_DIRFD = 3,      /* *at form: args[0] dirfd, args[1] path */
	DEV_SRC_CWD = 4,        /* args[0] is a path relative to the cwd */
	DEV_SRC_GLOBAL = 5,     /* no single filesystem (sync, io_uring_enter, io_submit) */
	DEV_SRC_MARKER = 6,     /* prctl: not traced, but may carry a phase marker */
	DEV_SRC_RET_FD_AT = 7,  /* openat/openat2: args[0] dirfd, args[1] path; the fd decides at exit */
	DEV_SRC_AIO_SUBMIT = 8, /* io_submit: args[2] iocb **; placed by its first iocb's fd, each
	                         * iocb followed to the io_getevents that reaps it */
	DEV_SRC_AIO_REAP = 9,   /* io_getevents/io_pgetevents: no single filesystem; args[3] the
	                         * io_event array whose events end their iocbs */
};

/* Who is traced: the pid tree of the workload, a cgroup, or every process (with a dev filter, for
 * `fsprof record --mount`). */
enum filter_mode {
	FILTER_PID = 0,
	FILTER_CGROUP = 1,
	FILTER_ALL = 2,
};

struct filter {
	__u32 mode;
	__u32 dev; /* nonzero: only operations on this superblock count */
};

/* Stack sampling (fsprof --stack-sample): off-CPU and waker stacks are walked in 1 of `every`
 * calls of an op once `first` of its blocked intervals have been (windows of a worker: once it has
 * had `first` windows); every <= 1: in all. A call's blocked interval of tail_ns or longer is the
 * tail: its stacks are taken whatever the sampling (the sleeper's at its switch-in, the waker's at
 * its wakeup, when the length is known) and it is marked so (off_key.tail); 0: no tail. In a map,
 * not .rodata, so that every kernel's verifier checks both paths whatever a run chooses. */
struct stack_sampling {
	__u32 every;
	__u32 first;
	__u64 tail_ns;
	__u32 exemplars; /* the slowest calls kept whole per op: 1..EXEMPLARS (0: EXEMPLARS) */
	__u32 pad;
};

/* A stack taken of a task that is not the current one (bpf_get_task_stack): no stack map can
 * keep it, so tail_stacks does, under a hash of its frames with this bit set. */
#define TAIL_STACK_BIT (1 << 29)
#define TAIL_STACK_MASK (TAIL_STACK_BIT - 1)

struct stack_ips {
	__u64 ips[MAX_STACK_DEPTH];
};

/* The stack id of an interval in a call whose stacks were not walked (stack sampling): its time
 * is split in userspace in the proportions of the same op's walked calls. Below every errno. */
#define STACK_NOT_WALKED (-100000)

struct phase_state {
	__u32 current;
	__u32 pad;
	__u64 start_ns[MAX_PHASES]; /* bpf_ktime_get_ns() when each phase was first entered */
};

/* Events the probes could not record, counted so that nothing is lost silently. */
enum drop_reason {
	DROP_INFLIGHT_FULL = 0, /* no room to remember a traced syscall: its time is not counted */
	DROP_OPS_FULL,          /* op histogram map full */
	DROP_OFFCPU_FULL,       /* off-CPU aggregate map full */
	DROP_OFFCPU_STACK,      /* switch-out stack not captured (stack map full or collision) */
	DROP_SAMPLES_FULL,      /* on-CPU sample map full */
	DROP_SAMPLE_STACK,      /* sample stack not captured */
	DROP_OFF_SLOTS,         /* an open blocked at more distinct stacks than it keeps: the extra
	                          * interval went under the filesystem known at entry (its relative
	                          * path's), which differs from the final one only across a mount */
	DROP_BLOCK_FULL,        /* block request map full */
	DROP_WAKER_STACK,       /* a waker's stack not captured: the wait is kept, its waker stack is -1 */
	DROP_WORKER_FULL,       /* a filesystem worker window or its off-CPU aggregate did not fit */
	DROP_FS_FULL,           /* a journal/log/transaction aggregate map full (bpf/<fs>.bpf.c) */
	DROP_RQ_FULL,           /* block request tracking map full: that request's times are not counted */
	DROP_WRITEBACK_FULL,    /* writeback/dirty-throttling aggregate map full */
	DROP_EXEMPLAR_BUSY,     /* a call not weighed as an exemplar: another CPU was updating its op's
	                          * set (the call itself is counted like any other) */
	DROP_WORKER_SWITCHES,   /* a worker window switched out more often than on_switch timed
	                          * off-CPU intervals in it (nvcsw + nivcsw moved more): its time not
	                          * seen off CPU is kept apart as unseen, never counted as its CPU */
	DROP_AIO_IOCBS,         /* libaio iocbs past the AIO_MAX_IOCBS an io_submit or io_getevents
	                          * call is read for: not followed (or not ended: evicted later) */
	N_DROPS,
};

struct hist {
	__u64 count;
	__u64 total_ns;
	__u64 max_ns;
	__u64 ret_sum; /* op_hist: sum of positive return values (bytes, for read/write calls) */
	__u64 slots[FINE_SLOTS];
};

/* dev is the kernel's dev_t of the superblock (major << 20 | minor); 0 = not resolved. */
struct op_key {
	__u32 dev;
	__u16 nr;
	__u16 phase;
};

#define COMM_LEN 16

/* One off-CPU aggregate: time a traced thread spent switched out inside syscall `nr`, with the
 * kernel stack at switch-out; runnable = preempted while it could run (CPU contention). A blocked
 * interval also names who ended it: the waker's kernel stack and command, as sched_waking saw them
 * in the waker's context (an interrupt's stack shows its irq frames above whatever it interrupted).
 * Runnable intervals, and blocked ones whose wakeup was not seen, have waker_stack -1 and no comm. */
struct off_key {
	struct op_key op;
	__s32 stackid;
	__u16 runnable;
	__u16 tail; /* blocked for stack_sampling.tail_ns or longer: counted exactly, never estimated */
	__s32 waker_stack;
	char waker_comm[COMM_LEN];
};

/* Block request classes (bpf/block.bpf.c), from the flags the submitter gave (read at
 * block_io_start, before the flush machinery strips PREFLUSH/FUA on a device without them). */
enum blk_class {
	BLK_FLUSH = 0,      /* REQ_OP_FLUSH: what /sys/block/<dev>/stat counts as flush requests; also
	                        * an empty REQ_PREFLUSH write (blkdev_issue_flush), which only waits for one */
	BLK_PREFLUSH_WRITE, /* a write with REQ_PREFLUSH (cache flush before it; FUA or not) */
	BLK_FUA_WRITE,      /* a write with REQ_FUA and no PREFLUSH */
	BLK_META_WRITE,     /* a REQ_META write (journal, log, btree blocks) */
	BLK_SYNC_WRITE,     /* a REQ_SYNC write (someone waits for it: fsync, O_DIRECT) */
	BLK_ASYNC_WRITE,    /* any other write (background writeback) */
	BLK_READ,
	BLK_DISCARD, /* discard, secure erase */
	BLK_OTHER,   /* write zeroes, zone and driver commands */
	N_BLK_CLASSES,
};

/* Filesystem worker windows: a kernel thread doing work that ends other threads' waits (a jbd2
 * commit, an XFS CIL push, a btrfs transaction commit), between a begin and an end tracepoint in
 * bpf/<fs>.bpf.c. syscalls.bpf.c's sched_switch times the thread's off-CPU intervals inside a
 * window, by stack, so that the worker's own time can be split by cause like a syscall's. */
enum worker_kind {
	WORKER_JBD2_COMMIT = 1,
	WORKER_EXT4_FC_COMMIT = 2,
	WORKER_XFS_CIL_PUSH = 3,
	WORKER_XFS_LOG_WORKER = 4, /* xfs_log_worker: the periodic log force and cover */
	WORKER_BTRFS_COMMIT = 5,
	WORKER_BTRFS_LOG_SYNC = 6,
	WORKER_XFS_INODEGC = 7, /* xfs_inodegc_worker: inactivating unlinked inodes (freeing their blocks) */
	WORKER_FLUSHER = 8,     /* a flusher pass (writeback_start to writeback_written) over a bdi */
	N_WORKER_KINDS,
};

/* The times of block requests that have ended, summed (block.bpf.c's rq_owner_add): from the
 * device's issue to its completion, and from the request's start to its last completion (queue,
 * device, and a cache flush the kernel ran before it for REQ_PREFLUSH). */
struct rq_times {
	__u64 device_ns;
	__u64 life_ns;
	__u32 timed; /* how many */
	__u32 pad;
};

struct worker_window {
	__u64 start_ns;
	__u64 out_ns; /* switched out inside the window; 0 while on CPU */
	__u32 dev;    /* superblock (or journal) dev_t the work is for */
	__u16 kind;   /* enum worker_kind */
	__u16 phase;
	__s32 out_stack;
	__u16 out_runnable;
	__u16 no_stacks;               /* stack sampling passed this window over: its intervals are STACK_NOT_WALKED */
	__u64 blocked_ns;              /* off CPU and not runnable inside the window so far (ext4's commit block
				* takes its part as the difference between two readings) */
	__u32 id;                      /* the work's own number: a jbd2 commit's transaction tid; 0: none */
	__u16 requests[N_BLK_CLASSES]; /* block requests made inside it so far, by class */
	struct rq_times rq_times;      /* of those that have ended (block.bpf.c, at their last completion) */
	__u64 switches;                /* the thread's nvcsw + nivcsw when the window began */
	__u64 offcpu_ns;               /* off CPU inside the window so far, runnable or not */
	__u32 switches_seen;           /* its off-CPU intervals on_switch timed, switch-out to switch-in */
	__u32 gen;                     /* workers_open's generation it was counted in */
};

/* A worker window as a waiter saw it when the worker woke it: the work that ended the wait (an
 * exemplar's wait keeps it). The window may still be open then (end_ns 0), or have just closed:
 * jbd2 wakes the fsync waiters after trace_jbd2_end_commit, where its window ends. */
struct work_seen {
	__u64 start_ns;
	__u64 end_ns;     /* 0: still open when it woke the waiter */
	__u64 blocked_ns; /* the worker's own blocked time in it (mostly waiting for its I/O) */
	__u32 id;
	__u16 kind; /* enum worker_kind; 0: the waker was in no window and had closed none just before */
	__u16 requests[N_BLK_CLASSES];
	struct rq_times rq_times; /* of its requests that had ended by then */
};

/* worker_last's value: a window its worker closed, and the worker's voluntary context switches
 * then. Until the worker next sleeps (nvcsw moves), what it wakes is that work's ending: jbd2
 * wakes the fsync waiters a few locks after trace_jbd2_end_commit, and a preemption between the
 * two (a tick under emulation) must not cut the link. */
struct work_last {
	struct work_seen seen;
	__u64 nvcsw;
};

struct worker_key {
	__u32 dev;
	__u16 kind;
	__u16 phase;
	__s32 stackid;
	__u32 runnable;
};

struct off_val {
	__u64 count;
	__u64 total_ns;
};

/* One on-CPU sample of a traced thread inside syscall `nr`. */
/* Exemplars: the EXEMPLARS slowest calls of each (filesystem, syscall, phase), each recorded
whole, in one set per op shared by the CPUs (a per-CPU set would grow with the machine). */
#define EXEMPLAR_WAITS 4 /* a call's longest blocked intervals, each with its stacks and waker */
#define EXEMPLARS 16     /* at most; --exemplars K keeps fewer. A power of two: slots are masked */

struct exemplar_wait {
	__u64 start_ns; /* when it blocked */
	__u64 ns;       /* blocked until its wakeup (its switch-in when no wakeup was seen) */
	__s32 stack;    /* STACK_NOT_WALKED: a passed-over call's wait below the tail threshold */
	__s32 waker_stack;
	char waker_comm[COMM_LEN];
	struct work_seen work; /* the worker window of its waker, if it was one */
};

/* The block requests a call made from its own bios (by class), and the times of those that had
 * ended by its exit: what its own I/O took (an XFS fsync's iclog write, btrfs's tree-log writes, a
 * direct write). Kept per thread in call_rqs (shared_maps.h) while the call runs. */
struct own_rqs {
	__u16 requests[N_BLK_CLASSES];
	__u16 pad[3];
	struct rq_times times;
};

struct call_rqs {
	__u64 call_ns; /* the call's start_ns: a later call of the thread starts afresh */
	struct own_rqs own;
};

/* A block request that ended, as the device ring keeps it (shared_maps.h rq_ring): what the
 * traced devices were doing while a slow call ran, one request at a time. */
struct rq_seen {
	__u64 end_ns;    /* its last completion */
	__u32 life_ns;   /* from its start (first bio) to its end; U32_MAX: that or longer */
	__u32 device_ns; /* from its issue to the device's completion; 0: not issued itself */
	__u32 dev;
	__u32 tid; /* the thread that made it (0: not known) */
	__u16 cls;
	__u16 pad[3];
};

/* A kept call's device requests: the last EXEMPLAR_RQS to end on the traced devices while it ran
 * (a power of two: slots are masked). */
#define EXEMPLAR_RQS 8

struct exemplar {
	__u64 start_ns;
	__u64 end_ns;
	__u64 runq_ns;    /* off CPU while runnable: CPU contention */
	__u64 blocked_ns; /* all its blocked intervals */
	__s64 ret;
	__u32 tid;
	__u32 waits; /* blocked intervals, all of them; the longest EXEMPLAR_WAITS are in wait[] */
	struct exemplar_wait wait[EXEMPLAR_WAITS];
	struct own_rqs own; /* its own block requests */
	__u32 device_rqs;   /* how many of device[] hold a request */
	__u32 device_more;  /* 1: more requests ended during the call than device[] holds */
	struct rq_seen device[EXEMPLAR_RQS];
};

/* An io_uring request from its submission to its completion (syscalls.bpf.c), in uring_reqs
 * (shared_maps.h): where it is placed, and what its exemplar needs. */
struct uring_req {
	__u64 start_ns;
	__u32 dev;
	__u16 phase;
	__u8 opcode;
	__u8 place;  /* syscalls.bpf.c's enum uring_place */
	__u32 tid;   /* the thread that submitted it */
	__u32 waits; /* its io-wq worker's blocked intervals in it */
	__u64 blocked_ns;
	__u64 runq_ns;
	struct exemplar_wait wait; /* the longest of them */
	struct own_rqs own;        /* the block requests it made, and the times of those that ended */
};

/* io_uring requests' exemplars share the exemplars map with syscalls': op_key.nr is this bit and
 * the opcode (syscall numbers stay far below it). */
#define URING_EXEMPLAR_NR 0x8000

struct exemplar_set {
	__u64 floor_ns; /* the fastest call kept once the set is full: a call no slower is not weighed */
	__u32 busy;     /* a try-lock: one CPU updates the set, another skips its candidate */
	__u32 pad;
	struct exemplar call[EXEMPLARS];
};

struct sample_key {
	struct op_key op;
	__s32 stackid;
	__u32 pad;
};

/* Block requests by class: those a traced syscall made from its own bios (block_getrq in its
 * thread, inside the syscall: per op_key in syscalls.bpf.c), or a worker inside its windows. */
struct rq_classes {
	__u64 count[N_BLK_CLASSES];
	__u64 bytes[N_BLK_CLASSES];
	/* Of those whose last completion was seen (block.bpf.c): how many, and their times (struct
	 * rq_times). Where the owner is not known at issue (a front merge made a later bio the
	 * request's first), a request is counted above and not here. */
	__u64 timed[N_BLK_CLASSES];
	__u64 device_ns[N_BLK_CLASSES];
	__u64 life_ns[N_BLK_CLASSES];
};

/* Who made a block request, kept from its first bio (block_getrq, in the maker's context) to its
 * issue (block.bpf.c), where it moves into the request's record; its times are added to the
 * owner's rq_classes at its last completion. */
enum rq_owner_kind {
	OWNER_NONE = 0,
	OWNER_OP,     /* op_rqs[key]: a traced syscall's own bio */
	OWNER_URING,  /* uring_rqs[key]: issued for an io_uring request */
	OWNER_WORKER, /* worker_runs[key as a worker_run_key], and the window tid's started at window_ns */
};

struct rq_owner {
	struct op_key key; /* OWNER_WORKER: the same 8 bytes as its struct worker_run_key */
	__u32 tid;
	__u16 kind;
	__u16 cls;       /* the class it was counted in */
	__u64 window_ns; /* OWNER_WORKER: its window's start_ns; OWNER_OP: its call's (call_rqs);
	                  * OWNER_URING: the request's uring_reqs key */
	__u32 dev;       /* the disk the bio was made for: a stale entry (a bio address reused for a
	                  * request nobody traced made) must not pass for the owner of another disk's */
	__u32 pad;
};

/* What a filesystem worker did in its windows, per (dev, kind, phase) of the window: how many
 * began, their wall time (begin to end; those whose end was missed add none), the block
 * requests made inside them, and the windows whose every switch was not seen. */
struct worker_run_key {
	__u32 dev;
	__u16 kind;
	__u16 phase;
};

struct worker_run {
	__u64 windows;
	__u64 wall_ns;
	struct rq_classes rqs;
	__u64 unseen_windows; /* windows with switches on_switch did not see (DROP_WORKER_SWITCHES) */
	__u64 unseen_ns;      /* their wall less their recorded off-CPU time: on or off CPU, unknown */
};

struct blk_key {
	__u32 dev;
	__u16 cls;
	__u16 phase;
};

#define BLK_SIZE_SLOTS 24 /* log2(bytes) of issued requests; 8 MiB and above share the last */

/* One (device, class, phase) of bpf/block.bpf.c. Counts at issue unless said otherwise; the
 * histograms in ns: queue = insert (or start) -> issue, device = issue -> completion. */
struct blk_val {
	__u64 count;            /* block_rq_issue events (as a bpftrace one-liner counts them) */
	__u64 bytes;            /* bytes at issue */
	__u64 completed;        /* issued, then completed (the device histogram's count) */
	__u64 unissued;         /* ended without being issued: served by the flush machinery */
	__u64 merged;           /* merged into another request before issue (block_rq_merge) */
	__u64 requeued;         /* issued, then requeued (block_rq_requeue): issued again later */
	__u64 lost;             /* issued, then issued again with no completion or requeue seen between:
	                        * its completion passed untraced (see docs/behind-block.md) */
	__u64 submitted;        /* block_io_start: new requests made from bios (phase at submission) */
	__u64 fua;              /* of those, submitted with REQ_FUA */
	__u64 preflush;         /* ... with REQ_PREFLUSH */
	__u64 meta;             /* ... with REQ_META */
	__u64 flush_asked;      /* flush class: cache flushes the submitted requests asked for */
	__u64 wait_ns;          /* start -> insert of requests inserted after they started (plug, flush sequence) */
	__u64 life_ns;          /* start -> end of issued requests, flush sequence included: the span
	                        * /sys/block/<dev>/stat ticks measure */
	__u64 unissued_life_ns; /* the same for the unissued ones */
	__u64 size_log2[BLK_SIZE_SLOTS];
	struct hist queue;
	struct hist device;
};

/* Dirty throttling (writeback:balance_dirty_pages), by bdi (writeback.bpf.c's id), phase and who
 * (enum wb_who there). */
struct throttle_key {
	__u16 bdi;
	__u16 phase;
	__u16 who;
	__u16 nr; /* syscall number for WHO_SYSCALL, else 0 */
};

/* A pause announced by balance_dirty_pages, until the task is back on a CPU. */
struct pause_pending {
	__u64 start_ns;
	struct throttle_key key;
	__u32 switched_out;
};

struct pause_val {
	__u64 unmatched;   /* pauses whose sleep was not seen (BDP_ASYNC, or map full) */
	struct hist slept; /* ns from the tracepoint to the task's switch-in after the sleep */
};

#define PF_KTHREAD 0x00200000 /* include/linux/sched.h: a #define, not in BTF */

/* Whether the current task is a kernel thread (task flags are a plain load through the BTF pointer). */
static __always_inline bool in_kthread(void)
{
	return CUR(current_task(), flags) & PF_KTHREAD;
}

/* The syscall a user task is in: orig_ax of its saved user registers (x86-64), negative outside
 * one. bpf_task_pt_regs gives a BTF pointer, so this is a plain load, not a probe read. Before it
 * (5.10): task_pt_regs() by hand, the registers at the top of the 16 KiB kernel stack (THREAD_SIZE
 * on x86-64 without KASAN, Debian's config). */
#ifdef FSPROF_LEGACY
#define THREAD_SIZE_X86_64 16384
static __always_inline long task_syscall_nr(struct task_struct *task)
{
	struct pt_regs *regs = (struct pt_regs *)((char *)BPF_CORE_READ(task, stack) + THREAD_SIZE_X86_64) - 1;

	return BPF_CORE_READ(regs, orig_ax);
}
#else
static __always_inline long task_syscall_nr(struct task_struct *task)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);

	return regs->orig_ax;
}
#endif

static __always_inline __u32 log2_slot(__u64 v)
{
	__u32 slot = 0;

	/* Unrolled binary search: the verifier accepts it and it costs a handful of instructions. */
	if (v >= (1ULL << 32)) {
		v >>= 32;
		slot += 32;
	}
	if (v >= (1ULL << 16)) {
		v >>= 16;
		slot += 16;
	}
	if (v >= (1ULL << 8)) {
		v >>= 8;
		slot += 8;
	}
	if (v >= (1ULL << 4)) {
		v >>= 4;
		slot += 4;
	}
	if (v >= (1ULL << 2)) {
		v >>= 2;
		slot += 2;
	}
	if (v >= (1ULL << 1)) {
		slot += 1;
	}
	return slot < HIST_SLOTS ? slot : HIST_SLOTS - 1;
}

static __always_inline __u32 fine_slot(__u64 v)
{
	__u32 e, slot;

	if (v < (1 << FINE_SUB_BITS))
		return v;
	if (v >= (1ULL << 40))
		return FINE_SLOTS - 1;
	e = log2_slot(v); /* >= FINE_SUB_BITS here */
	slot = ((e - FINE_SUB_BITS + 1) << FINE_SUB_BITS) + ((v >> (e - FINE_SUB_BITS)) & ((1 << FINE_SUB_BITS) - 1));
	return slot < FINE_SLOTS ? slot : FINE_SLOTS - 1;
}

/* One value into a histogram shared by all CPUs (a preallocated HASH value, not per-CPU: a struct
 * hist is 4.7 KiB, per CPU it would grow with the machine). No atomic max in BPF: a racing larger
 * maximum can be lost; its slot still counts it. */
static __always_inline void hist_record(struct hist *h, __u64 ns)
{
	__sync_fetch_and_add(&h->count, 1);
	__sync_fetch_and_add(&h->total_ns, ns);
	__sync_fetch_and_add(&h->slots[fine_slot(ns)], 1);
	if (ns > h->max_ns)
		h->max_ns = ns;
}

/* Fields of classic tracepoint records that the legacy programs read (bpf/ext4.bpf.c's jbd2
 * programs on 5.10, whose modules carry no BTF): their offsets come from tracefs's format files,
 * filled in by the loader (profiler/trace/tp_fields.py lists them in this order); 0: absent. The
 * jbd2_commit class (start_commit, commit_locking, commit_flushing, commit_logging) shares one
 * layout. */
enum tp_field {
	TPF_COMMIT_DEV,
	TPF_COMMIT_TID,
	TPF_COMMIT_SYNC,
	TPF_END_DEV,
	TPF_END_TID,
	TPF_RUN_DEV,
	TPF_RUN_TID,
	TPF_RUN_WAIT,
	TPF_RUN_REQUEST_DELAY,
	TPF_RUN_RUNNING,
	TPF_RUN_LOCKED,
	TPF_RUN_FLUSHING,
	TPF_RUN_LOGGING,
	TPF_RUN_HANDLE_COUNT,
	TPF_RUN_BLOCKS,
	TPF_RUN_BLOCKS_LOGGED,
	TPF_CKPT_DEV,
	TPF_CKPT_RESULT,
	TPF_CKPTS_DEV,
	TPF_CKPTS_CHP_TIME,
	TPF_CKPTS_FORCED,
	TPF_CKPTS_WRITTEN,
	TPF_CKPTS_DROPPED,
	TPF_EXT4_DIRTY_DEV, /* ext4_mark_inode_dirty, for placing calls */
	TPF_XFS_LOOKUP_DEV, /* the XFS events that place calls (bpf/xfs.bpf.c's PLACE_CALL) */
	TPF_XFS_GETATTR_DEV,
	TPF_XFS_SETATTR_DEV,
	TPF_XFS_CREATE_DEV,
	TPF_XFS_REMOVE_DEV,
	TPF_XFS_RENAME_DEV,
	TPF_XFS_LINK_DEV,
	TPF_BTRFS_RESV_FSID, /* btrfs_space_reservation's fsid, for placing calls */
	TPF_XFS_FORCE_DEV,   /* xfs_log_force */
	TPF_XFS_FORCE_LSN,
	TPF_XFS_FORCE_CALLER,
	TPF_XFS_RESERVE_DEV, /* the XFS log space (loggrant) events */
	TPF_XFS_REGRANT_DEV,
	TPF_XFS_GRANT_SLEEP_DEV,
	TPF_XFS_GRANT_WAKE_UP_DEV,
	TPF_XFS_CIL_WAIT_DEV,
	TPF_DA_WB_DEV, /* ext4's delayed allocation, block allocation and freeing events */
	TPF_WB_DEV,
	TPF_DA_RESV_DEV,
	TPF_DA_RESV_BLOCKS, /* optional: after 6.1 only */
	TPF_DA_REL_DEV,
	TPF_DA_REL_FREED,
	TPF_DA_UPD_DEV,
	TPF_DA_UPD_USED,
	TPF_DA_EXT_DEV,
	TPF_DA_EXT_LEN,
	TPF_REQ_DEV,
	TPF_REQ_LEN,
	TPF_ALLOC_DEV,
	TPF_ALLOC_LEN,
	TPF_ALLOC_FLAGS,
	TPF_MB_DEV,
	TPF_MB_GROUPS,
	TPF_FREE_DEV,
	TPF_FREE_COUNT,
	TPF_RM_DEV,
	TPF_RM_INO,
	TPF_RMD_DEV,
	TPF_RMD_INO,
	TPF_EVICT_DEV,
	TPF_EVICT_INO,
	TPF_EVICT_NLINK,
	TPF_TRUNC_DEV,
	TPF_TRUNC_INO,
	TPF_BTRFS_SYNC_FSID, /* btrfs_sync_file */
	TPF_BTRFS_SYNC_DATASYNC,
	TPF_BTRFS_COMMIT_FSID, /* btrfs_transaction_commit */
	/* The btrfs__ordered_extent class (ordered_extent_add, _start, _remove share its layout). */
	TPF_BTRFS_OE_FSID,
	TPF_BTRFS_OE_INO,
	TPF_BTRFS_OE_OFFSET,
	TPF_BTRFS_OE_LEN,
	TPF_BTRFS_OE_FLAGS,
	TPF_BTRFS_OE_ROOT,
	TPF_BTRFS_FLUSH_FSID, /* btrfs_flush_space */
	TPF_BTRFS_FLUSH_BYTES,
	TPF_BTRFS_FLUSH_STATE,
	TPF_BTRFS_FLUSH_RET,
	TPF_BTRFS_TRIGGER_FSID, /* btrfs_trigger_flush */
	TPF_BTRFS_TRIGGER_BYTES,
	TPF_BTRFS_TRIGGER_FLUSH,
	TPF_BTRFS_TRIGGER_REASON, /* __data_loc: offset | length << 16 */
	TPF_BTRFS_RESV_TYPE,      /* btrfs_space_reservation, after TPF_BTRFS_RESV_FSID; __data_loc */
	TPF_BTRFS_RESV_BYTES,
	TPF_BTRFS_RESV_RESERVE,
	/* The xfs_imap_class (iomap_alloc, map_blocks_alloc, map_blocks_found share its layout). */
	TPF_XFS_IMAP_DEV,
	TPF_XFS_IMAP_STARTBLOCK,
	TPF_XFS_IMAP_BLOCKCOUNT,
	TPF_XFS_ENOSPC_DEV,     /* xfs_delalloc_enospc */
	TPF_EXT4_FC_START_DEV,  /* ext4_fc_commit_start */
	TPF_EXT4_FC_STOP_NBLKS, /* ext4_fc_commit_stop */
	TPF_EXT4_FC_STOP_REASON,
	N_TP_FIELDS,
};

struct tp_fields {
	__u16 off[N_TP_FIELDS];
};

#endif
