"""From a collector snapshot (raw, keyed by superblock dev and phase index) to the per-filesystem,
per-phase figures stored in result.json: histograms summarised, stacks symbolised, attribution
applied. Plain data in, plain data out: a stored run can be assembled again (`fsprof report`)."""

from collections.abc import Sequence
from typing import Any

from . import attribution, exemplars
from .. import behind
from ..trace import hist, symbols
from ..trace.maps import EXEMPLARS


def phase_elapsed(start_ns: Sequence[int], names: Sequence[str], end_ns: int) -> dict[str, float]:
    """Seconds per phase, from the kernel's first-entry timestamps (phases in order of entry)."""
    started = sorted((t, i) for i, t in enumerate(start_ns) if t and i < len(names))
    out: dict[str, float] = {}
    for (t, i), nxt in zip(started, [s for s, _ in started[1:]] + [end_ns]):
        out[names[i]] = max(nxt - t, 0) / 1e9
    return out


def _name(names, index):
    return names[index] if index < len(names) else f"phase-{index}"


def workers(
    fs: str,
    records: Sequence[dict[str, Any]],
    stacks: dict[int, list[str]],
    names: Sequence[str],
    runs: Sequence[dict[str, Any]] = (),
) -> dict[str, dict[str, Any]]:
    """{worker kind: {"all": breakdown, "phases": {phase name: breakdown}}} of the workers' own
    off-CPU time (attribution.attribute_worker), with the windows begun, their wall and on-CPU
    time and the block requests made inside them (`runs`: the snapshot's worker_runs of this
    filesystem)."""
    out: dict[str, dict[str, Any]] = {}
    for kind in sorted({r["kind"] for r in list(records) + list(runs)}):
        mine = [r for r in records if r["kind"] == kind]
        made = [r for r in runs if r["kind"] == kind]

        def part(phase=None):
            b = attribution.attribute_worker(fs, [r for r in mine if phase is None or r["phase"] == phase], stacks)
            rs = [r for r in made if phase is None or r["phase"] == phase]
            if rs:
                b["windows"] = sum(r["windows"] for r in rs)
                b["wall_ns"] = sum(r["wall_ns"] for r in rs)
                unseen = sum(r.get("unseen_ns", 0) for r in rs)
                if unseen:  # windows with switches sched_switch did not show: not CPU, not known
                    b["unseen_windows"] = sum(r["unseen_windows"] for r in rs)
                    b["unseen_ns"] = unseen
                # Off-CPU time is timed inside open windows only, so it never exceeds their wall.
                b["oncpu_ns"] = max(b["wall_ns"] - b["offcpu_ns"] - unseen, 0)
                b["requests"] = attribution.merge_requests(r["requests"] for r in rs)
            return b

        out[kind] = {
            "all": part(),
            "phases": {_name(names, i): part(i) for i in sorted({r["phase"] for r in mine + made})},
        }
    return out


def _records(raw, target):
    """This filesystem's records of the snapshot: {ops, unresolved, offcpu, samples, workers,
    worker_runs, op_requests}. A worker names the superblock, or (jbd2) the block device its
    journal is on; unresolved ops (dev 0) are no filesystem's and every one's."""
    sb_dev = target.sb_dev
    mine = lambda recs: [r for r in recs if r["dev"] == sb_dev]  # noqa: E731
    ours = lambda recs: [r for r in recs if r["dev"] == sb_dev or r["dev"] in target.block_devs]  # noqa: E731
    return {
        "ops": mine(raw["ops"]),
        "uring": mine(raw.get("uring", [])),
        "uring_offcpu": mine(raw.get("uring_offcpu", [])),
        "unresolved": [r for r in raw["ops"] if r["dev"] == 0],
        "uring_enter_wait": [r for r in raw.get("uring_enter_wait", []) if r["dev"] == 0],
        "offcpu": attribution.split_unwalked(mine(raw["offcpu"])),
        "samples": mine(raw["samples"]),
        "workers": attribution.split_unwalked(ours(raw.get("workers", []))),
        "worker_runs": ours(raw.get("worker_runs", [])),
        "op_requests": mine(raw.get("op_requests", [])),
        "uring_requests": mine(raw.get("uring_requests", [])),
        "exemplars": mine(raw.get("exemplars", [])),
    }


def _stacks(raw, recs):
    """The symbolised stacks the records (and the behind modules) name."""
    used = (
        {r["stack"] for r in recs["offcpu"] + recs["samples"] + recs["workers"] + recs["uring_offcpu"]}
        | {r["waker_stack"] for r in recs["offcpu"]}
        | {
            s
            for x in recs["exemplars"]
            for c in x["calls"]
            for w in c["longest"]
            for s in (w["stack"], w["waker_stack"])
        }
        | set(behind.stack_ids(raw.get("behind", {})))
    )
    return symbols.symbolize({sid: a for sid, a in raw["stacks"].items() if sid in used})


def _phase(raw, recs, fs, index, stacks, spans):
    """One phase's figures: its syscalls, unresolved ones, attribution and block requests."""
    p_ops = {r["op"]: r for r in recs["ops"] if r["phase"] == index}
    breakdown = {}
    for op, wall in p_ops.items():
        breakdown[op] = attribution.attribute(
            fs,
            wall,
            [r for r in recs["offcpu"] if r["phase"] == index and r["op"] == op],
            [r for r in recs["samples"] if r["phase"] == index and r["op"] == op],
            stacks,
            spans.get((index, op)),
        )
        if raw.get("requests_per_op", False):  # none of the per-op requests where the kernel lacks block_getrq
            breakdown[op]["requests"] = attribution.merge_requests(
                r["requests"] for r in recs["op_requests"] if r["phase"] == index and r["op"] == op
            )
    return {
        "index": index,
        "syscalls": {op: hist.summarize(r) for op, r in sorted(p_ops.items())},
        # The traced processes' ops with no filesystem told (io_uring_enter, io_submit, sync, ...).
        "unresolved_syscalls": {
            r["op"]: hist.summarize(r) for r in sorted(recs["unresolved"], key=lambda r: r["op"]) if r["phase"] == index
        },
        "attribution": breakdown,
        "block": {dev: by_phase.get(index, {}) for dev, by_phase in raw["block"].items()},
        **_uring(raw, recs, fs, stacks, index),
    }


def _uring(raw, recs, fs, stacks, phase=None):
    """The io_uring requests (and libaio iocbs) on this filesystem by opcode, of one phase or (None)
    of the whole run: io_uring, their time from submission to completion posted; io_uring_io_wq,
    the part an io-wq worker ran (an fsync, ext4's buffered writes), the worker's off-CPU time by
    cause, classified as a syscall's; io_uring_block_requests, the block requests they made (where
    the kernel has block_getrq and some were made)."""
    mine = lambda recs: [r for r in recs if phase is None or r["phase"] == phase]  # noqa: E731
    done, offcpu, made = mine(recs["uring"]), mine(recs["uring_offcpu"]), mine(recs["uring_requests"])
    out = {
        "io_uring": {op: hist.merge([r for r in done if r["op"] == op]) for op in sorted({r["op"] for r in done})},
        "io_uring_io_wq": {
            op: attribution.attribute_worker(fs, [r for r in offcpu if r["op"] == op], stacks, syscall_rules=True)
            for op in sorted({r["op"] for r in offcpu})
        },
    }
    if raw.get("requests_per_op", False) and made:
        out["io_uring_block_requests"] = {
            op: attribution.merge_requests(r["requests"] for r in made if r["op"] == op)
            for op in sorted({r["op"] for r in made})
        }
    return out


def _phases(raw, recs, fs, names, end_ns, stacks, spans):
    """{phase name: figures} in order of the phases' indexes, each with its elapsed time."""
    indexes = {r["phase"] for r in recs["ops"] + recs["unresolved"]} | {i for dev in raw["block"].values() for i in dev}
    phases = {_name(names, index): _phase(raw, recs, fs, index, stacks, spans) for index in sorted(indexes)}
    for name, secs in phase_elapsed(raw["phase_start_ns"], names, end_ns).items():
        phases.setdefault(
            name,
            {
                "index": names.index(name),
                "syscalls": {},
                "unresolved_syscalls": {},
                "attribution": {},
                "block": {},
                "io_uring": {},
                "io_uring_io_wq": {},
            },
        )
        phases[name]["elapsed_s"] = secs
    return dict(sorted(phases.items(), key=lambda kv: kv[1]["index"]))


def _block_totals(raw):
    """device -> class -> {count, bytes} over every phase."""
    block = {}
    for dev, by_phase in raw["block"].items():
        for counts in by_phase.values():
            for cls, v in counts.items():
                e = block.setdefault(dev, {}).setdefault(cls, {"count": 0, "bytes": 0})
                e["count"] += v["count"]
                e["bytes"] += v["bytes"]
    return block


def _trace(raw, recs, stacks):
    """The aggregates the figures come from, for flame graphs and re-analysis."""
    return {
        "sample_hz": raw["sample_hz"],
        "offcpu": [
            {
                k: r[k]
                for k in (
                    "phase",
                    "op",
                    "stack",
                    "runnable",
                    "waker_stack",
                    "waker_comm",
                    "count",
                    "total_ns",
                    "estimated_ns",
                )
                if k in r
            }
            for r in recs["offcpu"]
        ],
        "samples": [{k: r[k] for k in ("phase", "op", "stack", "count")} for r in recs["samples"]],
        "workers": [
            {k: r[k] for k in ("phase", "kind", "stack", "runnable", "count", "total_ns", "estimated_ns") if k in r}
            for r in recs["workers"]
        ],
        # io-wq workers' off-CPU time inside io_uring requests, by the request's opcode.
        "io_wq": [
            {k: r[k] for k in ("phase", "op", "stack", "runnable", "count", "total_ns")} for r in recs["uring_offcpu"]
        ],
        "stacks": {str(k): v for k, v in stacks.items()},
    }


def _uring_enter_split(calls: dict[str, Any] | None, waits: list[dict[str, Any]]) -> dict[str, Any] | None:
    """io_uring_enter's wall time in two: waiting for completions (from io_cqring_wait's decision
    to sleep to the call's exit), and the rest, submitting (and reaping the completions already
    there). None without calls."""
    if not calls or not calls["count"]:
        return None
    waiting = hist.merge(waits)
    return {
        "calls": calls["count"],
        "total_ns": calls["total_ns"],
        "submitting_ns": max(0, calls["total_ns"] - waiting["total_ns"]),
        "waiting": waiting,
    }


def assemble(raw: dict[str, Any], target: behind.Target, names: list[str], end_ns: int) -> dict[str, Any]:
    """The result entry fields for the filesystem of `target` (a behind.Target); names[i] is
    phase i's name (phase 0: everything before the workload's first marker)."""
    fs, sb_dev = target.fs, target.sb_dev
    recs = _records(raw, target)
    stacks = _stacks(raw, recs)
    spans = behind.cpu_spans(raw.get("behind", {}), {sb_dev, *target.block_devs})
    phases = _phases(raw, recs, fs, names, end_ns, stacks, spans)
    breakdowns = [b for p in phases.values() for b in p["attribution"].values()]
    off = sum(b["offcpu_ns"] for b in breakdowns)
    other = sum(b["causes"].get(attribution.OTHER_WAIT, 0) for b in breakdowns)
    ops, unresolved = recs["ops"], recs["unresolved"]
    all_ops = sorted({r["op"] for r in ops})
    entry: dict[str, Any] = {
        # The model's own error bar: the share of off-CPU time no rule explained.
        "other_wait_share": other / off if off else 0.0,
        "syscalls": {op: hist.merge([r for r in ops if r["op"] == op]) for op in all_ops},
        "unresolved_syscalls": {
            op: hist.merge([r for r in unresolved if r["op"] == op]) for op in sorted({r["op"] for r in unresolved})
        },
        **_uring(raw, recs, fs, stacks),
        "attribution": {
            op: attribution.merge([p["attribution"][op] for p in phases.values() if op in p["attribution"]])
            for op in all_ops
        },
        "phases": phases,
        "block": _block_totals(raw),
        "trace": _trace(raw, recs, stacks),
        "drops": raw["drops"],
        # The slowest calls of each syscall, each explained whole.
        "exemplars": exemplars.explain(
            fs, recs["exemplars"], stacks, names, raw.get("exemplars_kept", EXEMPLARS), target.block_devs
        ),
    }
    if raw.get("stack_sampling"):
        estimated = sum(b.get("offcpu_estimated_ns", 0) for b in breakdowns)
        tail = [b["tail"] for b in breakdowns if b.get("tail")]
        entry["stack_sampling"] = {
            **raw["stack_sampling"],
            "estimated_share": estimated / off if off else 0.0,
            # The tail's waits, each with its own stacks: none of this time is estimated.
            "tail_waits": sum(t["waits"] for t in tail),
            "tail_ns": sum(t["ns"] for t in tail),
        }
    if raw.get("uring_enter_split"):  # where the kernel has io_uring_cqring_wait
        split = _uring_enter_split(entry["unresolved_syscalls"].get("io_uring_enter"), recs["uring_enter_wait"])
        if split:
            entry["io_uring_enter"] = split
    ctx = behind.Context(
        fs=fs,
        sb_dev=sb_dev,
        block_devs=target.block_devs,
        phase_names=list(names),
        elapsed_s=sum(p.get("elapsed_s", 0) for p in phases.values()),
        syscalls=entry["syscalls"],
        phases=phases,
        workers=workers(fs, recs["workers"], stacks, names, recs["worker_runs"]),
        stacks=stacks,
    )
    entry["behind"] = {m.NAME: m.summarize(raw.get("behind", {}).get(m.NAME, {}), ctx) for m in behind.MODULES}
    entry["behind"]["workers"] = ctx.workers
    return entry
