#!/usr/bin/env python3
"""Benchmark: the cost of the report. Makes a three-filesystem run (ext4, XFS, btrfs scratch images)
with `fsprof run`, then times, each in a fresh Python process, the full HTML report with its flame
graphs (profiler.views.html.report.write_html(run_dir, out_file)) and the terminal report with the
flame graph files (`fsprof report RUN`). Two runs: `make run`'s job (fsync-loop, 1000 fsyncs) and a
heavier one (fsync-heavy rndwr, an fsync round after every write, 5 s), whose traces hold more
stacks. If profiler.views.html.report is not in the tree, its rows say "not available".

    .venv/bin/python bench/bench_report.py [--repeats 5]
    BENCH_QUICK=1 ...   # 2 repeats, the fsync-loop run only
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from common import PY, QUICK, REPO, fmt, spread  # noqa: E402
from profiler import rundir  # noqa: E402 (common put the tree on sys.path)

RUNS = {
    "fsync-loop": ["--workload", "fsync-loop"],
    "fsync-heavy": [
        "--workload",
        "fsync-heavy",
        "--file-test-mode",
        "rndwr",
        "--file-fsync-freq",
        "1",
        "--file-total-size",
        "64M",
        "--time",
        "5",
    ],
}
HTML = (
    "import json, sys, time; t = time.perf_counter(); from profiler.views.html.report import write_html; "
    "write_html(sys.argv[1], sys.argv[2]); print(json.dumps({'inside_s': time.perf_counter() - t}))"
)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=2 if QUICK else 5)
    ap.add_argument("--runs", default="fsync-loop" if QUICK else ",".join(RUNS))
    return ap.parse_args()


def html_available():
    probe = "import profiler.views.html.report as h; assert callable(h.write_html)"
    return subprocess.run([PY, "-c", probe], cwd=REPO, capture_output=True).returncode == 0


def make_run(out, workload_args):
    argv = [PY, "-m", "profiler", "run", "--fs", "ext4,xfs,btrfs", "-o", str(out), *workload_args]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"fsprof run failed: {proc.stderr.strip()[-400:]}")
    return time.monotonic() - start


def timed(argv):
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} failed: {proc.stderr.strip()[-400:]}")
    return time.monotonic() - start, proc.stdout


def bench_run(name, args, tmp, html):
    run_dir = tmp / name
    run_s = make_run(run_dir, RUNS[name])
    result = rundir.load(run_dir)
    stacks = sum(len(fs.get("trace", {}).get("stacks", {})) for fs in result["filesystems"])
    out = {
        "run_s": run_s,
        "filesystems": len(result["filesystems"]),
        "stacks": stacks,
        "report": [],
        "html": [],
        "html_inside": [],
        "html_bytes": None,
    }
    for _ in range(args.repeats):  # alternated: the page cache and the machine's drift alike
        out["report"].append(timed([PY, "-m", "profiler", "report", str(run_dir)])[0])
        if html:
            page = tmp / f"{name}.html"
            wall, text = timed([PY, "-c", HTML, str(run_dir), str(page)])
            out["html"].append(wall)
            out["html_inside"].append(json.loads(text)["inside_s"])
            out["html_bytes"] = page.stat().st_size
    print(f"  {name}: " + common.brief({k: v for k, v in out.items() if not isinstance(v, list)}), flush=True)
    return out


def render(runs, html, args):
    s = dict(digits=2, unit=" s")
    lines = [
        "| three-filesystem run | stacks in result.json | HTML report with flame graphs (process) | "
        "of which write_html() | HTML size | terminal report + flame graph files |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in runs.items():
        if html:
            h, inside, size = (
                fmt(spread(r["html"]), **s),
                fmt(spread(r["html_inside"]), **s),
                f"{r['html_bytes'] / 1e6:.1f} MB",
            )
        else:
            h = inside = size = "not available (profiler.views.html.report is not in the tree)"
        lines.append(
            f"| {name} (`{' '.join(RUNS[name])}`) | {r['stacks']:,} | {h} | {inside} | {size} | "
            f"{fmt(spread(r['report']), **s)} |"
        )
    lines += ["", f"Median (min – max) of {args.repeats} repeats, each in a fresh Python process."]
    return "\n".join(lines)


HOW = """How: `make bench` (or `.venv/bin/python bench/bench_report.py`). `fsprof run --fs
ext4,xfs,btrfs` makes the run; then, alternately, `python -c "...write_html(run, out)"` (the whole
process, and write_html's own time inside it) and `fsprof report RUN` (terminal tables; it also
rewrites the run's flame graph files, as the HTML report does)."""


def main():
    args = parse_args()
    html = html_available()
    if not html:
        print("profiler.views.html.report.write_html is not available: its rows say so", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-report-", dir="/var/tmp") as tmp:
        runs = {name: bench_run(name, args, Path(tmp), html) for name in args.runs.split(",")}
    md = render(runs, html, args)
    print("\n" + md)
    common.save("report", {"runs": runs, "html_available": html, "markdown": md, "how": HOW})


if __name__ == "__main__":
    main()
