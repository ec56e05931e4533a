// SPDX-License-Identifier: GPL-2.0
/* btrfs behind the wait: fsyncs, transaction commits and who ran them, superblock writes (the
 * evidence of each tree-log sync and commit), ordered extents, and space reservation tickets, all
 * aggregated in the kernel per (filesystem, phase).
 *
 * btrfs tracepoints name their filesystem by fsid (fs_info->fs_devices->fsid, the UUID of
 * /sys/fs/btrfs/<fsid>), not by a dev_t: profiler/behind/btrfs.py maps each fsid under test to its
 * superblock dev in traced_fsids, and every aggregate here is keyed by that dev. Read on 6.18
 * (fs/btrfs/transaction.c, space-info.c, ordered-data.c, file.c, disk-io.c):
 *   - btrfs_transaction_commit fires once per commit, at its very end (after the superblock is
 *     written and the transaction is COMPLETED), in the committing thread. Nothing fires where a
 *     commit starts, so a commit cannot be bracketed by tracepoints: its duration is the kernel's
 *     own commit_stats timer, read at that tracepoint (raw_tp: the fs_info pointer).
 *   - btrfs_sync_log has no tracepoint; a tree-log sync is seen as its superblock write
 *     (write_all_supers -> write_dev_supers, bio at 64 KiB) with btrfs_sync_log on the stack.
 * The programs are tp_btf: each computes from the tracepoint's raw arguments the classic event's
 * fields it uses, as that event's TP_fast_assign does (the same on 6.1, 6.12 and 6.18). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "compat.h"
#include <bpf/bpf_tracing.h>
#include "fsprof.h"
#include "shared_maps.h"

char LICENSE[] SEC("license") = "GPL";

/* What an aggregate counts (mirrored in profiler/behind/btrfs.py EVENTS). */
enum btrfs_event {
	BT_SYNC_FILE = 0,     /* arg: datasync */
	BT_COMMIT = 1,        /* stack: the committing thread's */
	BT_OE_ADD = 2,        /* arg: ordered extent type (enum ordered_type below); bytes: len */
	BT_OE_START = 3,      /* someone started and waits for an ordered extent; bytes: len */
	BT_OE_FINISH = 4,     /* I/O of a range of an ordered extent completed; arg: uptodate */
	BT_OE_REMOVE = 5,     /* ordered extent done (file extent item inserted) and removed */
	BT_TICKET = 6,        /* arg: flush | space << 8 | failed << 16; bytes; wait time */
	BT_FLUSH_SPACE = 7,   /* arg: state | for_preempt << 8 | failed << 9; bytes: num_bytes */
	BT_TRIGGER_FLUSH = 8, /* arg: flush | reason << 8 (0 enospc, 1 preempt, 2 other); bytes */
	BT_SUPER_WRITE = 9,   /* dev: block device; arg: mirror (0 = primary); stack: submitter */
};

/* Histograms (bt_hists "which"). */
enum btrfs_hist {
	BH_COMMIT = 0,      /* commit critical section, ns (commit_stats.last_commit_dur) */
	BH_TICKET_WAIT = 1, /* reservation ticket: queued -> granted or failed */
	BH_OE_LIFE = 2,     /* ordered extent: added -> removed */
};

struct fsid_key {
	__u8 fsid[16];
};

struct bt_key {
	__u32 dev; /* superblock dev_t (block dev_t for BT_SUPER_WRITE) */
	__u16 phase;
	__u16 event;
	__u32 arg;
	__s32 stackid;
};

struct bt_val {
	__u64 count;
	__u64 bytes;
	__u64 total_ns;
	__u64 max_ns;
};

struct bh_key {
	__u32 dev;
	__u16 phase;
	__u16 which;
};

struct oe_key {
	__u32 dev;
	__u32 pad;
	__u64 root;
	__u64 ino;
	__u64 file_offset;
};

struct oe_val {
	__u64 add_ns;
	__u32 phase;
	__u32 pad;
};

#define RESV_TYPE_LEN 24
struct resv_key {
	__u32 dev;
	__u16 phase;
	__u16 reserve;
	char type[RESV_TYPE_LEN];
};

struct commit_seen {
	__u64 commit_count; /* commit_stats.commit_count at the last commit seen */
	__u64 last_ns;      /* that commit's duration */
};

/* fsid -> superblock dev_t of each btrfs under test (userspace fills it). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct fsid_key);
	__type(value, __u32);
} traced_fsids SEC(".maps");

/* Block devices under test -> start sector of the partition (0 for a whole device). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} super_devs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, struct bt_key);
	__type(value, struct bt_val);
} bt_counts SEC(".maps");

/* Shared (not per-CPU) with atomic adds, as op_hist: a struct hist is 4.7 KiB. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct bh_key);
	__type(value, struct hist);
} bt_hists SEC(".maps");

/* Ordered extents in flight: added, not yet removed. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct oe_key);
	__type(value, struct oe_val);
} oe_inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2048);
	__type(key, struct resv_key);
	__type(value, struct bt_val);
} space_resv SEC(".maps");

/* Per superblock dev: the commit_stats seen at the last commit (to detect interleaved commits). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct commit_seen);
} commit_last SEC(".maps");

/* Commits whose commit_stats had moved on by more than one commit when their tracepoint fired
 * (another commit finished in between): their timed duration is the other commit's. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} commit_interleaved SEC(".maps");

/* An empty histogram to insert (too big for the BPF stack). */

/* The superblock dev of the filesystem an event's fsid names, or 0 if it is not under test. */
static __always_inline __u32 target_dev(const void *fsid)
{
	struct fsid_key key;
	__u32 *dev;

	bpf_probe_read_kernel(&key, sizeof(key), fsid);
	dev = bpf_map_lookup_elem(&traced_fsids, &key);
	return dev ? *dev : 0;
}

/* The same from an fs_info, with the fsid a classic btrfs event carries: TP_fast_assign_fsid
 * copies fs_info->fs_devices->fsid, or zeros when fs_info is NULL. */
static __always_inline __u32 fs_info_dev(const struct btrfs_fs_info *fs_info)
{
	struct btrfs_fs_devices *fs_devices = NULL;
	struct fsid_key key = {};
	__u32 *dev;

	if (fs_info)
		fs_devices = BPF_CORE_READ(fs_info, fs_devices);
	if (fs_devices)
		bpf_core_read(&key, sizeof(key), &fs_devices->fsid);
	dev = bpf_map_lookup_elem(&traced_fsids, &key);
	return dev ? *dev : 0;
}

/* Events that take a btrfs_inode: their fs_info is inode->root->fs_info. Pointer arguments are
 * NULL-checked before a field address is taken from them: 6.12's verifier types them
 * trusted_ptr_or_null and refuses that arithmetic before the check. */
static __always_inline __u32 inode_dev(const struct btrfs_inode *inode)
{
	struct btrfs_root *root = inode ? inode->root : NULL; /* BTF pointers: plain loads */

	return root ? fs_info_dev(root->fs_info) : 0;
}

static __always_inline void count_event(__u32 dev, __u16 event, __u32 arg, __s32 stackid, __u64 bytes, __u64 ns)
{
	struct bt_key key = { .dev = dev, .phase = current_phase(), .event = event, .arg = arg, .stackid = stackid };
	struct bt_val *v, zero = {};

	v = lookup_or_init(&bt_counts, &key, &zero, DROP_FS_FULL);
	if (!v)
		return;
	__sync_fetch_and_add(&v->count, 1);
	ADD_MAYBE_ZERO(&v->bytes, bytes);
	ADD_MAYBE_ZERO(&v->total_ns, ns);
	if (ns > v->max_ns)
		v->max_ns = ns;
}

/* Records ns into dev's histogram `which` (BH_*) in phase. Its max is not atomic: see
 * docs/attribution.md#limits. */
static __always_inline void bt_hist_add(__u32 dev, __u16 phase, __u16 which, __u64 ns)
{
	struct bh_key key = { .dev = dev, .phase = phase, .which = which };

	hist_add(&bt_hists, &key, ns, DROP_FS_FULL);
}

/* btrfs_sync_file: the entry of every btrfs fsync (fsync, fdatasync, O_SYNC writes, msync),
 * before any flushing or logging. The fsid is that of btrfs_sb() of the file's superblock (its
 * dentry's d_sb, the same as its inode's i_sb). */
SEC("tp_btf/btrfs_sync_file")
int BPF_PROG(on_sync_file, const struct file *file, int datasync)
{
	__u32 dev;

	if (!file)
		return 0;
	dev = fs_info_dev(BPF_CORE_READ(file, f_path.dentry, d_sb, s_fs_info));
	if (dev)
		count_event(dev, BT_SYNC_FILE, datasync ? 1 : 0, -1, 0, 0);
	return 0;
}

/* btrfs_transaction_commit: the end of a transaction commit, in the thread that did it (an fsync
 * that could not use the tree log, sync/syncfs, the btrfs-transaction kthread, space flushing).
 * Also fires when an aborted transaction is cleaned up. The stack says who committed. */
SEC("tp_btf/btrfs_transaction_commit")
int BPF_PROG(on_transaction_commit, const struct btrfs_fs_info *fs_info)
{
	__u32 dev = fs_info_dev(fs_info);

	if (dev)
		count_event(dev, BT_COMMIT, 0, get_stack(ctx), 0, 0);
	return 0;
}

/* The same tracepoint, raw_tp: its argument is the fs_info, whose commit_stats the commit has just
 * updated (update_commit_stats runs after write_all_supers, before this tracepoint). */
SEC("raw_tp/btrfs_transaction_commit")
int BPF_PROG(on_transaction_commit_timed, const struct btrfs_fs_info *fs_info)
{
	struct btrfs_fs_devices *fs_devices;
	struct commit_seen now = {}, *prev;
	__u32 dev, zero = 0;
	__u64 *interleaved;

	if (!bpf_core_field_exists(fs_info->commit_stats))
		return 0;
	fs_devices = BPF_CORE_READ(fs_info, fs_devices);
	if (!fs_devices)
		return 0;
	dev = target_dev(&fs_devices->fsid);
	if (!dev)
		return 0;
	now.commit_count = BPF_CORE_READ(fs_info, commit_stats.commit_count);
	now.last_ns = BPF_CORE_READ(fs_info, commit_stats.last_commit_dur);
	prev = bpf_map_lookup_elem(&commit_last, &dev);
	if (prev && now.commit_count != prev->commit_count + 1) {
		interleaved = bpf_map_lookup_elem(&commit_interleaved, &zero);
		if (interleaved)
			(*interleaved)++;
	}
	bpf_map_update_elem(&commit_last, &dev, &now, BPF_ANY);
	bt_hist_add(dev, current_phase(), BH_COMMIT, now.last_ns);
	return 0;
}

/* Superblock writes: write_dev_supers submits one bio per device and mirror (64 KiB, 64 MiB,
 * 256 GiB), in the thread that runs write_all_supers (a tree-log sync or a commit). Seen at
 * block_bio_queue, which runs in the submitter's context; block_rq_issue does not always (a FUA
 * write on a device without FUA is issued by the flush machinery from kblockd). */
static __always_inline int super_mirror(__u64 sector)
{
	if (sector == (65536 >> 9))
		return 0;
	if (sector == ((16384ULL << 12) >> 9))
		return 1;
	if (sector == ((16384ULL << 24) >> 9))
		return 2;
	return -1;
}

/* From the bio as block_bio_queue's TP_fast_assign: dev = bio_dev(bio) = MKDEV(major,
 * first_minor) of bi_bdev->bd_disk (the whole disk), sector = bi_iter.bi_sector, nr_sector =
 * bio_sectors(bio) = bi_iter.bi_size >> 9. A write is rwbs "W..." or "FW..." (blk_fill_rwbs: 'F'
 * first for REQ_PREFLUSH, then 'W' only for REQ_OP_WRITE; write-zeroes is 'N' up to 6.18): the op,
 * the bits below the first flag bit (REQ_OP_MASK), is REQ_OP_WRITE. */
SEC("tp_btf/block_bio_queue")
int BPF_PROG(on_bio_queue, BIO_QUEUE_ARGS)
{
	struct gendisk *disk;
	__u32 dev, nr_sector;
	__u64 *start;
	int mirror;

	if (!bio)
		return 0;
	/* bio is a BTF pointer: plain loads (this runs for every bio on the machine). */
	disk = bio_disk(bio);
	if (!disk)
		return 0;
	dev = disk_devt(disk);
	start = bpf_map_lookup_elem(&super_devs, &dev);
	if (!start)
		return 0;
	mirror = super_mirror(bio->bi_iter.bi_sector - *start);
	if (mirror < 0)
		return 0;
	if (op_of(bio->bi_opf) != REQ_OP_VALUE(REQ_OP_WRITE))
		return 0;
	nr_sector = bio->bi_iter.bi_size >> 9;
	count_event(dev, BT_SUPER_WRITE, mirror, get_stack(ctx), (__u64)nr_sector << 9, 0);
	return 0;
}

/* Ordered extents: one per range of data being written back (created when writeback allocates
 * its extent), removed once its I/O is done and its file extent item is in the tree. */
static __always_inline __u32 ordered_type(unsigned long flags)
{
	if (flags & (1UL << BTRFS_ORDERED_DIRECT))
		return 4;
	if (flags & (1UL << BTRFS_ORDERED_COMPRESSED))
		return 3;
	if (flags & (1UL << BTRFS_ORDERED_PREALLOC))
		return 2;
	if (flags & (1UL << BTRFS_ORDERED_NOCOW))
		return 1;
	return 0;
}

/* An ordered extent's key: btrfs__ordered_extent's TP_fast_assign (6.1 to 6.18, all with a
 * btrfs_inode) gives ino = btrfs_ino(inode), which is vfs_inode.i_ino on 64-bit kernels since 6.0;
 * root_objectid = inode->root->root_key.objectid; file_offset, len (= num_bytes) and flags from the
 * ordered extent. The classic record (5.10) holds the same values. */
static __always_inline void oe_added(__u32 dev, unsigned long flags, __u64 num_bytes, __u64 root, __u64 ino,
                                     __u64 file_offset)
{
	struct oe_key key = { .dev = dev, .root = root, .ino = ino, .file_offset = file_offset };
	struct oe_val val = {};

	count_event(dev, BT_OE_ADD, ordered_type(flags), -1, num_bytes, 0);
	val.add_ns = bpf_ktime_get_ns();
	val.phase = current_phase();
	if (bpf_map_update_elem(&oe_inflight, &key, &val, BPF_ANY))
		count_drop(DROP_FS_FULL);
}

static __always_inline void oe_removed(__u32 dev, __u64 num_bytes, __u64 root, __u64 ino, __u64 file_offset)
{
	struct oe_key key = { .dev = dev, .root = root, .ino = ino, .file_offset = file_offset };
	struct oe_val *added;

	count_event(dev, BT_OE_REMOVE, 0, -1, num_bytes, 0);
	added = bpf_map_lookup_elem(&oe_inflight, &key);
	if (added) {
		/* Timed in the phase it was added in, as syscalls are in the phase they started. */
		bt_hist_add(dev, added->phase, BH_OE_LIFE, bpf_ktime_get_ns() - added->add_ns);
		bpf_map_delete_elem(&oe_inflight, &key);
	}
}

static __always_inline __u64 inode_root(const struct btrfs_inode *inode)
{
	struct btrfs_root *root = inode->root; /* inode is a non-NULL BTF pointer here */

	return root ? root->root_key.objectid : 0;
}

SEC("tp_btf/btrfs_ordered_extent_add")
int BPF_PROG(on_oe_add, const struct btrfs_inode *inode, const struct btrfs_ordered_extent *ordered)
{
	__u32 dev = inode_dev(inode);

	if (!dev || !inode || !ordered) /* all three checked: 6.12 takes the arguments as possibly NULL */
		return 0;
	oe_added(dev, ordered->flags, ordered->num_bytes, inode_root(inode), inode->vfs_inode.i_ino,
	         ordered->file_offset);
	return 0;
}

/* btrfs_start_ordered_extent: a thread kicks writeback of an ordered extent and (usually) waits
 * for it: a full fsync waiting for its data, truncate, direct I/O over a buffered range. */
SEC("tp_btf/btrfs_ordered_extent_start")
int BPF_PROG(on_oe_start, const struct btrfs_inode *inode, const struct btrfs_ordered_extent *ordered)
{
	__u32 dev = inode_dev(inode);

	if (dev && ordered)
		count_event(dev, BT_OE_START, 0, -1, ordered->num_bytes, 0);
	return 0;
}

/* btrfs_finish_ordered_extent: the I/O of a range of an ordered extent completed (bio end).
 * Absent on 6.1 (the program is then skipped); len and uptodate are its raw arguments. */
SEC("tp_btf/btrfs_finish_ordered_extent")
int BPF_PROG(on_oe_finish, const struct btrfs_inode *inode, u64 start, u64 len, bool uptodate)
{
	__u32 dev = inode_dev(inode);

	if (dev)
		count_event(dev, BT_OE_FINISH, uptodate ? 1 : 0, -1, len, 0);
	return 0;
}

SEC("tp_btf/btrfs_ordered_extent_remove")
int BPF_PROG(on_oe_remove, const struct btrfs_inode *inode, const struct btrfs_ordered_extent *ordered)
{
	__u32 dev = inode_dev(inode);

	if (!dev || !inode || !ordered) /* all three checked: 6.12 takes the arguments as possibly NULL */
		return 0;
	oe_removed(dev, ordered->num_bytes, inode_root(inode), inode->vfs_inode.i_ino, ordered->file_offset);
	return 0;
}

/* btrfs_reserve_ticket: a space reservation that had to queue a ticket is done (granted or
 * failed), in the waiting thread. start_ns is ktime_get_ns() when the ticket was queued (0 if
 * the tracepoint was off then), the same clock as bpf_ktime_get_ns(). */
SEC("tp_btf/btrfs_reserve_ticket")
int BPF_PROG(on_reserve_ticket, const struct btrfs_fs_info *fs_info, u64 flags, u64 bytes, u64 start_ns, int flush,
             int error)
{
	__u32 dev = fs_info_dev(fs_info);
	__u64 now = bpf_ktime_get_ns(), start = start_ns, wait = 0;
	/* Block group type bits: DATA 1, SYSTEM 2, METADATA 4. */
	__u32 space = flags & 7;
	__u32 arg = (flush & 0xff) | space << 8 | (error ? 1 : 0) << 16;

	if (!dev)
		return 0;
	if (start && start <= now) {
		wait = now - start;
		bt_hist_add(dev, current_phase(), BH_TICKET_WAIT, wait);
	}
	count_event(dev, BT_TICKET, arg, -1, bytes, wait);
	return 0;
}

/* btrfs_flush_space: one flushing step done to free space for tickets (delayed items, delayed
 * refs, delalloc, chunk allocation, a transaction commit...), by the async reclaim worker or a
 * priority ticket's own thread. */
static __always_inline void flush_space(__u32 dev, __u64 num_bytes, int state, int ret, bool for_preempt)
{
	__u32 arg = (state & 0xff) | (for_preempt ? 1 : 0) << 8 | (ret ? 1 : 0) << 9;

	/* ALLOC_CHUNK_FORCE asks for (u64)-1 bytes: count it, do not add it. */
	if (dev)
		count_event(dev, BT_FLUSH_SPACE, arg, -1, num_bytes == ~0ULL ? 0 : num_bytes, 0);
}

SEC("tp_btf/btrfs_flush_space")
int BPF_PROG(on_flush_space, const struct btrfs_fs_info *fs_info, u64 flags, u64 num_bytes, int state, int ret,
             bool for_preempt)
{
	flush_space(fs_info_dev(fs_info), num_bytes, state, ret, for_preempt);
	return 0;
}

/* btrfs_trigger_flush: a reservation kicked the async reclaim worker: "enospc" (a ticket was
 * queued) or "preempt" (preemptive reclaim, nobody waits yet). */
static __always_inline void trigger_flush(__u32 dev, __u64 bytes, int flush, const char *reason_str)
{
	char reason[2] = {};
	__u32 why;

	if (!dev)
		return;
	/* The classic event copies the string (its first character is all that is used; a NULL
	 * reason is "(null)" there, nothing here: "other" either way). */
	bpf_probe_read_kernel_str(reason, sizeof(reason), reason_str);
	why = reason[0] == 'e' ? 0 : reason[0] == 'p' ? 1 : 2;
	count_event(dev, BT_TRIGGER_FLUSH, (flush & 0xff) | why << 8, -1, bytes, 0);
}

SEC("tp_btf/btrfs_trigger_flush")
int BPF_PROG(on_trigger_flush, const struct btrfs_fs_info *fs_info, u64 flags, u64 bytes, int flush,
             const char *reason_str)
{
	trigger_flush(fs_info_dev(fs_info), bytes, flush, reason_str);
	return 0;
}

/* btrfs_space_reservation: bytes reserved or released in a block reserve, by type ("delalloc",
 * "transaction", "delayed_inode", "space_info", "space_info:enospc", ...). */
static __always_inline void space_reservation(__u32 dev, const char *type, __u64 bytes, int reserve)
{
	struct resv_key key = {};
	struct bt_val *v, zero = {};

	if (!dev)
		return;
	/* Every btrfs call that changes the tree starts a transaction, which reserves space: one by
	 * a path that placed it on no filesystem (an absolute one) ran btrfs's code. */
	place_call(dev);
	key.dev = dev;
	key.phase = current_phase();
	key.reserve = reserve ? 1 : 0;
	/* As the classic event's __string(type): the string, "(null)" for a NULL pointer. */
	if (type)
		bpf_probe_read_kernel_str(key.type, sizeof(key.type), type);
	else
		__builtin_memcpy(key.type, "(null)", sizeof("(null)"));
	v = lookup_or_init(&space_resv, &key, &zero, DROP_FS_FULL);
	if (!v)
		return;
	__sync_fetch_and_add(&v->count, 1);
	ADD_MAYBE_ZERO(&v->bytes, bytes);
}

SEC("tp_btf/btrfs_space_reservation")
int BPF_PROG(on_space_reservation, const struct btrfs_fs_info *fs_info, const char *type, u64 val, u64 bytes,
             int reserve)
{
	space_reservation(fs_info_dev(fs_info), type, bytes, reserve);
	return 0;
}

#ifdef FSPROF_LEGACY
/* 5.10: classic tracepoints (compat.h's tp_record), whose records name the filesystem by its
 * fsid: the superblock dev under test, or 0. */
static __always_inline __u32 tp_fsid_dev(struct tp_record *r, int field)
{
	struct fsid_key key = {};
	__u64 halves[2];
	__u32 *dev;

	/* Two aligned 8-byte reads (the loader gives an 8-aligned offset), each masked into the copy. */
	halves[0] = tp_u64(r, field);
	halves[1] = *(__u64 *)(r->b + ((r->f->off[field] + 8) & (TP_REC - 8)));
	__builtin_memcpy(&key, halves, sizeof(key));
	dev = bpf_map_lookup_elem(&traced_fsids, &key);
	return dev ? *dev : 0;
}

/* A __data_loc string of the record (offset | length << 16 from the record's start), read from the
 * record itself: the copy holds only its first TP_REC bytes. */
static __always_inline const char *tp_string(void *ctx, struct tp_record *r, int field)
{
	return (const char *)ctx + (tp_u32(r, field) & 0xffff);
}

SEC("tracepoint/btrfs/btrfs_space_reservation")
int tp_btrfs_space_reservation(void *ctx)
{
	struct tp_record r;
	__u32 dev;

	if (tp_record(ctx, &r, TPF_BTRFS_RESV_TYPE, 3) && (dev = tp_fsid_dev(&r, TPF_BTRFS_RESV_FSID)))
		space_reservation(dev, tp_string(ctx, &r, TPF_BTRFS_RESV_TYPE), tp_u64(&r, TPF_BTRFS_RESV_BYTES),
		                  (int)tp_u32(&r, TPF_BTRFS_RESV_RESERVE));
	return 0;
}

/* The btrfs__ordered_extent class: ordered_extent_add, _start and _remove have one layout. */
SEC("tracepoint/btrfs/btrfs_ordered_extent_add")
int tp_btrfs_ordered_extent_add(void *ctx)
{
	struct tp_record r;
	__u32 dev;

	if (tp_record(ctx, &r, TPF_BTRFS_OE_FSID, 6) && (dev = tp_fsid_dev(&r, TPF_BTRFS_OE_FSID)))
		oe_added(dev, tp_u64(&r, TPF_BTRFS_OE_FLAGS), tp_u64(&r, TPF_BTRFS_OE_LEN),
		         tp_u64(&r, TPF_BTRFS_OE_ROOT), tp_u64(&r, TPF_BTRFS_OE_INO), tp_u64(&r, TPF_BTRFS_OE_OFFSET));
	return 0;
}

SEC("tracepoint/btrfs/btrfs_ordered_extent_start")
int tp_btrfs_ordered_extent_start(void *ctx)
{
	struct tp_record r;
	__u32 dev;

	if (tp_record(ctx, &r, TPF_BTRFS_OE_FSID, 6) && (dev = tp_fsid_dev(&r, TPF_BTRFS_OE_FSID)))
		count_event(dev, BT_OE_START, 0, -1, tp_u64(&r, TPF_BTRFS_OE_LEN), 0);
	return 0;
}

SEC("tracepoint/btrfs/btrfs_ordered_extent_remove")
int tp_btrfs_ordered_extent_remove(void *ctx)
{
	struct tp_record r;
	__u32 dev;

	if (tp_record(ctx, &r, TPF_BTRFS_OE_FSID, 6) && (dev = tp_fsid_dev(&r, TPF_BTRFS_OE_FSID)))
		oe_removed(dev, tp_u64(&r, TPF_BTRFS_OE_LEN), tp_u64(&r, TPF_BTRFS_OE_ROOT),
		           tp_u64(&r, TPF_BTRFS_OE_INO), tp_u64(&r, TPF_BTRFS_OE_OFFSET));
	return 0;
}

/* 5.10's record has no for_preempt (preemptive reclaim came in 5.11). */
SEC("tracepoint/btrfs/btrfs_flush_space")
int tp_btrfs_flush_space(void *ctx)
{
	struct tp_record r;

	if (tp_record(ctx, &r, TPF_BTRFS_FLUSH_FSID, 4))
		flush_space(tp_fsid_dev(&r, TPF_BTRFS_FLUSH_FSID), tp_u64(&r, TPF_BTRFS_FLUSH_BYTES),
		            (int)tp_u32(&r, TPF_BTRFS_FLUSH_STATE), (int)tp_u32(&r, TPF_BTRFS_FLUSH_RET), false);
	return 0;
}

SEC("tracepoint/btrfs/btrfs_trigger_flush")
int tp_btrfs_trigger_flush(void *ctx)
{
	struct tp_record r;

	if (tp_record(ctx, &r, TPF_BTRFS_TRIGGER_FSID, 4))
		trigger_flush(tp_fsid_dev(&r, TPF_BTRFS_TRIGGER_FSID), tp_u64(&r, TPF_BTRFS_TRIGGER_BYTES),
		              (int)tp_u32(&r, TPF_BTRFS_TRIGGER_FLUSH), tp_string(ctx, &r, TPF_BTRFS_TRIGGER_REASON));
	return 0;
}

SEC("tracepoint/btrfs/btrfs_sync_file")
int tp_btrfs_sync_file(void *ctx)
{
	struct tp_record r;
	__u32 dev;

	if (tp_record(ctx, &r, TPF_BTRFS_SYNC_FSID, 2) && (dev = tp_fsid_dev(&r, TPF_BTRFS_SYNC_FSID)))
		count_event(dev, BT_SYNC_FILE, tp_u32(&r, TPF_BTRFS_SYNC_DATASYNC) ? 1 : 0, -1, 0, 0);
	return 0;
}

SEC("tracepoint/btrfs/btrfs_transaction_commit")
int tp_btrfs_transaction_commit(void *ctx)
{
	struct tp_record r;
	__u32 dev;

	if (tp_record(ctx, &r, TPF_BTRFS_COMMIT_FSID, 1) && (dev = tp_fsid_dev(&r, TPF_BTRFS_COMMIT_FSID)))
		count_event(dev, BT_COMMIT, 0, get_stack(ctx), 0, 0);
	return 0;
}
#endif
