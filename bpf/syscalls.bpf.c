// SPDX-License-Identifier: GPL-2.0
/* Syscall-level latency of the traced processes, per (filesystem, syscall), aggregated in the
 * kernel. raw_syscalls brackets every syscall; the pid filter and the syscall table drop all
 * others before any work is done. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "fsprof.h"

#define AT_FDCWD -100

char LICENSE[] SEC("license") = "GPL";

/* Processes to trace (tgid). Userspace seeds the workload; forks of traced processes join. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} traced_tgids SEC(".maps");

/* syscall number -> enum dev_source; DEV_SRC_NONE means not traced. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SYSCALL_NR);
	__type(key, __u32);
	__type(value, __u8);
} syscall_dev_source SEC(".maps");

struct inflight {
	__u64 start_ns;
	__u32 nr;
	__u32 dev;
};

/* The syscall each traced thread is in, by tid. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct inflight);
} inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct op_key);
	__type(value, struct hist);
} op_hist SEC(".maps");

const struct hist zero_hist = {};
const __u8 one = 1;

static __always_inline __u32 file_dev(struct file *file)
{
	return file ? BPF_CORE_READ(file, f_inode, i_sb, s_dev) : 0;
}

static __always_inline __u32 fd_dev(struct task_struct *task, long fd)
{
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	struct file **fds, *file = NULL;

	if (!fdt || fd < 0 || fd >= BPF_CORE_READ(fdt, max_fds))
		return 0;
	fds = BPF_CORE_READ(fdt, fd);
	bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]);
	return file_dev(file);
}

static __always_inline __u32 cwd_dev(struct task_struct *task)
{
	return BPF_CORE_READ(task, fs, pwd.dentry, d_sb, s_dev);
}

/* A relative path resolves against dirfd (or the cwd); an absolute one we cannot place without a
 * path walk, so it stays unresolved (dev 0) rather than being guessed. */
static __always_inline __u32 path_dev(struct task_struct *task, int dirfd, const char *path)
{
	char c = 0;

	bpf_probe_read_user(&c, 1, path);
	if (c == '/')
		return 0;
	return dirfd == AT_FDCWD ? cwd_dev(task) : fd_dev(task, dirfd);
}

static __always_inline bool is_traced(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	return bpf_map_lookup_elem(&traced_tgids, &tgid) != NULL;
}

SEC("tracepoint/raw_syscalls/sys_enter")
int on_sys_enter(struct trace_event_raw_sys_enter *ctx)
{
	__u32 nr = ctx->id, tid = (__u32)bpf_get_current_pid_tgid();
	struct task_struct *task;
	struct inflight op = {};
	__u8 *src;

	src = bpf_map_lookup_elem(&syscall_dev_source, &nr);
	if (!src || *src == DEV_SRC_NONE || !is_traced())
		return 0;

	task = (struct task_struct *)bpf_get_current_task();
	switch (*src) {
	case DEV_SRC_FD:
		op.dev = fd_dev(task, ctx->args[0]);
		break;
	case DEV_SRC_DIRFD:
		/* dirfd is an int: only the low 32 bits of the register are meaningful. */
		op.dev = path_dev(task, (int)ctx->args[0], (const char *)ctx->args[1]);
		break;
	case DEV_SRC_CWD:
		op.dev = path_dev(task, AT_FDCWD, (const char *)ctx->args[0]);
		break;
	}
	op.nr = nr;
	op.start_ns = bpf_ktime_get_ns();
	bpf_map_update_elem(&inflight, &tid, &op, BPF_ANY);
	return 0;
}

SEC("tracepoint/raw_syscalls/sys_exit")
int on_sys_exit(struct trace_event_raw_sys_exit *ctx)
{
	__u32 nr = ctx->id, tid = (__u32)bpf_get_current_pid_tgid();
	struct inflight *op;
	struct op_key key = {};
	struct hist *h;
	__u64 delta;
	__u8 *src;

	/* An array lookup first: most syscalls on the machine are not traced ones. */
	src = bpf_map_lookup_elem(&syscall_dev_source, &nr);
	if (!src || *src == DEV_SRC_NONE)
		return 0;
	op = bpf_map_lookup_elem(&inflight, &tid);
	if (!op)
		return 0;
	delta = bpf_ktime_get_ns() - op->start_ns;
	key.nr = op->nr;
	key.dev = op->dev;
	bpf_map_delete_elem(&inflight, &tid);

	if (*src == DEV_SRC_RET_FD && ctx->ret >= 0)
		key.dev = fd_dev((struct task_struct *)bpf_get_current_task(), ctx->ret);

	h = bpf_map_lookup_elem(&op_hist, &key);
	if (!h) {
		bpf_map_update_elem(&op_hist, &key, &zero_hist, BPF_NOEXIST);
		h = bpf_map_lookup_elem(&op_hist, &key);
		if (!h)
			return 0;
	}
	/* Per-CPU value: no atomics needed. */
	h->count++;
	h->total_ns += delta;
	if (delta > h->max_ns)
		h->max_ns = delta;
	h->slots[log2_slot(delta)]++;
	return 0;
}

SEC("tracepoint/sched/sched_process_fork")
int on_fork(struct trace_event_raw_sched_process_fork *ctx)
{
	__u32 child = ctx->child_pid;

	if (is_traced())
		bpf_map_update_elem(&traced_tgids, &child, &one, BPF_ANY);
	return 0;
}

SEC("tracepoint/sched/sched_process_exit")
int on_exit(struct trace_event_raw_sched_process_exit *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id, tgid = id >> 32;

	bpf_map_delete_elem(&inflight, &tid);
	/* Threads were added by tid when they were created; the process leaves with its last thread
	 * (whichever that is), or with its leader on kernels without group_dead. */
	if (tid != tgid)
		bpf_map_delete_elem(&traced_tgids, &tid);
	if (bpf_core_field_exists(ctx->group_dead) ? ctx->group_dead : tid == tgid)
		bpf_map_delete_elem(&traced_tgids, &tgid);
	return 0;
}
