"""The slowest calls of each syscall, each explained whole (docs/tail.md): its time split into its
longest blocked intervals (each with its cause, by the same rules as the attribution, and who
ended it), its other blocked time, its time runnable off CPU, and its time on CPU."""

from typing import Any

from ..causes import URING_ELSEWHERE
from ..machine import blockdev
from ..trace.maps import EXEMPLARS, STACK_NOT_WALKED, U32_MAX
from . import attribution

# A wait below the tail threshold in a call stack sampling passed over: its length is exact, its
# stack was not taken.
NOT_WALKED = "wait, stack not sampled"


def explain(
    fs: str,
    records: list[dict[str, Any]],
    stacks: dict[int, list[str]],
    names: list[str],
    kept: int = EXEMPLARS,
    devices: dict[int, str] | None = None,
) -> dict[str, Any]:
    """{syscall: [call, slowest first]} from the snapshot's exemplar records of one filesystem
    (one record per (syscall, phase), each its `kept` slowest calls): the `kept` slowest of all.
    devices: the traced block devices' names by dev_t, for the calls' device requests."""
    rules = attribution.rules_for(fs)
    devices = devices or {}
    by_op: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        phase = names[rec["phase"]] if rec["phase"] < len(names) else str(rec["phase"])
        by_op.setdefault(rec["op"], []).extend({**call, "phase": phase} for call in rec["calls"])
    return {
        op: [
            _call(rules, call, stacks, devices, uring=op.startswith("io_uring "))
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


def _device_request(rq: dict[str, Any], call: dict[str, Any], devices: dict[int, str]) -> dict[str, Any]:
    """A request that ended while the call ran, on the call's time axis (from its start; negative:
    it began before the call): its device, class, start, end and time on the device (None: not
    issued itself, an empty cache flush the queue's own flush request served), who made it."""
    end = rq["end_ns"] - call["start_ns"]
    return {
        "device": devices.get(rq["dev"]) or blockdev.name_of_kdev(rq["dev"]),
        "class": rq["class"],
        "start_at_ns": end - rq["life_ns"],
        "end_at_ns": end,
        "device_ns": rq["device_ns"] or None,
        # The thread that made it: the call's own (its tid), a worker's, another process's; None: unknown.
        "made_by": rq["tid"] or None,
        # A time of 2^32-1 ns is that long or longer (the ring keeps 32-bit times).
        **({"saturated": True} if U32_MAX in (rq["life_ns"], rq["device_ns"]) else {}),
    }


def _queued_while_flushing(requests: list[dict[str, Any]]) -> None:
    """Marks each request that queued while its device was flushing its cache: how long its time
    before the device (its queue, or a preflush write's wait for its pre-flush) overlapped a cache
    flush's time on the same device (`queued_while_flushing_ns`), as a data write behind a commit's
    flush does."""
    flushing: dict[str, list[tuple[int, int]]] = {}
    for rq in requests:
        if rq["class"] == "flush" and rq["device_ns"]:
            flushing.setdefault(rq["device"], []).append((rq["end_at_ns"] - rq["device_ns"], rq["end_at_ns"]))
    for rq in requests:
        spans = flushing.get(rq["device"])
        if rq["class"] == "flush" or not spans or rq["device_ns"] is None:
            continue
        start, end = rq["start_at_ns"], rq["end_at_ns"] - rq["device_ns"]
        covered, reach = 0, start
        for s, e in sorted(spans):  # the union of the flushes' spans, clipped to the queue time
            s, e = max(s, reach), min(e, end)
            if e > s:
                covered += e - s
                reach = e
        if covered:
            rq["queued_while_flushing_ns"] = covered


def _last_requests(waits: list[dict[str, Any]], requests: list[dict[str, Any]], own: set[str], tid: int) -> None:
    """Marks each wait with the last request to end on the filesystem's own devices (`own`, not a
    loop device's backing disk) while it waited: `last_request`, with how long before the wakeup
    it ended. A wait for I/O ends when such a request does: an XFS log force when its iclog write
    ends, an fsync's data wait when its data write does. The requests kept are the last to end
    while the call ran (a suffix in time), so the one found is the last there was, never an older
    one that a later, unkept request hid."""
    for w in waits:
        start, end = w["at_ns"], w["at_ns"] + w["ns"]
        ended = [rq for rq in requests if rq["device"] in own and start <= rq["end_at_ns"] <= end]
        if not ended:
            continue
        rq = max(ended, key=lambda r: r["end_at_ns"])
        w["last_request"] = {
            "device": rq["device"],
            "class": rq["class"],
            "before_wake_ns": end - rq["end_at_ns"],
            "life_ns": rq["end_at_ns"] - rq["start_at_ns"],
            "device_ns": rq["device_ns"],
            **(
                {"queued_while_flushing_ns": rq["queued_while_flushing_ns"]} if "queued_while_flushing_ns" in rq else {}
            ),
            "made_by": "this call" if rq["made_by"] == tid else rq["made_by"],
        }


def _call(
    rules: attribution.Rules,
    call: dict[str, Any],
    stacks: dict[int, list[str]],
    devices: dict[int, str],
    uring: bool = False,
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
            cause, detail = attribution.classify_off(
                rules, {"stack": w["stack"], "runnable": False}, frames, waker=stacks.get(w["waker_stack"])
            )
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
    device_requests = [_device_request(rq, call, devices) for rq in reversed(call.get("device_requests", []))]
    _queued_while_flushing(device_requests)
    _last_requests(waits, device_requests, set(devices.values()), call["tid"])
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
        # What the traced devices were doing meanwhile: the last requests to end while it ran, oldest
        # first; device_requests_more: more ended than are kept (bpf/fsprof.h EXEMPLAR_RQS).
        **(
            {
                "device_requests": device_requests,
                "device_requests_more": call.get("device_more", False),
            }
            if device_requests
            else {}
        ),
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
