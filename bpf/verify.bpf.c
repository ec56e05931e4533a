// SPDX-License-Identifier: GPL-2.0
/* `fsprof verify`: what the kernel did while a short probe workload ran on one filesystem, as
 * counts (and, for the few timed events, a ring buffer of records), so that profiler/verify/
 * can say whether a barrier, writeback, journal or mount setting took effect.
 *
 * Loaded on its own for the length of one verify (it shares no map with the run's collector).
 * Everything is filtered to the filesystem under test: its superblock dev, its block devices
 * (bio level: the devices the filesystem submits to, partitions included; request level: their
 * whole disks), its bdi name, its btrfs fsid, and the probe's own process or inodes. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "compat.h"
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

#define BDI_LEN 32
#define FSID_LEN 16
#define ELV_LEN 32
#define N_WB_REASONS 16
#define N_COMPRESS 8

/* vdevs value bits (profiler/verify/probe.py fills them). */
#define VDEV_FS 1   /* a device the filesystem submits bios to (block_bio_queue's bio->bi_bdev) */
#define VDEV_DISK 2 /* a disk whose requests are counted (block_rq_*: the whole disk) */

/* vinos values: what the probe uses the inode for. */
#define ROLE_DATA 1   /* written and fsynced: ordered extents, delalloc */
#define ROLE_ATIME 2  /* only read: is it dirtied? */
#define ROLE_EXPIRE 3 /* dirtied once, then left to the flusher */
#define ROLE_KEEP 4   /* rewritten every few hundred ms to keep the bdi and the journal busy */

struct verify_cfg {
	__u32 tgid;          /* the probe workload: verify's own process */
	__u32 sb_dev;        /* the superblock's s_dev (kernel encoding) */
	__u32 journal_dev;   /* jbd2's dev (the journal's filesystem device) */
	__u32 has_fsid;      /* btrfs: fsid below is set */
	__u8 fsid[FSID_LEN]; /* btrfs */
	char bdi[BDI_LEN];   /* the bdi the filesystem writes back through, as writeback_* name it */
};

/* Counters, all for the filesystem under test; mirrored by COUNTERS in profiler/verify/probe.py. */
enum vcounter {
	VC_BIO_WRITE = 0,        /* block_bio_queue: write bios (with data) */
	VC_BIO_FLUSH,            /* bios asking for a cache flush: REQ_PREFLUSH (empty or with data) or REQ_OP_FLUSH */
	VC_BIO_EMPTY_FLUSH,      /* of those, empty ones (blkdev_issue_flush) */
	VC_BIO_FUA,              /* bios with REQ_FUA */
	VC_RQ_FLUSH,             /* block_rq_issue: flush requests handed to the device */
	VC_RQ_FUA,               /* requests issued with REQ_FUA (only on a device that does FUA) */
	VC_RQ_DATA,              /* read/write requests with data issued */
	VC_RQ_SCHED,             /* of those, through an I/O scheduler (RQF_USE_SCHED) */
	VC_RQ_INSERT,            /* block_rq_insert of data requests */
	VC_GDS,                  /* global_dirty_state in the probe's own writes */
	VC_BDP,                  /* balance_dirty_pages (a throttling decision) in the probe */
	VC_BDP_PAUSED,           /* of those, with a pause */
	VC_ATIME_DIRTY_SYNC,     /* the read-only inode marked dirty for writing (I_DIRTY_SYNC/DATASYNC) */
	VC_ATIME_DIRTY_TIME,     /* ... marked dirty for its timestamps only (lazytime: I_DIRTY_TIME) */
	VC_XFS_UPDATE_TIME,      /* xfs_update_time on the read-only inode */
	VC_BTRFS_DELAYED_INODE,  /* btrfs reserved a delayed inode update for the read-only inode */
	VC_JBD2_START,           /* jbd2_start_commit */
	VC_JBD2_COMMITS,         /* jbd2_run_stats: finished commits */
	VC_JBD2_BLOCKS,          /* their blocks (buffers in the transaction) */
	VC_JBD2_LOGGED,          /* their blocks written to the journal */
	VC_FC_START,             /* ext4_fc_commit_start: a fast commit attempted */
	VC_FC_OK,                /* ext4_fc_commit_stop with status ok */
	VC_FC_OTHER,             /* ... ineligible, skipped or failed (a full commit instead) */
	VC_FC_BLOCKS,            /* fast commit blocks written */
	VC_DA_WRITE_BEGIN,       /* ext4_da_write_begin in the probe's writes */
	VC_WRITE_BEGIN,          /* ext4_write_begin (no delayed allocation) */
	VC_JOURNALLED_WRITE_END, /* ext4_journalled_write_end (data=journal) */
	VC_XLOG_SYNC,            /* xlog_iclog_sync: XFS log writes */
	VC_XLOG_BYTES,           /* their size as xlog_sync rounds it */
	VC_BTRFS_COMMITS,        /* btrfs_transaction_commit */
	VC_OE,                   /* btrfs ordered extents of the probe's data file */
	VC_OE_BYTES,             /* their file bytes */
	VC_OE_DISK_BYTES,        /* their bytes on disk (smaller when compressed) */
	VC_SYNC_FS,              /* sync_fs of the filesystem by another process */
	VC_WB_REASON,            /* writeback_start by reason: N_WB_REASONS slots from here */
	VC_OE_COMPRESS = VC_WB_REASON + N_WB_REASONS, /* ordered extents by compress_type: N_COMPRESS slots */
	N_VCOUNTERS = VC_OE_COMPRESS + N_COMPRESS,
};

/* Running statistics of a value; min and max are racy (no atomic min/max in BPF). */
enum vstat_id {
	VS_DIRTY_THRESH = 0, /* global_dirty_state dirty_thresh (pages) */
	VS_BG_THRESH,        /* global_dirty_state background_thresh */
	VS_DIRTY_LIMIT,      /* global_dirty_state dirty_limit (the smoothed limit) */
	VS_BDP_LIMIT,        /* balance_dirty_pages limit */
	VS_ICLOG_SIZE,       /* the log's l_iclog_size at each log write */
	VS_ICLOG_BUFS,       /* the log's l_iclog_bufs */
	VS_LOG_WRITE,        /* bytes of each log write */
	N_VSTATS,
};

struct vstat {
	__u64 count;
	__u64 min;
	__u64 max;
	__u64 last;
	__u64 sum;
};

/* Timed records for profiler/verify/probe.py (rare events only). */
enum vevent_kind {
	EV_JBD2_COMMIT = 1,     /* a = tid, b = jiffies the transaction ran, c = blocks logged, d = blocks */
	EV_BTRFS_COMMIT = 2,    /* a = generation, b = 1 if by the btrfs-transaction kthread */
	EV_WB_PERIODIC = 3,     /* writeback_start with for_kupdate: a = reason, b = nr_pages */
	EV_INODE_WRITEBACK = 4, /* writeback of a probe inode starts: a = ino, b = age in jiffies,
	                          * c = 1 kupdate | 2 background | 4 WB_SYNC_ALL, d = role */
	EV_SYNC_FS = 5,         /* sync_fs of the filesystem by another process */
};

struct vevent {
	__u64 ns;
	__u32 kind;
	__u32 pid;
	__u64 a;
	__u64 b;
	__u64 c;
	__u64 d;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct verify_cfg);
} vcfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u8);
} vdevs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u64);
	__type(value, __u8);
} vinos SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, N_VCOUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} vcounts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, N_VSTATS);
	__type(key, __u32);
	__type(value, struct vstat);
} vstats SEC(".maps");

/* Distinct iclogs (in-core log buffers) the XFS log wrote from: pointer -> log writes. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u64);
	__type(value, __u64);
} iclogs SEC(".maps");

/* The elevator of the first request issued through a scheduler. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, char[ELV_LEN]);
} elevator SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} vevents SEC(".maps");

static __always_inline struct verify_cfg *cfg(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&vcfg, &zero);
}

static __always_inline void count(__u32 which, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&vcounts, &which);

	if (v)
		__sync_fetch_and_add(v, n);
}

static __always_inline void stat_add(__u32 which, __u64 x)
{
	struct vstat *s = bpf_map_lookup_elem(&vstats, &which);

	if (!s)
		return;
	if (!s->count || x < s->min)
		s->min = x;
	if (x > s->max)
		s->max = x;
	s->last = x;
	__sync_fetch_and_add(&s->sum, x);
	__sync_fetch_and_add(&s->count, 1);
}

static __always_inline void emit(__u32 kind, __u64 a, __u64 b, __u64 c, __u64 d)
{
	struct vevent *e = bpf_ringbuf_reserve(&vevents, sizeof(*e), 0);

	if (!e)
		return; /* a full ring loses the record: 256 KiB holds thousands of these rare events */
	e->ns = bpf_ktime_get_ns();
	e->kind = kind;
	e->pid = bpf_get_current_pid_tgid() >> 32;
	e->a = a;
	e->b = b;
	e->c = c;
	e->d = d;
	bpf_ringbuf_submit(e, 0);
}

static __always_inline __u8 dev_bits(__u32 dev)
{
	__u8 *b = bpf_map_lookup_elem(&vdevs, &dev);

	return b ? *b : 0;
}

static __always_inline __u8 ino_role(__u64 ino)
{
	__u8 *r = bpf_map_lookup_elem(&vinos, &ino);

	return r ? *r : 0;
}

static __always_inline bool is_probe(void)
{
	struct verify_cfg *c = cfg();

	return c && c->tgid && c->tgid == bpf_get_current_pid_tgid() >> 32;
}

static __always_inline bool is_sb(__u32 dev)
{
	struct verify_cfg *c = cfg();

	return c && c->sb_dev && c->sb_dev == dev;
}

/* The bdi's name as the writeback_* tracepoints give it: strscpy_pad(name, bdi_dev_name(bdi), 32),
 * bdi_dev_name() being "(unknown)" for a bdi without a device. */
static __always_inline bool same_bdi(struct backing_dev_info *bdi)
{
	const char unknown[] = "(unknown)";
	struct verify_cfg *c = cfg();
	char name[BDI_LEN] = {};

	if (!c || !c->bdi[0])
		return false;
	if (bdi && BPF_CORE_READ(bdi, dev))
		BPF_CORE_READ_STR_INTO(&name, bdi, dev_name);
	else
		__builtin_memcpy(name, unknown, sizeof(unknown));
	for (int i = 0; i < BDI_LEN; i++) {
		if (name[i] != c->bdi[i])
			return false;
		if (!name[i])
			return true;
	}
	return true;
}

/* The btrfs tracepoints' fsid (TP_fast_assign_fsid): fs_info->fs_devices->fsid, zeros without an fs_info. */
static __always_inline bool same_fsid(const struct btrfs_fs_info *fs_info)
{
	struct verify_cfg *c = cfg();
	__u8 fsid[FSID_LEN] = {};

	if (!c || !c->has_fsid)
		return false;
	if (fs_info)
		BPF_CORE_READ_INTO(&fsid, fs_info, fs_devices, fsid);
	for (int i = 0; i < FSID_LEN; i++)
		if (fsid[i] != c->fsid[i])
			return false;
	return true;
}

/* ---- barriers: the bio level (what the filesystem asked for) and the request level ---- */

/* submit_bio_noacct() has already dropped REQ_PREFLUSH/REQ_FUA here when the device has no
 * volatile write cache (and completed an empty flush bio without queueing it): on such a device
 * this counts what survived, not what the filesystem asked for (docs/verify.md). */
SEC("tp_btf/block_bio_queue")
int BPF_PROG(on_bio_queue, BIO_QUEUE_ARGS)
{
	__u32 dev = bio_bdev_dev(bio);
	__u32 flags, op, size;

	if (!(dev_bits(dev) & VDEV_FS))
		return 0;
	flags = BPF_CORE_READ(bio, bi_opf);
	op = op_of(flags);
	size = BPF_CORE_READ(bio, bi_iter.bi_size);
	if (op == REQ_OP_VALUE(REQ_OP_FLUSH)) {
		count(VC_BIO_FLUSH, 1);
		count(VC_BIO_EMPTY_FLUSH, 1);
		return 0;
	}
	if (op != REQ_OP_VALUE(REQ_OP_WRITE))
		return 0;
	if (size)
		count(VC_BIO_WRITE, 1);
	if (flags & REQ_BIT(__REQ_PREFLUSH)) {
		count(VC_BIO_FLUSH, 1);
		if (!size)
			count(VC_BIO_EMPTY_FLUSH, 1);
	}
	if (flags & REQ_BIT(__REQ_FUA))
		count(VC_BIO_FUA, 1);
	return 0;
}

static __always_inline __u32 rq_disk(struct request *rq)
{
	return rq_disk_dev(rq);
}

static __always_inline bool has_data(struct request *rq, __u32 op)
{
	return (op == REQ_OP_VALUE(REQ_OP_READ) || op == REQ_OP_VALUE(REQ_OP_WRITE)) && BPF_CORE_READ(rq, __data_len);
}

static __always_inline void note_elevator(struct request *rq)
{
	__u32 zero = 0;
	char *name = bpf_map_lookup_elem(&elevator, &zero);
	const char *src;

	if (!name || name[0])
		return;
	src = BPF_CORE_READ(rq, q, elevator, type, elevator_name);
	if (src)
		bpf_probe_read_kernel_str(name, ELV_LEN, src);
}

/* Handed to the driver: what the device received. */
SEC("tp_btf/block_rq_issue")
int BPF_PROG(on_rq_issue, struct request *rq)
{
	__u32 flags, op;

	if (!(dev_bits(rq_disk(rq)) & VDEV_DISK))
		return 0;
	flags = BPF_CORE_READ(rq, cmd_flags);
	op = op_of(flags);
	if (op == REQ_OP_VALUE(REQ_OP_FLUSH)) {
		count(VC_RQ_FLUSH, 1);
		return 0;
	}
	if (flags & REQ_BIT(__REQ_FUA))
		count(VC_RQ_FUA, 1);
	if (!has_data(rq, op))
		return 0;
	count(VC_RQ_DATA, 1);
	if (BPF_CORE_READ(rq, rq_flags) & rqf_use_sched()) {
		count(VC_RQ_SCHED, 1);
		note_elevator(rq);
	}
	return 0;
}

/* Into a scheduler (or a software queue): with scheduler "none" most requests skip this. */
SEC("tp_btf/block_rq_insert")
int BPF_PROG(on_rq_insert, struct request *rq)
{
	__u32 flags;

	if (!(dev_bits(rq_disk(rq)) & VDEV_DISK))
		return 0;
	flags = BPF_CORE_READ(rq, cmd_flags);
	if (has_data(rq, op_of(flags)))
		count(VC_RQ_INSERT, 1);
	return 0;
}

/* ---- dirty thresholds, in the probe's own writes ---- */

/* Classic, not tp_btf: dirty_limit is global_wb_domain.dirty_limit, which the raw arguments do not
 * lead to; no kernel's BTF has the variable, and a 6.18 without CONFIG_KALLSYMS_ALL (the host's)
 * cannot resolve it as a ksym either. */
SEC("tracepoint/writeback/global_dirty_state")
int on_global_dirty_state(struct trace_event_raw_global_dirty_state *ctx)
{
	if (!is_probe())
		return 0;
	count(VC_GDS, 1);
	stat_add(VS_DIRTY_THRESH, ctx->dirty_thresh);
	stat_add(VS_BG_THRESH, ctx->background_thresh);
	stat_add(VS_DIRTY_LIMIT, ctx->dirty_limit);
	return 0;
}

/* The argument layout differs by kernel: read_bdp_event() (compat.h) reads either. */
SEC("tp_btf/balance_dirty_pages")
int BPF_PROG(on_balance_dirty_pages, struct bdi_writeback *wb)
{
	struct bdp_event e = {};

	if (!is_probe())
		return 0;
	read_bdp_event(ctx, &e);
	count(VC_BDP, 1);
	if (e.pause > 0)
		count(VC_BDP_PAUSED, 1);
	stat_add(VS_BDP_LIMIT, e.limit);
	return 0;
}

/* ---- the flusher: its work by reason, periodic runs, the age of the inodes it writes ---- */

SEC("tp_btf/writeback_start")
int BPF_PROG(on_writeback_start, struct bdi_writeback *wb, struct wb_writeback_work *work)
{
	__u32 reason = BPF_CORE_READ(work, reason);

	if (!same_bdi(BPF_CORE_READ(wb, bdi)))
		return 0;
	if (reason < N_WB_REASONS)
		count(VC_WB_REASON + reason, 1);
	if (BPF_CORE_READ_BITFIELD_PROBED(work, for_kupdate))
		emit(EV_WB_PERIODIC, reason, BPF_CORE_READ(work, nr_pages), 0, 0);
	return 0;
}

/* Before the inode's pages are written: its age is now - dirtied_when (jiffies). */
SEC("tp_btf/writeback_single_inode_start")
int BPF_PROG(on_inode_writeback, struct inode *inode, struct writeback_control *wbc, unsigned long nr_to_write)
{
	__u64 ino = BPF_CORE_READ(inode, i_ino), how = 0;
	__u8 role;

	if (!is_sb(BPF_CORE_READ(inode, i_sb, s_dev)) || !(role = ino_role(ino)))
		return 0;
	if (BPF_CORE_READ_BITFIELD_PROBED(wbc, for_kupdate))
		how |= 1;
	if (BPF_CORE_READ_BITFIELD_PROBED(wbc, for_background))
		how |= 2;
	if (BPF_CORE_READ(wbc, sync_mode) == WB_SYNC_ALL)
		how |= 4;
	emit(EV_INODE_WRITEBACK, ino, bpf_jiffies64() - BPF_CORE_READ(inode, dirtied_when), how, role);
	return 0;
}

/* ---- atime: is the inode that was only read dirtied? ---- */

SEC("tp_btf/writeback_mark_inode_dirty")
int BPF_PROG(on_mark_inode_dirty, struct inode *inode, int flags)
{
	__u32 sync = i_dirty_sync_or_datasync();

	if (!is_sb(BPF_CORE_READ(inode, i_sb, s_dev)) || ino_role(BPF_CORE_READ(inode, i_ino)) != ROLE_ATIME)
		return 0;
	if (flags & sync)
		count(VC_ATIME_DIRTY_SYNC, 1);
	if (flags & i_dirty_time())
		count(VC_ATIME_DIRTY_TIME, 1);
	return 0;
}

/* Pointer arguments are NULL-checked before a field address is taken from them (none is NULL at
 * these tracepoints): 6.12's verifier types them trusted_ptr_or_null and refuses the arithmetic.
 * XFS logs a timestamp change in a transaction of its own instead of marking the inode dirty. */
SEC("tp_btf/xfs_update_time")
int BPF_PROG(on_xfs_update_time, struct xfs_inode *ip)
{
	if (ip && is_sb(BPF_CORE_READ(ip, i_vnode.i_sb, s_dev)) && ino_role(BPF_CORE_READ(ip, i_ino)) == ROLE_ATIME)
		count(VC_XFS_UPDATE_TIME, 1);
	return 0;
}

/* btrfs updates the inode item through a delayed inode, reserving space for it first. */
SEC("tp_btf/btrfs_space_reservation")
int BPF_PROG(on_btrfs_space_reservation, const struct btrfs_fs_info *fs_info, const char *name, u64 val, u64 bytes,
             int reserve)
{
	char type[16] = {};

	if (!reserve || ino_role(val) != ROLE_ATIME || !same_fsid(fs_info))
		return 0;
	bpf_probe_read_kernel_str(type, sizeof(type), name);
	if (type[0] == 'd' && type[1] == 'e' && type[2] == 'l' && type[7] == '_' && type[8] == 'i')
		count(VC_BTRFS_DELAYED_INODE, 1); /* "delayed_inode" */
	return 0;
}

/* ---- ext4 / jbd2 ---- */

static __always_inline bool is_journal(__u32 dev)
{
	struct verify_cfg *c = cfg();

	return c && c->journal_dev && c->journal_dev == dev;
}

/* jbd2's dev is journal->j_fs_dev->bd_dev. */
SEC("tp_btf/jbd2_start_commit")
int BPF_PROG(on_jbd2_start_commit, journal_t *journal, transaction_t *commit_transaction)
{
	if (journal && is_journal(BPF_CORE_READ(journal, j_fs_dev, bd_dev)))
		count(VC_JBD2_START, 1);
	return 0;
}

/* The end of a commit, with the transaction's running time (start to commit, jiffies). */
SEC("tp_btf/jbd2_run_stats")
int BPF_PROG(on_jbd2_run_stats, dev_t dev, tid_t tid, struct transaction_run_stats_s *stats)
{
	__u32 blocks, logged;

	if (!stats || !is_journal(dev))
		return 0;
	blocks = BPF_CORE_READ(stats, rs_blocks);
	logged = BPF_CORE_READ(stats, rs_blocks_logged);
	count(VC_JBD2_COMMITS, 1);
	count(VC_JBD2_BLOCKS, blocks);
	count(VC_JBD2_LOGGED, logged);
	emit(EV_JBD2_COMMIT, tid, BPF_CORE_READ(stats, rs_running), logged, blocks);
	return 0;
}

/* Fires only when the filesystem has fast commits on (ext4_fc_commit falls back to a plain
 * jbd2_complete_transaction before this tracepoint otherwise). */
SEC("tp_btf/ext4_fc_commit_start")
int BPF_PROG(on_fc_commit_start, struct super_block *sb, tid_t commit_tid)
{
	if (sb && is_sb(BPF_CORE_READ(sb, s_dev)))
		count(VC_FC_START, 1);
	return 0;
}

/* `reason` is the status: EXT4_FC_STATUS_OK (0), INELIGIBLE, SKIPPED, FAILED. */
SEC("tp_btf/ext4_fc_commit_stop")
int BPF_PROG(on_fc_commit_stop, struct super_block *sb, int nblks, int reason, tid_t commit_tid)
{
	if (!sb || !is_sb(BPF_CORE_READ(sb, s_dev)))
		return 0;
	count(reason == 0 ? VC_FC_OK : VC_FC_OTHER, 1);
	if (nblks > 0)
		count(VC_FC_BLOCKS, nblks);
	return 0;
}

SEC("tp_btf/ext4_da_write_begin")
int BPF_PROG(on_da_write_begin, struct inode *inode, loff_t pos, unsigned int len)
{
	if (inode && is_sb(BPF_CORE_READ(inode, i_sb, s_dev)) && is_probe())
		count(VC_DA_WRITE_BEGIN, 1);
	return 0;
}

SEC("tp_btf/ext4_write_begin")
int BPF_PROG(on_write_begin, struct inode *inode, loff_t pos, unsigned int len)
{
	if (inode && is_sb(BPF_CORE_READ(inode, i_sb, s_dev)) && is_probe())
		count(VC_WRITE_BEGIN, 1);
	return 0;
}

SEC("tp_btf/ext4_journalled_write_end")
int BPF_PROG(on_journalled_write_end, struct inode *inode, loff_t pos, unsigned int len, unsigned int copied)
{
	if (inode && is_sb(BPF_CORE_READ(inode, i_sb, s_dev)) && is_probe())
		count(VC_JOURNALLED_WRITE_END, 1);
	return 0;
}

/* ---- another process syncing the filesystem (it ends a commit or writeback interval early) ---- */

static __always_inline void sync_fs_seen(void)
{
	if (is_probe())
		return;
	count(VC_SYNC_FS, 1);
	emit(EV_SYNC_FS, 0, 0, 0, 0);
}

SEC("tp_btf/ext4_sync_fs")
int BPF_PROG(on_ext4_sync_fs, struct super_block *sb, int wait)
{
	if (sb && is_sb(BPF_CORE_READ(sb, s_dev)))
		sync_fs_seen();
	return 0;
}

/* xfs_fs_class's dev is mp->m_super->s_dev (mp is never NULL here: XFS_M(sb)). */
SEC("tp_btf/xfs_fs_sync_fs")
int BPF_PROG(on_xfs_sync_fs, struct xfs_mount *mp, void *caller_ip)
{
	if (mp && is_sb(BPF_CORE_READ(mp, m_super, s_dev)))
		sync_fs_seen();
	return 0;
}

SEC("tp_btf/btrfs_sync_fs")
int BPF_PROG(on_btrfs_sync_fs, const struct btrfs_fs_info *fs_info, int wait)
{
	if (same_fsid(fs_info))
		sync_fs_seen();
	return 0;
}

/* ---- XFS log buffers ---- */

/* xlog_sync: an iclog goes to disk. Its size as the kernel counts it (xs_log_blocks), the log's
 * buffer size and count, and which iclog it was (the log cycles through l_iclog_bufs of them). */
SEC("tp_btf/xlog_iclog_sync")
int BPF_PROG(on_iclog_sync, struct xlog_in_core *iclog, unsigned long caller_ip)
{
	__u64 ptr = (__u64)iclog, one = 1, *n;
	__u32 offset, hsize, roundoff, bytes;

	if (!iclog || !is_sb(BPF_CORE_READ(iclog, ic_log, l_mp, m_super, s_dev))) /* see xfs.bpf.c iclog_dev */
		return 0;
	offset = BPF_CORE_READ(iclog, ic_offset);
	hsize = BPF_CORE_READ(iclog, ic_log, l_iclog_hsize);
	roundoff = BPF_CORE_READ(iclog, ic_log, l_iclog_roundoff);
	bytes = hsize + offset;
	if (roundoff)
		bytes = (bytes + roundoff - 1) / roundoff * roundoff;
	count(VC_XLOG_SYNC, 1);
	count(VC_XLOG_BYTES, bytes);
	stat_add(VS_LOG_WRITE, bytes);
	stat_add(VS_ICLOG_SIZE, BPF_CORE_READ(iclog, ic_log, l_iclog_size));
	stat_add(VS_ICLOG_BUFS, BPF_CORE_READ(iclog, ic_log, l_iclog_bufs));
	n = bpf_map_lookup_elem(&iclogs, &ptr);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&iclogs, &ptr, &one, BPF_NOEXIST);
	return 0;
}

/* ---- btrfs ---- */

/* The tracepoint's ino is btrfs_ino(), vfs_inode.i_ino on 64-bit; len and disk_len are the ordered
 * extent's num_bytes and disk_num_bytes. */
SEC("tp_btf/btrfs_ordered_extent_add")
int BPF_PROG(on_ordered_extent_add, const struct btrfs_inode *inode, const struct btrfs_ordered_extent *ordered)
{
	__u32 type;

	if (!inode || !ordered)
		return 0;
	type = BPF_CORE_READ(ordered, compress_type);
	if (ino_role(BPF_CORE_READ(inode, vfs_inode.i_ino)) != ROLE_DATA ||
	    !same_fsid(BPF_CORE_READ(inode, root, fs_info)))
		return 0;
	count(VC_OE, 1);
	count(VC_OE_BYTES, BPF_CORE_READ(ordered, num_bytes));
	count(VC_OE_DISK_BYTES, BPF_CORE_READ(ordered, disk_num_bytes));
	if (type < N_COMPRESS)
		count(VC_OE_COMPRESS + type, 1);
	return 0;
}

/* A committed transaction, and whether the btrfs-transaction kthread committed it (its timer:
 * commit=) rather than an fsync, a sync or space pressure. */
SEC("tp_btf/btrfs_transaction_commit")
int BPF_PROG(on_btrfs_commit, const struct btrfs_fs_info *fs_info)
{
	const char kthread[] = "btrfs-transacti"; /* "btrfs-transaction" as a comm holds it */
	char comm[16];
	__u64 by_kthread = 1;

	if (!same_fsid(fs_info))
		return 0;
	bpf_get_current_comm(comm, sizeof(comm));
	for (int i = 0; i < sizeof(kthread); i++)
		if (comm[i] != kthread[i])
			by_kthread = 0;
	count(VC_BTRFS_COMMITS, 1);
	emit(EV_BTRFS_COMMIT, BPF_CORE_READ(fs_info, generation), by_kthread, 0, 0);
	return 0;
}
