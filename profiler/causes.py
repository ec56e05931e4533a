"""The causes a syscall's time is split into, one home: name, kind, what it means, its colour in
the HTML report, and for `fsprof compare` the worker whose own time explains it and the words of
the counts that bear on it. The rules (analysis/rules/*.toml), the attribution engine, the behind
modules, compare and the HTML report name causes only through this table: a name that is not in
it is an error when the module or rule table naming it is loaded, not a silent 0."""

from dataclasses import dataclass

from .errors import FsprofError

WAIT, CPU, RUNNABLE, UNEXPLAINED = "wait", "cpu", "runnable", "unexplained"


@dataclass(frozen=True)
class Cause:
    name: str
    kind: str  # WAIT: blocked off-CPU; CPU: on-CPU; RUNNABLE: preempted; UNEXPLAINED: no rule matched
    description: str
    colour: str  # HTML report; each cause keeps its colour on every page
    worker: str | None = None  # the worker kind (trace/maps.py WORKER_KINDS) whose own time explains this wait
    evidence: tuple = ()  # substrings of the evidence labels that bear on this cause (fsprof compare)


_ROWS = (
    # Waits of the traced syscall (rules [[offcpu]]) ...
    Cause(
        "journal commit wait",
        WAIT,
        "an ext3/4 fsync waiting for the jbd2 commit of its transaction",
        "#4e79a7",
        worker="jbd2 commit",
        evidence=("commit", "flush", "fua"),
    ),
    Cause(
        "journal handle wait",
        WAIT,
        "waiting for a jbd2 handle: a locked transaction, checkpoint or log space",
        "#a0cbe8",
    ),
    Cause(
        "log force wait",
        WAIT,
        "an XFS fsync waiting for its log force (iclog I/O)",
        "#f28e2b",
        worker="xfs cil push",
        evidence=("log force", "iclog", "flush", "fua"),
    ),
    Cause("log space reservation", WAIT, "waiting for XFS log space (grant heads)", "#ffbe7d"),
    Cause(
        "btrfs tree-log sync",
        WAIT,
        "a btrfs fsync syncing the tree log",
        "#59a14f",
        worker="btrfs log sync",
        evidence=("tree-log", "log sync", "flush"),
    ),
    Cause(
        "btrfs transaction commit",
        WAIT,
        "waiting for a btrfs transaction to commit",
        "#8cd17d",
        worker="btrfs commit",
        evidence=("transaction", "commit", "flush"),
    ),
    Cause("space reservation", WAIT, "waiting for btrfs metadata space (reservation tickets)", "#b6992d"),
    Cause(
        "cache flush",
        WAIT,
        "waiting for the device to flush its volatile cache (a barrier)",
        "#e15759",
        evidence=("flush", "fua"),
    ),
    Cause(
        "data writeback wait",
        WAIT,
        "waiting for data pages under writeback, or writeback throttling",
        "#76b7b2",
        evidence=("writeback", "write requests"),
    ),
    Cause(
        "dirty throttling",
        WAIT,
        "balance_dirty_pages: a writer paused because too much is dirty",
        "#edc948",
        evidence=("throttl", "dirty"),
    ),
    Cause("read I/O wait", WAIT, "waiting for a read from the device", "#b07aa1", evidence=("read",)),
    Cause(
        "direct I/O wait",
        WAIT,
        "waiting for the call's own direct I/O (O_DIRECT) to complete",
        "#2ca02c",
        evidence=("requests made in its calls",),
    ),
    Cause(
        "direct I/O fallen back to buffered",
        WAIT,
        "an O_DIRECT call the filesystem did through the page cache instead (btrfs with data checksums or "
        "compression, an unaligned range), waiting for that data's writeback",
        "#e377c2",
        evidence=("requests made in its calls",),
    ),
    Cause(
        "filesystem frozen",
        WAIT,
        "a write that waits for a frozen filesystem (fsfreeze, a snapshot) to be thawed: sb_start_write",
        "#6b6ecf",
    ),
    Cause("lock contention", WAIT, "waiting for (or spinning on) a lock: rwsem, mutex, inode lock", "#ff9da7"),
    Cause("cpu contention", RUNNABLE, "runnable but preempted: waiting for a CPU", "#9c755f"),
    # ... an io_uring request's (compare --op "io_uring fsync"), beside its io-wq worker's waits ...
    Cause(
        "outside an io-wq worker's waits",
        WAIT,
        "an io_uring request's time outside its io-wq worker's off-CPU waits: issued inline and in flight "
        "on the device, queued for a worker, the worker on CPU, its completion waiting to be posted",
        "#5254a3",
        evidence=("requests made in its calls",),
    ),
    Cause("other wait", UNEXPLAINED, "a wait no rule names (its innermost meaningful frame is kept)", "#bab0ac"),
    # ... their on-CPU time (rules [[oncpu]] and the attribution engine) ...
    Cause("delayed allocation", CPU, "allocating blocks for delayed-allocated data at writeback", "#499894"),
    Cause(
        "block freeing",
        CPU,
        "freeing a file's blocks: extent removal in an unlink's last iput, a truncate, a punch",
        "#8c6d31",
        evidence=("freed", "extent removal"),
    ),
    Cause(
        "page cache freeing",
        CPU,
        "dropping a file's cached pages (and buffer heads) as its last link goes or it is truncated",
        "#ad494a",
        evidence=("page cache",),
    ),
    Cause("filesystem CPU", CPU, "on-CPU in the filesystem and the rest of the kernel's syscall path", "#86bcb6"),
    Cause("other kernel CPU", CPU, "on-CPU outside filesystem code", "#d4a6c8"),
    Cause("CPU (too short to sample)", CPU, "on-CPU time of calls no sample fell in", "#d7b5a6"),
    Cause("CPU (stack not captured)", CPU, "on-CPU samples whose stack was not captured", "#79706e"),
    # ... and a filesystem thread's own time inside its work (rules [[worker]]).
    Cause("data flush (ordered mode)", WAIT, "jbd2 writing the transaction's data first (data=ordered)", "#f1ce63"),
    Cause("journal superblock write", WAIT, "jbd2 writing the journal superblock", "#fabfd2"),
    Cause("journal block writes", WAIT, "jbd2 writing the transaction's blocks to the journal", "#9d7660"),
    Cause("checkpoint", WAIT, "jbd2 checkpointing: writing journalled blocks home", "#d37295"),
    Cause("open handles (locking)", WAIT, "a commit waiting for open handles to close", "#a87c9f"),
    Cause("full commit (fast commit fell back)", WAIT, "an ext4 fast commit that had to do a full commit", "#ff9d9a"),
    Cause(
        "fast-commit block writes (tail with cache flush + FUA)",
        WAIT,
        "ext4 fast-commit blocks, ending with a flush + FUA write",
        "#bcbd22",
    ),
    Cause("log write wait (no free iclog)", WAIT, "the CIL push waiting for an iclog to become free", "#17becf"),
    Cause("earlier iclog writes wait", WAIT, "the CIL push waiting for earlier iclog writes", "#aec7e8"),
    Cause("earlier checkpoint wait", WAIT, "the CIL push waiting for an earlier checkpoint", "#98df8a"),
    Cause("CIL push wait", WAIT, "waiting for the XFS CIL push", "#c49c94"),
    Cause(
        "block layer throttling",
        WAIT,
        "a worker held back by the block layer: writeback throttling (wbt) or no free request tag",
        "#393b79",
        evidence=("write requests",),
    ),
)
TABLE = {c.name: c for c in _ROWS}
URING_ELSEWHERE = TABLE["outside an io-wq worker's waits"].name  # what exemplars and compare name it
assert len(TABLE) == len(_ROWS) and len({c.colour for c in _ROWS}) == len(_ROWS), "a cause or colour twice"


def check(name: str, where: str = "fsprof") -> str:
    """`name` if it is a cause of the table; one sentence naming `where` it was written otherwise."""
    if name not in TABLE:
        raise FsprofError(f"unknown cause '{name}' in {where}; the causes are listed in profiler/causes.py")
    return name


def colour(name: str) -> str:
    return TABLE[name].colour if name in TABLE else "#bab0ac"  # a result written by a newer fsprof
