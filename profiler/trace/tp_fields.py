"""Offsets of the classic tracepoint record fields the legacy objects read (bpf/fsprof.h's enum
tp_field, in its order): on 5.10 the jbd2 programs and those that place calls by absolute path are
classic tracepoints (their modules have no BTF for tp_btf), and they read each field at the offset
tracefs's format file gives. A field absent
from this kernel's record, or of another size than the program reads, is 0: the program then
counts nothing rather than read the wrong bytes."""

import re

from ..machine import tracefs

# (enum tp_field name, tracepoint, field, size in bytes), in the enum's order.
FIELDS = (
    ("TPF_COMMIT_DEV", "jbd2/jbd2_start_commit", "dev", 4),
    ("TPF_COMMIT_TID", "jbd2/jbd2_start_commit", "transaction", 4),
    ("TPF_COMMIT_SYNC", "jbd2/jbd2_start_commit", "sync_commit", 1),
    ("TPF_END_DEV", "jbd2/jbd2_end_commit", "dev", 4),
    ("TPF_END_TID", "jbd2/jbd2_end_commit", "transaction", 4),
    ("TPF_RUN_DEV", "jbd2/jbd2_run_stats", "dev", 4),
    ("TPF_RUN_TID", "jbd2/jbd2_run_stats", "tid", 4),
    ("TPF_RUN_WAIT", "jbd2/jbd2_run_stats", "wait", 8),
    ("TPF_RUN_REQUEST_DELAY", "jbd2/jbd2_run_stats", "request_delay", 8),
    ("TPF_RUN_RUNNING", "jbd2/jbd2_run_stats", "running", 8),
    ("TPF_RUN_LOCKED", "jbd2/jbd2_run_stats", "locked", 8),
    ("TPF_RUN_FLUSHING", "jbd2/jbd2_run_stats", "flushing", 8),
    ("TPF_RUN_LOGGING", "jbd2/jbd2_run_stats", "logging", 8),
    ("TPF_RUN_HANDLE_COUNT", "jbd2/jbd2_run_stats", "handle_count", 4),
    ("TPF_RUN_BLOCKS", "jbd2/jbd2_run_stats", "blocks", 4),
    ("TPF_RUN_BLOCKS_LOGGED", "jbd2/jbd2_run_stats", "blocks_logged", 4),
    ("TPF_CKPT_DEV", "jbd2/jbd2_checkpoint", "dev", 4),
    ("TPF_CKPT_RESULT", "jbd2/jbd2_checkpoint", "result", 4),
    ("TPF_CKPTS_DEV", "jbd2/jbd2_checkpoint_stats", "dev", 4),
    ("TPF_CKPTS_CHP_TIME", "jbd2/jbd2_checkpoint_stats", "chp_time", 8),
    ("TPF_CKPTS_FORCED", "jbd2/jbd2_checkpoint_stats", "forced_to_close", 4),
    ("TPF_CKPTS_WRITTEN", "jbd2/jbd2_checkpoint_stats", "written", 4),
    ("TPF_CKPTS_DROPPED", "jbd2/jbd2_checkpoint_stats", "dropped", 4),
    ("TPF_EXT4_DIRTY_DEV", "ext4/ext4_mark_inode_dirty", "dev", 4),
    ("TPF_XFS_LOOKUP_DEV", "xfs/xfs_lookup", "dev", 4),
    ("TPF_XFS_GETATTR_DEV", "xfs/xfs_getattr", "dev", 4),
    ("TPF_XFS_SETATTR_DEV", "xfs/xfs_setattr", "dev", 4),
    ("TPF_XFS_CREATE_DEV", "xfs/xfs_create", "dev", 4),
    ("TPF_XFS_REMOVE_DEV", "xfs/xfs_remove", "dev", 4),
    ("TPF_XFS_RENAME_DEV", "xfs/xfs_rename", "dev", 4),
    ("TPF_XFS_LINK_DEV", "xfs/xfs_link", "dev", 4),
    ("TPF_BTRFS_RESV_FSID", "btrfs/btrfs_space_reservation", "fsid", 16),
    ("TPF_XFS_FORCE_DEV", "xfs/xfs_log_force", "dev", 4),
    ("TPF_XFS_FORCE_LSN", "xfs/xfs_log_force", "lsn", 8),
    ("TPF_XFS_FORCE_CALLER", "xfs/xfs_log_force", "caller_ip", 8),
    ("TPF_XFS_RESERVE_DEV", "xfs/xfs_log_reserve", "dev", 4),
    ("TPF_XFS_REGRANT_DEV", "xfs/xfs_log_regrant", "dev", 4),
    ("TPF_XFS_GRANT_SLEEP_DEV", "xfs/xfs_log_grant_sleep", "dev", 4),
    ("TPF_XFS_GRANT_WAKE_UP_DEV", "xfs/xfs_log_grant_wake_up", "dev", 4),
    ("TPF_XFS_CIL_WAIT_DEV", "xfs/xfs_log_cil_wait", "dev", 4),
    ("TPF_DA_WB_DEV", "ext4/ext4_da_write_begin", "dev", 4),
    ("TPF_WB_DEV", "ext4/ext4_write_begin", "dev", 4),
    ("TPF_DA_RESV_DEV", "ext4/ext4_da_reserve_space", "dev", 4),
    ("TPF_DA_RESV_BLOCKS", "ext4/ext4_da_reserve_space", "reserve_blocks", 4),
    ("TPF_DA_REL_DEV", "ext4/ext4_da_release_space", "dev", 4),
    ("TPF_DA_REL_FREED", "ext4/ext4_da_release_space", "freed_blocks", 4),
    ("TPF_DA_UPD_DEV", "ext4/ext4_da_update_reserve_space", "dev", 4),
    ("TPF_DA_UPD_USED", "ext4/ext4_da_update_reserve_space", "used_blocks", 4),
    ("TPF_DA_EXT_DEV", "ext4/ext4_da_write_pages_extent", "dev", 4),
    ("TPF_DA_EXT_LEN", "ext4/ext4_da_write_pages_extent", "len", 4),
    ("TPF_REQ_DEV", "ext4/ext4_request_blocks", "dev", 4),
    ("TPF_REQ_LEN", "ext4/ext4_request_blocks", "len", 4),
    ("TPF_ALLOC_DEV", "ext4/ext4_allocate_blocks", "dev", 4),
    ("TPF_ALLOC_LEN", "ext4/ext4_allocate_blocks", "len", 4),
    ("TPF_ALLOC_FLAGS", "ext4/ext4_allocate_blocks", "flags", 4),
    ("TPF_MB_DEV", "ext4/ext4_mballoc_alloc", "dev", 4),
    ("TPF_MB_GROUPS", "ext4/ext4_mballoc_alloc", "groups", 2),
    ("TPF_FREE_DEV", "ext4/ext4_free_blocks", "dev", 4),
    ("TPF_FREE_COUNT", "ext4/ext4_free_blocks", "count", 8),
    ("TPF_RM_DEV", "ext4/ext4_ext_remove_space", "dev", 4),
    ("TPF_RM_INO", "ext4/ext4_ext_remove_space", "ino", 8),
    ("TPF_RMD_DEV", "ext4/ext4_ext_remove_space_done", "dev", 4),
    ("TPF_RMD_INO", "ext4/ext4_ext_remove_space_done", "ino", 8),
    ("TPF_EVICT_DEV", "ext4/ext4_evict_inode", "dev", 4),
    ("TPF_EVICT_INO", "ext4/ext4_evict_inode", "ino", 8),
    ("TPF_EVICT_NLINK", "ext4/ext4_evict_inode", "nlink", 4),
    ("TPF_TRUNC_DEV", "ext4/ext4_truncate_enter", "dev", 4),
    ("TPF_TRUNC_INO", "ext4/ext4_truncate_enter", "ino", 8),
    ("TPF_BTRFS_SYNC_FSID", "btrfs/btrfs_sync_file", "fsid", 16),
    ("TPF_BTRFS_SYNC_DATASYNC", "btrfs/btrfs_sync_file", "datasync", 4),
    ("TPF_BTRFS_COMMIT_FSID", "btrfs/btrfs_transaction_commit", "fsid", 16),
    # One event of a class gives the offsets of all (btrfs__ordered_extent, xfs_imap_class).
    ("TPF_BTRFS_OE_FSID", "btrfs/btrfs_ordered_extent_add", "fsid", 16),
    ("TPF_BTRFS_OE_INO", "btrfs/btrfs_ordered_extent_add", "ino", 8),
    ("TPF_BTRFS_OE_OFFSET", "btrfs/btrfs_ordered_extent_add", "file_offset", 8),
    ("TPF_BTRFS_OE_LEN", "btrfs/btrfs_ordered_extent_add", "len", 8),
    ("TPF_BTRFS_OE_FLAGS", "btrfs/btrfs_ordered_extent_add", "flags", 8),
    ("TPF_BTRFS_OE_ROOT", "btrfs/btrfs_ordered_extent_add", "root_objectid", 8),
    ("TPF_BTRFS_FLUSH_FSID", "btrfs/btrfs_flush_space", "fsid", 16),
    ("TPF_BTRFS_FLUSH_BYTES", "btrfs/btrfs_flush_space", "num_bytes", 8),
    ("TPF_BTRFS_FLUSH_STATE", "btrfs/btrfs_flush_space", "state", 4),
    ("TPF_BTRFS_FLUSH_RET", "btrfs/btrfs_flush_space", "ret", 4),
    ("TPF_BTRFS_TRIGGER_FSID", "btrfs/btrfs_trigger_flush", "fsid", 16),
    ("TPF_BTRFS_TRIGGER_BYTES", "btrfs/btrfs_trigger_flush", "bytes", 8),
    ("TPF_BTRFS_TRIGGER_FLUSH", "btrfs/btrfs_trigger_flush", "flush", 4),
    ("TPF_BTRFS_TRIGGER_REASON", "btrfs/btrfs_trigger_flush", "reason", 4),
    ("TPF_BTRFS_RESV_TYPE", "btrfs/btrfs_space_reservation", "type", 4),
    ("TPF_BTRFS_RESV_BYTES", "btrfs/btrfs_space_reservation", "bytes", 8),
    ("TPF_BTRFS_RESV_RESERVE", "btrfs/btrfs_space_reservation", "reserve", 4),
    ("TPF_XFS_IMAP_DEV", "xfs/xfs_iomap_alloc", "dev", 4),
    ("TPF_XFS_IMAP_STARTBLOCK", "xfs/xfs_iomap_alloc", "startblock", 8),
    ("TPF_XFS_IMAP_BLOCKCOUNT", "xfs/xfs_iomap_alloc", "blockcount", 8),
    ("TPF_XFS_ENOSPC_DEV", "xfs/xfs_delalloc_enospc", "dev", 4),
    ("TPF_EXT4_FC_START_DEV", "ext4/ext4_fc_commit_start", "dev", 4),
    ("TPF_EXT4_FC_STOP_NBLKS", "ext4/ext4_fc_commit_stop", "nblks", 4),
    ("TPF_EXT4_FC_STOP_REASON", "ext4/ext4_fc_commit_stop", "reason", 4),
)

# "field:unsigned long wait;	offset:16;	size:8;	signed:0;"
_FIELD = re.compile(r"field:[^;]*?(?P<name>\w+)(?:\[\d*\])?;\s*offset:(?P<off>\d+);\s*size:(?P<size>\d+);")


def record_layout(tracepoint: str) -> dict[str, tuple[int, int]]:
    """{field: (offset, size)} of a tracepoint's record ("group/event"), {} if it has no format."""
    try:
        text = (tracefs.TRACEFS / "events" / tracepoint / "format").read_text()
    except OSError:
        return {}
    return {m["name"]: (int(m["off"]), int(m["size"])) for m in _FIELD.finditer(text)}


def offsets() -> list[int]:
    """The offset of each FIELDS entry in this kernel's records, 0 where absent, of another size or
    not aligned to it."""
    layouts: dict[str, dict[str, tuple[int, int]]] = {}
    out = []
    for _, tracepoint, field, size in FIELDS:
        layout = layouts.setdefault(tracepoint, record_layout(tracepoint))
        off, got = layout.get(field, (0, 0))
        # The programs read each field aligned (their masks keep reads inside the record's copy).
        out.append(off if got == size and off % min(size, 8) == 0 else 0)
    return out
