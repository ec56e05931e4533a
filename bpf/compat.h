/* SPDX-License-Identifier: GPL-2.0 */
/* What differs between the kernels fsprof runs on (Debian 12's 6.1, 6.12, and current ones), in one
 * place. vmlinux.h comes from the build machine's kernel; each helper here asks the running kernel's
 * BTF (CO-RE) which form it has, and falls back to the older form. */
#ifndef FSPROF_COMPAT_H
#define FSPROF_COMPAT_H

#include <bpf/bpf_core_read.h>
#include "fsprof.h"

/* Flags CO-RE cannot relocate where the kernel keeps them in #defines (6.1, 6.12's inode flags) or
 * an anonymous enum (6.12's request flags): masks found by the loader (profiler/trace/kernel_flags.py)
 * from the kernel's BTF enumerators and tracepoint formats; 0 where not found. Also what no BTF
 * holds: CONFIG_HZ, and the address of global_wb_domain (/proc/kallsyms; 0 if not listed). */
struct kernel_flags {
	__u32 rqf_flush_seq;
	__u32 rqf_use_sched;
	__u32 i_dirty_sync;
	__u32 i_dirty_datasync;
	__u32 i_dirty_time;
	__u32 hz;
	__u64 global_wb_domain;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct kernel_flags);
} kernel_flags SEC(".maps");

static __always_inline struct kernel_flags *loader_flags(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&kernel_flags, &zero);
}

/* Request flags: a named enum on 6.18 (rqf_flags), an anonymous one on 6.12, #defines on 6.1. */
static __always_inline __u32 rqf_flush_seq(void)
{
	struct kernel_flags *k;

	if (bpf_core_enum_value_exists(enum rqf_flags, __RQF_FLUSH_SEQ))
		return 1U << bpf_core_enum_value(enum rqf_flags, __RQF_FLUSH_SEQ);
	k = loader_flags();
	return k ? k->rqf_flush_seq : 0;
}

/* "Went through an I/O scheduler": RQF_USE_SCHED since 6.5, RQF_ELV (the same meaning) before. */
static __always_inline __u32 rqf_use_sched(void)
{
	struct kernel_flags *k;

	if (bpf_core_enum_value_exists(enum rqf_flags, __RQF_USE_SCHED))
		return 1U << bpf_core_enum_value(enum rqf_flags, __RQF_USE_SCHED);
	k = loader_flags();
	return k ? k->rqf_use_sched : 0;
}

/* Inode state flags: a named enum on recent kernels (inode_state_flags_t); 6.12 moved the
 * #defines' bits (I_DIRTY_SYNC 1 << 0 on 6.1, 1 << 3 on 6.12). */
static __always_inline __u32 i_dirty_sync_or_datasync(void)
{
	struct kernel_flags *k;

	if (bpf_core_enum_value_exists(enum inode_state_flags_t, I_DIRTY_SYNC))
		return bpf_core_enum_value(enum inode_state_flags_t, I_DIRTY_SYNC) |
		       bpf_core_enum_value(enum inode_state_flags_t, I_DIRTY_DATASYNC);
	k = loader_flags();
	return k ? k->i_dirty_sync | k->i_dirty_datasync : 0;
}

static __always_inline __u32 i_dirty_time(void)
{
	struct kernel_flags *k;

	if (bpf_core_enum_value_exists(enum inode_state_flags_t, I_DIRTY_TIME))
		return bpf_core_enum_value(enum inode_state_flags_t, I_DIRTY_TIME);
	k = loader_flags();
	return k ? k->i_dirty_time : 0;
}

/* global_wb_domain.dirty_limit, balance_dirty_pages' limit before 6.15 (after, dtc->limit): no
 * kernel's BTF has the variable, so its address comes from the loader (kallsyms); 0 if unlisted. */
static __always_inline __u64 global_dirty_limit(void)
{
	struct kernel_flags *k = loader_flags();
	__u64 limit = 0;

	if (k && k->global_wb_domain)
		bpf_probe_read_kernel(&limit, sizeof(limit),
		                      (const char *)k->global_wb_domain +
		                              bpf_core_field_offset(struct wb_domain, dirty_limit));
	return limit;
}

/* balance_dirty_pages' raw arguments. Since 6.15 (the host's 6.18): (wb, dtc, dirty_ratelimit,
 * task_ratelimit, dirtied, period, pause, start_time), the throttle control itself, and the
 * tracepoint takes the hard limit from dtc->limit. Before (6.1, 6.12): (wb, thresh, bg_thresh,
 * dirty, bdi_thresh, bdi_dirty, then the same six) as scalars, and the limit from global_wb_domain.
 * One series (6.15, and 6.14.y's stable backport) made both changes: the dtc argument, then
 * dtc->limit (which needs it). So dtc->limit existing is the CO-RE constant that picks the layout;
 * bpf_core_type_matches() on a flavoured btf_trace_balance_dirty_pages typedef would ask the
 * prototype itself, but clang 14 (Debian 12's) cannot emit that relocation. A kernel with the
 * argument but not the field would take the scalar branch and its reads past the prototype: the
 * verifier refuses the program (left out, not wrong). */

/* The figures of a balance_dirty_pages event the program keeps, as its TP_fast_assign computes
 * them: freerun = (thresh + bg_thresh) / 2, setpoint = (limit + freerun) / 2, wb_setpoint =
 * setpoint * wb_thresh / (thresh + 1), dirtied an unsigned int; ratelimits as passed (pages/s). */
struct bdp_event {
	__u64 limit, setpoint, dirty, wb_setpoint, wb_dirty;
	__u64 dirty_ratelimit, task_ratelimit;
	__u32 dirtied;
	__s64 pause; /* jiffies: the tracepoint's pause is pause * 1000 / HZ ms */
};

/* Which argument layout this kernel has is a CO-RE constant: the other branch, whose context reads
 * may lie beyond this kernel's prototype, is removed at load. */
static __always_inline void read_bdp_event(unsigned long long *ctx, struct bdp_event *e)
{
	unsigned long thresh, bg_thresh, wb_thresh, freerun;

	if (bpf_core_field_exists(struct dirty_throttle_control, limit)) {
		struct dirty_throttle_control *dtc = (void *)ctx[1];

		thresh = BPF_CORE_READ(dtc, thresh);
		bg_thresh = BPF_CORE_READ(dtc, bg_thresh);
		e->limit = BPF_CORE_READ(dtc, limit);
		e->dirty = BPF_CORE_READ(dtc, dirty);
		wb_thresh = BPF_CORE_READ(dtc, wb_thresh);
		e->wb_dirty = BPF_CORE_READ(dtc, wb_dirty);
		e->dirty_ratelimit = ctx[2];
		e->task_ratelimit = ctx[3];
		e->dirtied = ctx[4];
		e->pause = ctx[6];
	} else {
		thresh = ctx[1];
		bg_thresh = ctx[2];
		e->dirty = ctx[3];
		wb_thresh = ctx[4];
		e->wb_dirty = ctx[5];
		e->dirty_ratelimit = ctx[6];
		e->task_ratelimit = ctx[7];
		e->dirtied = ctx[8];
		e->pause = ctx[10];
		e->limit = global_dirty_limit();
	}
	freerun = (thresh + bg_thresh) / 2;
	e->setpoint = (e->limit + freerun) / 2;
	e->wb_setpoint = e->setpoint * wb_thresh / (thresh + 1);
}

/* A disk's dev_t (MKDEV(major, first_minor)) */
static __always_inline __u32 disk_devt(struct gendisk *disk)
{
#ifndef FSPROF_LEGACY
	return (__u32)disk->major << 20 | (__u32)disk->first_minor; /* a BTF pointer: plain loads */
#else
	return (__u32)BPF_CORE_READ(disk, major) << 20 | (__u32)BPF_CORE_READ(disk, first_minor);
#endif
}

/* A bio's disk and device. Before 5.12 a bio named its disk and partition (bi_disk, bi_partno), not
 * a block device; and until 5.11 block_bio_queue (like block_getrq and the bio merges) took the
 * request queue before the bio: BIO_QUEUE_ARGS are its arguments for BPF_PROG. */
#ifndef FSPROF_LEGACY
#define BIO_QUEUE_ARGS struct bio *bio

/* bio is a BTF pointer: plain loads. */
static __always_inline struct gendisk *bio_disk(struct bio *bio)
{
	return bio->bi_bdev ? bio->bi_bdev->bd_disk : NULL;
}

/* The device the bio was submitted to (a partition's own dev_t). */
static __always_inline __u32 bio_bdev_dev(struct bio *bio)
{
	return BPF_CORE_READ(bio, bi_bdev, bd_dev);
}
#else
#define BIO_QUEUE_ARGS struct request_queue *queue_, struct bio *bio

struct bio___disk {
	struct gendisk *bi_disk;
	__u8 bi_partno;
} __attribute__((preserve_access_index));

static __always_inline struct gendisk *bio_disk(struct bio *bio)
{
	return BPF_CORE_READ((struct bio___disk *)bio, bi_disk);
}

static __always_inline __u32 bio_bdev_dev(struct bio *bio)
{
	struct gendisk *disk = bio_disk(bio);

	return disk ? disk_devt(disk) + BPF_CORE_READ((struct bio___disk *)bio, bi_partno) : 0;
}
#endif

/* What the block request tracepoints print as dev: the whole disk's dev_t. Before 6.0 the request
 * named its disk (rq_disk); after, its queue does. */
#ifdef FSPROF_LEGACY
struct request___disk {
	struct gendisk *rq_disk;
} __attribute__((preserve_access_index));
#endif

static __always_inline __u32 rq_disk_dev(struct request *rq)
{
#ifndef FSPROF_LEGACY
	return rq->q->disk->part0->bd_dev;
#else
	struct gendisk *disk = BPF_CORE_READ((struct request___disk *)rq, rq_disk);

	return disk ? disk_devt(disk) : 0;
#endif
}

/* Request and bio flags: REQ_* bit numbers from this kernel's enum req_flag_bits (CO-RE), never
 * copied; the op is the bits below the first flag bit (REQ_OP_MASK). */
#define REQ_BIT(name) (1U << bpf_core_enum_value(enum req_flag_bits, name))

static __always_inline __u32 op_of(__u32 flags)
{
	return flags & (REQ_BIT(__REQ_FAILFAST_DEV) - 1);
}

/* enum blk_class (fsprof.h) of a request or bio from the flags its submitter gave, as
 * bpf/block.bpf.c and syscalls.bpf.c's per-op requests count them. */
#ifdef FSPROF_LEGACY
/* 5.10 calls the enum req_opf; its values are the same as 6.x's enum req_op (blk_types.h). */
#define REQ_OP_VALUE(name) (name##_VALUE)
#define REQ_OP_READ_VALUE 0
#define REQ_OP_WRITE_VALUE 1
#define REQ_OP_FLUSH_VALUE 2
#define REQ_OP_DISCARD_VALUE 3
#define REQ_OP_SECURE_ERASE_VALUE 5
#else
#define REQ_OP_VALUE(name) bpf_core_enum_value(enum req_op, name)
#endif

static __always_inline __u16 blk_classify(__u32 flags, __u32 bytes)
{
	__u32 op = op_of(flags);

	if (op == REQ_OP_VALUE(REQ_OP_FLUSH))
		return BLK_FLUSH;
	if (op == REQ_OP_VALUE(REQ_OP_READ))
		return BLK_READ;
	if (op == REQ_OP_VALUE(REQ_OP_DISCARD) || op == REQ_OP_VALUE(REQ_OP_SECURE_ERASE))
		return BLK_DISCARD;
	if (op != REQ_OP_VALUE(REQ_OP_WRITE))
		return BLK_OTHER;
	if (flags & REQ_BIT(__REQ_PREFLUSH))
		/* No data: blkdev_issue_flush(), a request that only waits for a cache flush. */
		return bytes ? BLK_PREFLUSH_WRITE : BLK_FLUSH;
	if (flags & REQ_BIT(__REQ_FUA))
		return BLK_FUA_WRITE;
	if (flags & REQ_BIT(__REQ_META))
		return BLK_META_WRITE;
	if (flags & REQ_BIT(__REQ_SYNC))
		return BLK_SYNC_WRITE;
	return BLK_ASYNC_WRITE;
}

#ifdef FSPROF_LEGACY
/* 5.10's modules carry no BTF, so no tp_btf program attaches to their tracepoints: the legacy
 * objects have classic twins (tp_<event> for on_<event>) that get the record, whose fields hold
 * what the tp_btf programs compute. The record is copied once, then each field read at its offset
 * from tracefs (struct tp_fields, filled by the loader), masked to stay in the copy. */
#define TP_REC 128 /* bytes copied: the records read are at most 76 (jbd2_run_stats) */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tp_fields);
} tp_fields SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, char[TP_REC]);
} tp_rec SEC(".maps");

struct tp_record {
	char *b;
	struct tp_fields *f;
};

/* The record of this event and the fields' offsets; false if either is missing, or one of the
 * `need` fields (first .. first + n - 1) is absent from this kernel's record. */
static __always_inline bool tp_record(void *ctx, struct tp_record *r, int first, int n)
{
	__u32 zero = 0;

	r->f = bpf_map_lookup_elem(&tp_fields, &zero);
	r->b = bpf_map_lookup_elem(&tp_rec, &zero);
	if (!r->f || !r->b || bpf_probe_read_kernel(r->b, TP_REC, ctx))
		return false;
	for (int i = 0; i < 12; i++) {
		if (i < n && first + i < N_TP_FIELDS && !r->f->off[first + i])
			return false;
	}
	return true;
}

static __always_inline __u64 tp_u64(struct tp_record *r, int field)
{
	return *(__u64 *)(r->b + (r->f->off[field] & (TP_REC - 8)));
}

static __always_inline __u32 tp_u32(struct tp_record *r, int field)
{
	return *(__u32 *)(r->b + (r->f->off[field] & (TP_REC - 4)));
}

static __always_inline __u16 tp_u16(struct tp_record *r, int field)
{
	return *(__u16 *)(r->b + (r->f->off[field] & (TP_REC - 2)));
}

static __always_inline __u8 tp_u8(struct tp_record *r, int field)
{
	return *(__u8 *)(r->b + (r->f->off[field] & (TP_REC - 1)));
}

#endif

#endif
