"""`fsprof timeline`: a run's slowest calls (its exemplars, docs/tail.md) as a Perfetto trace, to open
in ui.perfetto.dev. Under a track per filesystem, a track per traced thread holds each slow call as
a slice with its longest waits nested in it (named by cause; an io_uring request's, its io-wq
worker's, on a track of their own), and a track per filesystem worker
(jbd2, XFS's CIL push and log worker, btrfs's commit and log sync) holds the work windows that ended
those waits, each with a flow arrow to the wait it ended, and a track per block device holds the
requests that ended while those calls ran (each from its start to its end, its time on the device
nested at the end). Times are the kernel's CLOCK_MONOTONIC (bpf_ktime_get_ns), in the trace's
default clock domain."""

from pathlib import Path
from typing import Any

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket, TrackEvent
from perfetto.trace_builder.proto_builder import TraceProtoBuilder

from ..errors import FsprofError
from ..rundir import load
from ..units import fmt_ns
from .report import last_request_words, requests_words

SEQUENCE = 1  # every packet is this one writer's (trusted_packet_sequence_id)
BEGIN, END = TrackEvent.Type.TYPE_SLICE_BEGIN, TrackEvent.Type.TYPE_SLICE_END


class Timeline:
    """Tracks and slices, built up, then packets in time order (a begin before its children's)."""

    def __init__(self) -> None:
        self.builder = TraceProtoBuilder()
        self.tracks: dict[tuple[Any, ...], int] = {}
        self.events: list[tuple[int, int, int, TracePacket]] = []  # (ts, order, seq, packet)
        self.lanes: dict[tuple[Any, ...], list[list[tuple[int, int]]]] = {}
        self.flows = 0
        self.windows: dict[tuple[Any, ...], TracePacket] = {}  # a work window's begin, drawn once
        self.requests: set[tuple[Any, ...]] = set()  # block requests drawn (several calls may share one)

    def track(self, key: tuple[Any, ...], name: str, parent: int | None = None) -> int:
        """The uuid of the track `key`, its descriptor written the first time."""
        if key not in self.tracks:
            uuid = self.tracks[key] = len(self.tracks) + 1
            p = self.builder.add_packet()
            p.trusted_packet_sequence_id = SEQUENCE
            p.track_descriptor.uuid = uuid
            p.track_descriptor.name = name
            if parent is not None:
                p.track_descriptor.parent_uuid = parent
        return self.tracks[key]

    def lane(self, key: tuple[Any, ...], name: str, parent: int, start: int, end: int) -> int:
        """A track of `key` where [start, end) overlaps no slice already there (the kworkers of one
        pool share a name: their windows may overlap)."""
        lanes = self.lanes.setdefault(key, [])
        free = next((i for i, taken in enumerate(lanes) if all(end <= s or start >= e for s, e in taken)), None)
        if free is None:
            lanes.append([])
            free = len(lanes) - 1
        lanes[free].append((start, end))
        return self.track((*key, free), name if free == 0 else f"{name} #{free + 1}", parent)

    def slice(
        self,
        track: int,
        name: str,
        start: int,
        end: int,
        depth: int,
        args: dict[str, Any],
        flow: int | None = None,
        ends_flow: int | None = None,
    ) -> TracePacket:
        """A slice on `track`; depth orders events at one timestamp (a parent begins first, ends last)."""
        begin = TracePacket(timestamp=start, trusted_packet_sequence_id=SEQUENCE)
        begin.track_event.type = BEGIN
        begin.track_event.track_uuid = track
        begin.track_event.name = name
        for key, value in args.items():
            a = begin.track_event.debug_annotations.add(name=key)
            if isinstance(value, int):
                a.int_value = value
            else:
                a.string_value = str(value)
        if flow is not None:
            begin.track_event.flow_ids.append(flow)
        if ends_flow is not None:
            begin.track_event.terminating_flow_ids.append(ends_flow)
        finish = TracePacket(timestamp=end, trusted_packet_sequence_id=SEQUENCE)
        finish.track_event.type = END
        finish.track_event.track_uuid = track
        self.events.append((start, depth, len(self.events), begin))
        self.events.append((end, -depth, len(self.events), finish))
        return begin

    def serialize(self) -> bytes:
        for _, _, _, packet in sorted(self.events, key=lambda e: e[:3]):
            self.builder.add_packet().CopyFrom(packet)
        return self.builder.serialize()


def add_call(tl: Timeline, fs_track: int, label: str, op: str, call: dict[str, Any]) -> None:
    """One exemplar: the call on its thread's track, its waits in it, the work that ended them."""
    start, end = call["start_ns"], call["start_ns"] + call["ns"]
    thread = tl.track((label, "thread", call["tid"]), f"thread {call['tid']}", fs_track)
    tl.slice(
        thread,
        f"{op} {fmt_ns(call['ns'])}",
        start,
        end,
        0,
        {
            "phase": call["phase"],
            "ret": call["ret"],
            "cpu_ns": call["cpu_ns"],
            # An io_uring request's time outside its io-wq worker's waits (not CPU).
            **({"elsewhere_ns": call["elsewhere_ns"]} if "elsewhere_ns" in call else {}),
            "runnable_ns": call["runnable_ns"],
            "blocked_intervals": call["blocked_intervals"],
            "other_blocked_ns": call["other_blocked_ns"],
            # Its own block requests and what those that ended took (summed).
            **(
                {
                    "own_requests": requests_words(call["own_requests"]["requests"]),
                    **{f"own_requests_{k}": call["own_requests"][k] for k in ("timed", "device_ns", "life_ns")},
                }
                if call.get("own_requests")
                else {}
            ),
        },
    )
    for rq in call.get("device_requests", []):
        add_request(tl, fs_track, label, call, rq)
    # An io_uring request's waits are its io-wq worker's (which worker is not recorded): on a track
    # of their own beside the submitter's, the request drawn again there with its waits in it.
    waits_track = thread
    if "elsewhere_ns" in call and call["waits"]:
        name = f"io-wq workers, thread {call['tid']}'s requests"
        waits_track = tl.lane((label, "io-wq", call["tid"]), name, fs_track, start, end)
        tl.slice(waits_track, f"{op} {fmt_ns(call['ns'])} (its io-wq worker's waits)", start, end, 0, {})
    for w in call["waits"]:
        w_start = min(max(start + w["at_ns"], start), end)
        w_end = min(w_start + w["ns"], end)
        work = w.get("work")
        flow = None
        if work:
            tl.flows += 1
            flow = tl.flows
            add_work(tl, fs_track, label, w, work, start, w_end, flow)
        tl.slice(
            waits_track,
            w["cause"],
            w_start,
            w_end,
            1,
            {
                "ended_by": w["ended_by"],
                **({"detail": w["detail"]} if w.get("detail") else {}),
                # The last request to end on the filesystem's device before the wakeup (its track).
                **({"last_request": last_request_words(w).removeprefix("; ")} if w.get("last_request") else {}),
            },
            ends_flow=flow,
        )


def add_work(
    tl: Timeline,
    fs_track: int,
    label: str,
    w: dict[str, Any],
    work: dict[str, Any],
    call_start: int,
    woken: int,
    flow: int,
) -> None:
    """The worker window that ended wait `w`, on the track of the thread that ended it (open at
    the wakeup: drawn to the wakeup)."""
    start = call_start + work["start_at_ns"]
    end = call_start + work["end_at_ns"] if work["end_at_ns"] is not None else max(woken, start)
    name = f"{w['ended_by']} ({work['worker']})"
    key = (label, name, work.get("id"), start, end)
    if key in tl.windows:  # one commit ended several slow calls' waits: one slice, an arrow each
        tl.windows[key].track_event.flow_ids.append(flow)
        return
    track = tl.lane((label, "worker", name), name, fs_track, start, end)
    title = f"{work['worker']} {work['id']}" if "id" in work else work["worker"]
    tl.windows[key] = tl.slice(
        track,
        title,
        start,
        end,
        0,
        {
            "blocked_ns": work["blocked_ns"],
            "requests": requests_words({cls: n for cls, n in work["requests"].items() if n}) or "none",
            "open_at_wakeup": int(work["end_at_ns"] is None),
            # Its requests that had ended by the wakeup: how many, their summed times.
            **{f"requests_{k}": v for k, v in work.get("request_times", {}).items()},
        },
        flow=flow,
    )


def add_request(tl: Timeline, fs_track: int, label: str, call: dict[str, Any], rq: dict[str, Any]) -> None:
    """A block request that ended while a slow call ran, on its device's track: from its start to
    its end, with its time on the device nested at the end (the rest it queued, or waited for the
    cache flush the kernel ran before it). Drawn once however many calls it overlapped."""
    start, end = call["start_ns"] + rq["start_at_ns"], call["start_ns"] + rq["end_at_ns"]
    key = (label, rq["device"], rq["class"], start, end)
    if key in tl.requests:
        return
    tl.requests.add(key)
    track = tl.lane((label, "device", rq["device"]), f"device {rq['device']}", fs_track, start, end)
    made_by = rq.get("made_by")
    whose = (
        "unknown" if made_by is None else f"thread {made_by}" + (" (the call's own)" if made_by == call["tid"] else "")
    )
    args: dict[str, Any] = {"made_by": whose, "device_ns": rq["device_ns"] or 0}
    if rq.get("queued_while_flushing_ns"):
        args["queued_while_flushing_ns"] = rq["queued_while_flushing_ns"]
    if rq["device_ns"] is None:
        args["issued"] = "no: the queue's own flush request did its device work"
    tl.slice(track, rq["class"], start, end, 0, args)
    if rq["device_ns"]:
        tl.slice(track, "on the device", max(end - rq["device_ns"], start), end, 1, {})


def build(result: dict[str, Any]) -> tuple[bytes, int]:
    """(the Perfetto trace of a result's exemplars, how many calls it holds)."""
    tl = Timeline()
    calls = 0
    for fs in result["filesystems"]:
        exemplars = fs.get("exemplars") or {}
        if not any(exemplars.values()):
            continue
        fs_track = tl.track((fs["label"],), f"{fs['fs']} {fs['label']}")
        for op, op_calls in exemplars.items():
            for call in op_calls:
                add_call(tl, fs_track, fs["label"], op, call)
                calls += 1
    return tl.serialize(), calls


def write(run_dir: str | Path, output: str | Path | None) -> tuple[Path, int]:
    """Writes RUN's timeline (default RUN/timeline.pftrace); (the path, the calls in it)."""
    result = load(run_dir)
    data, calls = build(result)
    if not calls:
        raise FsprofError(f"{run_dir} kept no slow calls to draw (a run recorded before exemplars, or with none)")
    path = Path(output) if output else Path(run_dir) / "timeline.pftrace"
    try:
        path.write_bytes(data)
    except OSError as e:
        raise FsprofError(f"cannot write {path}: {e.strerror}")
    return path, calls
