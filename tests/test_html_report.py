"""`fsprof report RUN --html FILE` on a real fsync-loop run over loop-backed ext4, XFS and btrfs,
opened in headless Chromium driven over the DevTools protocol (--remote-debugging-pipe, standard
library only): no console error, no network request, every flame graph present and interactive,
and the figures on the page equal to result.json's (the fsync count also to the workload's own)."""

import json
import os
import select
import shutil
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlparse

import pytest

from conftest import FSPROF, REPO, loops_under, mounts_under, run_fsprof
from profiler.analysis.compare import compare as comparisons
from profiler.views import compare, flamegraph

pytestmark = pytest.mark.slow
COUNT = 100
CHROMIUM = shutil.which("chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]


# ---------------------------------------------------------------------------------------------
# Headless Chromium over the DevTools protocol


class DevTools:
    """Chromium with --remote-debugging-pipe: JSON messages ended by NUL, commands on its fd 3,
    answers and events on its fd 4. Every target (the page, and each frame Chromium puts in a
    process of its own) is attached paused, so that its console and network are watched from
    its first script on."""

    def __init__(self, user_data_dir):
        to_chrome, self._to = os.pipe()
        self._from, from_chrome = os.pipe()
        self.proc = subprocess.Popen(
            [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={user_data_dir}", "--remote-debugging-pipe", "about:blank"],
            pass_fds=(3, 4, to_chrome, from_chrome),
            preexec_fn=lambda: (os.dup2(to_chrome, 3), os.dup2(from_chrome, 4)),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome)
        os.close(from_chrome)
        self._buf, self._next_id, self.answers, self.events, self.sessions = b"", 0, {}, [], []

    def _read(self, deadline):
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from], [], [], left)[0]:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._from, 1 << 20)
            if not chunk:
                raise EOFError("chromium closed its DevTools pipe")
            self._buf += chunk
        message, self._buf = self._buf.split(b"\0", 1)
        return json.loads(message)

    def _pump(self, deadline):
        message = self._read(deadline)
        if "id" in message:
            self.answers[message["id"]] = message
            return
        self.events.append(message)
        if message["method"] == "Target.attachedToTarget":
            self.watch(message["params"]["sessionId"])
        elif message["method"] == "Page.javascriptDialogOpening":  # inferno's search asks for a term
            self.call(
                "Page.handleJavaScriptDialog",
                {"accept": True, "promptText": SEARCH_TERM},
                session=message.get("sessionId"),
            )

    def call(self, method, params=None, session=None, timeout=30):
        self._next_id += 1
        mine = self._next_id
        message = {"id": mine, "method": method, "params": params or {}, **({"sessionId": session} if session else {})}
        os.write(self._to, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while mine not in self.answers:
            self._pump(deadline)
        answer = self.answers.pop(mine)
        assert "error" not in answer, (method, answer["error"])
        return answer["result"]

    def watch(self, session):
        """Console, exceptions, log and network of a target, and of the frames it starts; then let it run."""
        self.sessions.append(session)
        for method in ("Runtime.enable", "Log.enable", "Network.enable", "Page.enable"):
            self.call(method, session=session)
        self.call(
            "Target.setAutoAttach",
            {"autoAttach": True, "waitForDebuggerOnStart": True, "flatten": True},
            session=session,
        )
        self.call("Runtime.runIfWaitingForDebugger", session=session)

    def wait_for(self, method, timeout=60):
        deadline = time.monotonic() + timeout
        while not any(e["method"] == method for e in self.events):
            self._pump(deadline)

    def settle(self, seconds):
        deadline = time.monotonic() + seconds
        try:
            while True:
                self._pump(deadline)
        except TimeoutError:
            pass

    def of(self, *methods):
        return [e for e in self.events if e["method"] in methods]

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except (TimeoutError, EOFError, AssertionError):
            pass
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to)
        os.close(self._from)


def evaluate(tools, expression, session, context=None):
    params = {"expression": expression, "returnByValue": True, **({"contextId": context} if context else {})}
    answer = tools.call("Runtime.evaluate", params, session=session)
    assert "exceptionDetails" not in answer, answer["exceptionDetails"]
    return answer["result"].get("value")


FIGURES_JS = """JSON.stringify([...document.querySelectorAll('[data-figure]')].map(e => ({
    fs: e.dataset.fs, op: e.dataset.op, figure: e.dataset.figure, value: e.dataset.value, text: e.textContent})))"""
BARS_JS = """JSON.stringify([...document.querySelectorAll('svg.causes g.bar')].map(g => ({
    fs: g.dataset.fs, op: g.dataset.op, us: g.dataset.us, chart: g.closest('svg').querySelector('title').textContent,
    causes: [...g.querySelectorAll('rect.cause')].map(r => ({cause: r.dataset.cause, us: r.dataset.us,
                                                             width: r.getBBox().width}))})))"""
HISTS_JS = """JSON.stringify([...document.querySelectorAll('svg.latency g.panel')].map(g => ({
    fs: g.dataset.fs, op: g.dataset.op,
    buckets: [...g.querySelectorAll('rect.bucket')].map(r => [+r.dataset.bucket, +r.dataset.count])})))"""
TIMELINES_JS = """JSON.stringify([...document.querySelectorAll('svg.timeline')].map(s => ({
    fs: s.dataset.fs, op: s.dataset.op, ns: +s.dataset.ns, tid: +s.dataset.tid,
    waits: [...s.querySelectorAll('rect.wait')].map(r => ({cause: r.dataset.cause, at: +r.dataset.at, ns: +r.dataset.ns,
                                                          x: r.getBBox().x, width: r.getBBox().width})),
    requests: [...s.querySelectorAll('rect.request')].map(r => ({cls: r.dataset.class, start: +r.dataset.start,
                                                                end: +r.dataset.end}))})))"""
# Inside a flame graph's frame: drawn (frames), its script ran (init set total_samples), a click
# on Search asks for a term (answered SEARCH_TERM) and highlights its frames, a click on a frame
# zooms (the reset-zoom button shows); and nothing throws.
SEARCH_TERM = "."
READY_JS = "location.href.startsWith('data:image/svg+xml') && typeof total_samples === 'number'"
FLAME_JS = """(() => { if (!location.href.startsWith('data:image/svg+xml')) return null;
    const frames = document.querySelectorAll('#frames > g');
    const out = {src: location.href, frames: frames.length, title: document.getElementById('title').textContent,
                 script_ran: typeof total_samples === 'number' && total_samples > 0};
    document.getElementById('search').dispatchEvent(new MouseEvent('click', {bubbles: true}));
    out.searched = document.getElementById('search').classList.contains('show');
    frames[frames.length - 1].dispatchEvent(new MouseEvent('click', {bubbles: true}));
    out.zoomed = !document.getElementById('unzoom').classList.contains('hide');
    return JSON.stringify(out); })()"""


class Page:
    """What Chromium made of a report: its console, network, DOM, and each flame graph frame."""

    def __init__(self, html_file, user_data_dir):
        tools = DevTools(user_data_dir)
        try:
            page = next(t for t in tools.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
            session = tools.call("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True})["sessionId"]
            tools.watch(session)
            tools.call("Page.navigate", {"url": Path(html_file).as_uri()}, session=session)
            tools.wait_for("Page.loadEventFired")  # after every started frame's own load (and inferno's init)
            # Per-phase graphs wait in closed sections: only the others have started. A busy machine
            # runs the started frames' scripts late: counted once the count holds for a second.
            self.started_closed, deadline = -1, time.monotonic() + 20
            while time.monotonic() < deadline:
                tools.settle(1.0)
                started = len(self._in_frames(tools, READY_JS))
                if started == self.started_closed:
                    break
                self.started_closed = started
            self.deferred = evaluate(tools, "document.querySelectorAll('iframe[data-src]').length", session)
            evaluate(tools, "document.querySelectorAll('details').forEach(d => d.open = true)", session)
            frames = evaluate(tools, "document.querySelectorAll('iframe.flamegraph').length", session)
            deadline = time.monotonic() + 60
            while len(self._in_frames(tools, READY_JS)) < frames and time.monotonic() < deadline:
                tools.settle(0.5)
            self.dom = evaluate(tools, "document.documentElement.outerHTML", session)
            self.figures = json.loads(evaluate(tools, FIGURES_JS, session))
            self.bars = json.loads(evaluate(tools, BARS_JS, session))
            self.hists = json.loads(evaluate(tools, HISTS_JS, session))
            self.timelines = json.loads(evaluate(tools, TIMELINES_JS, session))
            self.iframe_srcs = evaluate(
                tools, "[...document.querySelectorAll('iframe.flamegraph')].map(f => f.src)", session
            )
            self.iframe_files = evaluate(
                tools, "[...document.querySelectorAll('iframe.flamegraph')].map(f => f.dataset.file)", session
            )
            self.flames = [json.loads(v) for v in self._in_frames(tools, FLAME_JS)]
            tools.settle(0.5)  # anything the clicks threw
            self.console = tools.of("Runtime.consoleAPICalled", "Runtime.exceptionThrown")
            self.log = [e for e in tools.of("Log.entryAdded") if e["params"]["entry"]["level"] in ("error", "warning")]
            self.requests = [e["params"]["request"]["url"] for e in tools.of("Network.requestWillBeSent")]
        finally:
            tools.close()

    @staticmethod
    def _in_frames(tools, expression):
        """expression's truthy values in every live default context of every session (a frame
        may run in the page's process or in one of its own)."""
        gone = {
            (e.get("sessionId"), e["params"]["executionContextId"])
            for e in tools.of("Runtime.executionContextDestroyed")
        }
        found = []
        for e in tools.of("Runtime.executionContextCreated"):
            ctx, session = e["params"]["context"], e.get("sessionId")
            if ctx["auxData"].get("isDefault") and (session, ctx["id"]) not in gone:
                try:
                    value = evaluate(tools, expression, session, ctx["id"])
                except AssertionError:  # a context replaced by navigation
                    continue
                if value:
                    found.append(value)
        return found


# ---------------------------------------------------------------------------------------------
# Fixtures: one run, one report, one browser load for the module


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    base = tmp_path_factory.mktemp("html")
    proc = run_fsprof(
        "run",
        "--fs",
        "ext4,xfs,btrfs",
        "--workload",
        "fsync-loop",
        "--count",
        str(COUNT),
        "--scratch-dir",
        str(base / "scratch"),
        "-o",
        str(base / "run"),
    )
    assert proc.returncode == 0, proc.stderr
    assert not mounts_under(base) and not loops_under(base)
    return base / "run"


@pytest.fixture(scope="module")
def result(run_dir):
    return json.loads((run_dir / "result.json").read_text())


@pytest.fixture(scope="module")
def report(run_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("html-out") / "report.html"
    proc = run_fsprof("report", str(run_dir), "--html", str(out))
    assert proc.returncode == 0, proc.stderr
    assert str(out) in proc.stderr
    return out


@pytest.fixture(scope="module")
def page(report, tmp_path_factory):
    if not CHROMIUM:
        pytest.skip("chromium is not installed (`make setup` installs it)")
    return Page(report, tmp_path_factory.mktemp("chromium-profile"))


# ---------------------------------------------------------------------------------------------
# Tests


@pytest.mark.root
def test_no_console_error_and_no_network(page, report):
    assert page.console == [] and page.log == [], (page.console, page.log)
    # The report itself is the one file loaded; frames are data: documents it carries.
    assert page.requests[0] == report.as_uri()
    assert all(urlparse(url).scheme == "data" for url in page.requests[1:]), [
        u[:80] for u in page.requests if not u.startswith("data:")
    ]
    assert_nothing_to_fetch(report.read_text())


class Links(HTMLParser):
    """Every attribute value that would make a browser fetch something, and every CSS url()."""

    FETCHING = {"src", "data-src", "href", "srcset", "data", "poster", "action", "xlink:href", "background"}

    def __init__(self):
        super().__init__()
        self.found, self.css = [], []

    def handle_starttag(self, tag, attrs):
        self.found += [(tag, k, v or "") for k, v in attrs if k in self.FETCHING]

    def handle_data(self, data):
        self.css += [data] if "url(" in data or "@import" in data else []


def assert_nothing_to_fetch(html):
    links = Links()
    links.feed(html)
    for tag, attr, value in links.found:
        # In-page anchors, and data: documents (the flame graphs) are all it may point to.
        assert value.startswith("#") or (value.startswith("data:") and tag == "iframe"), (tag, attr, value[:80])
    assert not links.css, links.css[:1]


@pytest.mark.root
def test_every_flame_graph_is_embedded_and_interactive(page, run_dir):
    on_disk = sorted(p.name for p in (run_dir / "flamegraphs").glob("*.svg"))
    assert len(on_disk) >= 3 * 3 + 2  # off-cpu, on-cpu, off-wake per filesystem, 2 differentials
    assert sorted(page.iframe_files) == on_disk
    # The per-phase graphs started only once their section was opened.
    per_phase = [name for name in on_disk if not name.endswith(".all.svg")]
    assert page.deferred == len(per_phase) > 0
    assert page.started_closed == len(on_disk) - len(per_phase)
    by_src = {f["src"]: f for f in page.flames}
    for src, name in zip(page.iframe_srcs, page.iframe_files):
        frame = by_src.get(src)
        assert frame, f"{name} was not rendered"
        assert frame["frames"] > 3 and frame["script_ran"] and frame["searched"] and frame["zoomed"], (name, frame)
        title = inferno_title(run_dir / "flamegraphs" / name)
        assert frame["title"] == title, name


def inferno_title(svg):
    import xml.etree.ElementTree as ET

    return "".join(next(e for e in ET.parse(svg).iter() if e.get("id") == "title").itertext())


@pytest.mark.root
def test_syscall_figures_equal_result_json(page, result):
    cells = {(f["fs"], f["op"], f["figure"]): f for f in page.figures if f.get("op")}
    for fs in result["filesystems"]:
        # The workload counted its own fsyncs: the page shows exactly those.
        assert fs["workload"]["fsyncs"] == COUNT
        shown = cells[(fs["label"], "fsync", "count")]
        assert int(shown["value"]) == int(shown["text"]) == fs["syscalls"]["fsync"]["count"] == COUNT
        for op, h in fs["syscalls"].items():
            for key in ("p50_ns", "p99_ns", "max_ns", "total_ns"):
                cell = cells[(fs["label"], op, key)]
                assert float(cell["value"]) == h[key], (fs["label"], op, key)
                assert_same_figure(cell["text"], h[key])


@pytest.mark.root
def test_cache_flushes_shown_are_the_devices_own_count(page, result):
    cells = {(f["fs"], f["figure"]): f for f in page.figures}
    for fs in result["filesystems"]:
        dev = fs["device"]["name"]
        shown = int(cells[(fs["label"], f"flushes:{dev}")]["text"])
        # /sys/block/<dev>/stat counted the flushes the device completed (read before and after).
        kernel = fs["kernel_counters"][dev]["flush_ios"]
        assert shown == fs["block"][dev]["flush"]["count"] >= COUNT  # barriers on, a write-back cache
        assert abs(shown - kernel) <= 0.01 * kernel, (fs["label"], shown, kernel)


def assert_same_figure(text, ns):
    """'901 µs' says ns to three significant figures."""
    number, unit = text.split()
    scale = {"ns": 1, "µs": 1e3, "ms": 1e6, "s": 1e9}[unit]
    assert abs(float(number) * scale - ns) <= 0.005 * ns + 1, (text, ns)


@pytest.mark.root
def test_cause_bars_are_the_attribution_in_us_per_op(page, result):
    bars = {(b["fs"], b["op"]): b for b in page.bars if b["chart"].endswith("all phases")}
    for fs in result["filesystems"]:
        b = fs["attribution"]["fsync"]
        bar = bars[(fs["label"], "fsync")]
        assert float(bar["us"]) == round(b["wall_ns"] / b["count"] / 1e3, 1)
        drawn = {c["cause"]: c for c in bar["causes"]}
        assert set(drawn) == {c for c, ns in b["causes"].items() if ns}
        px_per_us = sum(c["width"] for c in bar["causes"]) / (b["wall_ns"] / b["count"] / 1e3)
        for cause, ns in b["causes"].items():
            if ns:
                us = ns / b["count"] / 1e3
                assert float(drawn[cause]["us"]) == round(us, 1), (fs["label"], cause)
                assert abs(drawn[cause]["width"] - us * px_per_us) < 0.05, (fs["label"], cause)
    # The cause the terminal names first for ext4's fsync (journal commit wait, with barriers on
    # a write-back cache) is ext4's widest segment.
    ext4 = next(fs for fs in result["filesystems"] if fs["fs"] == "ext4")["attribution"]["fsync"]["causes"]
    widest = max(bars[("ext4", "fsync")]["causes"], key=lambda c: c["width"])
    assert widest["cause"] == max(ext4, key=ext4.get) == "journal commit wait"


@pytest.mark.root
def test_the_slowest_calls_are_drawn_where_their_waits_fell(page, result):
    """Each filesystem's slowest calls (result.json exemplars) on their own time axis: the same
    calls in the same order, each recorded wait where it began in the call and as long as it was."""
    for fs in result["filesystems"]:
        drawn = [t for t in page.timelines if t["fs"] == fs["label"]]
        slowest = {op: calls[0]["ns"] for op, calls in fs["exemplars"].items() if calls}
        ops = sorted(slowest, key=lambda op: -slowest[op])
        want = [(op, call) for op in ops[:2] for call in fs["exemplars"][op][:3]]
        assert [(t["op"], t["ns"], t["tid"]) for t in drawn] == [(op, c["ns"], c["tid"]) for op, c in want], fs["label"]
        for t, (_, call) in zip(drawn, want):
            px_per_ns = 520 / call["ns"]  # charts.PLOT_W
            assert [(w["cause"], w["at"], w["ns"]) for w in t["waits"]] == [
                (w["cause"], w["at_ns"], w["ns"]) for w in call["waits"]
            ]
            for w in t["waits"]:
                assert abs(w["x"] - (130 + w["at"] * px_per_ns)) < 0.05  # charts.LABEL_W
                assert abs(w["width"] - max(w["ns"] * px_per_ns, 0.5)) < 0.05
            # What the devices did meanwhile: each request that ended while the call ran.
            assert sorted((r["cls"], r["start"], r["end"]) for r in t["requests"]) == sorted(
                (r["class"], r["start_at_ns"], r["end_at_ns"]) for r in call.get("device_requests", [])
            )


@pytest.mark.root
def test_latency_plots_hold_every_call(page, result):
    hists = {(h["fs"], h["op"]): dict(h["buckets"]) for h in page.hists}
    for fs in result["filesystems"]:
        for op in ("fsync", "write"):
            h = fs["syscalls"][op]
            assert hists[(fs["label"], op)] == {i: n for i, n in enumerate(h["log2_ns"]) if n}
            assert sum(hists[(fs["label"], op)].values()) == h["count"] == COUNT


@pytest.mark.root
def test_conditions_and_comparison_are_stated(page, result, run_dir):
    cells = {(f["fs"], f["figure"]): f["text"] for f in page.figures if f["figure"].startswith("condition:")}
    for fs in result["filesystems"]:
        assert cells[(fs["label"], "condition:kernel")] == result["kernel"] == os.uname().release
        assert cells[(fs["label"], "condition:mount options in force")] == fs["mount_options_in_force"]
        assert cells[(fs["label"], "condition:write cache")] == fs["device"]["write_cache"]
        assert cells[(fs["label"], "condition:lost events")] == "none"
    # The same sentences as `fsprof compare RUN`, each in the page.
    text = page_text(page.dom)
    for cmp in comparisons([run_dir]):
        for line in compare.sentences(cmp):
            assert line.strip() in text, line


def page_text(dom):
    import html
    import re

    return html.unescape(re.sub(r"<[^>]+>", "", dom))


@pytest.mark.root
def test_without_inferno_the_report_says_so_and_lists_the_folded_stacks(run_dir, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("flamegraphs"))
    out = tmp_path / "report.html"
    empty = tmp_path / "no-inferno"
    empty.mkdir()
    # find_tool looks only in $FSPROF_INFERNO_DIR when it is set: an empty one is a machine without inferno.
    proc = subprocess.run(
        [*FSPROF, "report", str(copy), "--html", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": REPO, flamegraph.INFERNO_DIR_ENV: str(empty)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    html = out.read_text()
    assert "inferno-flamegraph was not found" in html and "<iframe" not in html
    folded = sorted(p.name for p in (copy / "flamegraphs").glob("*.folded"))
    assert folded and not list((copy / "flamegraphs").glob("*.svg"))
    for name in folded:
        assert str(copy / "flamegraphs" / name) in html
    if CHROMIUM:
        bare = Page(out, tmp_path / "chromium-profile")
        assert bare.console == [] and bare.log == [] and bare.flames == []


@pytest.mark.root
@pytest.mark.skipif(not shutil.which("chattr"), reason="chattr (e2fsprogs) is not installed")
def test_a_run_directory_it_cannot_write_still_gets_its_flame_graphs(run_dir, tmp_path):
    copy = tmp_path / "run"
    copy.mkdir()
    shutil.copy(run_dir / "result.json", copy)
    subprocess.run(["chattr", "+i", str(copy)], check=True)  # even root may not add flamegraphs/ to it
    try:
        proc = run_fsprof("report", str(copy), "--html", str(tmp_path / "r.html"))
    finally:
        subprocess.run(["chattr", "-i", str(copy)], check=True)
    assert proc.returncode == 0, proc.stderr
    html = (tmp_path / "r.html").read_text()
    assert "is not writable" in html and not (copy / "flamegraphs").exists()
    assert html.count("<iframe") == len(list((run_dir / "flamegraphs").glob("*.svg")))


@pytest.mark.root
def test_spec_output_is_grouped_by_workload_with_every_run(tmp_path):
    spec_file = tmp_path / "m.toml"
    spec_file.write_text("""
[[config]]
name = "ext4"
fs = "ext4"
[[config]]
name = "xfs"
fs = "xfs"
[[workload]]
name = "small"
workload = "fsync-loop"
args = ["--count", "20"]
[[workload]]
name = "big"
workload = "fsync-loop"
args = ["--count", "40", "--size", "16384"]
""")
    out = tmp_path / "out"
    proc = run_fsprof("run", "--spec", str(spec_file), "-o", str(out), "--scratch-dir", str(tmp_path / "scratch"))
    assert proc.returncode == 0, proc.stderr
    html_file = tmp_path / "spec.html"
    proc = run_fsprof("report", str(out), "--html", str(html_file))
    assert proc.returncode == 0, proc.stderr
    html = html_file.read_text()
    index = json.loads((out / "index.json").read_text())
    sections = html.split('<section class="workload"')[1:]
    assert [s.split("<h2>")[1].split(":")[0] for s in sections] == ["small", "big"]
    for section, workload in zip(sections, ("small", "big")):
        runs = [r for r in index["runs"] if r["workload"] == workload]
        assert len(runs) == 2
        for r in runs:
            fs = json.loads((out / r["dir"] / "result.json").read_text())["filesystems"][0]
            count = fs["syscalls"]["fsync"]["count"]
            assert count == fs["workload"]["fsyncs"] == {"small": 20, "big": 40}[workload]
            assert f'data-fs="{r["config"]}" data-op="fsync" data-figure="count" data-value="{count}"' in section
        # Each workload's own comparison, xfs against ext4, and nothing across workloads.
        assert f'data-base="{workload}/ext4" data-other="{workload}/xfs"' in section
        assert section.count('<pre class="why"') == 1
    assert_nothing_to_fetch(html)


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda tmp: tmp, "is neither an fsprof run directory"),
        (lambda tmp: tmp / "absent", "is neither an fsprof run directory"),
    ],
)
def test_not_a_run_directory_is_one_sentence(tmp_path, make, words):
    proc = run_fsprof("report", str(make(tmp_path)), "--html", str(tmp_path / "r.html"))
    assert_one_sentence(proc, words)
    assert not (tmp_path / "r.html").exists()


@pytest.mark.root
def test_bad_json_and_unwritable_output_are_one_sentence(tmp_path, run_dir):
    (tmp_path / "result.json").write_text("{not json")
    assert_one_sentence(run_fsprof("report", str(tmp_path), "--html", str(tmp_path / "r.html")), "not valid JSON")
    proc = run_fsprof("report", str(run_dir), "--html", str(tmp_path / "no-such-dir" / "r.html"))
    assert_one_sentence(proc, "cannot write the HTML report")


def assert_one_sentence(proc, words):
    assert proc.returncode != 0
    err = proc.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and err.startswith("fsprof: "), err
    assert words in err, err
