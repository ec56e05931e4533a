"""`fsprof record --continuous` against independent readers: a real Prometheus server (Debian's
`prometheus`) scrapes it and its stored counters are checked against the kernel's own
(/sys/block/*/stat, /proc/fs/jbd2/*/info); `promtool check metrics` checks the exposition; `go tool
pprof -raw` reads the profiles; a local HTTP server stands in for a Pyroscope ingest URL."""

import gzip
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from conftest import REPO, TIME_SCALE
from profiler.machine import blockdev, scratch, undo
from test_behind_ext4 import jbd2_info
from test_record import FSYNCS, fsprof_program_names, loaded_fsprof_programs

pytestmark = pytest.mark.root

WINDOW = "1s"
DASHBOARD = Path(REPO) / "deploy" / "grafana-dashboard.json"
FREEZE_WRITER = Path(__file__).with_name("freeze_writer.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_continuous(*args):
    proc = subprocess.Popen(
        [sys.executable, "-m", "profiler", "record", "--continuous", "--window", WINDOW, *args],
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stderr.readline()
    assert "recording" in line, line + proc.stderr.read()
    return proc


def stop(proc):
    """SIGTERM, as systemd stops a unit: exit 0 and nothing of fsprof's left in the kernel."""
    proc.send_signal(signal.SIGTERM)
    try:
        status = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    err = proc.stderr.read()
    assert status == 0, err
    assert "Traceback" not in err
    assert loaded_fsprof_programs(fsprof_program_names()) == []
    return err


def scrape(port, openmetrics=False):
    """The exposition text; in OpenMetrics (which carries exemplars) when asked for."""
    headers = {"Accept": "application/openmetrics-text; version=1.0.0"} if openmetrics else {}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read().decode()


def sample(text, name, **labels):
    """The value of one series in an exposition text (0 when absent)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            got = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0])) if "{" in line else {}
            if all(got.get(k) == v for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
    return total


def write_fsyncs(path, n):
    subprocess.run([sys.executable, "-c", FSYNCS, str(path), str(n)], check=True)


class Prometheus:
    """A Prometheus server of the test's own: its config, storage and port, scraping every second."""

    def __init__(self, tmp_path, target_port, *flags):
        self.port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            f"global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
            f"  - job_name: fsprof\n    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n"
        )
        self.proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                *flags,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def query(self, expr):
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]["result"]

    def exemplars(self, expr, start, end):
        """[(series labels, exemplar)] Prometheus stored for expr between start and end (wall s)."""
        args = urllib.parse.urlencode({"query": expr, "start": start, "end": end})
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/query_exemplars?{args}", timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return [(s["seriesLabels"], e) for s in body["data"] for e in s["exemplars"]]

    def value(self, expr):
        result = self.query(expr)
        return sum(float(r["value"][1]) for r in result) if result else None

    def wait_for(self, expr, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                v = self.value(expr)
                if v is not None:
                    return v
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"Prometheus never had {expr}")

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def settled(prom, device, labels, names):
    """(kernel counters, Prometheus's stored values) of one quiet moment: the kernel's flush and
    commit counts did not change over a few windows and scrapes (ext4 may still commit on its own
    a few seconds after a write), and what Prometheus stored did not either between two reads 2 s
    apart, and Prometheus holds two windows begun after the kernel's counts were read. On a loaded
    machine a window's export or a scrape can come late: one read after 3 s once saw 290 of 300
    flushes, and under `make test-stress` two reads 2 s apart once agreed on 294 of 300, the last
    commits' flushes still in a window not yet exported."""

    def stored():
        return [prom.value(n if "{" in n else n + labels) or 0 for n in names]

    for _ in range(20):
        before = kernel_counts(device)
        windows = prom.value("fsprof_windows_total") or 0
        deadline = time.time() + 60
        while (prom.value("fsprof_windows_total") or 0) < windows + 2 and time.time() < deadline:
            time.sleep(0.5)
        first = stored()
        time.sleep(2)
        last = stored()
        if kernel_counts(device) == before and first == last:
            return before, last
    raise AssertionError("the scratch filesystem never went quiet")


def kernel_counts(device):
    name = os.path.basename(device)
    return blockdev.read_stat(name)["flush_ios"], jbd2_info(name)["transactions"]


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("prometheus"), reason="Debian's prometheus package is not installed (make setup)")
def test_prometheus_stores_flushes_and_commits_equal_to_the_kernels(tmp_path):
    with undo.Changes() as changes:
        sfs = scratch.provision(changes, scratch.FsConfig("ext4"), tmp_path / "scratch")
        port = free_port()
        rec = start_continuous("--mount", sfs.mountpoint, "--listen", f"127.0.0.1:{port}")
        prom = Prometheus(tmp_path, port)
        try:
            labels = f'{{mountpoint="{sfs.mountpoint}"}}'
            prom.wait_for(f"fsprof_cache_flushes_total{labels}")
            metrics_ = (
                "fsprof_cache_flushes_total",
                "fsprof_jbd2_commits_total",
                f'fsprof_syscall_latency_seconds_count{{mountpoint="{sfs.mountpoint}",op="fsync"}}',
                f'fsprof_worker_windows_total{{mountpoint="{sfs.mountpoint}",worker="jbd2 commit"}}',
                f'fsprof_worker_block_requests_total{{mountpoint="{sfs.mountpoint}",worker="jbd2 commit",'
                'class="preflush_write"}',
            )
            kernel0, stored0 = settled(prom, sfs.devices[0], labels, metrics_)
            write_fsyncs(Path(sfs.mountpoint) / "a.dat", 150)
            kernel1, stored1 = settled(prom, sfs.devices[0], labels, metrics_)
            flushes, commits, fsyncs, windows, commit_blocks = (b - a for a, b in zip(stored0, stored1))
            flushes1, commits1 = kernel1
            flushes0, commits0 = kernel0
            assert fsyncs == 150
            # Each jbd2 commit is a worker window that writes one commit block (PREFLUSH + FUA).
            assert windows == commit_blocks == commits1 - commits0
            assert flushes1 - flushes0 >= 150 and flushes == flushes1 - flushes0
            assert commits1 - commits0 >= 150 and commits == commits1 - commits0
            # The time by cause adds up to the syscalls' time (the attribution's invariant).
            by_cause = prom.value(f'sum(fsprof_syscall_time_seconds_total{{mountpoint="{sfs.mountpoint}",op="fsync"}})')
            total = prom.value(f'fsprof_syscall_latency_seconds_sum{{mountpoint="{sfs.mountpoint}",op="fsync"}}')
            assert by_cause == pytest.approx(total, rel=1e-6)
            # Every panel of the shipped dashboard is a query Prometheus accepts and answers.
            # the fsync, flush, commit and worker panels have data on this ext4 (XFS, btrfs, throttling not).
            for expr in dashboard_queries():
                result = prom.query(
                    expr.replace("$host", ".*").replace("$mountpoint", ".*").replace("$__rate_interval", "30s")
                )
                assert result or not re.search(r"fsync|jbd2|worker", expr), expr

            text = scrape(port)
            check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
            assert check.returncode == 0, check.stdout + check.stderr
        finally:
            prom.close()
            stop(rec)


def test_the_write_that_met_a_freeze_reaches_prometheus_as_an_exemplar(tmp_path):
    """A 300 ms fsfreeze under a writer (tests/freeze_writer.py): the write that met it is kept as
    an exemplar of its latency bucket, which Prometheus (exemplar storage on, scraping OpenMetrics)
    stores with the writer's thread, the freeze as its cause, a value within the bounds the
    writer's own clock sets, and a timestamp inside the writer's run."""
    with undo.Changes() as changes:
        sfs = scratch.provision(changes, scratch.FsConfig("ext4"), tmp_path / "scratch")
        port = free_port()
        rec = start_continuous("--mount", sfs.mountpoint, "--listen", f"127.0.0.1:{port}")
        prom = Prometheus(tmp_path, port, "--enable-feature=exemplar-storage")
        try:
            prom.wait_for("fsprof_windows_total")
            began = time.time()
            writer = subprocess.run(
                [sys.executable, str(FREEZE_WRITER)], cwd=sfs.mountpoint, capture_output=True, text=True, check=True
            )
            ended = time.time()
            reported = dict(re.findall(r"(\w+)=(\d+)", writer.stdout.split("RESULT", 1)[1]))
            low, high = int(reported["frozen_min_us"]) * 1e-6, int(reported["frozen_max_us"]) * 1e-6
            expr = f'fsprof_syscall_latency_seconds_bucket{{mountpoint="{sfs.mountpoint}",op="pwrite64"}}'
            deadline, found = time.time() + 60, []
            while not found and time.time() < deadline:
                time.sleep(1)
                stored = prom.exemplars(expr, began - 60, time.time() + 60)
                found = [(s, e) for s, e in stored if e["labels"].get("cause") == "filesystem frozen"]
            assert len(found) == 1, stored
            series, exemplar = found[0]
            assert exemplar["labels"]["tid"] == reported["pid"], exemplar
            # The whole write: the freeze's wait and a few microseconds of its own around it.
            assert low <= float(exemplar["value"]) <= high + 0.02 * TIME_SCALE, (exemplar, low, high)
            assert float(exemplar["value"]) <= float(series["le"])  # in its own bucket
            assert began <= float(exemplar["timestamp"]) <= ended + 0.05, (exemplar, began, ended)
        finally:
            prom.close()
            stop(rec)


def dashboard_queries():
    board = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in board["panels"] for t in p.get("targets", [])]


def pprof_raw(path):
    """Samples of a profile as `go tool pprof -raw` prints them: [(values, [function, leaf first])]."""
    out = subprocess.run(
        ["go", "tool", "pprof", "-raw", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": str(path.parent)},
        check=True,
    ).stdout
    # "ID: 0x0 M=1 NAME :0:0 s=0", pprof adding "(FULL NAME)" where it shortened one (parentheses).
    locations = {
        i: full or name for i, name, full in re.findall(r"^\s+(\d+): 0x0 M=\d+ (.*?) :0:0 s=0(?:\((.*)\))?$", out, re.M)
    }
    samples = []
    section = out.split("Samples:", 1)[1].split("Locations", 1)[0].splitlines()[2:]
    for line in section:
        values, _, locs = line.partition(":")
        if locs.strip():
            samples.append(([int(v) for v in values.split()], [locations[i] for i in locs.split()]))
    return samples


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("go"), reason="go is not installed (make setup installs golang-go)")
def test_pprof_profiles_hold_the_attributions_cause_totals(tmp_path):
    pp = tmp_path / "profiles"
    with undo.Changes() as changes:
        sfs = scratch.provision(changes, scratch.FsConfig("ext4"), tmp_path / "scratch")
        port = free_port()
        rec = start_continuous("--mount", sfs.mountpoint, "--listen", f"127.0.0.1:{port}", "--pprof-dir", str(pp))
        try:
            write_fsyncs(Path(sfs.mountpoint) / "a.dat", 200)
            time.sleep(3)  # windows after the workload add nothing
            text = scrape(port)
            files = sorted(pp.glob("fsprof-*.pb.gz"))
        finally:
            stop(rec)
    assert files
    by_cause = {}
    for f in files:
        for values, frames in pprof_raw(f):
            root = frames[::-1]
            if root[:2] == [f"[{sfs.mountpoint}]", "[fsync]"]:
                cause = root[2][1:-1]
                by_cause[cause] = by_cause.get(cause, 0) + values[0] + values[1]
    counters = {cause: sample(text, "fsprof_syscall_time_seconds_total", op="fsync", cause=cause) for cause in by_cause}
    assert by_cause and "journal commit wait" in by_cause
    for cause, ns in by_cause.items():
        assert ns / 1e9 == pytest.approx(counters[cause], rel=1e-6, abs=2e-9), cause
    total = sample(text, "fsprof_syscall_latency_seconds_sum", op="fsync")
    assert sum(by_cause.values()) / 1e9 == pytest.approx(total, rel=1e-6)


class Ingest(BaseHTTPRequestHandler):
    received = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Ingest.received.append((self.path, self.headers["Content-Type"], body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.mark.slow
def test_profiles_reach_an_ingest_url_and_a_refusal_is_one_sentence(tmp_path):
    server = HTTPServer(("127.0.0.1", 0), Ingest)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with undo.Changes() as changes:
        sfs = scratch.provision(changes, scratch.FsConfig("ext4"), tmp_path / "scratch")
        url = f"http://127.0.0.1:{server.server_address[1]}/ingest"
        rec = start_continuous("--mount", sfs.mountpoint, "--listen", "off", "--pprof-url", url)
        try:
            write_fsyncs(Path(sfs.mountpoint) / "a.dat", 20)
            # A window is posted when it closes: 1 s, and longer on a loaded machine.
            deadline = time.monotonic() + 60
            while not Ingest.received and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            stop(rec)
        closed = free_port()  # nothing listens there
        refused = start_continuous(
            "--mount", sfs.mountpoint, "--listen", "off", "--pprof-url", f"http://127.0.0.1:{closed}/ingest"
        )
        guard = threading.Timer(60, refused.kill)  # a refusal never said fails, not hangs
        guard.start()
        refusal = refused.stderr.readline()  # the first window's post, however long it takes
        guard.cancel()
        err = refusal + stop(refused)
    server.shutdown()
    assert Ingest.received
    path, ctype, body = Ingest.received[0]
    query = urllib.parse.parse_qs(urllib.parse.urlparse(path).query)
    assert query["format"] == ["pprof"] and query["name"][0].startswith("fsprof{host=")
    assert int(query["until"][0]) >= int(query["from"][0])
    assert ctype.startswith("multipart/form-data") and b'name="profile"' in body
    gz = body[body.index(b"\x1f\x8b") :]
    assert gzip.decompress(gz.rsplit(b"\r\n--", 1)[0])  # a gzipped protobuf
    assert f"could not send the profile to http://127.0.0.1:{closed}/ingest" in err


@pytest.mark.slow
def test_a_taken_port_is_one_sentence_and_nothing_is_loaded(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run(
            [sys.executable, "-m", "profiler", "record", "--continuous", "--all", "--listen", f"127.0.0.1:{port}"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert r.returncode != 0
    assert r.stderr.count("\n") == 1 and f"cannot listen on 127.0.0.1:{port}" in r.stderr, r.stderr
    assert loaded_fsprof_programs(fsprof_program_names()) == []


@pytest.mark.slow
def test_filesystems_mounted_and_unmounted_while_recording(tmp_path):
    """--all: an XFS mounted after the start is traced (its programs loaded then) and its series
    go when it is unmounted; the recording carries on throughout."""
    port = free_port()
    rec = start_continuous("--all", "--listen", f"127.0.0.1:{port}")
    try:
        with undo.Changes() as changes:
            sfs = scratch.provision(changes, scratch.FsConfig("xfs"), tmp_path / "scratch")
            deadline = time.time() + 90  # the XFS programs load within a window or two
            while f'mountpoint="{sfs.mountpoint}"' not in scrape(port):
                assert time.time() < deadline, "the new XFS never appeared"
                time.sleep(0.5)
            write_fsyncs(Path(sfs.mountpoint) / "a.dat", 40)
            time.sleep(2.5)
            text = scrape(port)
            assert sample(text, "fsprof_syscall_latency_seconds_count", mountpoint=sfs.mountpoint, op="fsync") == 40
            assert sample(text, "fsprof_xfs_log_forces_total", mountpoint=sfs.mountpoint) >= 40
        time.sleep(2.5)  # unmounted now
        assert f'mountpoint="{sfs.mountpoint}"' not in scrape(port)
        assert rec.poll() is None
    finally:
        stop(rec)


@pytest.mark.parametrize(
    "args, words",
    [
        (["--continuous", "--all", "--window", "0.5s"], "--window must be at least 1s"),
        (["--continuous", "--all", "--window", "xyz"], "--window 'xyz' is not a positive duration"),
        (["--continuous", "--all", "--duration", "1q"], "--duration '1q' is not a positive duration"),
        (["--continuous", "--all", "--listen", "9478"], "--listen 9478: give HOST:PORT"),
        (["--all"], "--all needs --continuous"),
        (["--continuous", "--all", "--pid", "1"], "--all traces every process"),
        (["--continuous", "--all", "-o", "x"], "--continuous writes no run directory"),
        (["--continuous", "--all", "--pprof-keep", "0"], "argument --pprof-keep: '0' is not a positive"),
    ],
)
def test_bad_continuous_options_are_one_sentence(args, words):
    r = subprocess.run(
        [sys.executable, "-m", "profiler", "record", *args], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and words in r.stderr, r.stderr


@pytest.mark.slow
def test_a_cgroup_made_again_is_followed(tmp_path):
    """A restarted systemd service gets a new cgroup of the same path: --continuous --cgroup keeps
    recording it (the path is re-opened every window), and tasks outside it are not traced."""
    from profiler.session.record import cgroup2_root

    root = cgroup2_root()
    if not (root / "cgroup.procs").exists():
        pytest.skip("no cgroup v2 hierarchy is mounted")
    cgroup = root / f"fsprof-test-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    inside = 'echo $$ > {}/cgroup.procs && exec "$0" -c "$1" "$2" "$3"'.format(cgroup)
    cgroup.mkdir()
    port = free_port()
    try:
        with undo.Changes() as changes:
            sfs = scratch.provision(changes, scratch.FsConfig("ext4"), tmp_path / "scratch")
            rec = start_continuous("--cgroup", str(cgroup), "--listen", f"127.0.0.1:{port}")
            try:
                write_fsyncs(Path(sfs.mountpoint) / "out.dat", 15)  # outside: not traced
                subprocess.run(
                    ["sh", "-c", inside, sys.executable, FSYNCS, f"{sfs.mountpoint}/a.dat", "20"], check=True
                )
                time.sleep(2.5)
                cgroup.rmdir()  # the service stops ...
                time.sleep(1.5)
                cgroup.mkdir()  # ... and starts again
                time.sleep(2.5)
                subprocess.run(
                    ["sh", "-c", inside, sys.executable, FSYNCS, f"{sfs.mountpoint}/b.dat", "30"], check=True
                )
                time.sleep(2.5)
                text = scrape(port)
                assert rec.poll() is None
            finally:
                stop(rec)
    finally:
        if cgroup.exists():
            cgroup.rmdir()
    assert sample(text, "fsprof_syscall_latency_seconds_count", mountpoint=sfs.mountpoint, op="fsync") == 50


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")
def test_io_uring_requests_are_ops_of_their_own(tmp_path):
    """io_uring requests are ops in continuous mode as in a run (issue 35): their latency histogram
    by opcode, the block requests they made with their device and start-to-end times, and the io-wq
    workers' time by cause, each against fio's own count of its writes and fsyncs."""
    from test_io_uring import FSYNC_EVERY, WRITES, fio_argv

    with undo.Changes() as changes:
        sfs = scratch.provision(changes, scratch.FsConfig("ext4"), tmp_path / "scratch")
        port = free_port()
        rec = start_continuous("--mount", sfs.mountpoint, "--listen", f"127.0.0.1:{port}")
        try:
            fio_json = tmp_path / "fio.json"
            subprocess.run(fio_argv(fio_json), cwd=sfs.mountpoint, check=True, capture_output=True)
            time.sleep(2.5)  # two windows: the last requests' figures are in
            text = scrape(port)
            om = scrape(port, openmetrics=True)
        finally:
            stop(rec)
    writes = json.loads(fio_json.read_text())["jobs"][0]["write"]["total_ios"]
    assert writes == WRITES
    ours = {"mountpoint": sfs.mountpoint, "op": "io_uring write"}
    assert sample(text, "fsprof_io_uring_latency_seconds_count", **ours) == writes, text
    assert sample(text, "fsprof_io_uring_latency_seconds_count", mountpoint=sfs.mountpoint, op="io_uring fsync") >= (
        writes // FSYNC_EVERY
    )
    # Direct 4 KiB writes: one request each, timed (but those whose issue or completion program the
    # kernel skipped under load: the block programs' recursion misses).
    made = {**ours, "class": "sync_write"}
    assert sample(text, "fsprof_op_block_requests_total", **made) == writes
    skipped = sum(
        float(v) for v in re.findall(r'fsprof_bpf_recursion_misses_total\{program="block:[^"]+"\} (\S+)', text)
    )
    assert sample(text, "fsprof_op_block_requests_timed_total", **made) >= writes - skipped - max(2, writes // 2000)
    device = sample(text, "fsprof_op_block_request_device_seconds_total", **made)
    life = sample(text, "fsprof_op_block_request_life_seconds_total", **made)
    assert 0 < device <= life <= sample(text, "fsprof_io_uring_latency_seconds_sum", **ours), text
    # The FSYNCs ran in io-wq workers, waiting on the journal's commits.
    io_wq = sample(text, "fsprof_io_uring_io_wq_time_seconds_total", mountpoint=sfs.mountpoint, op="io_uring fsync")
    assert io_wq > 0, text
    # The slowest FSYNCs are exemplars of their latency buckets (docs/io_uring.md): the submitting
    # thread (fio's) and the cause that took most of the request's time.
    marked = [
        line
        for line in om.splitlines()
        if line.startswith("fsprof_io_uring_latency_seconds_bucket{")
        and 'op="io_uring fsync"' in line
        and " # {" in line
    ]
    assert marked, om
    assert all(re.search(r'# \{.*tid="\d+"', line) and 'cause="' in line for line in marked), marked
