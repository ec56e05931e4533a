/* SPDX-License-Identifier: GPL-2.0 */
/* What differs between the kernels fsprof runs on (Debian 12's 6.1, 6.12, and current ones), in one
 * place. vmlinux.h comes from the build machine's kernel; each helper here asks the running kernel's
 * BTF (CO-RE) which form it has, and falls back to the older form's value. Values of #defines (not in
 * BTF) are those of include/linux/{blk-mq,fs}.h in 6.1. */
#ifndef FSPROF_COMPAT_H
#define FSPROF_COMPAT_H

#include <bpf/bpf_core_read.h>

/* Request flags: an enum since 6.9 (rqf_flags), #defines before. */
static __always_inline __u32 rqf_flush_seq(void)
{
	if (bpf_core_enum_value_exists(enum rqf_flags, __RQF_FLUSH_SEQ))
		return 1U << bpf_core_enum_value(enum rqf_flags, __RQF_FLUSH_SEQ);
	return 1U << 4;
}

/* "Went through an I/O scheduler": RQF_USE_SCHED since 6.5, RQF_ELV (the same bit's meaning) before. */
static __always_inline __u32 rqf_use_sched(void)
{
	if (bpf_core_enum_value_exists(enum rqf_flags, __RQF_USE_SCHED))
		return 1U << bpf_core_enum_value(enum rqf_flags, __RQF_USE_SCHED);
	return 1U << 22;
}

/* Inode state flags: an enum since 6.12-ish (inode_state_flags_t), #defines before. */
static __always_inline __u32 i_dirty_sync_or_datasync(void)
{
	if (bpf_core_enum_value_exists(enum inode_state_flags_t, I_DIRTY_SYNC))
		return bpf_core_enum_value(enum inode_state_flags_t, I_DIRTY_SYNC) |
		       bpf_core_enum_value(enum inode_state_flags_t, I_DIRTY_DATASYNC);
	return (1U << 0) | (1U << 1);
}

static __always_inline __u32 i_dirty_time(void)
{
	if (bpf_core_enum_value_exists(enum inode_state_flags_t, I_DIRTY_TIME))
		return bpf_core_enum_value(enum inode_state_flags_t, I_DIRTY_TIME);
	return 1U << 11;
}

/* balance_dirty_pages: the per-device figures are bdi_* up to 6.12, wb_* later. Read through
 * BPF_CORE_READ: a choice between two direct ctx loads can compile to a load from a computed ctx
 * address, which the verifier refuses. */
struct trace_event_raw_balance_dirty_pages___bdi {
	unsigned long bdi_setpoint;
	unsigned long bdi_dirty;
} __attribute__((preserve_access_index));

static __always_inline __u64 bdp_wb_dirty(struct trace_event_raw_balance_dirty_pages *ctx)
{
	if (bpf_core_field_exists(ctx->wb_dirty))
		return BPF_CORE_READ(ctx, wb_dirty);
	return BPF_CORE_READ((struct trace_event_raw_balance_dirty_pages___bdi *)ctx, bdi_dirty);
}

static __always_inline __u64 bdp_wb_setpoint(struct trace_event_raw_balance_dirty_pages *ctx)
{
	if (bpf_core_field_exists(ctx->wb_setpoint))
		return BPF_CORE_READ(ctx, wb_setpoint);
	return BPF_CORE_READ((struct trace_event_raw_balance_dirty_pages___bdi *)ctx, bdi_setpoint);
}

/* ext4_da_reserve_space reserves nr_resv blocks per event since 6.8 (field reserve_blocks); one before. */
static __always_inline __u64 da_reserve_blocks(struct trace_event_raw_ext4_da_reserve_space *ctx)
{
	if (bpf_core_field_exists(ctx->reserve_blocks))
		return BPF_CORE_READ(ctx, reserve_blocks);
	return 1;
}

#endif
