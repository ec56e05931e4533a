// SPDX-License-Identifier: GPL-2.0
/* Block requests issued to the devices under test, counted by class in the kernel. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "fsprof.h"
#include "shared_maps.h"

char LICENSE[] SEC("license") = "GPL";

/* Devices under test (kernel dev_t); userspace fills it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u8);
} traced_devs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct blk_key);
	__type(value, struct blk_val);
} blk_counts SEC(".maps");

static __always_inline bool is_op_char(char c)
{
	return c == 'W' || c == 'R' || c == 'D' || c == 'E' || c == 'Z' || c == 'N' || c == 'F';
}

/* rwbs is "[F]<op>[F][S][M]...": a leading F is REQ_PREFLUSH, the op letter follows (F for
 * REQ_OP_FLUSH, so a flush request reads "FF"), and an F after the op is REQ_FUA. */
static __always_inline __u32 rwbs_class(const char *rwbs)
{
	int op = (rwbs[0] == 'F' && is_op_char(rwbs[1])) ? 1 : 0;

	switch (rwbs[op]) {
	case 'F':
		return BLK_FLUSH;
	case 'W':
		return rwbs[op + 1] == 'F' ? BLK_FUA_WRITE : BLK_WRITE;
	case 'R':
		return BLK_READ;
	case 'D':
		return BLK_DISCARD;
	}
	return BLK_OTHER;
}

SEC("tracepoint/block/block_rq_issue")
int on_rq_issue(struct trace_event_raw_block_rq *ctx)
{
	struct blk_key key = { .dev = ctx->dev };
	struct blk_val *v, zero = {};
	char rwbs[4];

	if (!bpf_map_lookup_elem(&traced_devs, &key.dev))
		return 0;
	/* The verifier forbids variable offsets into the context: classify a copy. */
	bpf_probe_read_kernel(rwbs, sizeof(rwbs), ctx->rwbs);
	key.cls = rwbs_class(rwbs);
	key.phase = current_phase();
	v = bpf_map_lookup_elem(&blk_counts, &key);
	if (!v) {
		bpf_map_update_elem(&blk_counts, &key, &zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&blk_counts, &key);
		if (!v) {
			count_drop(DROP_BLOCK_FULL);
			return 0;
		}
	}
	v->count++;
	v->bytes += ctx->bytes;
	return 0;
}
