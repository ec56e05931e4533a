// SPDX-License-Identifier: GPL-2.0
/* The life of a traced syscall, aggregated in the kernel:
 *   sys_enter    remember (start, syscall, filesystem, phase) for the thread
 *   sched_switch time each interval the thread spends off CPU inside it, with the switch-out stack
 *                and whether it was preempted (runnable) or blocked
 *   perf sample  count kernel stacks while it runs on CPU
 *   sys_exit     add its wall time to a linear-in-log histogram; hand its off-CPU intervals to
 *                the (filesystem, syscall, phase, stack) aggregate
 *   block_getrq  count a block request made from its bios under it (and one made inside a
 *                filesystem worker's window under that worker)
 * Nothing is streamed to userspace; userspace reads the maps at the end of a run. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "compat.h"
#include <bpf/bpf_tracing.h>
#include "fsprof.h"
#include "shared_maps.h"

#define AT_FDCWD -100
#define OFF_SLOTS 4 /* distinct (stack, runnable) off-CPU kinds kept per in-flight syscall */

char LICENSE[] SEC("license") = "GPL";

/* Who is traced (enum filter_mode) and the optional superblock filter. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct filter);
} filter_cfg SEC(".maps");

/* FILTER_PID: processes to trace (tgid). Userspace seeds the workload; forks of traced processes join. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} traced_tgids SEC(".maps");

/* FILTER_CGROUP: the cgroup (v2 directory fd) whose tasks, and its descendants', are traced. */
struct {
	__uint(type, BPF_MAP_TYPE_CGROUP_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} traced_cgroup SEC(".maps");

/* syscall number -> enum dev_source; DEV_SRC_NONE means not traced. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SYSCALL_NR);
	__type(key, __u32);
	__type(value, __u8);
} syscall_dev_source SEC(".maps");

/* Who ended a blocked interval (see struct off_key). */
struct waker {
	__s32 stack;
	char comm[COMM_LEN];
};

/* Intervals whose waker was not seen (or that were runnable). Never NULL: 6.1's verifier lost
 * track of a NULL-or-pointer waker once the compiler turned `if (waker)` into a test of the flag
 * it was chosen by. */
const struct waker no_waker = { .stack = -1 };

struct off_slot {
	__s32 stackid;
	__u16 runnable;
	__u16 tail;
	struct waker waker;
	__u64 count;
	__u64 total_ns;
};

struct inflight {
	__u64 start_ns;
	__u64 out_ns;     /* when it switched out; 0 while on CPU */
	__u64 woken_ns;   /* when it was woken while switched out; 0 if not (yet) */
	struct op_key op; /* dev as known at entry; an open's fd is resolved at exit */
	__s32 out_stack;
	__u8 out_runnable;
	__u8 deferred;         /* an open, or a call its path did not place: its filesystem is known only
	                        * at exit, so its off-CPU time waits in slots */
	__u8 no_stacks;        /* stack sampling passed this call over: its intervals are STACK_NOT_WALKED */
	__u8 counts_walks;     /* sampling, before the op's first waits_walked: its blocked intervals count there */
	__u8 decided;          /* no_stacks and counts_walks are set (at the call's first switch-out) */
	__u64 uring_wait_ns;   /* an io_uring_enter: when it began waiting for completions (0: it has not) */
	__u64 uring_req;       /* an io_uring_enter: the request it is issuing (0: none), for its bios */
	__u64 aio_events;      /* an io_getevents: the user's io_event array its events are returned in */
	struct waker waker;    /* who woke it while switched out */
	struct work_seen work; /* the waker's worker window, if it was in one (or just out of one) */
	struct off_slot slots[OFF_SLOTS];
	/* For its exemplar: reset at entry by count only (ex_wait[i] is valid below ex_waits). */
	__u64 ex_runq_ns;
	__u64 ex_blocked_ns;
	__u32 ex_waits;
	struct exemplar_wait ex_wait[EXEMPLAR_WAITS];
};

#ifndef FSPROF_LEGACY
/* The syscall each traced thread is in (start_ns 0: none). Task-local storage: sched_switch and
 * sched_waking, which run for every switch and wakeup on the machine, find it (or that a task
 * has none) through the task itself instead of hashing its tid; it goes with the task. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct inflight);
} inflight SEC(".maps");

static __always_inline struct inflight *inflight_any(struct task_struct *task)
{
	return bpf_task_storage_get(&inflight, task, 0, 0);
}

/* The current thread's record, made at its first traced syscall. */
static __always_inline struct inflight *inflight_made(void)
{
	return bpf_task_storage_get(&inflight, current_task(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
}

static __always_inline void inflight_forget(__u32 tid)
{
}
#else
/* Before task storage (5.10): a hash by tid, preallocated (sched_switch, under the run-queue lock,
 * must never allocate). Only sys_enter inserts, from a never-written template; the thread's exit
 * deletes. A record stays between syscalls (start_ns 0), so a syscall costs no insert. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct inflight);
} inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct inflight);
} inflight_template SEC(".maps");

static __always_inline struct inflight *inflight_any(struct task_struct *task)
{
	__u32 tid = BPF_CORE_READ(task, pid);

	return bpf_map_lookup_elem(&inflight, &tid);
}

static __always_inline struct inflight *inflight_made(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid(), zero = 0;
	struct inflight *rec = bpf_map_lookup_elem(&inflight, &tid), *blank;

	if (rec)
		return rec;
	blank = bpf_map_lookup_elem(&inflight_template, &zero);
	if (!blank || bpf_map_update_elem(&inflight, &tid, blank, BPF_NOEXIST))
		return NULL;
	return bpf_map_lookup_elem(&inflight, &tid);
}

static __always_inline void inflight_forget(__u32 tid)
{
	bpf_map_delete_elem(&inflight, &tid);
}
#endif

/* The record of a task inside a traced syscall, or NULL. */
static __always_inline struct inflight *inflight_of(struct task_struct *task)
{
	struct inflight *op = inflight_any(task);

	return op && op->start_ns ? op : NULL;
}

/* Wall time per (filesystem, syscall, phase). A value is 4.7 KiB: one shared, preallocated copy
 * updated with atomic adds, rather than one per CPU (which grows with the machine) or allocated on
 * demand (which can fail under a burst of new keys). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 512);
	__type(key, struct op_key);
	__type(value, struct hist);
} op_hist SEC(".maps");

/* io_uring_enter's time waiting for completions, per (filesystem, syscall, phase): from
 * io_uring_cqring_wait, which io_cqring_wait fires only when it is about to sleep (fewer CQEs than
 * asked for), to the call's exit. The rest of the call is submitting (and reaping what was there). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct op_key);
	__type(value, struct hist);
} uring_enter_wait SEC(".maps");

/* Preallocated: allocating as keys appear (BPF_F_NO_PREALLOC) fails under the run-queue lock that
 * sched_switch runs under, where the allocator cannot refill its per-CPU cache (lost intervals,
 * offcpu_full, in a 300-fsync run when tried). One value for all CPUs with atomic adds, as
 * `samples`: a preallocated per-CPU hash of this size took about 50 ms of every start to make
 * (on 2 CPUs, more with more), against 3 ms. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct off_key);
	__type(value, struct off_val);
} offcpu SEC(".maps");

/* One value for all CPUs, with atomic adds (999 samples/s per CPU contend for nothing): a
 * preallocated per-CPU hash of this size took 40-80 ms to create at every start. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct sample_key);
	__type(value, __u64);
} samples SEC(".maps");

/* Stack sampling: the blocked intervals of each (filesystem, syscall, phase) whose stacks were
 * walked. An op's calls are all walked until it has this many (stack_sampling.first), so that a
 * kind of wait met rarely is seen in full rather than estimated from a handful. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2048);
	__type(key, struct op_key);
	__type(value, __u64);
} waits_walked SEC(".maps");

/* The tail's stacks (TAIL_STACK_BIT ids), taken of the task being switched in; and a per-CPU
 * buffer to take one in (512 bytes: more than a BPF stack holds). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2048);
	__type(key, __u32);
	__type(value, struct stack_ips);
} tail_stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stack_ips);
} stack_scratch SEC(".maps");

/* The slowest calls of each (filesystem, syscall, phase): stack_sampling.exemplars of them, at
 * most EXEMPLARS. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 512);
	__type(key, struct op_key);
	__type(value, struct exemplar_set);
} exemplars SEC(".maps");

static const struct exemplar_set no_exemplars = {};

const __u64 zero_count = 0;
const __u8 one = 1;

static __always_inline __u32 file_dev(struct file *file)
{
	return file ? BPF_CORE_READ(file, f_inode, i_sb, s_dev) : 0;
}

/* task is a BTF pointer (the current task): its fields down to the fd array are plain loads, not
 * bpf_probe_read calls (each about 25 ns here). The file is not: an array element is no BTF
 * pointer, and 6.1 has no kfunc to make it one. */
static __always_inline __u32 fd_dev(struct task_struct *task, long fd)
{
	struct files_struct *files = CUR(task, files);
	struct fdtable *fdt = files ? CUR(files, fdt) : NULL;
	struct file **fds, *file = NULL;

	if (!fdt || fd < 0 || fd >= CUR(fdt, max_fds))
		return 0;
	fds = CUR(fdt, fd);
	bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]);
	return file_dev(file);
}

static __always_inline __u32 cwd_dev(struct task_struct *task)
{
	struct fs_struct *fs = CUR(task, fs);
	struct dentry *d = fs ? CUR(fs, pwd.dentry) : NULL;
	struct super_block *sb = d ? CUR(d, d_sb) : NULL;

	return sb ? CUR(sb, s_dev) : 0;
}

/* A relative path resolves against dirfd (or the cwd); an absolute one we cannot place without a
 * path walk, so it stays unresolved (dev 0) rather than being guessed. */
static __always_inline __u32 path_dev(struct task_struct *task, int dirfd, const char *path)
{
	char c = 0;

	if (bpf_probe_read_user(&c, 1, path) || c == '/')
		return 0;
	return dirfd == AT_FDCWD ? cwd_dev(task) : fd_dev(task, dirfd);
}

/* The same for a path the kernel has copied in already (an io_uring request's struct filename). */
static __always_inline __u32 kernel_path_dev(struct task_struct *task, int dirfd, struct filename *name)
{
	const char *path = name ? BPF_CORE_READ(name, name) : NULL;
	char c = 0;

	if (!path || bpf_probe_read_kernel(&c, 1, path) || c == '/')
		return 0;
	return dirfd == AT_FDCWD ? cwd_dev(task) : fd_dev(task, dirfd);
}

static __always_inline struct filter *get_filter(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&filter_cfg, &zero);
}

static __always_inline bool is_traced(struct filter *f)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (f->mode == FILTER_ALL)
		return true;
	if (f->mode == FILTER_CGROUP)
		return bpf_current_task_under_cgroup(&traced_cgroup, 0) == 1;
	return bpf_map_lookup_elem(&traced_tgids, &tgid) != NULL;
}

static __always_inline void set_phase(__u64 index)
{
	__u32 zero = 0;
	struct phase_state *ps = bpf_map_lookup_elem(&phase_state, &zero);

	if (!ps || index >= MAX_PHASES)
		return;
	ps->current = index;
	if (!ps->start_ns[index])
		ps->start_ns[index] = bpf_ktime_get_ns();
}

/* The raw syscall tracepoints give the registers: on x86-64 a syscall's arguments are in di, si,
 * dx, r10, r8, r9 and its number in orig_ax (what raw_syscalls' own fields are copied from). */
#define SYSCALL_ARG0(regs) ((regs)->di)
#define SYSCALL_ARG1(regs) ((regs)->si)
#define SYSCALL_ARG2(regs) ((regs)->dx)
#define SYSCALL_ARG3(regs) ((regs)->r10)

/* Whether a syscall's dev source is a path (its filesystem may be known only inside the call or
 * at its exit), and whether it is on no single filesystem. */
static __always_inline bool src_by_path(__u8 src)
{
	return src == DEV_SRC_RET_FD || src == DEV_SRC_DIRFD || src == DEV_SRC_CWD || src == DEV_SRC_RET_FD_AT;
}

static __always_inline bool src_on_no_fs(__u8 src)
{
	return src == DEV_SRC_GLOBAL || src == DEV_SRC_AIO_REAP;
}

int aio_submitted(__u64 nr, __u64 iocbpp);

SEC("tp_btf/sys_enter")
int BPF_PROG(on_sys_enter, struct pt_regs *regs, long id)
{
	__u32 nr = id;
	struct task_struct *task;
	struct inflight *rec;
	struct op_key key = {};
	struct filter *f;
	bool deferred, unplaced;
	__u64 arg0;
	__u8 *src;

	src = bpf_map_lookup_elem(&syscall_dev_source, &nr);
	if (!src || *src == DEV_SRC_NONE || !regs || !(f = get_filter()) || !is_traced(f))
		return 0;
	arg0 = SYSCALL_ARG0(regs);
	if (*src == DEV_SRC_MARKER) {
		if (arg0 == FSPROF_PHASE_MAGIC)
			set_phase(SYSCALL_ARG1(regs));
		return 0;
	}

	task = current_task();
	switch (*src) {
	case DEV_SRC_FD:
		key.dev = fd_dev(task, arg0);
		break;
	case DEV_SRC_DIRFD:
	case DEV_SRC_RET_FD_AT:
		/* dirfd is an int: only the low 32 bits of the register are meaningful. */
		key.dev = path_dev(task, (int)arg0, (const char *)SYSCALL_ARG1(regs));
		break;
	case DEV_SRC_CWD:
	case DEV_SRC_RET_FD:
		key.dev = path_dev(task, AT_FDCWD, (const char *)arg0);
		break;
	case DEV_SRC_AIO_SUBMIT:
		key.dev = (__u32)aio_submitted(SYSCALL_ARG1(regs), SYSCALL_ARG2(regs));
		break;
	}
	/* A path that placed the call nowhere (an absolute one) is placed by the filesystem events
	 * inside the call (place_call in shared_maps.h); an open that succeeds, by its new fd. */
	unplaced = !key.dev && src_by_path(*src);
	if (unplaced) {
		__u32 tid = (__u32)bpf_get_current_pid_tgid(), none = 0;

		bpf_map_update_elem(&unplaced_calls, &tid, &none, BPF_ANY);
	}
	deferred = *src == DEV_SRC_RET_FD || *src == DEV_SRC_RET_FD_AT || unplaced;
	/* With a filesystem filter, operations known to be elsewhere are not followed at all. One on
	 * no filesystem (io_uring_enter, sync) is: the io_uring requests it issues inline count their
	 * block requests under it (add_request), and its own figures stay under no filesystem. */
	if (f->dev && key.dev != f->dev && !deferred && !src_on_no_fs(*src))
		return 0;
	key.nr = nr;
	key.phase = current_phase();
	rec = inflight_made();
	if (!rec) {
		count_drop(DROP_INFLIGHT_FULL);
		return 0;
	}
	/* Field by field, not a copy of a whole zeroed record: the slots (most of its 300 bytes) are
	 * used by opens only, and only they need them cleared. */
	rec->op = key;
	rec->out_ns = 0;
	rec->woken_ns = 0;
	rec->uring_req = 0;
	rec->aio_events = *src == DEV_SRC_AIO_REAP ? SYSCALL_ARG3(regs) : 0;
	rec->out_stack = -1;
	rec->out_runnable = 0;
	rec->deferred = deferred;
	rec->no_stacks = 0;
	rec->counts_walks = 0;
	rec->decided = 0;
	rec->uring_wait_ns = 0;
	rec->ex_runq_ns = 0;
	rec->ex_blocked_ns = 0;
	rec->ex_waits = 0;
	if (deferred)
		__builtin_memset(rec->slots, 0, sizeof(rec->slots));
	rec->start_ns = bpf_ktime_get_ns();
	return 0;
}

/* stack_sampling.exemplars: how many of an op's slowest calls are kept, 1..EXEMPLARS. */
static __always_inline __u32 exemplars_kept(void)
{
	__u32 zero = 0;
	struct stack_sampling *s = bpf_map_lookup_elem(&stack_sampling, &zero);

	return s && s->exemplars && s->exemplars < EXEMPLARS ? s->exemplars : EXEMPLARS;
}

/* stack_sampling.tail_ns: blocked intervals this long or longer are the tail; 0: none. */
static __always_inline __u64 tail_ns(void)
{
	__u32 zero = 0;
	struct stack_sampling *s = bpf_map_lookup_elem(&stack_sampling, &zero);

	return s ? s->tail_ns : 0;
}

static __always_inline bool in_tail(__u64 blocked)
{
	__u64 from = tail_ns();

	return from && blocked >= from;
}

/* Global functions, so that the verifier checks their 64-frame loops once, on their own (inlined
 * into sched_switch, 6.1's gave up at a million insns). They only read their arguments: 6.1 takes
 * a global function's pointer argument as plain memory, which no map helper accepts. */

/* FNV-1a of a stack's frames (zero past its last). */
static __always_inline __u32 hash_frames(struct stack_ips *ips)
{
	__u32 hash = 2166136261U;

	for (int i = 0; i < MAX_STACK_DEPTH; i++) {
		hash = (hash ^ (__u32)ips->ips[i]) * 16777619U;
		hash = (hash ^ (__u32)(ips->ips[i] >> 32)) * 16777619U;
	}
	return hash & TAIL_STACK_MASK;
}

static __always_inline int frames_equal(struct stack_ips *a, struct stack_ips *b)
{
	for (int i = 0; i < MAX_STACK_DEPTH; i++) {
		if (a->ips[i] != b->ips[i])
			return 0;
	}
	return 1;
}

#ifndef FSPROF_LEGACY
__noinline __u32 stack_hash(struct stack_ips *ips)
{
	return ips ? hash_frames(ips) : 0;
}

__noinline int same_stack(struct stack_ips *a, struct stack_ips *b)
{
	return a && b ? frames_equal(a, b) : 0;
}

#define STACK_HASH(ips) stack_hash(ips)
#define SAME_STACK(kept, ips, hash) same_stack(kept, ips)
#else
/* 5.10's global functions take scalars only: these find the scratch stack (and the one kept under
 * its hash) again. */
__noinline __u32 stack_hash(void)
{
	__u32 zero = 0;
	struct stack_ips *ips = bpf_map_lookup_elem(&stack_scratch, &zero);

	return ips ? hash_frames(ips) : 0;
}

__noinline int same_stack(__u32 hash)
{
	__u32 zero = 0;
	struct stack_ips *ips = bpf_map_lookup_elem(&stack_scratch, &zero);
	struct stack_ips *kept = bpf_map_lookup_elem(&tail_stacks, &hash);

	return ips && kept ? frames_equal(kept, ips) : 0;
}

#define STACK_HASH(ips) stack_hash()
#define SAME_STACK(kept, ips, hash) same_stack(hash)
#endif

/* The kernel stack of task, which is not the current one, as an id in tail_stacks: TAIL_STACK_BIT
 * with the hash of its frames. A different stack already under that hash (about 1 in 40,000 for
 * 8,000 stacks) is not kept: -1, counted as a lost stack. */
static __always_inline __s32 task_stack_id(struct task_struct *task)
{
	__u32 zero = 0, hash;
	struct stack_ips *ips = bpf_map_lookup_elem(&stack_scratch, &zero), *kept;

	if (!ips)
		return -1;
	__builtin_memset(ips, 0, sizeof(*ips)); /* the frames past this stack's end are zero */
	if (bpf_get_task_stack(task, ips->ips, sizeof(ips->ips), 0) <= 0) {
		count_drop(DROP_OFFCPU_STACK);
		return -1;
	}
	hash = STACK_HASH(ips);
	if (bpf_map_update_elem(&tail_stacks, &hash, ips, BPF_NOEXIST) == 0)
		return hash | TAIL_STACK_BIT;
	kept = bpf_map_lookup_elem(&tail_stacks, &hash);
	if (!kept || !SAME_STACK(kept, ips, hash)) {
		count_drop(DROP_OFFCPU_STACK);
		return -1;
	}
	return hash | TAIL_STACK_BIT;
}

/* waker NULL: no waker (runnable time, or a wakeup not seen). No const global stands for it:
 * struct copies from .rodata came out wrong on this kernel/clang (the in-flight record was clobbered). */
static __always_inline void add_offcpu(struct op_key *opk, __s32 stackid, __u16 runnable, __u16 tail,
                                       const struct waker *waker, __u64 count, __u64 ns)
{
	struct off_key key = {
		.op = *opk, .stackid = stackid, .runnable = runnable, .tail = tail, .waker_stack = waker->stack
	};
	struct off_val *v, zero = {};

	__builtin_memcpy(key.waker_comm, waker->comm, COMM_LEN);

	v = lookup_or_init(&offcpu, &key, &zero, DROP_OFFCPU_FULL);
	if (!v)
		return;
	__sync_fetch_and_add(&v->count, count);
	__sync_fetch_and_add(&v->total_ns, ns);
}

static __always_inline void add_op(struct op_key *key, __u64 delta, long ret)
{
	struct hist *h = hist_add(&op_hist, key, delta, DROP_OPS_FULL);

	if (h && ret > 0)
		__sync_fetch_and_add(&h->ret_sum, ret);
}

/* The call into its op's exemplars if it is slower than the fastest kept. The set is shared by the
 * CPUs: once it is full, a call no slower than its floor is turned away by one plain read; a
 * candidate takes the set's try-lock (no spin lock in tracing programs) or, while another CPU
 * holds it, is not weighed (counted). A global function: the verifier checks its loop once. */
#ifndef FSPROF_LEGACY
static __always_inline bool exemplar_trylock(struct exemplar_set *set, struct op_key *k)
{
	if (__sync_fetch_and_add(&set->busy, 1)) {
		__sync_fetch_and_add(&set->busy, -1);
		return false;
	}
	return true;
}

static __always_inline void exemplar_unlock(struct exemplar_set *set, struct op_key *k)
{
	__sync_fetch_and_add(&set->busy, -1);
}
#else
/* No fetching atomics before 5.12: the try-lock is an insert that fails if the key is there (the
 * hash's bucket lock makes it exclusive). Only sys_exit takes it, never an NMI program. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 512);
	__type(key, struct op_key);
	__type(value, __u8);
} exemplar_locks SEC(".maps");

static __always_inline bool exemplar_trylock(struct exemplar_set *set, struct op_key *k)
{
	return bpf_map_update_elem(&exemplar_locks, k, &one, BPF_NOEXIST) == 0;
}

static __always_inline void exemplar_unlock(struct exemplar_set *set, struct op_key *k)
{
	bpf_map_delete_elem(&exemplar_locks, k);
}
#endif

/* The slot of key's set that a call of ns takes (its fastest kept call's), the set locked; NULL if
 * the call is no slower than what the set keeps, or another CPU holds the set. The caller fills
 * the slot, then calls exemplar_filled. */
static __always_inline struct exemplar *exemplar_slot(struct exemplar_set **setp, struct op_key *k, __u64 ns)
{
	struct exemplar_set *set = lookup_or_init(&exemplars, k, &no_exemplars, DROP_OPS_FULL);
	__u64 fastest = ~0ULL;
	__u32 slot = 0, kept;

	if (!set || ns <= set->floor_ns)
		return NULL;
	if (!exemplar_trylock(set, k)) {
		count_drop(DROP_EXEMPLAR_BUSY);
		return NULL;
	}
	kept = exemplars_kept();
	for (int i = 0; i < EXEMPLARS; i++) {
		if (i >= kept)
			break;
		if (set->call[i].end_ns - set->call[i].start_ns < fastest) {
			fastest = set->call[i].end_ns - set->call[i].start_ns;
			slot = i;
		}
	}
	if (fastest >= ns) {
		exemplar_unlock(set, k);
		return NULL;
	}
	*setp = set;
	return &set->call[slot & (EXEMPLARS - 1)];
}

/* The set's new floor (0 until every slot holds a call), and its lock released. */
static __always_inline void exemplar_filled(struct exemplar_set *set, struct op_key *k)
{
	__u64 fastest = ~0ULL;
	__u32 kept = exemplars_kept();

	for (int i = 0; i < EXEMPLARS; i++) {
		if (i >= kept)
			break;
		if (set->call[i].end_ns - set->call[i].start_ns < fastest)
			fastest = set->call[i].end_ns - set->call[i].start_ns;
	}
	set->floor_ns = fastest;
	exemplar_unlock(set, k);
}

/* A kept call's device requests, gathered apart from its slot (struct exemplar's device_rqs,
 * device_more and device[], in that order). */
struct device_rqs {
	__u32 n;
	__u32 more;
	struct rq_seen rq[EXEMPLAR_RQS];
};

/* Per CPU: where device_rqs_during gathers them before they are copied into the slot. The count
 * so far and the call's bounds are kept here and read afresh in each turn of the loop: in
 * registers, each turn's comparisons would leave their bounds on them, and the verifier would see
 * a new state for every path through the loop (past its 1,000,000 instructions). */
struct device_scratch {
	struct device_rqs got;
	__u64 start_ns;
	__u64 end_ns;
};

/* One scratch a nesting level: a call's exit in a task can be interrupted by an io_uring
 * request's completion on the same CPU (in an interrupt on 5.10), which keeps its own exemplar.
 * device_rqs_depth says how many are gathering on this CPU now. */
#define DEVICE_RQS_LEVELS 4 /* task, softirq, hardirq, NMI */

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DEVICE_RQS_LEVELS);
	__type(key, __u32);
	__type(value, struct device_scratch);
} device_rqs_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} device_rqs_depth SEC(".maps");

/* The requests that ended on the traced devices between start_ns and end_ns, newest first, from
 * the device ring, into this CPU's device_rqs_scratch at level: at most EXEMPLAR_RQS, `more` set when
 * there were more. The ring is in the order requests ended, so the walk stops at the first that
 * ended before start_ns. A global function with scalar arguments: its loop is checked once, apart
 * from the caller's slot search (whose 16 slots would multiply its states), on 5.10 too. */
__noinline int device_rqs_during(__u32 level, __u64 start_ns, __u64 end_ns)
{
	__u32 zero = 0, n, idx;
	__u64 *headp = bpf_map_lookup_elem(&rq_ring_head, &zero), head;
	struct device_scratch *out = bpf_map_lookup_elem(&device_rqs_scratch, &level);
	struct rq_seen *s;

	if (!out)
		return 0;
	out->got.n = 0;
	out->got.more = 0;
	out->start_ns = start_ns;
	out->end_ns = end_ns;
	if (!headp)
		return 0;
	head = *headp;
	for (int i = 0; i < RQ_RING_LOOK; i++) {
		if (i >= head)
			break;
		idx = (__u32)(head - 1 - i) & (RQ_RING - 1);
		s = bpf_map_lookup_elem(&rq_ring, &idx);
		if (!s || s->end_ns < out->start_ns)
			break;
		if (s->end_ns > out->end_ns) /* another CPU's, ended after the call */
			continue;
		n = out->got.n;
		if (n >= EXEMPLAR_RQS) {
			out->got.more = 1;
			break;
		}
		out->got.rq[n & (EXEMPLAR_RQS - 1)] = *s;
		out->got.n = n + 1;
	}
	return 0;
}

/* Into kept call e: its device requests (device_rqs_during), copied whole, gathered in this
 * nesting level's own scratch. */
static __always_inline void keep_device_rqs(struct exemplar *e)
{
	__u32 zero = 0, level;
	__u32 *depth = bpf_map_lookup_elem(&device_rqs_depth, &zero);
	struct device_scratch *scratch = NULL;

	e->device_rqs = 0;
	if (!depth)
		return;
	/* Not atomic: an interrupt between the read and the write restores what it added. */
	level = (*depth)++;
	if (level < DEVICE_RQS_LEVELS) {
		device_rqs_during(level, e->start_ns, e->end_ns);
		scratch = bpf_map_lookup_elem(&device_rqs_scratch, &level);
	}
	if (scratch)
		__builtin_memcpy(&e->device_rqs, &scratch->got, sizeof(scratch->got));
	(*depth)--;
}

static __always_inline int keep_exemplar_in(struct op_key *key, struct inflight *op, __u64 now, long ret)
{
	struct exemplar_set *set = NULL;
	struct call_rqs *call;
	struct exemplar *e;
	struct op_key k;

	k = *key; /* a copy on the stack: older verifiers take a map key from there */
	e = exemplar_slot(&set, &k, now - op->start_ns);
	if (!e || !set)
		return 0;
	e->start_ns = op->start_ns;
	e->end_ns = now;
	e->runq_ns = op->ex_runq_ns;
	e->blocked_ns = op->ex_blocked_ns;
	e->ret = ret;
	e->tid = (__u32)bpf_get_current_pid_tgid();
	e->waits = op->ex_waits;
	__builtin_memcpy(e->wait, op->ex_wait, sizeof(e->wait));
	call = bpf_map_lookup_elem(&call_rqs, &e->tid);
	if (call && call->call_ns == op->start_ns)
		e->own = call->own;
	else
		__builtin_memset(&e->own, 0, sizeof(e->own));
	keep_device_rqs(e);
	exemplar_filled(set, &k);
	return 0;
}

#ifndef FSPROF_LEGACY
__noinline int keep_exemplar(struct op_key *key, struct inflight *op, __u64 now, long ret)
{
	return key && op ? keep_exemplar_in(key, op, now, ret) : 0;
}

#define KEEP_EXEMPLAR(op, now, ret) keep_exemplar(&(op)->op, op, now, ret)
#else
/* Scalar arguments only (5.10): the call's record is found again by its thread. */
__noinline int keep_exemplar(__u32 tid, __u64 now, long ret)
{
	struct inflight *op = bpf_map_lookup_elem(&inflight, &tid);

	return op ? keep_exemplar_in(&op->op, op, now, ret) : 0;
}

#define KEEP_EXEMPLAR(op, now, ret) keep_exemplar((__u32)bpf_get_current_pid_tgid(), now, ret)
#endif

/* io_uring requests' submission-to-completion time per (filesystem, opcode, phase), and libaio
 * iocbs' submission-to-reaping time (AIO_NR | IOCB_CMD_*); ret_sum: bytes of reads and writes
 * that completed. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct op_key);
	__type(value, struct hist);
} uring_hist SEC(".maps");

/* ---- libaio: an iocb from the io_submit that submits it to the io_getevents that reaps it. fs/aio.c
 * has no tracepoint (docs/research/io_uring.md, section 6): the iocbs are read from the user's
 * array at io_submit's entry, the events from the user's io_event array at io_getevents' exit.
 * The time is submission to reaping: it includes how long the application took to come and reap.
 * ---- */
#define AIO_MAX_IOCBS 128 /* read per call; more are counted (DROP_AIO_IOCBS), not followed */
/* An iocb's time is kept in uring_hist under AIO_NR | its IOCB_CMD_* (uring_op_name in maps.py). */
#define AIO_NR 0x4000

struct aio_key {
	__u64 iocb; /* the user's iocb pointer, which its io_event's obj returns */
	__u32 tgid;
	__u32 pad;
};

struct aio_req {
	__u64 start_ns;
	__u32 dev;
	__u16 phase;
	__u16 opcode; /* IOCB_CMD_* */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct aio_key);
	__type(value, struct aio_req);
} aio_reqs SEC(".maps");

/* Requests and iocbs followed from submission, and those found again at their end (completion,
 * reaping), per CPU: with the entries still in uring_reqs and aio_reqs, userspace tells how many
 * were lost in flight (evicted from those LRU maps, or their key reused before their end was seen). */
enum async_count {
	ASYNC_URING_FOLLOWED,
	ASYNC_URING_ENDED,
	ASYNC_AIO_FOLLOWED,
	ASYNC_AIO_ENDED,
	ASYNC_COUNTS,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ASYNC_COUNTS);
	__type(key, __u32);
	__type(value, __u64);
} async_counts SEC(".maps");

static __always_inline void async_inc(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&async_counts, &which);

	if (v)
		(*v)++;
}

/* The uapi struct iocb's opcode and fd (include/uapi/linux/aio_abi.h, x86_64: at bytes 16 and 20),
 * and struct io_event. */
struct aio_iocb_head {
	__u16 opcode;
	__s16 reqprio;
	__u32 fd;
};

struct aio_event {
	__u64 data;
	__u64 obj;
	__s64 res;
	__s64 res2;
};

/* One iocb that io_submit submits, at iocb (its user address), followed from start_ns if it is on
 * a filesystem in the filter; its filesystem (a dev_t; 0: none). The per-iocb work of the loops
 * below is in global functions with scalar arguments, which the verifier checks once: inlined,
 * it was checked again at each of a loop's 128 turns (fd_dev's loads through the task's BTF type at
 * every one), 1.5 s of verification and most of fsprof's start-up (docs/benchmarks.md). */
__noinline int aio_follow(__u64 iocb, __u64 start_ns)
{
	struct aio_key k = { .tgid = bpf_get_current_pid_tgid() >> 32, .iocb = iocb };
	struct aio_req r = { .start_ns = start_ns, .phase = current_phase() };
	struct filter *f = get_filter();
	struct aio_iocb_head head;

	if (!f || bpf_probe_read_user(&head, sizeof(head), (void *)(iocb + 16)))
		return 0;
	r.dev = fd_dev(current_task(), head.fd);
	if (!r.dev || (f->dev && r.dev != f->dev))
		return r.dev;
	r.opcode = head.opcode;
	if (!bpf_map_update_elem(&aio_reqs, &k, &r, BPF_ANY))
		async_inc(ASYNC_AIO_FOLLOWED);
	return r.dev;
}

/* io_submit(ctx, nr, iocbpp): each iocb followed (aio_follow); the call's filesystem is its first
 * iocb's. Global too: sys_enter's paths do not multiply its loop. */
__noinline int aio_submitted(__u64 nr, __u64 iocbpp)
{
	__u64 iocb, now = bpf_ktime_get_ns();
	__u32 first = 0, dev;

	/* No branch on what aio_follow returned: one on a value the verifier does not know made it
	 * walk the rest of the loop again from each turn (164,000 instructions for 128 turns). */
	for (int i = 0; i < AIO_MAX_IOCBS; i++) {
		if (i >= nr)
			return first;
		if (bpf_probe_read_user(&iocb, sizeof(iocb), (void *)(iocbpp + i * sizeof(__u64))))
			return first;
		dev = (__u32)aio_follow(iocb, now);
		if (i == 0)
			first = dev;
	}
	if (nr > AIO_MAX_IOCBS)
		count_drop(DROP_AIO_IOCBS);
	return first;
}

/* A reaped event of the iocb at obj with result res: if followed, it ends at now. */
__noinline int aio_end(__u64 obj, __s64 res, __u64 now)
{
	struct aio_key k = { .tgid = bpf_get_current_pid_tgid() >> 32, .iocb = obj };
	struct aio_req *r = bpf_map_lookup_elem(&aio_reqs, &k);
	struct op_key key;
	struct hist *h;

	if (!r)
		return 0;
	key.dev = r->dev;
	key.nr = AIO_NR | r->opcode;
	key.phase = r->phase;
	h = hist_add(&uring_hist, &key, now > r->start_ns ? now - r->start_ns : 0, DROP_OPS_FULL);
	if (h && res > 0)
		__sync_fetch_and_add(&h->ret_sum, res);
	bpf_map_delete_elem(&aio_reqs, &k);
	async_inc(ASYNC_AIO_ENDED);
	return 0;
}

/* io_getevents returned n events in the user's array: each followed iocb ends now. */
static __always_inline void aio_reaped(__u64 events, long n, __u64 now)
{
	struct aio_event ev;

	for (int i = 0; i < AIO_MAX_IOCBS; i++) {
		if (i >= n)
			return;
		if (bpf_probe_read_user(&ev, sizeof(ev), (void *)(events + i * sizeof(ev))))
			return;
		aio_end(ev.obj, ev.res, now);
	}
	if (n > AIO_MAX_IOCBS)
		count_drop(DROP_AIO_IOCBS);
}

SEC("tp_btf/sys_exit")
int BPF_PROG(on_sys_exit, struct pt_regs *regs, long ret)
{
	struct inflight *op;
	struct op_key key;
	struct filter *f;
	__u64 delta;
	__u32 nr;
	__u8 *src;

	if (!regs)
		return 0;
	nr = regs->orig_ax;

	/* An array lookup first: most syscalls on the machine are not traced ones. */
	src = bpf_map_lookup_elem(&syscall_dev_source, &nr);
	if (!src || *src == DEV_SRC_NONE || *src == DEV_SRC_MARKER)
		return 0;
	op = inflight_of(current_task());
	if (!op)
		return 0;
	delta = bpf_ktime_get_ns() - op->start_ns;
	key = op->op;
	/* Only a call sys_enter armed (a path call it could not place) looks its placement up: an
	 * io_uring_enter or sync, also at dev 0, pays no hash lookup. */
	if (!key.dev && src_by_path(*src)) {
		__u32 tid = (__u32)bpf_get_current_pid_tgid();
		__u32 *placed = bpf_map_lookup_elem(&unplaced_calls, &tid);

		if (placed) {
			key.dev = *placed;
			bpf_map_delete_elem(&unplaced_calls, &tid);
		}
	}
	if ((*src == DEV_SRC_RET_FD || *src == DEV_SRC_RET_FD_AT) && ret >= 0)
		key.dev = fd_dev(current_task(), ret);
	if (op->aio_events && ret > 0)
		aio_reaped(op->aio_events, ret, op->start_ns + delta);

	f = get_filter();
	if (!f || !f->dev || key.dev == f->dev) {
		add_op(&key, delta, ret);
		if (op->uring_wait_ns && op->uring_wait_ns < op->start_ns + delta)
			hist_add(&uring_enter_wait, &key, op->start_ns + delta - op->uring_wait_ns, DROP_OPS_FULL);
		op->op = key; /* as placed at exit: the exemplar is kept under it */
		KEEP_EXEMPLAR(op, op->start_ns + delta, ret);
#pragma unroll
		for (int i = 0; i < OFF_SLOTS; i++) {
			if (op->deferred && op->slots[i].count)
				add_offcpu(&key, op->slots[i].stackid, op->slots[i].runnable, op->slots[i].tail,
				           &op->slots[i].waker, op->slots[i].count, op->slots[i].total_ns);
		}
	}
	op->start_ns = 0;
	op->out_ns = 0;
	return 0;
}

/* A blocked interval into the call's exemplar record: kept if among its EXEMPLAR_WAITS longest. */
static __always_inline void keep_exemplar_wait(struct inflight *op, __u32 woken, __u64 ns)
{
	struct exemplar_wait *w;
	__u32 slot = op->ex_waits;

	op->ex_blocked_ns += ns;
	op->ex_waits++;
	if (slot >= EXEMPLAR_WAITS) {
		slot = 0;
		for (int i = 1; i < EXEMPLAR_WAITS; i++) {
			if (op->ex_wait[i].ns < op->ex_wait[slot].ns)
				slot = i;
		}
		if (op->ex_wait[slot & (EXEMPLAR_WAITS - 1)].ns >= ns)
			return;
	}
	w = &op->ex_wait[slot & (EXEMPLAR_WAITS - 1)];
	w->start_ns = op->out_ns;
	w->ns = ns;
	w->stack = op->out_stack;
	w->waker_stack = woken ? op->waker.stack : -1;
	if (woken) {
		__builtin_memcpy(w->waker_comm, op->waker.comm, COMM_LEN);
		__builtin_memcpy(&w->work, &op->work, sizeof(w->work));
	} else {
		w->waker_comm[0] = 0;
		w->work.kind = 0;
	}
}

/* One part of an off-CPU interval. Its key is the syscall's (filesystem, syscall, phase); for an
 * open, whose filesystem is certain only at exit, it waits in the in-flight record until then.
 * A global function: the verifier checks it once, on its own, instead of at each of its three
 * calls in sched_switch, where the paths of its slot loop multiplied (29 ms of every start). */
static __always_inline int add_interval_in(struct inflight *op, __u32 runnable, __u32 woken, __u64 ns)
{
	/* The waker is the op's own record or no_waker, chosen here: a global function's pointer
	 * arguments must be writable memory, which no_waker (.rodata) is not. */
	const struct waker *waker;
	__u64 tail_from = tail_ns();
	__u16 tail;
	__s32 stack;
	int free = -1;

	tail = !runnable && tail_from && ns >= tail_from;
	if (runnable)
		op->ex_runq_ns += ns;
	else
		keep_exemplar_wait(op, woken, ns);
	if (!runnable && !tail && op->counts_walks) {
		/* A copy on the stack: older verifiers take a map key from there, not from op's memory. */
		struct op_key key = op->op;
		__u64 *n = lookup_or_init(&waits_walked, &key, &zero_count, DROP_OPS_FULL);

		if (n)
			__sync_fetch_and_add(n, 1);
	}
	/* A call whose stacks are not walked keeps no waker either (one record per kind of interval),
	 * except in its tail, whose waker on_waking took. */
	waker = woken && (!op->no_stacks || tail) ? &op->waker : &no_waker;
	/* Runnable time is CPU contention whatever the stack: an open keeps it in one slot. */
	stack = op->deferred && runnable ? -1 : op->out_stack;
	if (!op->deferred) {
		add_offcpu(&op->op, stack, runnable, tail, waker, 1, ns);
		return 0;
	}
#pragma unroll
	for (int i = 0; i < OFF_SLOTS; i++) {
		if (op->slots[i].count && op->slots[i].stackid == stack && op->slots[i].runnable == runnable &&
		    op->slots[i].tail == tail && op->slots[i].waker.stack == waker->stack) {
			op->slots[i].count++;
			op->slots[i].total_ns += ns;
			return 0;
		}
		if (!op->slots[i].count && free < 0)
			free = i;
	}
	if (free >= 0 && free < OFF_SLOTS) {
		op->slots[free].stackid = stack;
		op->slots[free].runnable = runnable;
		op->slots[free].tail = tail;
		op->slots[free].waker.stack = waker->stack;
		__builtin_memcpy(op->slots[free].waker.comm, waker->comm, COMM_LEN);
		op->slots[free].count = 1;
		op->slots[free].total_ns = ns;
		return 0;
	}
	count_drop(DROP_OFF_SLOTS);
	add_offcpu(&op->op, stack, runnable, tail, waker, 1, ns);
	return 0;
}

#ifndef FSPROF_LEGACY
__noinline int add_interval(struct inflight *op, __u32 runnable, __u32 woken, __u64 ns)
{
	return op ? add_interval_in(op, runnable, woken, ns) : 0;
}

#define ADD_INTERVAL(op, tid, runnable, woken, ns) ((void)(tid), add_interval(op, runnable, woken, ns))
#else
/* Scalar arguments only (5.10): the record is found again by its thread. */
__noinline int add_interval(__u32 tid, __u32 runnable, __u32 woken, __u64 ns)
{
	struct inflight *op = bpf_map_lookup_elem(&inflight, &tid);

	return op ? add_interval_in(op, runnable, woken, ns) : 0;
}

#define ADD_INTERVAL(op, tid, runnable, woken, ns) add_interval(tid, runnable, woken, ns)
#endif

/* Back on CPU. A blocked interval splits at its wakeup: until then the thread waited for what its
 * stack says, and the waker ended that wait; from then on it waited for a CPU (runnable: CPU
 * contention). This is also where the kernel's delay accounting ends an I/O wait
 * (try_to_wake_up), so the two agree. */
static __always_inline void off_interval_end(struct inflight *op, struct task_struct *task, __u64 now)
{
	bool woken = op->woken_ns && op->woken_ns >= op->out_ns && op->woken_ns <= now;
	__u64 blocked = (woken ? op->woken_ns : now) - op->out_ns, tail_from;
	__u32 tid = task->pid; /* ADD_INTERVAL's, where it finds the record by thread (5.10) */

	/* A passed-over call's blocked interval in the tail gets the stack it blocked at now that its
	 * length is known: the task's own, saved at its switch-out and about to be resumed. */
	if (op->no_stacks && !op->out_runnable && (tail_from = tail_ns()) && blocked >= tail_from)
		op->out_stack = task_stack_id(task);
	if (woken) {
		ADD_INTERVAL(op, tid, op->out_runnable, !op->out_runnable, blocked);
		op->out_stack = op->no_stacks ? STACK_NOT_WALKED : op->out_stack;
		if (now > op->woken_ns)
			ADD_INTERVAL(op, tid, 1, 0, now - op->woken_ns);
	} else {
		ADD_INTERVAL(op, tid, op->out_runnable, 0, blocked);
	}
	op->out_ns = 0;
	op->woken_ns = 0;
}

/* How long after its window ended a worker's wakeup is still that work's even if the worker slept
 * in between (a PREEMPT_RT spinlock sleeps); without a sleep it is (struct work_last). */
#define WORK_WAKE_NS 1000000ULL

/* The current task's worker window, as the task it wakes sees it: open, or closed just now. */
static __always_inline void waker_work(struct work_seen *out, __u64 now)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct worker_window *w = NULL;
	struct work_last *last;

	if (open_count(&workers_open) > 0)
		w = bpf_map_lookup_elem(&worker_windows, &tid);
	if (w) {
		out->start_ns = w->start_ns;
		out->end_ns = 0;
		out->blocked_ns = w->blocked_ns;
		out->id = w->id;
		out->kind = w->kind;
		__builtin_memcpy(out->requests, w->requests, sizeof(out->requests));
		out->rq_times = w->rq_times;
		return;
	}
	last = bpf_map_lookup_elem(&worker_last, &tid);
	if (last && last->seen.end_ns <= now &&
	    (now - last->seen.end_ns <= WORK_WAKE_NS || last->nvcsw == CUR(current_task(), nvcsw)))
		__builtin_memcpy(out, &last->seen, sizeof(*out));
	else
		out->kind = 0;
}

#define PF_IO_WORKER_FLAG 0x10 /* include/linux/sched.h, the same from 5.10 to 6.18 */
static __always_inline void uring_worker_woken(struct task_struct *p, void *ctx);

/* Runs in the waker's context: its stack and comm are the current task's. */
SEC("tp_btf/sched_waking")
int BPF_PROG(on_waking, struct task_struct *p)
{
	struct inflight *op;
	__u64 now;

	if (!p)
		return 0;
	op = inflight_of(p);
	if (!op && (p->flags & PF_IO_WORKER_FLAG))
		uring_worker_woken(p, ctx);
	if (!op || !op->out_ns || op->woken_ns)
		return 0;
	now = bpf_ktime_get_ns();
	/* A passed-over call's waker is taken too when the wait so far is already in the tail. */
	if (!op->out_runnable && (!op->no_stacks || in_tail(now - op->out_ns))) {
		op->waker.stack = get_stack(ctx);
		if (op->waker.stack < 0)
			count_drop(DROP_WAKER_STACK);
		bpf_get_current_comm(op->waker.comm, COMM_LEN);
		waker_work(&op->work, now);
	} else {
		/* Not taken: an exemplar's wait must not keep an earlier wait's waker. */
		op->waker.stack = -1;
		op->waker.comm[0] = 0;
		op->work.kind = 0;
	}
	/* Stamped after taking the stack: the wakee stays blocked until the waker gets past this
	 * probe, and the kernel's delay accounting (later in try_to_wake_up) counts it so too. */
	op->woken_ns = bpf_ktime_get_ns();
	return 0;
}

/* A filesystem worker inside its window (bpf/<fs>.bpf.c opens and closes it): switch-out stack
 * at prev, interval at next. Its time waits for nothing else, so no wakeup split. */
static __always_inline void worker_switch_out(__u32 tid, void *ctx, bool runnable, __u64 now)
{
	struct worker_window *w = bpf_map_lookup_elem(&worker_windows, &tid);

	if (!w)
		return;
	w->out_ns = now;
	w->out_runnable = runnable;
	if (w->no_stacks) {
		w->out_stack = STACK_NOT_WALKED;
		return;
	}
	w->out_stack = get_stack(ctx);
	if (w->out_stack < 0)
		count_drop(DROP_OFFCPU_STACK);
}

static __always_inline void worker_switch_in(__u32 tid, __u64 now)
{
	struct worker_window *w = bpf_map_lookup_elem(&worker_windows, &tid);
	struct worker_key key = {};
	struct off_val *v, zero = {};

	if (!w || !w->out_ns)
		return;
	key.dev = w->dev;
	key.kind = w->kind;
	key.phase = w->phase;
	key.stackid = w->out_stack;
	key.runnable = w->out_runnable;
	v = lookup_or_init(&worker_offcpu, &key, &zero, DROP_WORKER_FULL);
	if (v) {
		__sync_fetch_and_add(&v->count, 1);
		__sync_fetch_and_add(&v->total_ns, now - w->out_ns);
	}
	if (!w->out_runnable)
		w->blocked_ns += now - w->out_ns;
	w->offcpu_ns += now - w->out_ns;
	w->out_ns = 0;
	w->switches_seen++; /* counted once timed: a switch-out whose switch-in went unseen is not */
}

/* Whether stack sampling walks this call's stacks, decided once per call at its first switch-out,
 * not at entry: most calls never leave the CPU (untar's, nearly all), and the decision costs a
 * waits_walked lookup. */
static __always_inline void decide_stacks(struct inflight *op)
{
	struct stack_sampling *s = stack_sampling_on();
	struct op_key key;
	__u64 *n, walked;

	op->decided = 1;
	if (!s)
		return;
	key = op->op; /* a copy on the stack: older verifiers take a map key from there */
	n = bpf_map_lookup_elem(&waits_walked, &key);
	walked = n ? *n : 0; /* read once: other CPUs add to it */
	op->counts_walks = walked < s->first;
	op->no_stacks = sampled_out(s, walked);
}

/* io-wq workers' switches: the io_uring section below */
/* now: the switch's clock if on_switch read it already, else 0 */
static __always_inline void uring_worker_out(struct task_struct *prev, void *ctx, bool runnable, __u64 now);
static __always_inline void uring_worker_in(struct task_struct *next, __u64 now);

#ifndef FSPROF_LEGACY
SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
{
#else
/* task_struct's state before 5.14 renamed it __state */
struct task_struct___state {
	long state;
} __attribute__((preserve_access_index));

/* 5.10's sched_switch has no prev_state argument (5.18 added it): the field it is read from. */
SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	unsigned int prev_state = prev ? BPF_CORE_READ((struct task_struct___state *)prev, state) : 0;
#endif
	struct inflight *op;
	__u64 now = 0;

	if (!prev || !next)
		return 0;
	/* The clock is read only for a switch that concerns fsprof (most on the machine do not): it
	 * cost 80 of an untraced switch's 210 ns in a VM. prev is the current task here, so the stack
	 * taken is the one it is leaving at. */
	op = inflight_of(prev);
	if (op) {
		now = bpf_ktime_get_ns();
		op->out_ns = now;
		op->woken_ns = 0;
		op->waker.stack = -1;
		op->waker.comm[0] = 0;
		op->out_runnable = preempt || prev_state == 0 /* TASK_RUNNING */;
		if (!op->decided)
			decide_stacks(op);
		if (op->no_stacks) {
			op->out_stack = STACK_NOT_WALKED;
		} else {
			op->out_stack = get_stack(ctx);
			if (op->out_stack < 0)
				count_drop(DROP_OFFCPU_STACK);
		}
	}
	op = inflight_of(next);
	if (op && op->out_ns) {
		now = now ?: bpf_ktime_get_ns();
		off_interval_end(op, next, now);
	}
	if (open_count(&workers_open) > 0) {
		now = now ?: bpf_ktime_get_ns();
		worker_switch_out(prev->pid, ctx, preempt || prev_state == 0, now);
		worker_switch_in(next->pid, now);
	}
	if (open_count(&pauses_open) > 0) {
		now = now ?: bpf_ktime_get_ns();
		pause_switch(prev, prev_state, next, now);
	}
	/* io-wq workers (a flag test for every other task; the clock only for a followed request) */
	if (prev->flags & PF_IO_WORKER_FLAG)
		uring_worker_out(prev, ctx, preempt || prev_state == 0, now);
	if (next->flags & PF_IO_WORKER_FLAG)
		uring_worker_in(next, now);
	return 0;
}

static __always_inline struct rq_classes *uring_rqs_of(struct task_struct *task, __u64 req, struct rq_owner *owner,
                                                       struct uring_req **rp);

/* The call of thread tid that started at call_ns made a request of class cls (struct call_rqs). */
static __always_inline void count_call_request(__u32 tid, __u64 call_ns, __u16 cls)
{
	struct call_rqs *call = bpf_map_lookup_elem(&call_rqs, &tid), fresh = { .call_ns = call_ns };

	if (!call || call->call_ns != call_ns) {
		if (bpf_map_update_elem(&call_rqs, &tid, &fresh, BPF_ANY))
			return;
		call = bpf_map_lookup_elem(&call_rqs, &tid);
		if (!call)
			return;
	}
	if (cls < N_BLK_CLASSES)
		call->own.requests[cls]++;
}

/* A bio of the current thread becomes a new request (made = 1) or joins one (made = 0): the
 * request counts once, its bytes are its bios'. Under the io_uring request the thread is issuing
 * inside io_uring_enter or running as an io-wq worker, else under the traced syscall the thread is
 * in, else under the filesystem worker window it is in. An open counts under the filesystem known
 * at its entry. */
static __always_inline void add_request(struct bio *bio, __u64 made)
{
	struct task_struct *task = current_task();
	struct inflight *op;
	struct rq_classes *rqs = NULL;
	struct worker_window *w = NULL;
	struct worker_run *run;
	struct uring_req *ureq = NULL;
	struct rq_owner owner = {};
	__u64 bio_ptr = (__u64)bio;
	__u32 tid, bytes;
	__u16 cls;

	if (!bio)
		return;
	/* Most requests on the machine are neither: find where it counts before reading the bio. */
	op = inflight_of(task);
	owner.kind = OWNER_URING;
	if (op && op->uring_req)
		rqs = uring_rqs_of(task, op->uring_req, &owner, &ureq);
	else if (!op && (CUR(task, flags) & PF_IO_WORKER_FLAG))
		rqs = uring_rqs_of(task, 0, &owner, &ureq);
	if (!rqs && op) {
		owner.kind = OWNER_OP;
		owner.key = op->op;
		owner.tid = (__u32)bpf_get_current_pid_tgid();
		owner.window_ns = op->start_ns;
		rqs = lookup_or_init(&op_rqs, &op->op, &zero_rqs, DROP_OPS_FULL);
	} else if (!rqs && open_count(&workers_open) > 0) {
		tid = (__u32)bpf_get_current_pid_tgid();
		w = bpf_map_lookup_elem(&worker_windows, &tid);
		if (w && (run = worker_run_of(w))) {
			rqs = &run->rqs;
			owner.kind = OWNER_WORKER;
			owner.key.dev = w->dev; /* a worker_run_key: dev, kind, phase */
			owner.key.nr = w->kind;
			owner.key.phase = w->phase;
			owner.tid = tid;
			owner.window_ns = w->start_ns;
		}
	}
	if (!rqs)
		return;
	bytes = bio->bi_iter.bi_size;
	cls = blk_classify(bio->bi_opf, bytes);
	if (cls >= N_BLK_CLASSES)
		return;
	if (made) {
		__sync_fetch_and_add(&rqs->count[cls], 1);
		if (owner.kind == OWNER_OP)
			count_call_request(owner.tid, owner.window_ns, cls);
		else if (ureq) /* the request's own, for its exemplar */
			ureq->own.requests[cls]++;
		/* Timed by block.bpf.c from the request's issue, where this bio is its first. */
		struct gendisk *disk = bio_disk(bio);

		owner.dev = disk ? disk_devt(disk) : 0;
		owner.cls = cls;
		bpf_map_update_elem(&rq_owners, &bio_ptr, &owner, BPF_ANY);
	}
	__sync_fetch_and_add(&rqs->bytes[cls], bytes);
	if (w && made) /* the window's own, for the waiters it wakes (struct work_seen) */
		w->requests[cls]++;
}

/* The same requests as block_io_start (which 6.1 lacks), in the submitter's context. Before 5.11
 * these tracepoints took the request queue (and the merge ones the request) before the bio. */
#ifndef FSPROF_LEGACY
SEC("tp_btf/block_getrq")
int BPF_PROG(on_getrq, struct bio *bio)
{
	add_request(bio, 1);
	return 0;
}

SEC("tp_btf/block_bio_backmerge")
int BPF_PROG(on_bio_backmerge, struct bio *bio)
{
	add_request(bio, 0);
	return 0;
}

SEC("tp_btf/block_bio_frontmerge")
int BPF_PROG(on_bio_frontmerge, struct bio *bio)
{
	add_request(bio, 0);
	return 0;
}
#else
SEC("tp_btf/block_getrq")
int BPF_PROG(on_getrq, struct request_queue *q, struct bio *bio)
{
	add_request(bio, 1);
	return 0;
}

SEC("tp_btf/block_bio_backmerge")
int BPF_PROG(on_bio_backmerge, struct request_queue *q, struct request *rq, struct bio *bio)
{
	add_request(bio, 0);
	return 0;
}

SEC("tp_btf/block_bio_frontmerge")
int BPF_PROG(on_bio_frontmerge, struct request_queue *q, struct request *rq, struct bio *bio)
{
	add_request(bio, 0);
	return 0;
}
#endif

/* On-CPU samples (perf_event cpu-clock on every CPU) of traced threads inside a traced syscall. */
SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx)
{
	struct inflight *op = inflight_of(current_task());
	struct sample_key key = {};
	__u64 *n, zero = 0;

	if (!op)
		return 0;
	key.op = op->op;
	key.stackid = get_stack(ctx);
	if (key.stackid < 0)
		count_drop(DROP_SAMPLE_STACK);
	n = lookup_or_init(&samples, &key, &zero, DROP_SAMPLES_FULL);
	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 child_tid = BPF_CORE_READ(child, pid);
	struct filter *f = get_filter();

	if (f && f->mode == FILTER_PID && is_traced(f))
		bpf_map_update_elem(&traced_tgids, &child_tid, &one, BPF_ANY);
	return 0;
}

/* The exiting task is current. Its thread group is dead once signal->live is 0 (do_exit counts it
 * down before this tracepoint; 6.18 passes the same test as group_dead, 6.1 and 6.12 do not). */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id, tgid = id >> 32;
	struct inflight *op = inflight_of(current_task());

	if (op) /* exit inside a syscall (exit_group): no sys_exit, and its last switch is no wait */
		op->start_ns = 0;
	inflight_forget(tid);
	worker_forget(tid);
	/* Threads were added by tid when they were created; the process leaves with its last thread
	 * (whichever that is). */
	if (tid != tgid)
		bpf_map_delete_elem(&traced_tgids, &tid);
	if (BPF_CORE_READ(p, signal, live.counter) == 0)
		bpf_map_delete_elem(&traced_tgids, &tgid);
	return 0;
}

/* ---- io_uring: each request (SQE) of a traced thread on a filesystem, from its submission to its
 * completion being posted (docs/io_uring.md). The submitting thread is current at submission: the
 * one in io_uring_enter, or the ring's SQ thread (same process). The request pointer keys it until
 * its CQE: the kernel recycles it only after. ---- */

/* How a request's filesystem is found: by the fd of its SQE (dev set at submission), by its
 * registered file (read at completion, when req->file is set), or by the fd an open returns. */
enum uring_place {
	URING_BY_FD = 0,
	URING_BY_FIXED = 1,
	URING_BY_RESULT = 2,
};

/* A submitted request until its completion: struct uring_req in uring_reqs (bpf/shared_maps.h:
 * block.bpf.c times the block requests it made). */

/* ---- io-wq workers: a request punted to io-wq (an FSYNC always, ext4's buffered writes, any
 * that would block) runs blocking in an iou-wrk thread of the process (PF_IO_WORKER), with no
 * tracepoint where it starts. At the worker's switch-out its current work item names the
 * request (task->worker_private's io_worker->cur_work, inside the io_kiocb): the interval is that
 * request's, by stack, classified like a syscall's. */
struct uring_off_key {
	struct op_key op;
	__s32 stackid;
	__u32 runnable;
};

/* An io-wq worker switched out while working on a traced request, until it is back; who woke it,
 * for the request's exemplar (its longest wait). */
struct uring_out {
	__u64 out_ns;
	__u64 req; /* the request's uring_reqs key */
	__u64 woken_ns;
	struct uring_off_key key;
	__s32 waker_stack;
	__u32 pad;
	char waker_comm[COMM_LEN];
	struct work_seen work;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct uring_out);
} uring_workers_out SEC(".maps");

/* Off-CPU time of io-wq workers inside traced requests, per (filesystem, opcode, phase, stack,
 * runnable). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct uring_off_key);
	__type(value, struct off_val);
} uring_offcpu SEC(".maps");

/* REQ_F_FIXED_FILE (bit 0 of req->flags, IOSQE_FIXED_FILE_BIT): cqe.fd indexes the registered
 * files, not the fd table. */
#define URING_FIXED_FILE 1

/* The opcodes on an open file (io_issue_defs' needs_file, include/uapi/linux/io_uring.h):
 * READV, WRITEV, FSYNC, READ_FIXED, WRITE_FIXED, SYNC_FILE_RANGE, FALLOCATE, READ, WRITE, FADVISE,
 * READ_MULTISHOT, FTRUNCATE, READV_FIXED, WRITEV_FIXED. Only for these is cqe.fd the SQE's fd; the
 * by-path ones (OPENAT, STATX, UNLINKAT, ...) are placed by their dirfd (uring_path_dev). */
static __always_inline bool uring_on_file(__u8 opcode)
{
	switch (opcode) {
	case 1 ... 5:
	case 8:
	case 17:
	case 22 ... 24:
	case 49:
	case 55:
	case 60 ... 61:
		return true;
	}
	return false;
}

/* The opcodes that name a path (dirfd + path), by number: OPENAT 18, STATX 21, OPENAT2 28,
 * RENAMEAT 35, UNLINKAT 36, MKDIRAT 37, SYMLINKAT 38, LINKAT 39. The request's prep (io_init_req,
 * before the submission tracepoint) has copied the path in (struct filename) and kept the dirfd,
 * at the start of the request (its io_cmd_data, in a union with req->file): struct io_open,
 * io_statx, io_rename, io_unlink, io_mkdir, io_link (SYMLINKAT and LINKAT; not in 5.10's
 * backport, which stops at UNLINKAT). */
#define URING_OPENAT 18
#define URING_STATX 21
#define URING_OPENAT2 28
#define URING_RENAMEAT 35
#define URING_UNLINKAT 36
#define URING_MKDIRAT 37
#define URING_SYMLINKAT 38
#define URING_LINKAT 39

static __always_inline bool uring_by_path(__u8 opcode)
{
	return opcode == URING_OPENAT || opcode == URING_STATX || opcode == URING_OPENAT2 ||
	       (opcode >= URING_RENAMEAT && opcode <= URING_LINKAT);
}

/* The filesystem of a by-path request's relative path (0: an absolute path, or none). */
static __always_inline __u32 uring_path_dev(struct task_struct *task, struct io_kiocb *req, __u8 opcode)
{
	void *cmd = req; /* struct io_cmd_data, first in struct io_kiocb */

	switch (opcode) {
	case URING_OPENAT:
	case URING_OPENAT2:
		return kernel_path_dev(task, BPF_CORE_READ((struct io_open *)cmd, dfd),
		                       BPF_CORE_READ((struct io_open *)cmd, filename));
	case URING_STATX:
		return kernel_path_dev(task, BPF_CORE_READ((struct io_statx *)cmd, dfd),
		                       BPF_CORE_READ((struct io_statx *)cmd, filename));
	case URING_UNLINKAT:
		return kernel_path_dev(task, BPF_CORE_READ((struct io_unlink *)cmd, dfd),
		                       BPF_CORE_READ((struct io_unlink *)cmd, filename));
	case URING_MKDIRAT:
		return kernel_path_dev(task, BPF_CORE_READ((struct io_mkdir *)cmd, dfd),
		                       BPF_CORE_READ((struct io_mkdir *)cmd, filename));
	case URING_RENAMEAT: {
		/* Both paths lie on one mount (else EXDEV): the new one's, else the old one's. */
		struct io_rename *r = cmd;
		__u32 dev = kernel_path_dev(task, BPF_CORE_READ(r, new_dfd), BPF_CORE_READ(r, newpath));

		return dev ?: kernel_path_dev(task, BPF_CORE_READ(r, old_dfd), BPF_CORE_READ(r, oldpath));
	}
	case URING_SYMLINKAT:
	case URING_LINKAT: {
		struct io_link *l = cmd;
		__u32 dev;

		if (!bpf_core_type_exists(struct io_link))
			return 0;
		dev = kernel_path_dev(task, BPF_CORE_READ(l, new_dfd), BPF_CORE_READ(l, newpath));
		/* A symlink's old path is its target: any string, not a path to place. */
		if (dev || opcode == URING_SYMLINKAT)
			return dev;
		return kernel_path_dev(task, BPF_CORE_READ(l, old_dfd), BPF_CORE_READ(l, oldpath));
	}
	}
	return 0;
}

/* io_uring_submit_req (6.4 on) and io_uring_submit_sqe (before) fire in io_submit_sqe() right
 * after io_init_req(): the opcode and the SQE's fd are set, req->file not yet (6.1 to 6.18); on
 * 5.10 (5.15's io_uring, backported to 5.10.162) io_init_req has set req->file. `key` names the
 * request until its completion: its pointer, or on 5.10 its ring and user_data (uring_key). */
static __always_inline void uring_submit(struct io_kiocb *req, __u64 key)
{
	struct task_struct *task = current_task();
	struct inflight *op;
	struct filter *f;
	struct uring_req r = {};
	__u8 opcode;

	/* The opcode first: a plain load, where the tracing filter costs a hash lookup. */
	if (!req)
		return;
	opcode = CUR(req, opcode); /* 5.10 gives req as a plain pointer */
	if ((!uring_on_file(opcode) && !uring_by_path(opcode)) || !(f = get_filter()) || !is_traced(f))
		return;
	r.opcode = opcode;
	if (uring_by_path(opcode)) {
		r.dev = uring_path_dev(task, req, opcode);
		/* An open is placed by the fd it returns (an absolute path too), else by its path. */
		if (opcode == URING_OPENAT || opcode == URING_OPENAT2)
			r.place = URING_BY_RESULT;
		else if (!r.dev) /* an absolute path: no path walk here, so not placed */
			return;
	} else {
#ifdef FSPROF_LEGACY
		r.dev = file_dev(BPF_CORE_READ(req, file)); /* by fd or registered slot alike */
#else
		if (req->flags & URING_FIXED_FILE)
			r.place = URING_BY_FIXED;
		else
			r.dev = fd_dev(task, req->cqe.fd);
#endif
		if (!r.dev && r.place != URING_BY_FIXED) /* not a file on a filesystem (a socket, a pipe) or no file */
			return;
	}
	if (f->dev && r.dev && r.dev != f->dev && r.place != URING_BY_RESULT)
		return;
	r.phase = current_phase();
	r.tid = (__u32)bpf_get_current_pid_tgid();
	r.start_ns = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&uring_reqs, &key, &r, BPF_ANY))
		return;
	async_inc(ASYNC_URING_FOLLOWED);
	/* io_submit_sqe issues it next, in this thread: its bios are its own until the next request
	 * (or until the call waits for completions). */
	op = inflight_of(task);
	if (op)
		op->uring_req = key;
}

SEC("tp_btf/io_uring_submit_req")
int BPF_PROG(on_uring_submit_req, struct io_kiocb *req)
{
	uring_submit(req, (__u64)req);
	return 0;
}

#ifdef FSPROF_LEGACY
/* 5.10's completion tracepoint has no request, only its ring and user_data: those two name it
 * from submission to completion. Requests in flight at once with the same user_data on one ring
 * are one (the last submitted) to fsprof; fio and liburing's users give each its own. */
static __always_inline __u64 uring_key(void *ring, __u64 user_data)
{
	return ((__u64)ring * 0x9E3779B97F4A7C15ULL) ^ user_data;
}

SEC("tp_btf/io_uring_submit_sqe")
int BPF_PROG(on_uring_submit_sqe, void *ring, struct io_kiocb *req, u8 opcode, u64 user_data)
{
	uring_submit(req, uring_key(ring, user_data));
	return 0;
}
#else
SEC("tp_btf/io_uring_submit_sqe")
int BPF_PROG(on_uring_submit_sqe, struct io_kiocb *req)
{
	uring_submit(req, (__u64)req);
	return 0;
}
#endif

/* A request's filesystem once it is being run or done: an open's is its new fd's (in the fd table
 * the process shares with its io-wq workers; none when it installed a registered file slot, res
 * 0), else its path's; a registered file's is req->file's. */
static __always_inline __u32 uring_req_dev(struct io_kiocb *req, struct uring_req *r, int res)
{
	__u32 dev = 0;

	if (r->place == URING_BY_RESULT && res > 0)
		dev = fd_dev(current_task(), res);
	else if (r->place == URING_BY_FIXED && req)
		dev = file_dev(BPF_CORE_READ(req, file));
	return dev ?: r->dev;
}

/* A request among its (filesystem, opcode, phase)'s slowest, kept as an exemplar under
 * URING_EXEMPLAR_NR | opcode: who submitted it, its io-wq worker's blocked intervals (the longest
 * whole) and runnable time, and its own block requests. The rest of its time is not CPU: queued
 * for a worker, on the device, or waiting to be posted. */
static __always_inline int keep_uring_exemplar_in(struct op_key *key, __u64 req, __u64 now, int res)
{
	struct uring_req *r = bpf_map_lookup_elem(&uring_reqs, &req);
	struct exemplar_set *set = NULL;
	struct exemplar *e;
	struct op_key k;

	if (!r)
		return 0;
	k = *key;
	k.nr = URING_EXEMPLAR_NR | r->opcode;
	e = exemplar_slot(&set, &k, now - r->start_ns);
	if (!e || !set)
		return 0;
	e->start_ns = r->start_ns;
	e->end_ns = now;
	e->runq_ns = r->runq_ns;
	e->blocked_ns = r->blocked_ns;
	e->ret = res;
	e->tid = r->tid;
	e->waits = r->waits;
	__builtin_memset(e->wait, 0, sizeof(e->wait)); /* only the longest is kept: the others read 0 ns */
	if (r->waits)
		e->wait[0] = r->wait;
	e->own = r->own;
	keep_device_rqs(e);
	exemplar_filled(set, &k);
	return 0;
}

#ifndef FSPROF_LEGACY
__noinline int keep_uring_exemplar(struct op_key *key, __u64 req, __u64 now, int res)
{
	return key ? keep_uring_exemplar_in(key, req, now, res) : 0;
}

#define KEEP_URING_EXEMPLAR(k, req, now, res) keep_uring_exemplar(k, req, now, res)
#else
/* Scalar arguments only (5.10): the key is rebuilt from them. */
__noinline int keep_uring_exemplar(__u32 dev, __u32 nr_phase, __u64 req, __u64 now, int res)
{
	struct op_key k = { .dev = dev, .nr = nr_phase & 0xffff, .phase = nr_phase >> 16 };

	return keep_uring_exemplar_in(&k, req, now, res);
}

#define KEEP_URING_EXEMPLAR(k, req, now, res) \
	keep_uring_exemplar((k)->dev, (k)->nr | ((__u32)(k)->phase << 16), req, now, res)
#endif

/* A followed request's completion: its submission-to-completion time and bytes. req is NULL on
 * 5.10 (whose requests are never placed by a registered file at completion). */
static __always_inline void uring_completed(struct io_kiocb *req, __u64 key, int res)
{
	struct uring_req *r = bpf_map_lookup_elem(&uring_reqs, &key);
	struct op_key k = {};
	struct filter *f;
	struct hist *h;
	__u64 now;

	if (!r)
		return;
	now = bpf_ktime_get_ns();
	k.dev = uring_req_dev(req, r, res);
	k.nr = r->opcode;
	k.phase = r->phase;
	f = get_filter();
	if (k.dev && (!f || !f->dev || k.dev == f->dev) && now > r->start_ns) {
		h = hist_add(&uring_hist, &k, now - r->start_ns, DROP_OPS_FULL);
		if (h && res > 0)
			__sync_fetch_and_add(&h->ret_sum, res);
		KEEP_URING_EXEMPLAR(&k, key, now, res);
	}
	bpf_map_delete_elem(&uring_reqs, &key);
	async_inc(ASYNC_URING_ENDED);
}

#ifdef FSPROF_LEGACY
SEC("tp_btf/io_uring_complete")
int BPF_PROG(on_uring_complete, void *ring, u64 user_data, int res)
{
	uring_completed(NULL, uring_key(ring, user_data), res);
	return 0;
}
#else
/* Fired when the request's CQE is filled, in the context that posts it (the submitter's task work,
 * an io-wq worker, or inline). req is a plain pointer here (NULL: an auxiliary CQE); its second
 * place in the prototype of 6.1 to 6.18 alike. Its result is req->cqe.res in all of them. */
SEC("tp_btf/io_uring_complete")
int BPF_PROG(on_uring_complete, void *ring, void *req_ptr)
{
	struct io_kiocb *req = req_ptr;

	if (req_ptr)
		uring_completed(req, (__u64)req_ptr, BPF_CORE_READ(req, cqe.res));
	return 0;
}
#endif

/* A traced io_uring_enter starts waiting for completions: io_cqring_wait, after running the
 * completions already due, found fewer CQEs than asked for (5.10 to 6.18: same place, same
 * arguments, none needed here). Only io_uring_enter calls io_cqring_wait. */
SEC("tp_btf/io_uring_cqring_wait")
int BPF_PROG(on_uring_cqring_wait, void *ring, int min_events)
{
	struct inflight *op = inflight_of(current_task());

	if (op && !op->uring_wait_ns)
		op->uring_wait_ns = bpf_ktime_get_ns();
	if (op)
		op->uring_req = 0;
	return 0;
}

/* The request an io-wq worker is working on (0: none, or not one fsprof follows): its uring_reqs
 * entry, and its key. */
static __always_inline struct uring_req *uring_work_of(struct task_struct *task, __u64 *req)
{
	struct io_worker *worker;
	struct io_wq_work *work;

	/* On 5.10 requests are keyed by ring and user_data, which a worker's work item does not give. */
	if (FSPROF_IS_LEGACY || !bpf_core_field_exists(task->worker_private))
		return NULL;
	worker = (struct io_worker *)BPF_CORE_READ(task, worker_private);
	work = worker ? BPF_CORE_READ(worker, cur_work) : NULL;
	if (!work)
		return NULL;
	*req = (__u64)work - bpf_core_field_offset(struct io_kiocb, work);
	return bpf_map_lookup_elem(&uring_reqs, req);
}

/* The block requests' counters of the io_uring request req (0: the one the io-wq worker task is
 * running), or NULL if it is not one fsprof follows or lies outside the filesystem filter. The
 * owner gets its (filesystem, opcode, phase) and its key (window_ns), *rp its record. */
static __always_inline struct rq_classes *uring_rqs_of(struct task_struct *task, __u64 req, struct rq_owner *owner,
                                                       struct uring_req **rp)
{
	struct uring_req *r = req ? bpf_map_lookup_elem(&uring_reqs, &req) : uring_work_of(task, &req);
	struct op_key *k = &owner->key;
	struct filter *f;

	if (!r)
		return NULL;
	/* A registered file's device: the request has its file once it is being issued (never on 5.10,
	 * whose keys are no pointers and whose requests have their file's device from submission). */
	k->dev = r->dev || FSPROF_IS_LEGACY ? r->dev : file_dev(BPF_CORE_READ((struct io_kiocb *)req, file));
	f = get_filter();
	if (!k->dev || (f && f->dev && k->dev != f->dev))
		return NULL;
	k->nr = r->opcode;
	k->phase = r->phase;
	owner->window_ns = req;
	*rp = r;
	return lookup_or_init(&uring_rqs, k, &zero_rqs, DROP_OPS_FULL);
}

static __always_inline void uring_worker_out(struct task_struct *prev, void *ctx, bool runnable, __u64 now)
{
	struct uring_out o = {};
	struct uring_req *r;
	__u32 tid = prev->pid;
	__u64 req = 0;

	r = uring_work_of(prev, &req);
	if (!r)
		return;
	/* A registered file's device is known once the worker has the file (io_assign_file). */
	o.key.op.dev = r->dev ? r->dev : file_dev(BPF_CORE_READ((struct io_kiocb *)req, file));
	if (!o.key.op.dev)
		return;
	o.key.op.nr = r->opcode;
	o.key.op.phase = r->phase;
	o.key.runnable = runnable;
	o.key.stackid = get_stack(ctx);
	if (o.key.stackid < 0)
		count_drop(DROP_OFFCPU_STACK);
	o.req = req;
	o.waker_stack = -1;
	o.out_ns = now ?: bpf_ktime_get_ns();
	if (bpf_map_update_elem(&uring_workers_out, &tid, &o, BPF_ANY))
		count_drop(DROP_OFFCPU_FULL);
}

/* An io-wq worker blocked in a followed request is woken (in the waker's context): who woke it. */
static __always_inline void uring_worker_woken(struct task_struct *p, void *ctx)
{
	__u32 tid = p->pid;
	struct uring_out *o = bpf_map_lookup_elem(&uring_workers_out, &tid);
	__u64 now;

	if (!o || o->key.runnable || o->woken_ns)
		return;
	now = bpf_ktime_get_ns();
	o->waker_stack = get_stack(ctx);
	if (o->waker_stack < 0)
		count_drop(DROP_WAKER_STACK);
	bpf_get_current_comm(o->waker_comm, COMM_LEN);
	waker_work(&o->work, now);
	o->woken_ns = bpf_ktime_get_ns();
}

/* The worker's interval into its request's record: blocked until its wakeup (all of it when none
 * was seen), runnable after; the longest blocked one kept whole (one worker runs a request at a
 * time: no other writer). */
static __always_inline void uring_req_interval(struct uring_req *r, struct uring_out *o, __u64 now)
{
	__u64 woken = o->woken_ns && o->woken_ns <= now ? o->woken_ns : now, ns = woken - o->out_ns;

	if (o->key.runnable) {
		r->runq_ns += now - o->out_ns;
		return;
	}
	r->runq_ns += now - woken;
	r->blocked_ns += ns;
	r->waits++;
	if (ns <= r->wait.ns)
		return;
	r->wait.start_ns = o->out_ns;
	r->wait.ns = ns;
	r->wait.stack = o->key.stackid;
	r->wait.waker_stack = o->woken_ns ? o->waker_stack : -1;
	__builtin_memcpy(r->wait.waker_comm, o->waker_comm, COMM_LEN);
	if (o->woken_ns)
		r->wait.work = o->work;
	else
		r->wait.work.kind = 0;
}

static __always_inline void uring_worker_in(struct task_struct *next, __u64 now)
{
	__u32 tid = next->pid;
	struct uring_out *o = bpf_map_lookup_elem(&uring_workers_out, &tid);
	struct off_val *v, zero = {};
	struct uring_req *r;

	if (!o)
		return;
	now = now ?: bpf_ktime_get_ns();
	v = lookup_or_init(&uring_offcpu, &o->key, &zero, DROP_OFFCPU_FULL);
	if (v) {
		__sync_fetch_and_add(&v->count, 1);
		__sync_fetch_and_add(&v->total_ns, now - o->out_ns);
	}
	r = bpf_map_lookup_elem(&uring_reqs, &o->req);
	if (r && now >= o->out_ns)
		uring_req_interval(r, o, now);
	bpf_map_delete_elem(&uring_workers_out, &tid);
}
