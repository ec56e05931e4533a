/* SPDX-License-Identifier: GPL-2.0 */
/* Maps every fsprof object shares: declared in each, and made one map by the loader
 * (profiler/session/collect.py creates each once from syscalls.bpf.o's definition, and every object
 * reuses its fd). */
#ifndef FSPROF_SHARED_MAPS_H
#define FSPROF_SHARED_MAPS_H
#include "fsprof.h"

/* Calls whose path placed them on no filesystem at entry (an absolute path): tid -> the
 * superblock dev the first filesystem event inside the call names (0 until one does). Armed by
 * syscalls.bpf.c's sys_enter, set by place_call() in the filesystems' objects, taken at sys_exit:
 * a call is placed on the filesystem whose code it ran. A hash by tid, not task storage, which
 * 5.10 lacks; LRU, so that a thread that died inside a call leaves nothing for long. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
} unplaced_calls SEC(".maps");

/* Inside an unplaced call of the current thread, the filesystem of superblock `dev` ran: the call
 * is placed there (the first such event decides). Elsewhere: one failed hash lookup. */
static __always_inline void place_call(__u32 dev)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u32 *placed = bpf_map_lookup_elem(&unplaced_calls, &tid);

	if (placed && !*placed)
		*placed = dev;
}

/* The current workload phase, set by a traced process's marker (see fsprof.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct phase_state);
} phase_state SEC(".maps");

/* Set by userspace before attaching (struct stack_sampling). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stack_sampling);
} stack_sampling SEC(".maps");

/* enum drop_reason -> count of events not recorded. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, N_DROPS);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

/* Kernel stacks of every object, so that one stack id means one stack in the whole trace. A
 * stack map keeps one stack per hash bucket: a new stack whose bucket holds another gets -EEXIST
 * (overwriting would change what earlier ids mean). Such a stack goes to the spill map, which
 * only the few colliding stacks use, and its id carries SPILL_STACK_BIT (get_stack below). */
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, MAX_STACK_DEPTH * sizeof(__u64));
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 8192);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, MAX_STACK_DEPTH * sizeof(__u64));
} stacks_spill SEC(".maps");

#define SPILL_STACK_BIT (1 << 30)
#define ERR_EEXIST 17 /* errno.h is not in vmlinux.h */

/* The kernel stack id of ctx's context: from the main map, else (a collision there) from the
 * spill map with SPILL_STACK_BIT set; negative when neither could keep it (counted by callers). */
static __always_inline __s64 get_stack(void *ctx)
{
	__s64 id = bpf_get_stackid(ctx, &stacks, 0);

	if (id == -ERR_EEXIST) {
		id = bpf_get_stackid(ctx, &stacks_spill, 0);
		if (id >= 0)
			id |= SPILL_STACK_BIT;
	}
	return id;
}

/* tid -> the worker window it is in (see struct worker_window). LRU: a window whose end event
 * was missed must not hold its slot for ever. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct worker_window);
} worker_windows SEC(".maps");

/* tid -> the last worker window it closed, read by sched_waking when a worker wakes a traced
 * thread just after its window ended (jbd2 wakes the fsync waiters after its commit's window). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct work_last);
} worker_last SEC(".maps");

/* Slot 0: how many worker windows are open: sched_switch, which runs for every switch on the
 * machine, skips its two worker_windows lookups while none is. Slot 1: the generation, which
 * userspace's reset moves on after setting the count to 0 (before it clears worker_windows). A
 * window is counted in its generation and uncounted only in the same one, so the count is never
 * below the true one: a window that ends across a reset, or an LRU eviction, leaves it above,
 * which costs lookups only. */
#define WORKERS_GEN 1

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __s64);
} workers_open SEC(".maps");

/* Off-CPU time of workers inside their windows, by (dev, kind, phase, stack, runnable). One value
 * for all CPUs, with atomic adds (see offcpu in syscalls.bpf.c). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct worker_key);
	__type(value, struct off_val);
} worker_offcpu SEC(".maps");

const struct worker_run zero_worker_run = {};

/* What each worker's windows did (struct worker_run). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct worker_run_key);
	__type(value, struct worker_run);
} worker_runs SEC(".maps");

static __always_inline void count_drop(__u32 reason)
{
	__u64 *n = bpf_map_lookup_elem(&drops, &reason);

	if (n)
		(*n)++;
}

/* An aggregate's value for `key`, created from `zero` if absent; NULL (counted under `full`, an
 * enum drop_reason) when the map is full. */
static __always_inline void *lookup_or_init(void *map, const void *key, const void *zero, __u32 full)
{
	void *v = bpf_map_lookup_elem(map, key);

	if (v)
		return v;
	bpf_map_update_elem(map, key, zero, BPF_NOEXIST);
	v = bpf_map_lookup_elem(map, key);
	if (!v)
		count_drop(full);
	return v;
}

/* The empty histogram every hist map starts a key from (static: an object that never records one
 * leaves it out; 4.7 KiB, so never on the 512-byte stack). */
static const struct hist zero_hist = {};

/* Records ns into `map`'s histogram for `key`, created empty if absent; returns it (NULL, counted
 * under `full`, when the map is full). */
static __always_inline struct hist *hist_add(void *map, const void *key, __u64 ns, __u32 full)
{
	struct hist *h = lookup_or_init(map, key, &zero_hist, full);

	if (h)
		hist_record(h, ns);
	return h;
}

static __always_inline __u16 current_phase(void)
{
	__u32 zero = 0;
	struct phase_state *ps = bpf_map_lookup_elem(&phase_state, &zero);

	return ps ? ps->current : 0;
}

/* The stack sampling settings when sampling is on (every > 1); NULL when every stack is walked. */
static __always_inline struct stack_sampling *stack_sampling_on(void)
{
	__u32 zero = 0;
	struct stack_sampling *s = bpf_map_lookup_elem(&stack_sampling, &zero);

	return s && s->every > 1 ? s : NULL;
}

/* Whether sampling passes over the stacks of a call (worker window) whose op has had `done` waits
 * walked (whose worker has had `done` windows): never until s->first, then all but 1 in
 * s->every, at random. Decided once per call, so a walked call keeps all its intervals' stacks
 * and wakers and their proportions. */
static __always_inline bool sampled_out(struct stack_sampling *s, __u64 done)
{
	return done >= s->first && bpf_get_prandom_u32() % s->every != 0;
}

/* The count in a one-slot counter map (workers_open, pauses_open); 0 if unreadable. */
static __always_inline __s64 open_count(void *counter)
{
	__u32 zero = 0;
	__s64 *n = bpf_map_lookup_elem(counter, &zero);

	return n ? *n : 0;
}

/* Adds delta to a one-slot counter map. */
static __always_inline void open_count_add(void *counter, __s64 delta)
{
	__u32 zero = 0;
	__s64 *n = bpf_map_lookup_elem(counter, &zero);

	if (n)
		ADD_MAYBE_ZERO(n, delta);
}

/* A task's context switches so far: __schedule counts each one (in nvcsw when it slept, else in
 * nivcsw) before trace_sched_switch. */
static __always_inline __u64 switches_of(struct task_struct *task)
{
	return CUR(task, nvcsw) + CUR(task, nivcsw);
}

/* workers_open's generation (slot WORKERS_GEN). */
static __always_inline __u32 workers_gen(void)
{
	__u32 slot = WORKERS_GEN;
	__s64 *gen = bpf_map_lookup_elem(&workers_open, &slot);

	return gen ? (__u32)*gen : 0;
}

/* The worker_runs entry of a window (created at zero). */
static __always_inline struct worker_run *worker_run_of(struct worker_window *w)
{
	struct worker_run_key key = { .dev = w->dev, .kind = w->kind, .phase = w->phase };

	return lookup_or_init(&worker_runs, &key, &zero_worker_run, DROP_WORKER_FULL);
}

/* ---- block requests by who made them (counted by syscalls.bpf.c, timed by block.bpf.c) ---- */

const struct rq_classes zero_rqs = {};

/* Block requests each (filesystem, syscall, phase) made from its own bios: a per-op figure that
 * counts nothing done before or after the calls, nor by other threads. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 512);
	__type(key, struct op_key);
	__type(value, struct rq_classes);
} op_rqs SEC(".maps");

/* The block requests of io_uring requests, per (filesystem, opcode, phase): those the submitting
 * thread made while issuing one inside io_uring_enter, and those an io-wq worker made while
 * running one. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct op_key);
	__type(value, struct rq_classes);
} uring_rqs SEC(".maps");

_Static_assert(sizeof(struct op_key) == sizeof(struct worker_run_key), "rq_owner keeps either key");

/* A request's first bio -> who made it (struct rq_owner), from block_getrq to the request's issue.
 * LRU: a bio made on a device block.bpf.c does not trace is never taken. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct rq_owner);
} rq_owners SEC(".maps");

/* tid -> the block requests of the syscall it is in (struct call_rqs): counted by add_request,
 * timed by block.bpf.c, read into the call's exemplar at its exit. LRU: a thread that exits
 * leaves its entry to be evicted. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct call_rqs);
} call_rqs SEC(".maps");

static __always_inline void rq_times_add(struct rq_times *t, __u64 device_ns, __u64 life_ns)
{
	__sync_fetch_and_add(&t->device_ns, device_ns);
	__sync_fetch_and_add(&t->life_ns, life_ns);
	__sync_fetch_and_add(&t->timed, 1);
}

/* The device ring: the last RQ_RING block requests of the traced devices to end, in the order
 * they ended (block.bpf.c writes each at its last completion; rq_ring_head counts them all). A
 * call kept as an exemplar copies those that ended while it ran (device_rqs_during): a slow
 * call's device track, with no event per request leaving the kernel. */
#define RQ_RING 256     /* a power of two */
#define RQ_RING_LOOK 32 /* how far back a kept call looks for its requests */

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, RQ_RING);
	__type(key, __u32);
	__type(value, struct rq_seen);
} rq_ring SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} rq_ring_head SEC(".maps");

static __always_inline __u32 sat_u32(__u64 ns)
{
	return ns > 0xffffffffULL ? 0xffffffffU : (__u32)ns;
}

/* A request has ended: into the ring's next slot. Before 5.12 (no fetching atomics) two CPUs
 * ending requests at once may take the same slot: one of the two is lost from the ring. */
static __always_inline void rq_ring_add(__u64 end_ns, __u64 life_ns, __u64 device_ns, __u32 dev, __u32 tid, __u16 cls)
{
	__u32 zero = 0, idx;
	__u64 *head = bpf_map_lookup_elem(&rq_ring_head, &zero);
	struct rq_seen *s;

	if (!head)
		return;
#ifndef FSPROF_LEGACY
	idx = (__u32)__sync_fetch_and_add(head, 1) & (RQ_RING - 1);
#else
	idx = (__u32)*head & (RQ_RING - 1);
	__sync_fetch_and_add(head, 1);
#endif
	s = bpf_map_lookup_elem(&rq_ring, &idx);
	if (!s)
		return;
	s->end_ns = end_ns;
	s->life_ns = sat_u32(life_ns);
	s->device_ns = sat_u32(device_ns);
	s->dev = dev;
	s->tid = tid;
	s->cls = cls;
}

/* io_uring requests in flight (struct uring_req), keyed by the request's pointer (its ring and
 * user_data on 5.10) from submission to completion: syscalls.bpf.c follows them, block.bpf.c adds
 * the times of the block requests each made (an io_uring owner's window_ns is its key). 8,192 in
 * flight at once (a record is 260 bytes, within the maps' 64 MiB budget): past that the oldest is
 * evicted and its completion not counted. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, struct uring_req);
} uring_reqs SEC(".maps");

/* A request of class cls that `owner` made has ended: its times go to the owner's rq_classes and,
 * for a worker's, to the window that made it (open, or the worker's last closed one: its waiters
 * read them there). */
static __always_inline void rq_owner_add(struct rq_owner *owner, __u64 device_ns, __u64 life_ns)
{
	__u16 cls = owner->cls;
	struct rq_classes *rqs = NULL;
	struct worker_window *w;
	struct worker_run *run;
	struct work_last *last;

	if (cls >= N_BLK_CLASSES)
		return;
	if (owner->kind == OWNER_OP) {
		struct call_rqs *call = bpf_map_lookup_elem(&call_rqs, &owner->tid);

		if (call && call->call_ns == owner->window_ns)
			rq_times_add(&call->own.times, device_ns, life_ns);
		rqs = bpf_map_lookup_elem(&op_rqs, &owner->key);
	} else if (owner->kind == OWNER_URING) {
		struct uring_req *r = bpf_map_lookup_elem(&uring_reqs, &owner->window_ns);

		if (r && r->opcode == owner->key.nr) /* not a recycled request of another opcode */
			rq_times_add(&r->own.times, device_ns, life_ns);
		rqs = bpf_map_lookup_elem(&uring_rqs, &owner->key);
	} else if (owner->kind == OWNER_WORKER) {
		run = bpf_map_lookup_elem(&worker_runs, &owner->key);
		if (run)
			rqs = &run->rqs;
		w = bpf_map_lookup_elem(&worker_windows, &owner->tid);
		if (w && w->start_ns == owner->window_ns) {
			rq_times_add(&w->rq_times, device_ns, life_ns);
		} else {
			last = bpf_map_lookup_elem(&worker_last, &owner->tid);
			if (last && last->seen.start_ns == owner->window_ns)
				rq_times_add(&last->seen.rq_times, device_ns, life_ns);
		}
	}
	if (!rqs)
		return;
	__sync_fetch_and_add(&rqs->timed[cls], 1);
	__sync_fetch_and_add(&rqs->device_ns[cls], device_ns);
	__sync_fetch_and_add(&rqs->life_ns[cls], life_ns);
}

/* ---- dirty throttling pauses (writeback.bpf.c announces them, on_switch times their sleep) ---- */

#define TASK_RUNNING_STATE 0
/* A balance_dirty_pages sleep starts right after its tracepoint; a tracked pause not followed by a
 * sleeping switch-out within this time was not slept (BDP_ASYNC callers return -EAGAIN instead). */
#define PAUSE_SWITCH_WINDOW_NS 10000000ULL

/* tid -> its pause, until the task is back on a CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct pause_pending);
} pauses SEC(".maps");

/* How many entries `pauses` holds: sched_switch skips its two lookups while none is (racy but
 * never stuck: it only gates a fast path). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __s64);
} pauses_open SEC(".maps");

/* The pauses' sleeps, by the throttle key of writeback.bpf.c's `throttle`. One value for all CPUs
 * with atomic adds (pauses are few). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct throttle_key);
	__type(value, struct pause_val);
} pause_slept SEC(".maps");

const struct pause_val zero_pause_val = {};

static __always_inline void pause_unmatched(struct throttle_key *key)
{
	struct pause_val *v = lookup_or_init(&pause_slept, key, &zero_pause_val, DROP_WRITEBACK_FULL);

	if (v)
		__sync_fetch_and_add(&v->unmatched, 1);
}

static __always_inline void pause_forget(__u32 tid)
{
	if (!bpf_map_delete_elem(&pauses, &tid))
		open_count_add(&pauses_open, -1);
}

/* The current task is about to sleep a dirty-throttling pause of `key`. */
static __always_inline void pause_begin(struct throttle_key *key, __u64 now)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct pause_pending p = { .start_ns = now, .key = *key };
	struct pause_pending *earlier = bpf_map_lookup_elem(&pauses, &tid);

	if (earlier) { /* it never slept (BDP_ASYNC): unmatched, and replaced in place */
		pause_unmatched(&earlier->key);
		*earlier = p;
	} else if (bpf_map_update_elem(&pauses, &tid, &p, BPF_NOEXIST)) {
		pause_unmatched(key);
		count_drop(DROP_WRITEBACK_FULL);
	} else {
		open_count_add(&pauses_open, 1);
	}
}

/* At a switch while pauses are open: prev's sleep starts, next's ends. */
static __always_inline void pause_switch(struct task_struct *prev, unsigned int prev_state, struct task_struct *next,
                                         __u64 now)
{
	__u32 tid = prev->pid;
	struct pause_pending *p = bpf_map_lookup_elem(&pauses, &tid);
	struct pause_val *v;

	/* prev's sleep starts unless it is not throttled, already asleep, or preempted before the sleep */
	if (p && !p->switched_out && prev_state != TASK_RUNNING_STATE) {
		if (now - p->start_ns > PAUSE_SWITCH_WINDOW_NS) {
			pause_unmatched(&p->key);
			pause_forget(tid);
		} else {
			p->switched_out = 1;
		}
	}
	tid = next->pid;
	p = bpf_map_lookup_elem(&pauses, &tid);
	if (!p || !p->switched_out)
		return;
	v = lookup_or_init(&pause_slept, &p->key, &zero_pause_val, DROP_WRITEBACK_FULL);
	if (v)
		hist_record(&v->slept, now - p->start_ns);
	pause_forget(tid);
}

/* The current thread starts work of `kind` for `dev` (a begin tracepoint of bpf/<fs>.bpf.c); id:
 * the work's own number where it has one (a jbd2 commit's transaction tid), else 0. */
static __always_inline void worker_begin(__u16 kind, __u32 dev, __u32 id)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct worker_window w = { .start_ns = bpf_ktime_get_ns(),
		                   .dev = dev,
		                   .kind = kind,
		                   .phase = current_phase(),
		                   .out_stack = -1,
		                   .id = id,
		                   .switches = switches_of(current_task()) };
	struct worker_window *left;
	struct worker_run *run;
	bool counted = false;
	long err;

	struct stack_sampling *s = stack_sampling_on();

	run = worker_run_of(&w);
	w.no_stacks = s && sampled_out(s, run ? run->windows : 0);
	w.gen = workers_gen();
	/* A window left open (its end missed) is replaced: counted again only if it was not counted
	 * in this generation. */
	left = bpf_map_lookup_elem(&worker_windows, &tid);
	if (left)
		counted = left->gen == w.gen;
	err = bpf_map_update_elem(&worker_windows, &tid, &w, BPF_ANY);
	if (!err && !counted)
		open_count_add(&workers_open, 1);
	if (err)
		count_drop(DROP_WORKER_FULL);
	else if (run)
		__sync_fetch_and_add(&run->windows, 1);
}

/* Forgets the thread's window, if it has one: uncounted if counted in this generation. */
static __always_inline void worker_forget(__u32 tid)
{
	struct worker_window *w = bpf_map_lookup_elem(&worker_windows, &tid);
	bool counted = w && w->gen == workers_gen();

	if (bpf_map_delete_elem(&worker_windows, &tid) == 0 && counted && open_count(&workers_open) > 0)
		open_count_add(&workers_open, -1);
}

/* The current thread's window ends; returns when it began (0 if no window was open). */
static __always_inline __u64 worker_end(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct worker_window *w = bpf_map_lookup_elem(&worker_windows, &tid);
	__u64 start = w ? w->start_ns : 0, now = bpf_ktime_get_ns();
	struct worker_run *run;

	struct work_last done = {};

	if (!w)
		return 0;
	run = worker_run_of(w);
	if (start && start <= now && run) {
		__sync_fetch_and_add(&run->wall_ns, now - start);
		/* Every switch-out must have been timed, or part of the window's off-CPU time is missing
		 * and the rest would pass for CPU: kept apart as unseen instead. */
		if (switches_of(current_task()) - w->switches != w->switches_seen) {
			count_drop(DROP_WORKER_SWITCHES);
			__sync_fetch_and_add(&run->unseen_windows, 1);
			if (now - start > w->offcpu_ns)
				__sync_fetch_and_add(&run->unseen_ns, now - start - w->offcpu_ns);
		}
	}
	/* Kept for the wakeups that follow the window's end (struct work_last). */
	done.seen.start_ns = start;
	done.seen.end_ns = now;
	done.seen.blocked_ns = w->blocked_ns;
	done.seen.id = w->id;
	done.seen.kind = w->kind;
	__builtin_memcpy(done.seen.requests, w->requests, sizeof(done.seen.requests));
	done.seen.rq_times = w->rq_times;
	done.nvcsw = CUR(current_task(), nvcsw);
	bpf_map_update_elem(&worker_last, &tid, &done, BPF_ANY);
	worker_forget(tid);
	return start;
}
#endif
