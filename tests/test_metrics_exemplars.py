"""Continuous mode's latency histogram carries the window's slowest calls as OpenMetrics
exemplars (views/metrics.py), read back by prometheus-client's own OpenMetrics parser. The real
path (a freeze under a writer, stored by a Prometheus server) is in test_continuous.py."""

import copy
import gzip
import json
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from profiler.views import metrics

STORED = Path(__file__).resolve().parent / "data" / "stored-run" / "result.json.gz"


def entry_with(calls_ms):
    with gzip.open(STORED) as f:
        fs = copy.deepcopy(json.load(f)["filesystems"][0])

    def call(ms, tid):
        ns = int(ms * 1e6)
        wait = {"at_ns": 0, "ns": ns // 2, "cause": "journal commit wait", "ended_by": "jbd2/loop0-8"}
        return {
            "tid": tid, "phase": "run", "start_ns": 10**9, "ns": ns, "ret": 0, "waits": [wait],
            "other_blocked_ns": 0, "blocked_intervals": 1, "runnable_ns": ns // 10, "cpu_ns": ns - ns // 2 - ns // 10,
        }  # fmt: skip

    fs["exemplars"] = {"fsync": [call(ms, 100 + i) for i, ms in enumerate(calls_ms)]}
    return fs


def exposed(totals):
    registry = CollectorRegistry()
    registry.register(metrics.Exposition(totals))
    text = generate_latest(registry).decode()
    return {
        s.labels["le"]: s.exemplar
        for family in text_string_to_metric_families(text)
        if family.name == "fsprof_syscall_latency_seconds"
        for s in family.samples
        if s.name.endswith("_bucket") and s.labels["op"] == "fsync"
    }


def test_each_bucket_holds_its_slowest_call_of_the_latest_window():
    totals = metrics.Totals()
    first = entry_with([20, 18, 3])  # 20 and 18 ms share the bucket up to 2^26 ns (67.1 ms)
    totals.add_running(metrics.cumulative_figures(first))
    totals.exemplars.update(metrics.window_exemplars(first, 1000.0))
    got = exposed(totals)
    slow, fast = got["0.067108864"], got["0.004194304"]
    assert slow.labels == {"tid": "100", "cause": "journal commit wait"} and slow.value == 0.02
    assert float(slow.timestamp) == 1001.02  # the call's end on the wall clock: 1000 + 1 s + 20 ms
    assert fast.labels["tid"] == "102" and fast.value == 0.003
    assert sum(e is not None for e in got.values()) == 2
    # The next window's call in the same bucket takes its place; the other bucket keeps its own.
    later = entry_with([25])
    totals.exemplars.update(metrics.window_exemplars(later, 2000.0))
    got = exposed(totals)
    assert got["0.067108864"].value == 0.025 and got["0.004194304"].labels["tid"] == "102"
    # A filesystem unmounted takes its exemplars with it.
    totals.keep_filesystems(set())
    assert not totals.exemplars
