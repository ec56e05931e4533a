// SPDX-License-Identifier: GPL-2.0
/* One small program per attach type. `fsprof doctor` loads and attaches them to learn what this
 * kernel really allows (by trying, not by reading its config); the loader's tests use them too. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "fsprof.h"

char LICENSE[] SEC("license") = "GPL";

enum {
	HIT_TP,
	HIT_RAW_TP,
	HIT_TP_BTF,
	HIT_PERF,
	HIT_KPROBE,
	HIT_FENTRY,
	HIT_MAX
};

/* How often each program ran. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, HIT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} hits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 1024);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, 127 * sizeof(__u64));
} stacks SEC(".maps");

/* Kernel stack ids seen by the sampler, with how often. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} sampled_stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} events SEC(".maps");

/* The process whose syscalls are sent through the ring buffer. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} ring_tgid SEC(".maps");

struct sys_event {
	__u32 tgid;
	__u32 nr;
};

static __always_inline void hit(__u32 which)
{
	__u64 *n = bpf_map_lookup_elem(&hits, &which);

	if (n)
		(*n)++;
}

/* Classic on purpose: it is what `fsprof doctor` tries to learn that classic tracepoints attach. */
SEC("tracepoint/sched/sched_switch")
int tp_switch(void *ctx)
{
	hit(HIT_TP);
	return 0;
}

SEC("raw_tp/sched_switch")
int raw_tp_switch(void *ctx)
{
	hit(HIT_RAW_TP);
	return 0;
}

SEC("tp_btf/sched_switch")
int tp_btf_switch(void *ctx)
{
	hit(HIT_TP_BTF);
	return 0;
}

/* Does nothing: what one program run costs before it does anything (the kernel's call into BPF,
 * and under kernel.bpf_stats_enabled its two clock reads). bench/bench_overhead.py multiplies it
 * by a tracer's program runs per request: the floor of that tracer's cost. */
SEC("tp_btf/sched_switch")
int tp_btf_empty(void *ctx)
{
	return 0;
}

SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx)
{
	__s64 id = bpf_get_stackid(ctx, &stacks, 0);
	__u32 key = id;
	__u64 one = 1, *n;

	hit(HIT_PERF);
	if (id < 0)
		return 0;
	n = bpf_map_lookup_elem(&sampled_stacks, &key);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&sampled_stacks, &key, &one, BPF_NOEXIST);
	return 0;
}

/* The classic event's id is the raw id argument. */
SEC("tp_btf/sys_enter")
int BPF_PROG(ring_sys_enter, struct pt_regs *regs, long id)
{
	__u32 zero = 0, tgid = bpf_get_current_pid_tgid() >> 32, *want;
	struct sys_event *e;

	want = bpf_map_lookup_elem(&ring_tgid, &zero);
	if (!want || *want != tgid)
		return 0;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return 0;
	e->tgid = tgid;
	e->nr = id;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* Optional program types: on our kernels both are refused, which is what doctor reports. */
SEC("kprobe/vfs_fsync_range")
int kprobe_fsync(void *ctx)
{
	hit(HIT_KPROBE);
	return 0;
}

SEC("fentry/vfs_fsync_range")
int fentry_fsync(void *ctx)
{
	hit(HIT_FENTRY);
	return 0;
}
