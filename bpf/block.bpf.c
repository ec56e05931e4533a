// SPDX-License-Identifier: GPL-2.0
/* Block requests of the devices under test (and of the devices backing them), followed one by
 * one by their struct request pointer and aggregated in the kernel per (device, class, phase):
 * counts, bytes, sizes, queue time and device time, and who submitted them.
 *
 * The life of a request on this kernel (6.18, blk-mq), as the tracepoints see it:
 *   block_io_start     blk_account_io_start(), when a bio becomes a new request; runs in the
 *                      submitter's context (the thread calling submit_bio). cmd_flags are still as
 *                      submitted: the flush machinery (blk_insert_flush) strips REQ_PREFLUSH, and
 *                      REQ_FUA on a device without FUA, only after this.
 *   block_rq_insert    the request enters a scheduler or software queue. With scheduler "none" most
 *                      requests are issued directly and never inserted; the data part of a
 *                      PREFLUSH/FUA write is inserted when its pre-flush is done (requeue list).
 *   block_rq_issue     handed to the driver (blk_mq_start_request).
 *   block_rq_requeue   given back by the driver; inserted and issued again later.
 *   block_rq_merge     merged into another request before issue and freed.
 *   block_rq_complete  blk_update_request(): the device finished. It also fires for requests never
 *                      issued (an empty PREFLUSH write ends when the flush serving it ends) and a
 *                      second time for a write in the flush sequence (RQF_FLUSH_SEQ: PREFLUSH, or FUA
 *                      emulated by a post-flush) once that sequence ends: only the first completion
 *                      of an issued request is its device time.
 *   block_io_done      blk_account_io_done(), after the bios' completion callbacks, with the time the
 *                      kernel's /sys/block/<dev>/stat ticks end at (only when it keeps I/O stats).
 * The cache flush itself is the queue's own flush request (REQ_OP_FLUSH | REQ_PREFLUSH, rwbs "FF"),
 * one per batch of waiting requests: it has no block_io_start and no block_rq_insert; its queue
 * time starts at rq->start_time_ns, set when blk_kick_flush() queues it (the span the kernel's flush
 * ticks in /sys/block/<dev>/stat measure, up to completion). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "compat.h"
#include <bpf/bpf_tracing.h>
#include "fsprof.h"
#include "shared_maps.h"

char LICENSE[] SEC("license") = "GPL";

/* traced_devs value bits (profiler/behind/block.py fills them from /sys/block/<dev>/queue). */
#define DEV_TRACED 1
#define DEV_FUA 2 /* the device does FUA itself: no post-flush for a FUA write */
#define DEV_BIO 4 /* bio-based (device-mapper, md): no requests of its own; its bios are timed */

#define SUBMITTER_LEN 32

/* Devices under test and their backing devices (kernel dev_t) -> DEV_* bits. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u8);
} traced_devs SEC(".maps");

/* Per (device, class, phase); 9.6 KiB a value, shared and updated with atomic adds like op_hist. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct blk_key);
	__type(value, struct blk_val);
} blk_stats SEC(".maps");

/* Who submitted the requests: a thread's comm, or "kworker:<workqueue>" for a kworker. */
struct sub_key {
	__u32 dev;
	__u16 cls;
	__u16 phase;
	char who[SUBMITTER_LEN];
};

struct sub_val {
	__u64 count;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct sub_key);
	__type(value, struct sub_val);
} blk_submitters SEC(".maps");

/* A request between its start and its end (the last completion). */
struct rq_info {
	__u64 born_ns;   /* block_io_start, or the kernel's rq->start_time_ns when none was seen */
	__u64 start_ns;  /* queue start: as born_ns, cleared at issue (a requeue is inserted again) */
	__u64 insert_ns; /* the last block_rq_insert; 0 if none */
	__u64 issue_ns;  /* the last block_rq_issue; 0 until issued */
	__u32 dev;
	__u16 cls;
	__u16 phase;      /* at issue */
	__u8 device_done; /* its first completion after issue was seen */
	__u8 ended;       /* its last completion was seen; block_io_done follows */
	__u16 pad[3];
	char who[SUBMITTER_LEN];
	__u64 device_ns;       /* issue to the device's completion, once device_done */
	struct rq_owner owner; /* who made it (shared_maps.h rq_owners), taken at its first issue */
};

/* struct request pointer -> its rq_info. Entries of requests that never complete (rare error
 * paths) are overwritten when the kernel reuses the request for the next bio. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct rq_info);
} rqs SEC(".maps");

const struct blk_val zero_val = {};

static __always_inline __u32 rq_dev(struct request *rq)
{
	return rq_disk_dev(rq);
}

static __always_inline __u8 dev_flags(__u32 dev)
{
	__u8 *f = bpf_map_lookup_elem(&traced_devs, &dev);

	return f ? *f : 0;
}

static __always_inline struct blk_val *stats_of(__u32 dev, __u16 cls, __u16 phase)
{
	struct blk_key key = { .dev = dev, .cls = cls, .phase = phase };

	return lookup_or_init(&blk_stats, &key, &zero_val, DROP_BLOCK_FULL);
}

static __always_inline __u32 size_slot(__u32 bytes)
{
	__u32 slot = bytes ? log2_slot(bytes) : 0;

	return slot < BLK_SIZE_SLOTS ? slot : BLK_SIZE_SLOTS - 1;
}

static __always_inline bool is_kworker(const char *comm)
{
	return comm[0] == 'k' && comm[1] == 'w' && comm[2] == 'o' && comm[3] == 'r' && comm[4] == 'k' &&
	       comm[5] == 'e' && comm[6] == 'r' && comm[7] == '/';
}

/* The current thread as a submitter: its comm, except that a kworker ("kworker/u8:1" says nothing)
 * is named by the workqueue of the work it runs: "kworker:loop0" (the loop driver's worker),
 * "kworker:writeback" (the flusher), "kworker:kblockd". */
static __always_inline void submitter(char *who)
{
	struct task_struct *task = current_task();
	struct kthread *kt;
	struct worker *w;
	struct workqueue_struct *wq;

	bpf_get_current_comm(who, COMM_LEN);
	if (!is_kworker(who))
		return;
	/* A kworker's kthread data is its struct worker; current_pwq is set while it runs a work item. */
	if (bpf_core_field_exists(task->worker_private))
		kt = (struct kthread *)BPF_CORE_READ(task, worker_private);
	else /* before 5.17 a kthread's struct kthread hung from set_child_tid */
		kt = (struct kthread *)BPF_CORE_READ(task, set_child_tid);
	w = kt ? (struct worker *)BPF_CORE_READ(kt, data) : NULL;
	wq = w ? BPF_CORE_READ(w, current_pwq, wq) : NULL;
	if (!wq)
		return;
	__builtin_memcpy(who, "kworker:", 8);
	bpf_probe_read_kernel_str(who + 8, SUBMITTER_LEN - 8, wq->name);
}

static __always_inline void add_submitter(__u32 dev, __u16 cls, __u16 phase, const char *who, __u64 count, __u64 bytes)
{
	struct sub_key key = { .dev = dev, .cls = cls, .phase = phase };
	struct sub_val *v, zero = {};

	__builtin_memcpy(key.who, who, SUBMITTER_LEN);
	v = lookup_or_init(&blk_submitters, &key, &zero, DROP_BLOCK_FULL);
	if (!v)
		return;
	ADD_MAYBE_ZERO(&v->count, count);
	ADD_MAYBE_ZERO(&v->bytes, bytes);
}

/* The request of `info` (its rqs entry, or NULL) starts or is issued again. If its last issue saw neither a completion nor a
 * requeue, that completion went by without block_rq_complete or block_io_done reaching any BPF
 * program: counted as lost (one request in 30,000-70,000 here, sometimes in bursts; see
 * docs/behind-block.md). */
static __always_inline void count_lost(struct rq_info *info)
{
	struct blk_val *v;

	if (!info || info->ended || !info->issue_ns || info->device_done)
		return;
	v = stats_of(info->dev, info->cls, info->phase);
	if (v)
		__sync_fetch_and_add(&v->lost, 1);
	info->ended = 1; /* stale from now on */
}

/* Cache flushes a submitted request asks for (blk_flush_policy): one before it for REQ_PREFLUSH
 * (or for an empty flush request), one after it for REQ_FUA on a device without FUA. Flags reaching
 * here already had PREFLUSH/FUA dropped by submit_bio_noacct() if the device has no write cache. */
static __always_inline __u32 flushes_asked(__u32 flags, __u16 cls, __u8 devf)
{
	__u32 n = 0;

	if (cls == BLK_FLUSH || (flags & REQ_BIT(__REQ_PREFLUSH)))
		n++;
	if ((flags & REQ_BIT(__REQ_FUA)) && !(devf & DEV_FUA) && cls != BLK_FLUSH)
		n++;
	return n;
}

/* A submitted request (or a bio-based device's bio), with the flags it was submitted with. */
static __always_inline void count_submitted(struct blk_val *v, __u32 flags)
{
	__sync_fetch_and_add(&v->submitted, 1);
	if (flags & REQ_BIT(__REQ_FUA))
		__sync_fetch_and_add(&v->fua, 1);
	if (flags & REQ_BIT(__REQ_PREFLUSH))
		__sync_fetch_and_add(&v->preflush, 1);
	if (flags & REQ_BIT(__REQ_META))
		__sync_fetch_and_add(&v->meta, 1);
}

/* A bio became a new request, in the submitter's context. */
SEC("tp_btf/block_io_start")
int BPF_PROG(on_io_start, struct request *rq)
{
	__u64 ptr = (__u64)rq;
	__u32 dev, flags, asked;
	struct rq_info info = {};
	struct blk_val *v;
	__u8 devf;

	if (!rq) /* never, but 6.12 marks tp_btf pointers maybe-NULL */
		return 0;
	dev = rq_dev(rq);
	devf = dev_flags(dev);
	if (!devf)
		return 0;
	count_lost(bpf_map_lookup_elem(&rqs, &ptr));
	flags = rq->cmd_flags;
	info.born_ns = info.start_ns = bpf_ktime_get_ns();
	info.dev = dev;
	info.cls = blk_classify(flags, rq->__data_len);
	info.phase = current_phase();
	submitter(info.who);
	if (bpf_map_update_elem(&rqs, &ptr, &info, BPF_ANY))
		count_drop(DROP_RQ_FULL);
	v = stats_of(dev, info.cls, info.phase);
	if (v)
		count_submitted(v, flags);
	asked = flushes_asked(flags, info.cls, devf);
	if (asked) {
		/* The flush class's "submitters" are the threads whose requests asked for flushes. */
		v = stats_of(dev, BLK_FLUSH, info.phase);
		if (v)
			__sync_fetch_and_add(&v->flush_asked, asked);
		add_submitter(dev, BLK_FLUSH, info.phase, info.who, asked, 0);
	}
	return 0;
}

/* Into a scheduler or software queue (also the requeue of a flush sequence's data part). */
SEC("tp_btf/block_rq_insert")
int BPF_PROG(on_rq_insert, struct request *rq)
{
	__u64 ptr = (__u64)rq, now;
	struct rq_info *info, fresh = {};
	__u32 dev;

	if (!rq) /* never, but 6.12 marks tp_btf pointers maybe-NULL */
		return 0;
	dev = rq_dev(rq);
	if (!dev_flags(dev))
		return 0;
	now = bpf_ktime_get_ns();
	info = bpf_map_lookup_elem(&rqs, &ptr);
	if (info && !info->ended) {
		info->insert_ns = now;
		return 0;
	}
	/* Started before tracing began (or a passthrough request): its queue time starts here. */
	fresh.born_ns = rq->start_time_ns ?: now;
	fresh.start_ns = now;
	fresh.insert_ns = now;
	fresh.dev = dev;
	fresh.cls = blk_classify(rq->cmd_flags, rq->__data_len);
	submitter(fresh.who);
	if (bpf_map_update_elem(&rqs, &ptr, &fresh, BPF_ANY))
		count_drop(DROP_RQ_FULL);
	return 0;
}

/* Who made the request: recorded under its first bio by syscalls.bpf.c's add_request (a traced
 * syscall, an io_uring request, a filesystem worker's window). One lookup per issue; a request
 * whose first bio is not the one it was made with (a front merge) keeps no owner. */
static __always_inline void take_owner(struct rq_info *info, struct request *rq)
{
	__u64 bio = (__u64)rq->bio;
	struct rq_owner *o;

	if (info->owner.kind || !bio)
		return;
	o = bpf_map_lookup_elem(&rq_owners, &bio);
	if (!o)
		return;
	if (o->dev == info->dev)
		info->owner = *o;
	bpf_map_delete_elem(&rq_owners, &bio);
}

/* Handed to the driver: counted here (phase current now), and its queue time ends. */
SEC("tp_btf/block_rq_issue")
int BPF_PROG(on_rq_issue, struct request *rq)
{
	__u64 ptr = (__u64)rq, now, queued_at;
	struct rq_info *info, fresh = {};
	struct blk_val *v;
	__u32 dev, bytes;
	__u16 phase;

	if (!rq) /* never, but 6.12 marks tp_btf pointers maybe-NULL */
		return 0;
	dev = rq_dev(rq);
	if (!dev_flags(dev))
		return 0;
	now = bpf_ktime_get_ns();
	phase = current_phase();
	bytes = rq->__data_len;
	info = bpf_map_lookup_elem(&rqs, &ptr);
	count_lost(info); /* one lookup for both */
	if (!info || info->ended || info->issue_ns) {
		/* The queue's flush request, or one started before tracing began: classified from its
		 * flags now; queued since the kernel's own start time (blk_kick_flush for a flush). */
		fresh.dev = dev;
		fresh.cls = blk_classify(rq->cmd_flags, bytes);
		fresh.born_ns = fresh.start_ns = rq->start_time_ns;
		if (fresh.cls != BLK_FLUSH)
			submitter(fresh.who);
		bpf_map_update_elem(&rqs, &ptr, &fresh, BPF_ANY);
		info = bpf_map_lookup_elem(&rqs, &ptr);
		if (!info) {
			count_drop(DROP_RQ_FULL);
			return 0;
		}
	}
	info->issue_ns = now;
	info->phase = phase;
	take_owner(info, rq);
	v = stats_of(dev, info->cls, phase);
	if (!v)
		return 0;
	__sync_fetch_and_add(&v->count, 1);
	__sync_fetch_and_add(&v->bytes, bytes);
	__sync_fetch_and_add(&v->size_log2[size_slot(bytes)], 1);
	queued_at = info->insert_ns ? info->insert_ns : info->start_ns;
	if (info->insert_ns && info->start_ns && info->start_ns < info->insert_ns)
		__sync_fetch_and_add(&v->wait_ns, info->insert_ns - info->start_ns);
	if (queued_at && queued_at <= now)
		hist_record(&v->queue, now - queued_at);
	if (info->cls != BLK_FLUSH && info->who[0])
		add_submitter(dev, info->cls, phase, info->who, 1, bytes);
	/* A requeued request is inserted again: its next queue time starts at that insert. */
	info->insert_ns = 0;
	info->start_ns = 0;
	return 0;
}

/* Given back by the driver: it is inserted and issued again; its device time starts then. */
SEC("tp_btf/block_rq_requeue")
int BPF_PROG(on_rq_requeue, struct request *rq)
{
	__u64 ptr = (__u64)rq;
	struct rq_info *info = bpf_map_lookup_elem(&rqs, &ptr);
	struct blk_val *v;

	if (!info || info->ended || !info->issue_ns)
		return 0;
	v = stats_of(info->dev, info->cls, info->phase);
	if (v)
		__sync_fetch_and_add(&v->requeued, 1);
	info->issue_ns = 0;
	return 0;
}

/* Merged into another request before issue: the kernel frees it. */
SEC("tp_btf/block_rq_merge")
int BPF_PROG(on_rq_merge, struct request *rq)
{
	__u64 ptr = (__u64)rq;
	struct rq_info *info = bpf_map_lookup_elem(&rqs, &ptr);
	struct blk_val *v;

	if (!info || info->ended)
		return 0;
	v = stats_of(info->dev, info->cls, current_phase());
	if (v)
		__sync_fetch_and_add(&v->merged, 1);
	bpf_map_delete_elem(&rqs, &ptr);
	ptr = (__u64)rq->bio; /* its maker's entry goes with it (never taken at an issue) */
	bpf_map_delete_elem(&rq_owners, &ptr);
	return 0;
}

/* The device finished (the first completion after issue), or a request's last completion. A request
 * in the flush sequence (RQF_FLUSH_SEQ) completes when its data is written and again when the
 * sequence ends; the queue's own flush request (REQ_OP_FLUSH) carries RQF_FLUSH_SEQ but completes once. */
SEC("tp_btf/block_rq_complete")
int BPF_PROG(on_rq_complete, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	__u64 ptr = (__u64)rq, now;
	struct rq_info *info = bpf_map_lookup_elem(&rqs, &ptr);
	__u32 flush_seq = rqf_flush_seq();
	struct blk_val *v;

	if (!info || info->ended || !rq)
		return 0;
	now = bpf_ktime_get_ns(); /* after the filter: reading the clock costs 50-80 ns in a VM */
	if (info->issue_ns && !info->device_done) {
		info->device_done = 1;
		info->device_ns = now - info->issue_ns;
		v = stats_of(info->dev, info->cls, info->phase);
		if (v) {
			__sync_fetch_and_add(&v->completed, 1);
			hist_record(&v->device, now - info->issue_ns);
		}
	}
	if ((rq->rq_flags & flush_seq) && op_of(rq->cmd_flags) != REQ_OP_VALUE(REQ_OP_FLUSH))
		return 0; /* more to come */
	info->ended = 1;
	/* A request never issued itself (an empty cache flush: the queue's own flush request did its
	 * device work) is timed here from start to end, with no device time of its own. One issued
	 * and not seen to complete on the device (counted lost) is not timed. */
	if (!info->issue_ns)
		take_owner(info, rq);
	if ((info->device_done || !info->issue_ns) && info->born_ns && info->born_ns <= now) {
		if (info->owner.kind)
			rq_owner_add(&info->owner, info->device_done ? info->device_ns : 0, now - info->born_ns);
		rq_ring_add(now, now - info->born_ns, info->device_done ? info->device_ns : 0, info->dev,
		            info->owner.kind ? info->owner.tid : 0, info->cls);
	}
	if (!info->issue_ns) {
		info->phase = current_phase();
		v = stats_of(info->dev, info->cls, info->phase);
		if (v)
			__sync_fetch_and_add(&v->unissued, 1);
	}
	return 0;
}

/* The request's end as the kernel accounts it (after the bios' completion callbacks): its whole
 * life since it started, the span of the /sys/block/<dev>/stat ticks. A request whose device keeps
 * no I/O stats (iostats 0, no scheduler) has no block_io_done: its entry is overwritten on reuse. */
SEC("tp_btf/block_io_done")
int BPF_PROG(on_io_done, struct request *rq)
{
	__u64 ptr = (__u64)rq, now;
	struct rq_info *info = bpf_map_lookup_elem(&rqs, &ptr);
	struct blk_val *v;

	if (!info || !info->ended)
		return 0; /* not ours, or the first end of a request in the flush sequence */
	now = bpf_ktime_get_ns();
	v = stats_of(info->dev, info->cls, info->phase);
	if (v && info->born_ns && info->born_ns <= now) {
		if (info->issue_ns)
			__sync_fetch_and_add(&v->life_ns, now - info->born_ns);
		else
			__sync_fetch_and_add(&v->unissued_life_ns, now - info->born_ns);
	}
	bpf_map_delete_elem(&rqs, &ptr);
	return 0;
}

/* A bio-based device under test (a dm-delay model over a loop device, an LVM volume) makes no
 * requests: the disks below it do, and are traced as such. Its own bios are followed from
 * block_bio_queue (submit_bio_noacct, once per bio: it marks the bio BIO_TRACE_COMPLETION) to
 * block_bio_complete (bio_endio of that bio, after everything below it is done): their "device"
 * time is the whole stack below the device, the dm target's own delay included. */
struct bio_info {
	__u64 start_ns;
	__u32 dev;
	__u16 cls;
	__u16 phase;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct bio_info);
} stacked_bios SEC(".maps");

SEC("tp_btf/block_bio_queue")
int BPF_PROG(on_stacked_bio_queue, BIO_QUEUE_ARGS)
{
	struct bio_info info = {};
	char who[SUBMITTER_LEN] = {};
	__u64 ptr = (__u64)bio;
	struct blk_val *v;
	__u32 flags, bytes;

	if (!bio)
		return 0;
	info.dev = bio_bdev_dev(bio);
	if (!(dev_flags(info.dev) & DEV_BIO))
		return 0;
	flags = bio->bi_opf;
	bytes = bio->bi_iter.bi_size;
	info.cls = blk_classify(flags, bytes);
	info.phase = current_phase();
	info.start_ns = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&stacked_bios, &ptr, &info, BPF_ANY)) {
		count_drop(DROP_RQ_FULL);
		return 0;
	}
	v = stats_of(info.dev, info.cls, info.phase);
	if (v) {
		count_submitted(v, flags);
		__sync_fetch_and_add(&v->count, 1);
		__sync_fetch_and_add(&v->bytes, bytes);
		__sync_fetch_and_add(&v->size_log2[size_slot(bytes)], 1);
	}
	submitter(who);
	add_submitter(info.dev, info.cls, info.phase, who, 1, bytes);
	return 0;
}

SEC("tp_btf/block_bio_complete")
int BPF_PROG(on_stacked_bio_complete, struct request_queue *q, struct bio *bio)
{
	__u64 ptr = (__u64)bio, now;
	struct bio_info *info = bpf_map_lookup_elem(&stacked_bios, &ptr);
	struct blk_val *v;

	if (!info)
		return 0;
	now = bpf_ktime_get_ns();
	v = stats_of(info->dev, info->cls, info->phase);
	if (v && info->start_ns <= now) {
		__sync_fetch_and_add(&v->completed, 1);
		hist_record(&v->device, now - info->start_ns);
	}
	bpf_map_delete_elem(&stacked_bios, &ptr);
	return 0;
}
