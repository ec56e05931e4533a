/* SPDX-License-Identifier: GPL-2.0 */
/* Types and helpers shared by fsprof's BPF programs. Userspace mirrors of these structs live in
 * profiler/maps.py; the loader checks their sizes against the maps' BTF so a drift fails loudly. */
#ifndef FSPROF_H
#define FSPROF_H

#define HIST_SLOTS 40          /* log2(ns) slots: 2^40 ns is about 18 minutes */
#define MAX_SYSCALL_NR 512

/* How a traced syscall names the filesystem it works on (profiler/syscalls.py holds the table). */
enum dev_source {
	DEV_SRC_NONE = 0,      /* not traced */
	DEV_SRC_FD = 1,        /* args[0] is an fd */
	DEV_SRC_RET_FD = 2,    /* returns a new fd (open family): resolved at exit */
	DEV_SRC_DIRFD = 3,     /* *at form: args[0] dirfd, args[1] path */
	DEV_SRC_CWD = 4,       /* args[0] is a path relative to the cwd */
	DEV_SRC_GLOBAL = 5,    /* no single filesystem (sync, io_uring_enter, io_submit) */
};

struct hist {
	__u64 count;
	__u64 total_ns;
	__u64 max_ns;
	__u64 slots[HIST_SLOTS];
};

/* dev is the kernel's dev_t of the superblock (major << 20 | minor); 0 = not resolved. */
struct op_key {
	__u32 dev;
	__u32 nr;
};

enum blk_class {
	BLK_FLUSH = 0,         /* REQ_OP_FLUSH: what /sys/block/<dev>/stat counts as flush requests */
	BLK_FUA_WRITE = 1,
	BLK_WRITE = 2,
	BLK_READ = 3,
	BLK_DISCARD = 4,
	BLK_OTHER = 5,
};

struct blk_key {
	__u32 dev;
	__u32 cls;
};

struct blk_val {
	__u64 count;
	__u64 bytes;
};

static __always_inline __u32 log2_slot(__u64 v)
{
	__u32 slot = 0;

	/* Unrolled binary search: the verifier accepts it and it costs a handful of instructions. */
	if (v >= (1ULL << 32)) { v >>= 32; slot += 32; }
	if (v >= (1ULL << 16)) { v >>= 16; slot += 16; }
	if (v >= (1ULL << 8))  { v >>= 8;  slot += 8; }
	if (v >= (1ULL << 4))  { v >>= 4;  slot += 4; }
	if (v >= (1ULL << 2))  { v >>= 2;  slot += 2; }
	if (v >= (1ULL << 1))  { slot += 1; }
	return slot < HIST_SLOTS ? slot : HIST_SLOTS - 1;
}

#endif
