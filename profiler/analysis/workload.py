"""The user's number first: a difference of the workload's time, decomposed over its calls.

Users bring a workload's time, not an average call. Between two runs, the workload's elapsed time
differs by the sum of (docs/compare.md, "The workload first"):
- each traced call's total time, split exactly into its **count** part (the change in how many
  calls, at the old latency) and its **latency** part (the change per call, at the new count):
  Δ(n·l) = Δn·l_old + n_new·Δl;
- the workload's user-space CPU (getrusage of its process tree, `workload_cpu`), where both runs
  have it;
- what no traced call covers: page faults, untraced syscalls, sleeps, waiting for a child.
The parts add up to the difference by construction. Counts can be given per unit of work (a
transaction: `--unit`). Where the traced calls of concurrent threads add up to more than the wall
time, the last part also takes back that overlap, and the average concurrency is said.

Reads filesystem entries of result.json only.
"""

from typing import Any

from ..errors import FsprofError
from ..work_unit import Unit

UNPLACED = "(not placed on a filesystem)"
OVERLAP_SLACK = 1.01  # traced time above 101% of the wall time: concurrent threads overlapped


def declared_unit(entries: list[dict[str, Any]]) -> Unit | None:
    """The unit of work every entry's workload declares (a bundled workload's UNIT), or None."""
    names: set[Any] = {(fs.get("workload") or {}).get("unit") for fs in entries}
    return Unit(names.pop()) if len(names) == 1 and None not in names else None


def units_done(fs: dict[str, Any], unit: Unit) -> float:
    """How many units this entry's workload did: the user's count, or the workload's RESULT line
    for the unit (singular or plural key) or a bundled workload's own count of it."""
    if unit.count is not None:
        return unit.count
    own = fs.get("workload") or {}
    reported = own.get("reported", {})
    keys: tuple[str, ...] | str = (unit.name, unit.name + "s", unit.name + "es", unit.name[:-1] + "ies")
    for figures in (reported, own):
        for key in keys:
            if isinstance(figures.get(key), (int, float)) and not isinstance(figures.get(key), bool):
                return figures[key]
    keys = ", ".join(sorted(reported)) or "none"
    raise FsprofError(
        f"--unit {unit.name}: {fs['label']}'s workload reported no {unit.name} count "
        f"(its RESULT keys: {keys}); give one as --unit {unit.name}=N",
        exit_code=2,
    )


def call_totals(fs: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """{call: (count, total_ns)} of the traced calls, those placed on the filesystem and those
    on none (named with UNPLACED)."""
    out = {op: (s["count"], s["total_ns"]) for op, s in fs.get("syscalls", {}).items()}
    for op, s in fs.get("unresolved_syscalls", {}).items():
        out[f"{op} {UNPLACED}"] = (s["count"], s["total_ns"])
    return out


def _mean(values):
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def _side(entries, unit):
    """One side's figures, the mean over its repeats: elapsed s, user CPU s (None unless every
    repeat has it), {call: (count, total s)}, units done."""
    calls = {}
    for fs in entries:
        for op, (n, ns) in call_totals(fs).items():
            c = calls.setdefault(op, [0.0, 0.0])
            c[0] += n / len(entries)
            c[1] += ns / 1e9 / len(entries)
    cpus = [(fs.get("workload_cpu") or {}).get("user_s") for fs in entries]
    return {
        "elapsed_s": _mean(fs["elapsed_s"] for fs in entries),
        "user_cpu_s": _mean(cpus) if None not in cpus else None,
        "calls": calls,
        "units": _mean(units_done(fs, unit) for fs in entries) if unit else None,
    }


def decompose(
    base_entries: list[dict[str, Any]], other_entries: list[dict[str, Any]], unit: Unit | None = None
) -> dict[str, Any]:
    """The workload's elapsed time, other against base, as signed parts that add up to it.
    Entries are filesystem entries (a side's repeats)."""
    a, b = _side(base_entries, unit), _side(other_entries, unit)
    parts = []
    for op in sorted(set(a["calls"]) | set(b["calls"])):
        (na, ta), (nb, tb) = a["calls"].get(op, (0, 0.0)), b["calls"].get(op, (0, 0.0))
        if not (ta or tb):
            continue
        la, lb = (ta / na if na else None), (tb / nb if nb else None)
        if la is not None and lb is not None:
            count_s, latency_s = (nb - na) * la, nb * (lb - la)
        else:  # calls one side never made: all of it is their number
            count_s, latency_s = tb - ta, 0.0
        parts.append(
            {
                "kind": "calls",
                "call": op,
                "placed": not op.endswith(UNPLACED),
                "count": [na, nb],
                "latency_us": [x * 1e6 if x is not None else None for x in (la, lb)],
                "total_s": [ta, tb],
                "count_s": count_s,
                "latency_s": latency_s,
                "diff_s": tb - ta,
            }
        )
    cpu = None
    if a["user_cpu_s"] is not None and b["user_cpu_s"] is not None:
        cpu = [a["user_cpu_s"], b["user_cpu_s"]]
        parts.append({"kind": "user CPU", "total_s": cpu, "diff_s": cpu[1] - cpu[0]})
    rest, concurrency = [], []
    for side in (a, b):
        traced = sum(t for _, t in side["calls"].values()) + (side["user_cpu_s"] if cpu else 0.0)
        rest.append(side["elapsed_s"] - traced)
        concurrency.append(traced / side["elapsed_s"] if side["elapsed_s"] else None)
    overlapped = any(c and c > OVERLAP_SLACK for c in concurrency)
    parts.append(
        {
            "kind": "not traced",
            "total_s": rest,
            "diff_s": rest[1] - rest[0],
            "includes_user_cpu": cpu is None,
            "overlap": overlapped,
        }
    )
    parts.sort(key=lambda p: -abs(p["diff_s"]))
    diff = b["elapsed_s"] - a["elapsed_s"]
    phase = {fs.get("phase_view") for fs in [*base_entries, *other_entries]}.pop()
    return {
        "figure": "elapsed_s",
        "phase": phase,
        "elapsed_s": [a["elapsed_s"], b["elapsed_s"]],
        "diff_s": diff,
        "ratio": b["elapsed_s"] / a["elapsed_s"] if a["elapsed_s"] else None,
        "unit": {"name": unit.name, "count": [a["units"], b["units"]]} if unit else None,
        "traced_concurrency": concurrency,
        "parts": parts,
    }


def per_unit(count: float, units: float | None) -> float | None:
    """A count per unit of work, or None where the units are not known."""
    return count / units if units else None
