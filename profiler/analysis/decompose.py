"""A difference of time per call as signed contributions of its causes, and the split of a wait
that a filesystem thread ended into that thread's own time: what `fsprof compare` does to whole
runs (compare.py) and to one latency band (band.py)."""

from typing import Any

from .. import behind
from ..causes import TABLE as CAUSES

# A wait that a filesystem thread ends, and the worker whose own time explains it (XFS's log force
# wait has none: the fsync waits for iclog I/O the CIL push submits but does not wait on): a
# column of causes.py.
WORKER_OF_CAUSE = {c.name: c.worker for c in CAUSES.values() if c.worker}
MIN_SHARE = 0.05  # below 5% of the op's time (and 1 us) a cause "does not differ"
MIN_US = 1.0


def split_by_workers(us: dict[str, float], threads: dict[str, dict[str, int]]) -> dict[str, float]:
    """{cause: us} with each worker-ended wait split by its worker's own causes ({kind: {cause:
    ns}}, worker_causes), pro rata: the waiter waited while the worker spent its window that way."""
    out: dict[str, float] = {}
    for cause, v in us.items():
        kind = WORKER_OF_CAUSE.get(cause, "")
        total = sum(threads.get(kind, {}).values())
        if total:
            for sub, sub_ns in threads[kind].items():
                key = f"{cause} > {kind}: {sub}"
                out[key] = out.get(key, 0) + v * sub_ns / total
        else:
            out[cause] = out.get(cause, 0) + v
    return out


def expanded_causes(fs: dict[str, Any], op: str) -> dict[str, float]:
    """{cause: us per op} of `op` in one filesystem entry, worker-ended waits split (split_by_workers)."""
    b = fs["attribution"].get(op)
    if not b or not b["count"]:
        return {}
    return split_by_workers({c: ns / b["count"] / 1e3 for c, ns in b["causes"].items()}, worker_causes(fs))


def worker_causes(fs: dict[str, Any]) -> dict[str, dict[str, int]]:
    """{worker kind: {cause: ns}} of a run's filesystem threads over their whole windows (on-CPU
    time included), from the behind modules that account for it (thread_causes)."""
    out: dict[str, dict[str, int]] = {}
    for module in behind.MODULES:
        fn, section = getattr(module, "thread_causes", None), fs.get("behind", {}).get(module.NAME)
        if fn and section:
            out.update(fn(section))
    return out


def decompose(causes: dict[str, list[float]], diff: float, threshold: float) -> dict[str, Any]:
    """The difference of mean us per op as signed contributions of causes ({cause: [base, other]}).
    They add up to it: the causes above the threshold, largest magnitude first, then the rest
    together ("not different"), then what the causes' sum misses of the wall time (the residual of
    the sum invariant). A contribution's share is of the gross change on its own side (of all
    increases, or of all decreases), so no share exceeds 100% and the two sides do not cancel."""
    ranked = sorted(causes.items(), key=lambda kv: -abs(kv[1][1] - kv[1][0]))
    up = sum(y - x for _, (x, y) in ranked if y > x)
    down = sum(x - y for _, (x, y) in ranked if y < x)
    listed: list[dict[str, Any]]
    rest: list[dict[str, Any]]
    listed, rest = [], []
    for c, (x, y) in ranked:
        d = y - x
        if abs(d) >= threshold:
            listed.append(
                {"cause": c, "us_per_op": [x, y], "diff_us": d, "share_of_gross": d / up if d > 0 else -d / down}
            )
        elif max(x, y) >= MIN_US or d:
            rest.append({"cause": c, "us_per_op": [x, y], "diff_us": d})
    explained = sum(y - x for _, (x, y) in ranked)
    return {
        "causes": listed,
        "not_different": rest,
        "gross_us": [up, down],
        "not_different_us": sum(r["diff_us"] for r in rest),
        "residual_us": diff - explained,
    }
