"""The slowest calls of each syscall, each explained whole (docs/tail.md): its time split into its
longest blocked intervals (each with its cause, by the same rules as the attribution, and who
ended it), its other blocked time, its time runnable off CPU, and its time on CPU."""

from typing import Any

from ..causes import URING_ELSEWHERE
from ..trace.maps import EXEMPLARS, STACK_NOT_WALKED
from . import attribution

# A wait below the tail threshold in a call stack sampling passed over: its length is exact, its
# stack was not taken.
NOT_WALKED = "wait, stack not sampled"


def explain(
    fs: str, records: list[dict[str, Any]], stacks: dict[int, list[str]], names: list[str], kept: int = EXEMPLARS
) -> dict[str, Any]:
    """{syscall: [call, slowest first]} from the snapshot's exemplar records of one filesystem
    (one record per (syscall, phase), each its `kept` slowest calls): the `kept` slowest of all."""
    rules = attribution.rules_for(fs)
    by_op: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        phase = names[rec["phase"]] if rec["phase"] < len(names) else str(rec["phase"])
        by_op.setdefault(rec["op"], []).extend({**call, "phase": phase} for call in rec["calls"])
    return {
        op: [
            _call(rules, call, stacks, uring=op.startswith("io_uring "))
            for call in sorted(calls, key=lambda c: -c["ns"])[:kept]
        ]
        for op, calls in sorted(by_op.items())
    }


def _work(work: dict[str, Any], call_start: int) -> dict[str, Any]:
    """The work whose worker ended a wait: its window on the call's time axis (from the call's
    start; negative: before the call), what the worker itself blocked on in it, its requests."""
    return {
        "worker": work["worker"],
        **({"id": work["id"]} if work["id"] else {}),
        "start_at_ns": work["start_ns"] - call_start,
        "end_at_ns": work["end_ns"] - call_start if work["end_ns"] else None,
        "blocked_ns": work["blocked_ns"],
        "requests": work["requests"],
        # Older runs: none. Of the requests, those that had ended by the wakeup, and their times.
        **({"request_times": work["request_times"]} if work.get("request_times", {}).get("timed") else {}),
    }


def _call(
    rules: attribution.Rules, call: dict[str, Any], stacks: dict[int, list[str]], uring: bool = False
) -> dict[str, Any]:
    """One call explained. An io_uring request (uring): its waits and runnable time are its io-wq
    worker's, and the rest is not CPU but outside the worker's waits (`elsewhere_ns`): queued for a
    worker, issued inline and on the device, the worker on CPU, or its completion waiting to be
    posted (docs/io_uring.md)."""
    waits = []
    for w in call["longest"]:
        frames = stacks.get(w["stack"], [])
        if w["stack"] == STACK_NOT_WALKED:
            cause, detail = NOT_WALKED, None
        else:
            cause, detail = attribution.classify_off(rules, {"stack": w["stack"], "runnable": False}, frames)
        waits.append(
            {
                "at_ns": w["start_ns"] - call["start_ns"],  # from the call's start
                "ns": w["ns"],
                "cause": cause,
                **({"detail": detail} if detail else {}),
                "ended_by": attribution.waker_name(w["waker_comm"], stacks.get(w["waker_stack"])),
                **({"work": _work(w["work"], call["start_ns"])} if w.get("work") else {}),
            }
        )
    shown = sum(w["ns"] for w in waits)
    return {
        "tid": call["tid"],
        "phase": call["phase"],
        "start_ns": call["start_ns"],  # CLOCK_MONOTONIC, as bpf_ktime_get_ns
        "ns": call["ns"],
        "ret": call["ret"],
        "waits": waits,
        "other_blocked_ns": max(call["blocked_ns"] - shown, 0),
        "blocked_intervals": call["waits"],
        "runnable_ns": call["runq_ns"],
        **(
            {"cpu_ns": 0, "elsewhere_ns": max(call["ns"] - call["blocked_ns"] - call["runq_ns"], 0)}
            if uring
            else {"cpu_ns": max(call["ns"] - call["blocked_ns"] - call["runq_ns"], 0)}
        ),
        # The block requests it made itself, and what those that ended by its exit took.
        **({"own_requests": call["own_requests"]} if call.get("own_requests") else {}),
    }


# A call's time outside its recorded waits: its shorter blocked intervals (only the longest are
# kept whole), its time runnable off CPU, and its time on CPU.
SHORTER_WAITS, RUNNABLE, ON_CPU = "shorter waits", "cpu contention", "on CPU"


def time_by_cause(call: dict[str, Any]) -> dict[str, int]:
    """{cause: ns} of one explained call (explain's output): sums to its length."""
    out: dict[str, int] = {}
    for w in call["waits"]:
        out[w["cause"]] = out.get(w["cause"], 0) + w["ns"]
    rest = (
        (SHORTER_WAITS, call["other_blocked_ns"]),
        (RUNNABLE, call["runnable_ns"]),
        (ON_CPU, call["cpu_ns"]),
        (URING_ELSEWHERE, call.get("elsewhere_ns", 0)),  # an io_uring request's (_call's elsewhere_ns)
    )
    for cause, ns in rest:
        if ns:
            out[cause] = out.get(cause, 0) + ns
    return out


def main_cause(call: dict[str, Any]) -> str:
    """The cause that took most of one explained call's time."""
    by = time_by_cause(call)
    return max(by, key=by.__getitem__) if by else ON_CPU
