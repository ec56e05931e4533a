"""`fsprof timeline RUN`: the run's slowest calls as a Perfetto trace. Read back with Perfetto's
own protos, the trace holds every exemplar of result.json (itself held against a bpftrace oracle
in test_tail.py) as a slice on its thread's track, its waits nested in it, and the jbd2 commit
that ended each commit wait on the jbd2 thread's track, with an arrow to the wait, and the block
requests that ended while the calls ran on their device's track."""

import json
from collections import defaultdict

import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

from conftest import run_fsprof

BEGIN, END = TrackEvent.Type.TYPE_SLICE_BEGIN, TrackEvent.Type.TYPE_SLICE_END


def read_trace(path):
    """(track uuid -> (name, parent uuid), [(track, begin, end, name, args, flows, ends_flows)])."""
    tracks, slices, open_ = {}, [], defaultdict(list)
    last_ts = 0
    for p in Trace.FromString(path.read_bytes()).packet:
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            tracks[d.uuid] = (d.name, d.parent_uuid or None)
            continue
        e = p.track_event
        assert p.timestamp >= last_ts  # in time order, as trace_processor's sorter wants
        last_ts = p.timestamp
        if e.type == BEGIN:
            args = {a.name: a.int_value if a.HasField("int_value") else a.string_value for a in e.debug_annotations}
            open_[e.track_uuid].append((p.timestamp, e.name, args, list(e.flow_ids), list(e.terminating_flow_ids)))
        else:
            assert e.type == END
            begin, name, args, flows, ends = open_[e.track_uuid].pop()  # nested: the last begun ends first
            slices.append((e.track_uuid, begin, p.timestamp, name, args, flows, ends))
    assert not any(open_.values())
    return tracks, slices


@pytest.mark.slow
@pytest.mark.root
def test_the_timeline_holds_each_slow_call_its_waits_and_the_commit_that_ended_them(tmp_path):
    run = tmp_path / "run"
    proc = run_fsprof(
        "run", "--scratch-dir", str(tmp_path / "scratch"), "-o", str(run), "--fs", "ext4", "--count", "200"
    )
    assert proc.returncode == 0, proc.stderr
    (fs,) = json.loads((run / "result.json").read_text())["filesystems"]
    proc = run_fsprof("timeline", str(run))
    assert proc.returncode == 0, proc.stderr
    calls = [(op, c) for op, cs in fs["exemplars"].items() for c in cs]
    assert f"{len(calls)} slow calls" in proc.stdout
    tracks, slices = read_trace(run / "timeline.pftrace")

    (fs_track,) = [u for u, (name, parent) in tracks.items() if parent is None]
    assert tracks[fs_track][0] == f"ext4 {fs['label']}"
    by_span = {(tracks[s[0]][0], s[1], s[2]): s for s in slices}
    flows_ending = {}
    for op, call in calls:
        start, end = call["start_ns"], call["start_ns"] + call["ns"]
        track, _, _, name, args, _, _ = by_span[(f"thread {call['tid']}", start, end)]
        assert tracks[track][1] == fs_track
        assert (args["ret"], args["cpu_ns"]) == (call["ret"], call["cpu_ns"])
        own = call.get("own_requests")  # an fsync's data write: its own
        assert args.get("own_requests_device_ns") == (own["device_ns"] if own else None), (args, own)
        assert name.startswith(op + " ")
        in_call = [s for s in slices if s[0] == track and start <= s[1] and s[2] <= end and s[1:3] != (start, end)]
        assert sorted((s[1] - start, s[2] - s[1], s[3]) for s in in_call) == sorted(
            (w["at_ns"], w["ns"], w["cause"]) for w in call["waits"]
        )
        for s in in_call:
            for flow in s[6]:
                flows_ending[flow] = s
    commit_waits = [w for _, c in calls for w in c["waits"] if w.get("work")]
    assert commit_waits, "no exemplar wait was ended by a worker"
    # Each wait a worker ended has one arrow from that work's slice, on the worker thread's track.
    work_slices = [s for s in slices if "(" in tracks[s[0]][0]]
    arrows = {flow: s for s in work_slices for flow in s[5]}
    assert sorted(arrows) == sorted(flows_ending) and len(arrows) == len(commit_waits)
    for flow, work_slice in arrows.items():
        wait = flows_ending[flow]
        track_name = tracks[work_slice[0]][0]
        assert track_name.startswith(wait[4]["ended_by"] + " (")  # the thread that ended the wait
        if track_name.endswith("(jbd2 commit)"):
            assert work_slice[3].startswith("jbd2 commit ")  # named by its transaction
            assert work_slice[2] <= wait[2]  # the commit ended, then the fsync woke
    # One slice per commit, however many waits it ended.
    assert len({(s[0], s[1], s[2]) for s in work_slices}) == len(work_slices)

    # Each request that ended on a device while a slow call ran (result.json's device_requests,
    # held against bpftrace in test_tail.py): one slice on its device's track, from its start to
    # its end, its time on the device nested at the end; drawn once however many calls it overlapped.
    requests = {
        (rq["device"], c["start_ns"] + rq["start_at_ns"], c["start_ns"] + rq["end_at_ns"], rq["class"], rq["device_ns"])
        for _, c in calls
        for rq in c.get("device_requests", [])
    }
    assert requests, "no slow call saw a request end on the device"
    drawn = {
        (tracks[s[0]][0].removeprefix("device ").split(" #")[0], s[1], s[2], s[3], s[4]["device_ns"] or None)
        for s in slices
        if tracks[s[0]][0].startswith("device ") and s[3] != "on the device"
    }
    assert drawn == requests
    on_device = {(s[0], s[2], s[2] - s[1]) for s in slices if s[3] == "on the device"}
    for s in slices:
        if tracks[s[0]][0].startswith("device ") and s[3] != "on the device" and s[4]["device_ns"]:
            assert tracks[s[0]][1] == fs_track
            assert (s[0], s[2], min(s[4]["device_ns"], s[2] - s[1])) in on_device

    # A run that kept no slow calls, and an output that cannot be written: one sentence each.
    result = json.loads((run / "result.json").read_text())
    result["filesystems"][0]["exemplars"] = {}
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "result.json").write_text(json.dumps(result))
    proc = run_fsprof("timeline", str(tmp_path / "none"))
    assert proc.returncode == 1 and "kept no slow calls" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_fsprof("timeline", str(run), "-o", str(tmp_path / "missing" / "t.pftrace"))
    assert proc.returncode == 1 and "cannot write" in proc.stderr and "Traceback" not in proc.stderr


def test_bad_input_gets_one_sentence(tmp_path):
    proc = run_fsprof("timeline", str(tmp_path))
    assert proc.returncode == 1 and "is not an fsprof run directory" in proc.stderr
    assert "Traceback" not in proc.stderr
