// SPDX-License-Identifier: GPL-2.0
/* Behind the wait on ext4: jbd2 commits (timed per commit phase, with the kernel's own run
 * statistics), fast commits, checkpoints, and delayed allocation (reservations at write time vs
 * allocations at writeback, by the thread that forced them). Aggregated per (device, workload
 * phase) in the kernel; profiler/behind/ext4.py mirrors the structs below.
 *
 * Kernel 6.18, fs/jbd2/commit.c jbd2_journal_commit_transaction(), run by the journal's kjournald2
 * thread ("jbd2/<dev>-8"), fires in this order for one transaction:
 *   jbd2_start_commit     the thread took the running transaction (after any fast commit ended)
 *   jbd2_commit_locking   T_LOCKED: waits for every open handle (t_updates) to stop
 *   jbd2_commit_flushing  T_FLUSH: a new transaction may start; ordered-mode data is submitted,
 *                         revoke records written. jbd2 starts its own commit_time clock here.
 *   jbd2_commit_logging   T_COMMIT: metadata blocks written to the log, ordered data waited for,
 *                         cache flush, commit block (REQ_PREFLUSH|REQ_FUA), checkpoint lists
 *   jbd2_run_stats        per-transaction statistics (times in jiffies, handles, blocks); jbd2
 *                         stops its clock right after and files the same figures into
 *                         /proc/fs/jbd2/<dev>-8/info
 *   jbd2_end_commit       after the commit callbacks (ext4 frees blocks released by the transaction)
 * Every event carries the journal's filesystem device (j_fs_dev) and the transaction id.
 *
 * All programs are tp_btf: they read the tracepoints' raw arguments and compute each classic field
 * the way the tracepoint's TP_fast_assign does (named at each program). Pointer arguments are
 * NULL-checked before anything is read through them (an older verifier refuses arithmetic on a
 * pointer that may be NULL); none is NULL here, as TP_fast_assign dereferences them all. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "compat.h"
#include <bpf/bpf_tracing.h>
#include "fsprof.h"
#include "shared_maps.h"

char LICENSE[] SEC("license") = "GPL";

/* Commit phases, each timed from its tracepoint to the next. */
enum commit_phase {
	CPH_START = 0, /* start_commit -> commit_locking */
	CPH_LOCKING,   /* commit_locking -> commit_flushing: waiting for open handles */
	CPH_FLUSHING,  /* commit_flushing -> commit_logging: submitting ordered data */
	CPH_LOGGING,   /* commit_logging -> run_stats: log writes, data wait, flush, commit block */
	CPH_END,       /* run_stats -> end_commit: commit callbacks */
	N_CPH,
};

/* One (journal device, workload phase) of jbd2 commits. */
struct jbd2_val {
	__u64 commits;      /* jbd2_run_stats seen: what /proc/fs/jbd2/<dev>-8/info counts */
	__u64 timed;        /* commits seen from jbd2_start_commit to jbd2_end_commit */
	__u64 sync_commits; /* timed commits whose transaction was marked synchronous */
	__u64 phase_ns[N_CPH];
	__u64 phase_max_ns[N_CPH];
	__u64 kernel_ns; /* commit_flushing -> run_stats: the span jbd2's commit_time covers */
	/* The commit block (REQ_PREFLUSH|REQ_FUA unless barrier=0 or async_commit): from its
	 * submission by the commit thread to the end of the commit's logging; its blocked time is the
	 * cache flush + FUA write that the worker stacks cannot tell from log block writes (both
	 * wait in wait_on_buffer, inlined into jbd2_journal_commit_transaction). */
	__u64 commit_blocks, commit_block_ns, commit_block_offcpu_ns;
	/* jbd2_run_stats sums (times in jiffies, as the kernel keeps them) */
	__u64 rs_wait, rs_request_delay, rs_running, rs_locked, rs_flushing, rs_logging;
	__u64 handles, blocks, blocks_logged;
	/* Time from one commit's start to the next one's on the same journal */
	__u64 intervals, interval_ns, interval_max_ns;
	/* Checkpointing: jbd2_checkpoint (a checkpoint pass, in whichever thread needs log space) and
	 * jbd2_checkpoint_stats (a transaction leaving the checkpoint list) */
	__u64 checkpoints, checkpoint_errors;
	__u64 chp_transactions, chp_time_j, chp_written, chp_dropped, chp_forced;
	struct hist commit; /* start_commit -> end_commit */
};

struct jbd2_key {
	__u32 dev;
	__u16 phase;
	__u16 pad;
};

/* A commit in progress, by (device, transaction id). */
struct commit_key {
	__u32 dev;
	__u32 tid;
};

struct commit_state {
	__u64 ts[N_CPH]; /* when each phase began; 0 = not seen */
	__u16 phase;     /* workload phase at jbd2_start_commit */
	__u8 sync;
	__u8 pad[5];
};

/* Per journal: the kernel's own running average of commit_time (jbd2 weights the newest commit
 * 1/4, j_average_commit_time, printed in info as "average transaction commit time"), computed the
 * same way over the same span, and the last commit start for intervals. */
struct journal_state {
	__u64 last_start_ns;
	__u64 ewma_ns;
	__u64 ewma_commits;
	__u64 fc_ewma_ns; /* the same for fast commits done fast (s_fc_avg_commit_time, fc_info) */
	__u64 fc_ewma_commits;
};

/* Fast commits (ext4_fc_commit, run in the fsync caller's thread). status: the kernel's
 * EXT4_FC_STATUS_{OK, INELIGIBLE, SKIPPED, FAILED}; INELIGIBLE and FAILED fall back to a full
 * jbd2 commit, waited for inside the fast-commit window. */
struct fc_key {
	__u32 dev;
	__u16 phase;
	__u16 status;
};

struct fc_val {
	__u64 count;
	__u64 total_ns;
	__u64 max_ns;
	__u64 blocks;
};

struct fc_inflight {
	__u64 start_ns;
	__u32 dev;
	__u16 phase;
	__u16 pad;
};

/* Delayed allocation and block allocation events, by who ran them. */
enum da_event {
	DA_WRITE_BEGIN = 0,  /* ext4_da_write_begin: a buffered write with delalloc (blocks reserved) */
	DA_NODA_WRITE_BEGIN, /* ext4_write_begin: a buffered write without delalloc (nodelalloc,
	                        * data=journal, or delalloc switched off when space runs low) */
	DA_RESERVE,          /* ext4_da_reserve_space: blocks reserved at write time */
	DA_RELEASE,          /* ext4_da_release_space: reservations dropped (truncate, punch) */
	DA_CLAIM,            /* ext4_da_update_reserve_space: reserved blocks turned into allocated */
	DA_MAP_EXTENT,       /* ext4_da_write_pages_extent: writeback maps a delayed extent */
	DA_REQUEST,          /* ext4_request_blocks: an allocation request to mballoc */
	DA_ALLOC_DELALLOC,   /* ext4_allocate_blocks with EXT4_MB_DELALLOC_RESV: delalloc blocks */
	DA_ALLOC_OTHER,      /* ext4_allocate_blocks otherwise (metadata, nodelalloc data, ...) */
	DA_MBALLOC,          /* ext4_mballoc_alloc: mballoc's search; blocks = groups scanned */
	DA_FREE,             /* ext4_free_blocks: blocks freed (unlink, truncate, punch) */
	N_DA_EVENTS,
};

enum who {
	WHO_SYSCALL = 0, /* a user thread inside syscall `nr` */
	WHO_USER = 1,    /* a user thread outside a syscall (page fault: mmap writes) */
	WHO_KTHREAD = 2, /* a kernel thread (the flusher's kworker, jbd2, ...) */
};

struct da_key {
	__u32 dev;
	__u16 phase;
	__u16 event;
	__u16 who;
	__u16 nr;
	__u32 pad;
	char comm[COMM_LEN];
};

struct da_val {
	__u64 count;
	__u64 blocks;
};

#define EXT4_MB_DELALLOC_RESV 0x0400 /* allocation flag: blocks come from a delalloc reservation */

/* Devices under test (kernel dev_t): the superblock's and its block devices. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u8);
} ext4_devs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct jbd2_key);
	__type(value, struct jbd2_val);
} jbd2_commits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct commit_key);
	__type(value, struct commit_state);
} commits_inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct journal_state);
} journals SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct fc_key);
	__type(value, struct fc_val);
} fc_commits SEC(".maps");

/* thread id -> its fast commit in progress */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct fc_inflight);
} fc_inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct da_key);
	__type(value, struct da_val);
} da_events SEC(".maps");

/* thread id -> the commit it is running (set from jbd2_start_commit to jbd2_end_commit) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct commit_key);
} committing SEC(".maps");

/* The commit block in flight, by commit thread id: its submission time and the thread's blocked
 * time so far in its commit window (struct worker_window, timed by syscalls.bpf.c's on_switch: one
 * sched_switch program for all, rather than one more run at every switch on the machine). */
struct commit_block {
	__u64 start_ns;
	__u64 blocked_at_start; /* NO_WINDOW: the commit had no worker window (its blocked time is not known) */
	struct commit_key commit;
};

#define NO_WINDOW ((__u64)-1)

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct commit_block);
} commit_block_wait SEC(".maps");

const struct jbd2_val zero_jbd2 = {};

/* The blocked time so far of the current thread's worker window, or NO_WINDOW. */
static __always_inline __u64 window_blocked_ns(__u32 thread)
{
	struct worker_window *w = bpf_map_lookup_elem(&worker_windows, &thread);

	return w ? w->blocked_ns : NO_WINDOW;
}

/* Forgets the thread's commit block wait, if it has one. */
static __always_inline void commit_block_forget(__u32 thread)
{
	bpf_map_delete_elem(&commit_block_wait, &thread);
}

static __always_inline bool traced_dev(__u32 dev)
{
	return bpf_map_lookup_elem(&ext4_devs, &dev) != NULL;
}

static __always_inline struct jbd2_val *jbd2_agg(__u32 dev, __u16 phase)
{
	struct jbd2_key key = { .dev = dev, .phase = phase };

	return lookup_or_init(&jbd2_commits, &key, &zero_jbd2, DROP_FS_FULL);
}

static __always_inline struct journal_state *journal_of(__u32 dev)
{
	struct journal_state fresh = {};

	return lookup_or_init(&journals, &dev, &fresh, DROP_FS_FULL);
}

/* jbd2's running average of commit_time (commit.c; ext4_fc_update_stats the same for fast
 * commits): avg = (t + 3 avg) / 4, the first commit taken as is. */
static __always_inline void ewma(__u64 *avg, __u64 *n, __u64 t)
{
	*avg = *avg ? (t + *avg * 3) / 4 : t;
	(*n)++;
}

static __always_inline void journal_ewma(__u32 dev, __u64 t)
{
	struct journal_state *js = journal_of(dev);

	if (js)
		ewma(&js->ewma_ns, &js->ewma_commits, t);
}

/* ---- jbd2 commits ---- */

static __always_inline struct commit_state *commit_of(__u32 dev, __u32 tid)
{
	struct commit_key key = { .dev = dev, .tid = tid };

	return bpf_map_lookup_elem(&commits_inflight, &key);
}

/* The dev every journal_t tracepoint records: journal->j_fs_dev->bd_dev. */
static __always_inline __u32 journal_dev(journal_t *journal)
{
	struct block_device *bdev = journal ? journal->j_fs_dev : NULL; /* BTF pointers: plain loads */

	return bdev ? bdev->bd_dev : 0;
}

/* The jbd2_commit class's dev and transaction (and jbd2_end_commit's, assigned the same way):
 * journal->j_fs_dev->bd_dev and commit_transaction->t_tid. false if an argument is NULL. */
static __always_inline bool commit_key_of(journal_t *journal, transaction_t *txn, struct commit_key *key)
{
	if (!journal || !txn)
		return false;
	key->dev = journal_dev(journal);
	key->tid = txn->t_tid;
	return true;
}

/* The tracepoints' bodies take the fields their records hold: the tp_btf programs compute them as
 * TP_fast_assign does, the classic ones of 5.10 (FSPROF_LEGACY, below) read them from the record. */
static __always_inline int jbd2_start(__u32 dev, __u32 tid, __u8 sync)
{
	struct commit_key key = { .dev = dev, .tid = tid };
	__u32 thread = (__u32)bpf_get_current_pid_tgid();
	struct commit_state st = {};
	struct journal_state *js;
	struct jbd2_val *v;
	__u64 now;

	if (!traced_dev(key.dev))
		return 0;
	now = bpf_ktime_get_ns();
	st.ts[CPH_START] = now;
	st.phase = current_phase();
	st.sync = sync;
	if (bpf_map_update_elem(&commits_inflight, &key, &st, BPF_ANY)) {
		count_drop(DROP_FS_FULL);
		return 0;
	}
	/* The commit thread's own time, split by cause from its off-CPU stacks ([[worker]] rules). */
	worker_begin(WORKER_JBD2_COMMIT, key.dev, key.tid);
	bpf_map_update_elem(&committing, &thread, &key, BPF_ANY);

	js = journal_of(key.dev);
	if (!js)
		return 0;
	if (js->last_start_ns) {
		__u64 gap = now - js->last_start_ns;

		v = jbd2_agg(key.dev, st.phase);
		if (v) {
			__sync_fetch_and_add(&v->intervals, 1);
			__sync_fetch_and_add(&v->interval_ns, gap);
			if (gap > v->interval_max_ns)
				v->interval_max_ns = gap;
		}
	}
	js->last_start_ns = now;
	return 0;
}

SEC("tp_btf/jbd2_start_commit")
int BPF_PROG(on_jbd2_start_commit, journal_t *journal, transaction_t *commit_transaction)
{
	struct commit_key key = {};

	if (!commit_key_of(journal, commit_transaction, &key))
		return 0;
	/* sync_commit: the 1-bit t_synchronous_commit */
	return jbd2_start(key.dev, key.tid, BPF_CORE_READ_BITFIELD_PROBED(commit_transaction, t_synchronous_commit));
}

/* Marks the start of commit phase `cph` (the end of the one before). */
static __always_inline int jbd2_phase(__u32 dev, __u32 tid, int cph)
{
	struct commit_state *st;

	if (!traced_dev(dev))
		return 0;
	st = commit_of(dev, tid);
	if (st && cph > 0 && cph < N_CPH)
		st->ts[cph] = bpf_ktime_get_ns();
	return 0;
}

static __always_inline int mark_phase(journal_t *journal, transaction_t *txn, int cph)
{
	struct commit_key key = {};

	return commit_key_of(journal, txn, &key) ? jbd2_phase(key.dev, key.tid, cph) : 0;
}

SEC("tp_btf/jbd2_commit_locking")
int BPF_PROG(on_jbd2_commit_locking, journal_t *journal, transaction_t *commit_transaction)
{
	return mark_phase(journal, commit_transaction, CPH_LOCKING);
}

SEC("tp_btf/jbd2_commit_flushing")
int BPF_PROG(on_jbd2_commit_flushing, journal_t *journal, transaction_t *commit_transaction)
{
	return mark_phase(journal, commit_transaction, CPH_FLUSHING);
}

SEC("tp_btf/jbd2_commit_logging")
int BPF_PROG(on_jbd2_commit_logging, journal_t *journal, transaction_t *commit_transaction)
{
	return mark_phase(journal, commit_transaction, CPH_LOGGING);
}

/* ---- the commit block ---- */

/* A bio queued by a commit thread with REQ_PREFLUSH and data ("FWFS..." in rwbs): the commit
 * block, which with barriers on carries the cache flush and the FUA write. (jbd2 runs
 * journal_submit_commit_record() in its own context, so block_bio_queue sees the commit thread.) An
 * empty flush bio (blkdev_issue_flush: external journal, async_commit) has no sectors: the
 * worker rules name it by its stack.
 * From the bio as block_bio_queue's TP_fast_assign: nr_sector = bio_sectors(bio) =
 * bi_iter.bi_size >> 9; blk_fill_rwbs(bi_opf) writes 'F' first exactly when REQ_PREFLUSH is set
 * or the op (the bits below __REQ_FAILFAST_DEV, REQ_OP_MASK) is REQ_OP_FLUSH. */
SEC("tp_btf/block_bio_queue")
int BPF_PROG(on_bio_queue, BIO_QUEUE_ARGS)
{
	__u32 thread = (__u32)bpf_get_current_pid_tgid();
	struct commit_key *commit;
	struct commit_block cb = {};
	__u32 opf;

	/* Most bios on the machine come from user threads; the commit thread is a kernel thread. */
	if (!in_kthread())
		return 0;
	commit = bpf_map_lookup_elem(&committing, &thread);
	if (!commit || !bio || !(bio->bi_iter.bi_size >> 9))
		return 0;
	opf = bio->bi_opf;
	if (!(opf & REQ_BIT(__REQ_PREFLUSH)) && op_of(opf) != REQ_OP_VALUE(REQ_OP_FLUSH))
		return 0;
	cb.start_ns = bpf_ktime_get_ns();
	cb.blocked_at_start = window_blocked_ns(thread);
	cb.commit = *commit;
	bpf_map_update_elem(&commit_block_wait, &thread, &cb, BPF_NOEXIST);
	return 0;
}

/* The commit block's part of the commit ends where the journal moves on: a journal superblock
 * update (jbd2_update_log_tail, named by its own stack) or the run statistics. */
static __always_inline void commit_block_done(struct jbd2_val *v, __u64 now)
{
	__u32 thread = (__u32)bpf_get_current_pid_tgid();
	struct commit_block *cb = bpf_map_lookup_elem(&commit_block_wait, &thread);
	__u64 blocked;

	if (!cb)
		return;
	blocked = window_blocked_ns(thread);
	if (v) {
		__sync_fetch_and_add(&v->commit_blocks, 1);
		__sync_fetch_and_add(&v->commit_block_ns, now - cb->start_ns);
		if (blocked != NO_WINDOW && cb->blocked_at_start != NO_WINDOW && blocked >= cb->blocked_at_start)
			__sync_fetch_and_add(&v->commit_block_offcpu_ns, blocked - cb->blocked_at_start);
	}
	commit_block_forget(thread);
}

/* Only the thread matters here, none of the event's fields. */
static __always_inline int jbd2_write_superblock(void)
{
	__u32 thread = (__u32)bpf_get_current_pid_tgid();
	struct commit_block *cb = bpf_map_lookup_elem(&commit_block_wait, &thread);
	struct commit_state *st;

	if (!cb)
		return 0;
	st = commit_of(cb->commit.dev, cb->commit.tid);
	commit_block_done(jbd2_agg(cb->commit.dev, st ? st->phase : current_phase()), bpf_ktime_get_ns());
	return 0;
}

SEC("tp_btf/jbd2_write_superblock")
int BPF_PROG(on_jbd2_write_superblock, journal_t *journal, blk_opf_t write_flags)
{
	return jbd2_write_superblock();
}

/* jbd2_run_stats' fields (stats->rs_<field>). */
struct run_stats {
	__u64 wait, request_delay, running, locked, flushing, logging;
	__u32 handle_count, blocks, blocks_logged;
};

static __always_inline int jbd2_run(__u32 dev, __u32 tid, struct run_stats *rs)
{
	struct commit_state *st;
	struct jbd2_val *v;
	__u64 now;

	if (!traced_dev(dev))
		return 0;
	now = bpf_ktime_get_ns();
	st = commit_of(dev, tid);
	/* A commit that began before the probes were reset still counts (as info does); its phase is
	 * the current one. */
	v = jbd2_agg(dev, st ? st->phase : current_phase());
	if (!v)
		return 0;
	__sync_fetch_and_add(&v->commits, 1);
	ADD_MAYBE_ZERO(&v->rs_wait, rs->wait);
	ADD_MAYBE_ZERO(&v->rs_request_delay, rs->request_delay);
	ADD_MAYBE_ZERO(&v->rs_running, rs->running);
	ADD_MAYBE_ZERO(&v->rs_locked, rs->locked);
	ADD_MAYBE_ZERO(&v->rs_flushing, rs->flushing);
	ADD_MAYBE_ZERO(&v->rs_logging, rs->logging);
	ADD_MAYBE_ZERO(&v->handles, rs->handle_count);
	ADD_MAYBE_ZERO(&v->blocks, rs->blocks);
	ADD_MAYBE_ZERO(&v->blocks_logged, rs->blocks_logged);
	commit_block_done(v, now);
	if (st) {
		st->ts[CPH_END] = now;
		if (st->ts[CPH_FLUSHING])
			journal_ewma(dev, now - st->ts[CPH_FLUSHING]);
	}
	return 0;
}

/* dev and tid are arguments; every other field is stats->rs_<field>. */
SEC("tp_btf/jbd2_run_stats")
int BPF_PROG(on_jbd2_run_stats, dev_t dev, tid_t tid, struct transaction_run_stats_s *stats)
{
	struct run_stats rs;

	if (!stats)
		return 0;
	rs.wait = BPF_CORE_READ(stats, rs_wait);
	rs.request_delay = BPF_CORE_READ(stats, rs_request_delay);
	rs.running = BPF_CORE_READ(stats, rs_running);
	rs.locked = BPF_CORE_READ(stats, rs_locked);
	rs.flushing = BPF_CORE_READ(stats, rs_flushing);
	rs.logging = BPF_CORE_READ(stats, rs_logging);
	rs.handle_count = BPF_CORE_READ(stats, rs_handle_count);
	rs.blocks = BPF_CORE_READ(stats, rs_blocks);
	rs.blocks_logged = BPF_CORE_READ(stats, rs_blocks_logged);
	return jbd2_run(dev, tid, &rs);
}

static __always_inline void add_phase(struct jbd2_val *v, int cph, __u64 ns)
{
	if (cph < 0 || cph >= N_CPH)
		return;
	__sync_fetch_and_add(&v->phase_ns[cph], ns);
	if (ns > v->phase_max_ns[cph])
		v->phase_max_ns[cph] = ns;
}

static __always_inline int jbd2_end(__u32 dev, __u32 tid)
{
	struct commit_key key = { .dev = dev, .tid = tid };
	__u32 thread = (__u32)bpf_get_current_pid_tgid();
	struct commit_state *st;
	struct jbd2_val *v;
	__u64 now, total;
	int i;

	if (!traced_dev(key.dev))
		return 0;
	worker_end();
	bpf_map_delete_elem(&committing, &thread);
	commit_block_forget(thread);
	st = bpf_map_lookup_elem(&commits_inflight, &key);
	if (!st)
		return 0;
	now = bpf_ktime_get_ns();
	v = jbd2_agg(key.dev, st->phase);
	if (v && st->ts[CPH_START]) {
		/* Each phase runs to the next one seen (all are, unless the probes were reset mid-commit). */
		for (i = 0; i < N_CPH; i++) {
			__u64 from = st->ts[i], to = now;
			int j;

			if (!from)
				continue;
			for (j = i + 1; j < N_CPH; j++) {
				if (st->ts[j]) {
					to = st->ts[j];
					break;
				}
			}
			add_phase(v, i, to - from);
		}
		total = now - st->ts[CPH_START];
		__sync_fetch_and_add(&v->timed, 1);
		if (st->sync)
			__sync_fetch_and_add(&v->sync_commits, 1);
		if (st->ts[CPH_FLUSHING] && st->ts[CPH_END])
			__sync_fetch_and_add(&v->kernel_ns, st->ts[CPH_END] - st->ts[CPH_FLUSHING]);
		hist_record(&v->commit, total);
	}
	bpf_map_delete_elem(&commits_inflight, &key);
	return 0;
}

SEC("tp_btf/jbd2_end_commit")
int BPF_PROG(on_jbd2_end_commit, journal_t *journal, transaction_t *commit_transaction)
{
	struct commit_key key = {};

	return commit_key_of(journal, commit_transaction, &key) ? jbd2_end(key.dev, key.tid) : 0;
}

/* ---- checkpoints ---- */

static __always_inline int jbd2_checkpoint(__u32 dev, int result)
{
	struct jbd2_val *v;

	if (!traced_dev(dev))
		return 0;
	v = jbd2_agg(dev, current_phase());
	if (!v)
		return 0;
	__sync_fetch_and_add(&v->checkpoints, 1);
	if (result < 0)
		__sync_fetch_and_add(&v->checkpoint_errors, 1);
	return 0;
}

SEC("tp_btf/jbd2_checkpoint")
int BPF_PROG(on_jbd2_checkpoint, journal_t *journal, int result)
{
	return jbd2_checkpoint(journal_dev(journal), result);
}

static __always_inline int jbd2_checkpoint_stats(__u32 dev, __u64 chp_time, __u32 written, __u32 dropped, __u32 forced)
{
	struct jbd2_val *v;

	if (!traced_dev(dev))
		return 0;
	v = jbd2_agg(dev, current_phase());
	if (!v)
		return 0;
	__sync_fetch_and_add(&v->chp_transactions, 1);
	ADD_MAYBE_ZERO(&v->chp_time_j, chp_time);
	ADD_MAYBE_ZERO(&v->chp_written, written);
	ADD_MAYBE_ZERO(&v->chp_dropped, dropped);
	ADD_MAYBE_ZERO(&v->chp_forced, forced);
	return 0;
}

/* dev is an argument; the other fields are stats->cs_<field>. */
SEC("tp_btf/jbd2_checkpoint_stats")
int BPF_PROG(on_jbd2_checkpoint_stats, dev_t dev, tid_t tid, struct transaction_chp_stats_s *stats)
{
	if (!stats)
		return 0;
	return jbd2_checkpoint_stats(dev, BPF_CORE_READ(stats, cs_chp_time), BPF_CORE_READ(stats, cs_written),
	                             BPF_CORE_READ(stats, cs_dropped), BPF_CORE_READ(stats, cs_forced_to_close));
}

#ifdef FSPROF_LEGACY
/* ---- 5.10: the jbd2 tracepoints as classic ones (tp_<event>, twins of on_<event>; compat.h's
 * tp_record reads their fields). ---- */
static __always_inline int tp_commit_phase(void *ctx, int cph)
{
	struct tp_record r;

	if (!tp_record(ctx, &r, TPF_COMMIT_DEV, 3))
		return 0;
	return jbd2_phase(tp_u32(&r, TPF_COMMIT_DEV), tp_u32(&r, TPF_COMMIT_TID), cph);
}

SEC("tracepoint/jbd2/jbd2_start_commit")
int tp_jbd2_start_commit(void *ctx)
{
	struct tp_record r;

	if (!tp_record(ctx, &r, TPF_COMMIT_DEV, 3))
		return 0;
	return jbd2_start(tp_u32(&r, TPF_COMMIT_DEV), tp_u32(&r, TPF_COMMIT_TID), tp_u8(&r, TPF_COMMIT_SYNC) & 1);
}

SEC("tracepoint/jbd2/jbd2_commit_locking")
int tp_jbd2_commit_locking(void *ctx)
{
	return tp_commit_phase(ctx, CPH_LOCKING);
}

SEC("tracepoint/jbd2/jbd2_commit_flushing")
int tp_jbd2_commit_flushing(void *ctx)
{
	return tp_commit_phase(ctx, CPH_FLUSHING);
}

SEC("tracepoint/jbd2/jbd2_commit_logging")
int tp_jbd2_commit_logging(void *ctx)
{
	return tp_commit_phase(ctx, CPH_LOGGING);
}

SEC("tracepoint/jbd2/jbd2_end_commit")
int tp_jbd2_end_commit(void *ctx)
{
	struct tp_record r;

	if (!tp_record(ctx, &r, TPF_END_DEV, 2))
		return 0;
	return jbd2_end(tp_u32(&r, TPF_END_DEV), tp_u32(&r, TPF_END_TID));
}

SEC("tracepoint/jbd2/jbd2_write_superblock")
int tp_jbd2_write_superblock(void *ctx)
{
	return jbd2_write_superblock();
}

SEC("tracepoint/jbd2/jbd2_run_stats")
int tp_jbd2_run_stats(void *ctx)
{
	struct tp_record r;
	struct run_stats rs;

	if (!tp_record(ctx, &r, TPF_RUN_DEV, 11))
		return 0;
	rs.wait = tp_u64(&r, TPF_RUN_WAIT);
	rs.request_delay = tp_u64(&r, TPF_RUN_REQUEST_DELAY);
	rs.running = tp_u64(&r, TPF_RUN_RUNNING);
	rs.locked = tp_u64(&r, TPF_RUN_LOCKED);
	rs.flushing = tp_u64(&r, TPF_RUN_FLUSHING);
	rs.logging = tp_u64(&r, TPF_RUN_LOGGING);
	rs.handle_count = tp_u32(&r, TPF_RUN_HANDLE_COUNT);
	rs.blocks = tp_u32(&r, TPF_RUN_BLOCKS);
	rs.blocks_logged = tp_u32(&r, TPF_RUN_BLOCKS_LOGGED);
	return jbd2_run(tp_u32(&r, TPF_RUN_DEV), tp_u32(&r, TPF_RUN_TID), &rs);
}

SEC("tracepoint/jbd2/jbd2_checkpoint")
int tp_jbd2_checkpoint(void *ctx)
{
	struct tp_record r;

	if (!tp_record(ctx, &r, TPF_CKPT_DEV, 2))
		return 0;
	return jbd2_checkpoint(tp_u32(&r, TPF_CKPT_DEV), (int)tp_u32(&r, TPF_CKPT_RESULT));
}

SEC("tracepoint/jbd2/jbd2_checkpoint_stats")
int tp_jbd2_checkpoint_stats(void *ctx)
{
	struct tp_record r;

	if (!tp_record(ctx, &r, TPF_CKPTS_DEV, 5))
		return 0;
	return jbd2_checkpoint_stats(tp_u32(&r, TPF_CKPTS_DEV), tp_u64(&r, TPF_CKPTS_CHP_TIME),
	                             tp_u32(&r, TPF_CKPTS_WRITTEN), tp_u32(&r, TPF_CKPTS_DROPPED),
	                             tp_u32(&r, TPF_CKPTS_FORCED));
}
#endif

/* ---- fast commits ---- */

/* The dev the ext4 tracepoints record: sb->s_dev, or inode->i_sb->s_dev. */
static __always_inline __u32 sb_dev(struct super_block *sb)
{
	if (!sb)
		return 0;
	return BPF_CORE_READ(sb, s_dev);
}

/* inode is a BTF pointer (a tp_btf argument or a field of one): plain loads, not probe reads. */
static __always_inline __u32 inode_dev(struct inode *inode)
{
	struct super_block *sb = inode ? inode->i_sb : NULL;

	return sb ? sb->s_dev : 0;
}

/* A call by a path that placed it on no filesystem (an absolute one) ran ext4's code: unlink,
 * create, rename, link, setattr and the rest all mark an inode dirty inside the call. */
SEC("tp_btf/ext4_mark_inode_dirty")
int BPF_PROG(on_mark_inode_dirty, struct inode *inode)
{
	place_call(inode_dev(inode));
	return 0;
}

#ifdef FSPROF_LEGACY
SEC("tracepoint/ext4/ext4_mark_inode_dirty")
int tp_ext4_mark_inode_dirty(void *ctx)
{
	struct tp_record r;

	if (tp_record(ctx, &r, TPF_EXT4_DIRTY_DEV, 1))
		place_call(tp_u32(&r, TPF_EXT4_DIRTY_DEV));
	return 0;
}
#endif

/* ext4_fc_commit() entered on a fast_commit filesystem (the fsync caller's thread). */
static __always_inline void fc_commit_start(__u32 dev)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct fc_inflight fc = {};

	if (!traced_dev(dev))
		return;
	fc.start_ns = bpf_ktime_get_ns();
	fc.dev = dev;
	fc.phase = current_phase();
	if (bpf_map_update_elem(&fc_inflight, &tid, &fc, BPF_ANY)) {
		count_drop(DROP_FS_FULL);
		return;
	}
	worker_begin(WORKER_EXT4_FC_COMMIT, fc.dev, 0);
}

/* ext4_fc_commit() done (ext4_fc_update_stats): `status` is the outcome (EXT4_FC_STATUS_*),
 * `nblks` the fast-commit blocks written. A fallback to a full commit has already waited for it. */
static __always_inline void fc_commit_stop(int nblks, int status)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct fc_inflight *fc = bpf_map_lookup_elem(&fc_inflight, &tid);
	struct fc_key key = {};
	struct fc_val *v, zero = {};
	__u64 ns;

	if (!fc)
		return;
	worker_end();
	ns = bpf_ktime_get_ns() - fc->start_ns;
	key.dev = fc->dev;
	key.phase = fc->phase;
	key.status = status;
	bpf_map_delete_elem(&fc_inflight, &tid);
	v = lookup_or_init(&fc_commits, &key, &zero, DROP_FS_FULL);
	if (!v)
		return;
	__sync_fetch_and_add(&v->count, 1);
	__sync_fetch_and_add(&v->total_ns, ns);
	if (nblks > 0)
		__sync_fetch_and_add(&v->blocks, nblks);
	if (ns > v->max_ns)
		v->max_ns = ns;
	if (key.status == EXT4_FC_STATUS_OK) {
		struct journal_state *js = journal_of(key.dev);

		if (js)
			ewma(&js->fc_ewma_ns, &js->fc_ewma_commits, ns);
	}
}

SEC("tp_btf/ext4_fc_commit_start")
int BPF_PROG(on_fc_commit_start, struct super_block *sb, tid_t commit_tid)
{
	fc_commit_start(sb_dev(sb));
	return 0;
}

SEC("tp_btf/ext4_fc_commit_stop")
int BPF_PROG(on_fc_commit_stop, struct super_block *sb, int nblks, int reason, tid_t commit_tid)
{
	fc_commit_stop(nblks, reason);
	return 0;
}

#ifdef FSPROF_LEGACY
/* 5.10: as classic tracepoints (compat.h's tp_record). 5.10's reasons are EXT4_FC_REASON_OK 0,
 * INELIGIBLE 1, ALREADY_COMMITTED 2, FC_START_FAILED 3, FC_FAILED 4 (fs/ext4/fast_commit.h);
 * later kernels (6.1 here): EXT4_FC_STATUS_OK 0, INELIGIBLE 1, SKIPPED 2, FAILED 3. Already committed is skipped,
 * both failures failed. */
SEC("tracepoint/ext4/ext4_fc_commit_start")
int tp_ext4_fc_commit_start(void *ctx)
{
	struct tp_record r;

	if (tp_record(ctx, &r, TPF_EXT4_FC_START_DEV, 1))
		fc_commit_start(tp_u32(&r, TPF_EXT4_FC_START_DEV));
	return 0;
}

SEC("tracepoint/ext4/ext4_fc_commit_stop")
int tp_ext4_fc_commit_stop(void *ctx)
{
	struct tp_record r;
	int reason;

	if (!tp_record(ctx, &r, TPF_EXT4_FC_STOP_NBLKS, 2))
		return 0;
	reason = (int)tp_u32(&r, TPF_EXT4_FC_STOP_REASON);
	fc_commit_stop((int)tp_u32(&r, TPF_EXT4_FC_STOP_NBLKS), reason > 2 ? EXT4_FC_STATUS_FAILED : reason);
	return 0;
}
#endif

/* ---- delayed allocation ---- */

/* Who runs the current event: a user thread in a syscall (its number from the saved user
 * registers), a user thread outside one, or a kernel thread. */
static __always_inline void fill_who(struct da_key *key)
{
	struct task_struct *task = current_task();

	bpf_get_current_comm(key->comm, COMM_LEN);
	if (CUR(task, flags) & PF_KTHREAD) {
		key->who = WHO_KTHREAD;
		return;
	}
	long nr = task_syscall_nr(task);

	if (nr >= 0 && nr < MAX_SYSCALL_NR) {
		key->who = WHO_SYSCALL;
		key->nr = nr;
	} else {
		key->who = WHO_USER;
	}
}

static __always_inline int da_count(__u32 dev, __u16 event, __s64 blocks)
{
	struct da_key key = { .dev = dev, .event = event };
	struct da_val *v, zero = {};

	if (!traced_dev(dev))
		return 0;
	key.phase = current_phase();
	fill_who(&key);
	v = lookup_or_init(&da_events, &key, &zero, DROP_FS_FULL);
	if (!v)
		return 0;
	__sync_fetch_and_add(&v->count, 1);
	if (blocks > 0)
		__sync_fetch_and_add(&v->blocks, blocks);
	return 0;
}

SEC("tp_btf/ext4_da_write_begin")
int BPF_PROG(on_da_write_begin, struct inode *inode, loff_t pos, unsigned int len)
{
	return da_count(inode_dev(inode), DA_WRITE_BEGIN, 0);
}

SEC("tp_btf/ext4_write_begin")
int BPF_PROG(on_write_begin, struct inode *inode, loff_t pos, unsigned int len)
{
	return da_count(inode_dev(inode), DA_NODA_WRITE_BEGIN, 0);
}

/* The classic field reserve_blocks = nr_resv came with the argument (one commit, after 6.1); 6.1
 * has neither and reserves one block per event. The field's presence in the kernel's BTF is a
 * CO-RE constant, so on 6.1 the read of the second argument is removed at load (the verifier
 * refuses a read past the prototype). (bpf_core_type_matches on the prototype needs clang 15.) */
SEC("tp_btf/ext4_da_reserve_space")
int BPF_PROG(on_da_reserve_space, struct inode *inode)
{
	__s64 blocks = 1;

	if (bpf_core_field_exists(struct trace_event_raw_ext4_da_reserve_space, reserve_blocks))
		blocks = (int)ctx[1];
	return da_count(inode_dev(inode), DA_RESERVE, blocks);
}

SEC("tp_btf/ext4_da_release_space")
int BPF_PROG(on_da_release_space, struct inode *inode, int freed_blocks)
{
	return da_count(inode_dev(inode), DA_RELEASE, freed_blocks);
}

SEC("tp_btf/ext4_da_update_reserve_space")
int BPF_PROG(on_da_update_reserve_space, struct inode *inode, int used_blocks, int quota_claim)
{
	return da_count(inode_dev(inode), DA_CLAIM, used_blocks);
}

/* len = map->m_len */
SEC("tp_btf/ext4_da_write_pages_extent")
int BPF_PROG(on_da_write_pages_extent, struct inode *inode, struct ext4_map_blocks *map)
{
	if (!map)
		return 0;
	return da_count(inode_dev(inode), DA_MAP_EXTENT, map->m_len);
}

/* ext4_request_blocks and ext4_allocate_blocks: dev = ar->inode->i_sb->s_dev, len = ar->len,
 * flags = ar->flags */
SEC("tp_btf/ext4_request_blocks")
int BPF_PROG(on_request_blocks, struct ext4_allocation_request *ar)
{
	if (!ar)
		return 0;
	return da_count(inode_dev(ar->inode), DA_REQUEST, ar->len);
}

SEC("tp_btf/ext4_allocate_blocks")
int BPF_PROG(on_allocate_blocks, struct ext4_allocation_request *ar, unsigned long long block)
{
	__u16 event;

	if (!ar)
		return 0;
	event = (ar->flags & EXT4_MB_DELALLOC_RESV) ? DA_ALLOC_DELALLOC : DA_ALLOC_OTHER;
	return da_count(inode_dev(ar->inode), event, ar->len);
}

/* dev = ac->ac_inode->i_sb->s_dev, groups = ac->ac_groups_scanned (a __u16 as the field) */
SEC("tp_btf/ext4_mballoc_alloc")
int BPF_PROG(on_mballoc_alloc, struct ext4_allocation_context *ac)
{
	if (!ac)
		return 0;
	return da_count(inode_dev(ac->ac_inode), DA_MBALLOC, (__u16)ac->ac_groups_scanned);
}

/* ---- block freeing ---- */

/* Spans timed in the thread doing them, between two tracepoints:
 *   extent removal      ext4_ext_remove_space to its _done: a file's blocks freed by an unlink's
 *                       last iput, a truncate or a punch;
 *   page cache freeing  ext4_evict_inode of an unlinked inode to its ext4_truncate_enter: mostly
 *                       truncate_inode_pages_final, the file's cached pages and buffer heads
 *                       dropped (an inode without blocks never reaches ext4_truncate: its span
 *                       is dropped at ext4_free_inode).
 * A span with no context switch (nvcsw + nivcsw unchanged) was on CPU throughout, interrupts
 * included, as the syscall's on-CPU time is: it can split the CPU of calls too short for the
 * sampler. A span that switched out has its off-CPU part attributed by stack already; its wall
 * time is kept apart. span_event = what * 2 + (switched out). */
enum span_event {
	SPAN_EXTENT_ON_CPU = 0,
	SPAN_EXTENT_SWITCHED = 1,
	SPAN_PAGES_ON_CPU = 2,
	SPAN_PAGES_SWITCHED = 3,
};

struct span_start {
	__u64 start_ns;
	__u64 switches;
	__u64 ino;
};

struct span_val {
	__u64 count;
	__u64 ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct span_start);
} removing SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct span_start);
} evicting SEC(".maps");

/* key.event: enum span_event */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct da_key);
	__type(value, struct span_val);
} freeing_spans SEC(".maps");

static __always_inline void span_begin_ino(void *map, __u64 ino)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct span_start st = {};

	st.start_ns = bpf_ktime_get_ns();
	st.switches = switches_of(current_task());
	st.ino = ino;
	bpf_map_update_elem(map, &tid, &st, BPF_ANY);
}

static __always_inline void span_begin(void *map, struct inode *inode)
{
	span_begin_ino(map, BPF_CORE_READ(inode, i_ino));
}

/* Ends the thread's span in `map` if it is of this inode; event_on_cpu is the span's
 * SPAN_*_ON_CPU (+1 when it switched out). */
static __always_inline void span_end_ino(void *map, __u32 dev, __u64 ino, __u16 event_on_cpu)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct span_start *st = bpf_map_lookup_elem(map, &tid);
	struct da_key key = {};
	struct span_val *v, zero = {};
	__u64 now;

	if (!st || st->ino != ino)
		return;
	now = bpf_ktime_get_ns();
	key.dev = dev;
	key.phase = current_phase();
	key.event = event_on_cpu + (switches_of(current_task()) != st->switches);
	fill_who(&key);
	if (st->start_ns && st->start_ns <= now && (v = lookup_or_init(&freeing_spans, &key, &zero, DROP_FS_FULL))) {
		__sync_fetch_and_add(&v->count, 1);
		__sync_fetch_and_add(&v->ns, now - st->start_ns);
	}
	bpf_map_delete_elem(map, &tid);
}

static __always_inline void span_end(void *map, struct inode *inode, __u16 event_on_cpu)
{
	span_end_ino(map, inode_dev(inode), BPF_CORE_READ(inode, i_ino), event_on_cpu);
}

SEC("tp_btf/ext4_ext_remove_space")
int BPF_PROG(on_remove_space, struct inode *inode)
{
	if (inode && traced_dev(inode_dev(inode)))
		span_begin(&removing, inode);
	return 0;
}

SEC("tp_btf/ext4_ext_remove_space_done")
int BPF_PROG(on_remove_space_done, struct inode *inode)
{
	if (inode)
		span_end(&removing, inode, SPAN_EXTENT_ON_CPU);
	return 0;
}

/* Only an inode whose last link is gone is deleted (and truncated) here. */
SEC("tp_btf/ext4_evict_inode")
int BPF_PROG(on_evict_inode, struct inode *inode)
{
	if (inode && !BPF_CORE_READ(inode, __i_nlink) && traced_dev(inode_dev(inode)))
		span_begin(&evicting, inode);
	return 0;
}

SEC("tp_btf/ext4_truncate_enter")
int BPF_PROG(on_truncate_enter, struct inode *inode)
{
	if (inode)
		span_end(&evicting, inode, SPAN_PAGES_ON_CPU);
	return 0;
}

SEC("tp_btf/ext4_free_inode")
int BPF_PROG(on_free_inode, struct inode *inode)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	bpf_map_delete_elem(&evicting, &tid);
	return 0;
}

/* ext4_free_blocks(inode, block, count, flags) */
SEC("tp_btf/ext4_free_blocks")
int BPF_PROG(on_free_blocks, struct inode *inode, __u64 block, unsigned long count)
{
	return da_count(inode_dev(inode), DA_FREE, count);
}

#ifdef FSPROF_LEGACY
/* 5.10: the delayed allocation, block allocation and freeing events as classic tracepoints
 * (compat.h's tp_record): their records hold the dev, the counts and the inode. */
#define TP_DA_COUNT(event, dev_field, n_field, da_event)                                    \
	SEC("tracepoint/ext4/" #event)                                                      \
	int tp_##event(void *ctx)                                                           \
	{                                                                                   \
		struct tp_record r;                                                         \
		if (!tp_record(ctx, &r, dev_field, 1) || !r.f->off[n_field])                \
			return 0;                                                           \
		return da_count(tp_u32(&r, dev_field), da_event, (int)tp_u32(&r, n_field)); \
	}
TP_DA_COUNT(ext4_da_release_space, TPF_DA_REL_DEV, TPF_DA_REL_FREED, DA_RELEASE)
TP_DA_COUNT(ext4_da_update_reserve_space, TPF_DA_UPD_DEV, TPF_DA_UPD_USED, DA_CLAIM)
TP_DA_COUNT(ext4_da_write_pages_extent, TPF_DA_EXT_DEV, TPF_DA_EXT_LEN, DA_MAP_EXTENT)
TP_DA_COUNT(ext4_request_blocks, TPF_REQ_DEV, TPF_REQ_LEN, DA_REQUEST)

SEC("tracepoint/ext4/ext4_da_write_begin")
int tp_ext4_da_write_begin(void *ctx)
{
	struct tp_record r;

	return tp_record(ctx, &r, TPF_DA_WB_DEV, 1) ? da_count(tp_u32(&r, TPF_DA_WB_DEV), DA_WRITE_BEGIN, 0) : 0;
}

SEC("tracepoint/ext4/ext4_write_begin")
int tp_ext4_write_begin(void *ctx)
{
	struct tp_record r;

	return tp_record(ctx, &r, TPF_WB_DEV, 1) ? da_count(tp_u32(&r, TPF_WB_DEV), DA_NODA_WRITE_BEGIN, 0) : 0;
}

/* reserve_blocks where the record has it (after 6.1), else one block per event, as on 6.1. */
SEC("tracepoint/ext4/ext4_da_reserve_space")
int tp_ext4_da_reserve_space(void *ctx)
{
	struct tp_record r;

	if (!tp_record(ctx, &r, TPF_DA_RESV_DEV, 1))
		return 0;
	return da_count(tp_u32(&r, TPF_DA_RESV_DEV), DA_RESERVE,
	                r.f->off[TPF_DA_RESV_BLOCKS] ? (int)tp_u32(&r, TPF_DA_RESV_BLOCKS) : 1);
}

SEC("tracepoint/ext4/ext4_allocate_blocks")
int tp_ext4_allocate_blocks(void *ctx)
{
	struct tp_record r;

	if (!tp_record(ctx, &r, TPF_ALLOC_DEV, 3))
		return 0;
	return da_count(tp_u32(&r, TPF_ALLOC_DEV),
	                (tp_u32(&r, TPF_ALLOC_FLAGS) & EXT4_MB_DELALLOC_RESV) ? DA_ALLOC_DELALLOC : DA_ALLOC_OTHER,
	                tp_u32(&r, TPF_ALLOC_LEN));
}

SEC("tracepoint/ext4/ext4_mballoc_alloc")
int tp_ext4_mballoc_alloc(void *ctx)
{
	struct tp_record r;

	if (!tp_record(ctx, &r, TPF_MB_DEV, 2))
		return 0;
	return da_count(tp_u32(&r, TPF_MB_DEV), DA_MBALLOC, tp_u16(&r, TPF_MB_GROUPS));
}

SEC("tracepoint/ext4/ext4_free_blocks")
int tp_ext4_free_blocks(void *ctx)
{
	struct tp_record r;

	if (!tp_record(ctx, &r, TPF_FREE_DEV, 2))
		return 0;
	return da_count(tp_u32(&r, TPF_FREE_DEV), DA_FREE, tp_u64(&r, TPF_FREE_COUNT));
}

SEC("tracepoint/ext4/ext4_ext_remove_space")
int tp_ext4_ext_remove_space(void *ctx)
{
	struct tp_record r;

	if (tp_record(ctx, &r, TPF_RM_DEV, 2) && traced_dev(tp_u32(&r, TPF_RM_DEV)))
		span_begin_ino(&removing, tp_u64(&r, TPF_RM_INO));
	return 0;
}

SEC("tracepoint/ext4/ext4_ext_remove_space_done")
int tp_ext4_ext_remove_space_done(void *ctx)
{
	struct tp_record r;

	if (tp_record(ctx, &r, TPF_RMD_DEV, 2))
		span_end_ino(&removing, tp_u32(&r, TPF_RMD_DEV), tp_u64(&r, TPF_RMD_INO), SPAN_EXTENT_ON_CPU);
	return 0;
}

SEC("tracepoint/ext4/ext4_evict_inode")
int tp_ext4_evict_inode(void *ctx)
{
	struct tp_record r;

	if (tp_record(ctx, &r, TPF_EVICT_DEV, 3) && !tp_u32(&r, TPF_EVICT_NLINK) &&
	    traced_dev(tp_u32(&r, TPF_EVICT_DEV)))
		span_begin_ino(&evicting, tp_u64(&r, TPF_EVICT_INO));
	return 0;
}

SEC("tracepoint/ext4/ext4_truncate_enter")
int tp_ext4_truncate_enter(void *ctx)
{
	struct tp_record r;

	if (tp_record(ctx, &r, TPF_TRUNC_DEV, 2))
		span_end_ino(&evicting, tp_u32(&r, TPF_TRUNC_DEV), tp_u64(&r, TPF_TRUNC_INO), SPAN_PAGES_ON_CPU);
	return 0;
}

SEC("tracepoint/ext4/ext4_free_inode")
int tp_ext4_free_inode(void *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	bpf_map_delete_elem(&evicting, &tid);
	return 0;
}
#endif
