"""`fsprof record --continuous`: record a pid, cgroup, mount or the whole machine indefinitely, in
windows, for the systems a fleet already runs: Prometheus scrapes the figures (views/metrics.py),
and each window's stacks become a pprof profile (views/pprof.py) written to a directory and, if
asked, sent to a Pyroscope-compatible ingest URL.

Bounded by construction: every window drains the stack-keyed BPF maps (Collector.snapshot with
drain); the syscall histograms and block/journal counters are keyed by filesystem and syscall
only; the stack maps are emptied whenever the stacks seen since they were last emptied pass a
quarter of the main map's size (beyond that, more collide than its spill map holds); the
metrics keep the series of filesystems mounted now; the profile directory keeps the newest
--pprof-keep files. Filesystems mounted or unmounted are picked up at the next window; a
filesystem type whose BPF object is not loaded yet (its module loaded since) makes the programs be
loaded again, the counters carrying on. The target is pointed at again every window (a cgroup
re-opened by its path, a process's children found again). SIGHUP does both at once; SIGTERM and
Ctrl-C stop after detaching everything.
"""

import dataclasses
import signal
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import behind, filesystems
from ..analysis.assemble import assemble
from ..errors import FsprofError
from ..machine.mounts import mount_of, mounts
from ..views import flamegraph, metrics, pprof
from ..trace.maps import EXEMPLARS
from .collect import DEFAULT_STACK_SAMPLE, DEFAULT_TAIL_NS, Collector
from .record import _block_of, _sb_dev, apply_target, check_target, parse_duration, zero_block_classes

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    import requests

DEFAULT_WINDOW = "15s"
DEFAULT_LISTEN = "127.0.0.1:9478"
DEFAULT_PPROF_KEEP = 240  # an hour of 15 s windows
PHASES = ["continuous"]
PROFILE_TYPES = (("off_cpu", "nanoseconds"), ("on_cpu", "nanoseconds"), ("workers_off_cpu", "nanoseconds"))
PPROF_PREFIX = "fsprof-"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContinuousOptions:
    """What `fsprof record --continuous` is asked; profiler/commands/record.py builds it. One of
    pid, cgroup and mount names the target, or all is set."""

    pid: int | None = None
    cgroup: str | None = None  # absolute, or relative to the cgroup v2 root
    mount: str | None = None
    all: bool = False  # every process, every traced filesystem
    window: str = DEFAULT_WINDOW  # as the user wrote it: the start line repeats it
    duration: str | None = None  # None: until stopped
    listen: str = DEFAULT_LISTEN  # HOST:PORT of /metrics, or "off"
    pprof_dir: str | None = None
    pprof_keep: int = DEFAULT_PPROF_KEEP
    pprof_url: str | None = None
    sample_hz: int
    stack_sample: int = DEFAULT_STACK_SAMPLE
    tail_threshold_ns: int = DEFAULT_TAIL_NS
    exemplars: int = EXEMPLARS  # the slowest calls kept whole per op and window


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise FsprofError(f"--listen {text}: give HOST:PORT, e.g. {DEFAULT_LISTEN}", exit_code=2)
    return host.strip("[]") or "0.0.0.0", int(port)


def serve(listen: str, totals: metrics.Totals) -> "WSGIServer":
    """The HTTP endpoint Prometheus scrapes (/metrics), on a thread of its own."""
    from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server

    host, port = parse_listen(listen)
    registry = CollectorRegistry()
    registry.register(metrics.Exposition(totals))
    ProcessCollector(registry=registry)  # fsprof's own CPU seconds and memory
    try:
        server, _ = start_http_server(port, addr=host, registry=registry)
    except OSError as e:
        raise FsprofError(
            f"cannot listen on {listen} for Prometheus: {e.strerror or e}; choose another with --listen HOST:PORT"
        )
    return server


class Scope:
    """What is traced and on which filesystems, re-read at every window."""

    def __init__(self, options):
        self.mount = options.mount
        if options.all:
            self.kind, self.value = "all", None
        else:
            self.kind, self.value, _ = check_target(options.pid, options.cgroup, options.mount)

    def mounts(self) -> list[tuple[dict[str, str], behind.Target]]:
        """The traced filesystems mounted now: (mount, behind.Target), one per superblock."""
        if self.kind == "mount":
            m = mount_of(self.mount)
            found = [m] if m and m["fstype"] in filesystems.NAMES else []
        else:
            found = [m for m in mounts() if m["fstype"] in filesystems.NAMES]
        seen, out = set(), []
        for m in found:
            if m["majmin"] not in seen:
                seen.add(m["majmin"])
                block = _block_of(m)
                out.append(
                    (m, behind.Target(m["fstype"], _sb_dev(m), {block[1]: block[0]} if block else {}, m["target"]))
                )
        return out

    def point(self, collector: Collector, targets: list[behind.Target]) -> str:
        """Points the collector at the target as it is now; returns its description."""
        if self.kind == "all":
            collector.trace_all(0)
            return "every process, every ext4/XFS/btrfs filesystem"
        if self.kind == "mount":
            if not targets:
                return f"{self.mount} (not mounted now)"
            collector.trace_all(targets[0].sb_dev)
            return f"every process, operations on {self.mount}"
        if self.kind == "cgroup" and not (self.value / "cgroup.procs").exists():
            return f"cgroup {self.value} (gone: recording resumes when it is made again)"
        return apply_target(collector, self.kind, self.value)


def _zero_hist():
    return {"count": 0, "total_ns": 0, "max_ns": 0, "fine": {}}


def _hist_delta(now, before):
    fine = {s: n - before["fine"].get(s, 0) for s, n in now["fine"].items() if n - before["fine"].get(s, 0)}
    out = {
        "count": now["count"] - before["count"],
        "total_ns": now["total_ns"] - before["total_ns"],
        "max_ns": now["max_ns"],
        "fine": fine,
    }
    if "bytes" in now:
        out["bytes"] = now["bytes"] - before.get("bytes", 0)
    return out


class Windows:
    """Turns successive drained snapshots of one Collector into per-window raw data."""

    def __init__(self):
        self.ops = {}  # (dev, op, phase) -> cumulative histogram at the last window
        self.carry = {}  # (dev, op, phase) -> ns of off-CPU time recorded before its syscall ended

    def window_raw(self, raw: dict[str, Any]) -> dict[str, Any]:
        """raw with ops turned into this window's change. A syscall whose off-CPU intervals were
        drained in an earlier window than its exit is held to them: its wall time in a window is
        raised to that window's off-CPU time and the excess carried (negative) into the next, so
        that no window shows negative on-CPU time and the sum over windows is the true one."""
        now = {(r["dev"], r["op"], r["phase"]): r for r in raw["ops"] if r["dev"]}
        off: dict[tuple[int, str, int], int] = {}
        for r in raw["offcpu"]:
            key = (r["dev"], r["op"], r["phase"])
            off[key] = off.get(key, 0) + r["total_ns"]
        ops = []
        for key in set(now) | set(off) | set(self.carry):
            cur = now.get(key) or self.ops.get(key) or _zero_hist()
            d = _hist_delta(cur, self.ops.get(key) or _zero_hist())
            wall = d["total_ns"] + self.carry.get(key, 0)
            on = wall - off.get(key, 0)
            self.carry[key] = min(on, 0)
            if not self.carry[key]:
                del self.carry[key]
            d["total_ns"] = max(wall, off.get(key, 0))
            if d["count"] or d["total_ns"]:
                ops.append({"dev": key[0], "op": key[1], "phase": key[2], **d})
        self.ops.update(now)
        return {**raw, "ops": ops}


def _entry(raw, mount, target, end_ns):
    """A result entry (as `fsprof record` writes) of one filesystem."""
    names = list(target.block_devs.values())
    raw_m = {**raw, "block": {n: v for n, v in raw["block"].items() if n in names}}
    entry = {
        "label": mount["target"],
        "fs": mount["fstype"],
        "device": {"name": names[0] if names else mount["source"]},
        **assemble(raw_m, target, PHASES, end_ns),
    }
    zero_block_classes(entry, names)
    return entry


def window_profile(entries: list[dict[str, Any]], start_ns_wall: int, duration_ns: int, host: str) -> pprof.Profile:
    """One pprof profile of a window: off-CPU, on-CPU and worker time (ns) under the flame graphs'
    [filesystem];[op or worker];[cause] roots."""
    prof = pprof.Profile(
        PROFILE_TYPES,
        time_ns=start_ns_wall,
        duration_ns=duration_ns,
        comments=[f"fsprof record --continuous on {host}"],
    )
    for entry in entries:
        for i, build in enumerate((flamegraph.offcpu_stacks, flamegraph.oncpu_stacks, flamegraph.worker_stacks)):
            for path, ns in build(entry).items():
                values = [0, 0, 0]
                values[i] = int(ns)
                prof.add(path, values)
    return prof


def write_profile(directory: str | Path, prof: pprof.Profile, end_wall_s: float, keep: int) -> Path:
    """DIR/fsprof-<UTC time of the window's end, to the millisecond>.pb.gz; the oldest beyond `keep` go."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(end_wall_s)) + f".{int(end_wall_s * 1000) % 1000:03d}Z"
    path = Path(directory) / f"{PPROF_PREFIX}{stamp}.pb.gz"
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(prof.gzipped())
    tmp.replace(path)
    ours = sorted(p for p in Path(directory).glob(f"{PPROF_PREFIX}*.pb.gz"))
    for old in ours[: max(len(ours) - keep, 0)]:
        old.unlink(missing_ok=True)
    return path


def post_profile(
    url: str, data: bytes, start_s: float, end_s: float, host: str, session: "requests.Session"
) -> str | None:
    """Pyroscope's ingest API: POST /ingest?name=...&from=&until=&format=pprof, the profile as
    the multipart field "profile". A refusal is said once per window, and recording goes on."""
    params: dict[str, str | int] = {
        "name": f"fsprof{{host={host}}}",
        "from": int(start_s),
        "until": int(end_s),
        "format": "pprof",
    }
    try:
        r = session.post(url, params=params, files={"profile": ("profile.pb.gz", data)}, timeout=10)
    except Exception as e:  # requests' connection errors, timeouts, bad URLs
        return f"could not send the profile to {url}: {e.__class__.__name__}: {e}"
    if r.status_code >= 300:
        return f"{url} refused the profile: HTTP {r.status_code} {r.text.strip()[:200]}"
    return None


class Generation:
    """One set of loaded BPF programs (a Collector) for the filesystem types in `fs`."""

    def __init__(
        self,
        scope,
        fs,
        sample_hz,
        targets,
        stack_sample=DEFAULT_STACK_SAMPLE,
        tail_ns=DEFAULT_TAIL_NS,
        exemplars=EXEMPLARS,
    ):
        self.fs = set(fs)
        self.collector = Collector(
            sample_hz=sample_hz, fs=sorted(self.fs), stack_sample=stack_sample, tail_ns=tail_ns, exemplars=exemplars
        )
        self.collector.reset()
        self.what = scope.point(self.collector, targets)
        self.collector.set_targets(targets)
        self.windows = Windows()
        self.stacks_seen = set()
        self.last_entries = []  # the last window's result entries (its profile's source)

    def close(self) -> None:
        self.collector.close()


def _say(text):
    print(f"fsprof: {text}", file=sys.stderr, flush=True)


def continuous(options: ContinuousOptions) -> int:
    window_s = parse_duration(options.window, "--window")
    if window_s < 1:
        raise FsprofError("--window must be at least 1s", exit_code=2)
    duration = parse_duration(options.duration) if options.duration else float("inf")
    scope = Scope(options)
    keep = options.pprof_keep
    if options.pprof_dir:
        try:
            Path(options.pprof_dir).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise FsprofError(f"cannot use {options.pprof_dir} for profiles: {e.strerror}")
    session = None
    if options.pprof_url:
        import requests

        session = requests.Session()
    host = socket.gethostname()
    totals = metrics.Totals()
    server = serve(options.listen, totals) if options.listen != "off" else None
    rescan = []
    old_hup = signal.signal(signal.SIGHUP, lambda *_: rescan.append(1))
    found: list[tuple[dict[str, str], behind.Target]]
    gen, started, found, w_end = None, time.monotonic(), [], 0
    try:
        while time.monotonic() - started < duration:
            was_found, found = found, scope.mounts()
            targets = [t for _, t in found]
            wanted = {m["fstype"] for m, _ in found} or {"ext4"}
            if gen is None or not wanted <= gen.fs:
                if gen is not None:
                    _say(f"loading the programs again for {', '.join(sorted(wanted - gen.fs))}")
                    # What the old programs saw since the last window counts, then they go.
                    one_window(gen, was_found, totals, w_end, time.monotonic_ns())
                    gen.close()
                    totals.begin_generation()
                gen = Generation(
                    scope,
                    wanted | (gen.fs if gen else set()),
                    options.sample_hz,
                    targets,
                    options.stack_sample,
                    options.tail_threshold_ns,
                    options.exemplars,
                )
                _say(
                    f"recording {gen.what} in {options.window} windows"
                    + (f"; metrics on http://{options.listen}/metrics" if server else "")
                    + "; Ctrl-C to stop"
                )
            else:
                gen.collector.set_targets(targets)
                # Pointed again each window: a remount under --mount, a restarted service's new
                # cgroup of the same path, children the traced process started before fsprof.
                try:
                    scope.point(gen.collector, targets)
                except FsprofError as e:  # e.g. the cgroup went away between looking and opening
                    _say(f"{e}; trying again next window")
            w_start, w_start_wall = time.monotonic_ns(), time.time()
            end = min(time.monotonic() + window_s, started + duration)
            while time.monotonic() < end and not rescan:
                time.sleep(min(0.2, max(end - time.monotonic(), 0)))
            rescan.clear()
            w_end = time.monotonic_ns()
            one_window(gen, found, totals, w_start, w_end)
            if options.pprof_dir or session:
                prof = window_profile(gen.last_entries, int(w_start_wall * 1e9), w_end - w_start, host)
                if options.pprof_dir:
                    write_profile(options.pprof_dir, prof, time.time(), keep)
                if session:
                    assert options.pprof_url is not None  # session is made only for it
                    problem = post_profile(options.pprof_url, prof.gzipped(), w_start_wall, time.time(), host, session)
                    if problem:
                        _say(problem)
        return 0
    except KeyboardInterrupt:
        return 0
    except SystemExit as e:
        if e.code == 128 + signal.SIGTERM:
            return 0
        raise
    finally:
        signal.signal(signal.SIGHUP, old_hup)
        if gen is not None:
            gen.close()
        if server is not None:
            server.shutdown()
            server.server_close()


def one_window(
    gen: Generation,
    found: list[tuple[dict[str, str], behind.Target]],
    totals: metrics.Totals,
    start_ns: int,
    end_ns: int,
) -> list[dict[str, Any]]:
    """Drains the window's figures into `totals` (and gen.last_entries, for its profile)."""
    c = gen.collector
    raw = c.snapshot(drain=True)
    window = gen.windows.window_raw(raw)
    cumulative = {**raw, "offcpu": [], "samples": [], "workers": []}
    entries = [_entry(window, m, target, end_ns) for m, target in found]
    running = [metrics.cumulative_figures(_entry(cumulative, m, target, end_ns)) for m, target in found]
    running += [metrics.drop_figures(raw["drops"]), metrics.program_figures(c.run_stats())]
    with totals.lock:
        for figures in running:
            totals.add_running(figures)
        wall_minus_monotonic = time.time() - time.monotonic()
        for e in entries:
            totals.add(metrics.window_figures(e))
            totals.exemplars.update(metrics.window_exemplars(e, wall_minus_monotonic))
        totals.add({("fsprof_windows", ()): 1})
        totals.gauges[("fsprof_window_seconds", ())] = (end_ns - start_ns) / 1e9
        totals.gauges[("fsprof_traced_filesystems", ())] = len(found)
        totals.keep_filesystems({metrics.fs_labels(e) for e in entries})
    gen.last_entries = entries
    gen.stacks_seen |= {r["stack"] for r in raw["offcpu"] + raw["samples"] + raw["workers"]}
    if len(gen.stacks_seen) > c.stacks.max_entries // 4:
        c.forget_stacks()
        gen.stacks_seen = set()
    return entries
