/* SPDX-License-Identifier: GPL-2.0 */
/* Maps that syscalls.bpf.c and block.bpf.c share: declared in both objects, and made one map by
 * the loader (BpfObject(share=...) reuses syscalls' fds when it loads block). */
#ifndef FSPROF_SHARED_MAPS_H
#define FSPROF_SHARED_MAPS_H
#include "fsprof.h"

/* The current workload phase, set by a traced process's marker (see fsprof.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct phase_state);
} phase_state SEC(".maps");

/* enum drop_reason -> count of events not recorded. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, N_DROPS);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

static __always_inline void count_drop(__u32 reason)
{
	__u64 *n = bpf_map_lookup_elem(&drops, &reason);

	if (n)
		(*n)++;
}

static __always_inline __u16 current_phase(void)
{
	__u32 zero = 0;
	struct phase_state *ps = bpf_map_lookup_elem(&phase_state, &zero);

	return ps ? ps->current : 0;
}
#endif
