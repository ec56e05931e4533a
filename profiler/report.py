"""Terminal view of a run's result.json. Reads plain data only: it never touches the kernel."""

import json
from pathlib import Path

from .errors import FsprofError
from .maps import BLK_CLASSES

RESULT_FILE = "result.json"
SCHEMA = "fsprof.run/1"


def load(run_dir):
    path = Path(run_dir) / RESULT_FILE
    if not path.is_file():
        raise FsprofError(f"{run_dir} is not an fsprof run directory (no {RESULT_FILE} in it)")
    try:
        result = json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FsprofError(f"{path} is not valid JSON ({e})")
    if not isinstance(result, dict) or result.get("schema") != SCHEMA:
        raise FsprofError(f"{path} is not an fsprof result (schema {SCHEMA})")
    return result


def fmt_ns(ns):
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g}{unit}"
    return f"{ns:.0f}ns"


def histogram(log2_ns, width=40):
    """bcc-style log2 histogram; slot i holds latencies in [2^i, 2^(i+1)) ns."""
    used = [i for i, n in enumerate(log2_ns) if n]
    if not used:
        return ["      (no samples)"]
    peak = max(log2_ns)
    lines = [f"      {'latency':>21} : {'count':<8} distribution"]
    for i in range(used[0], used[-1] + 1):
        n = log2_ns[i]
        bar = "*" * round(width * n / peak)
        lines.append(f"      {fmt_ns(2 ** i):>9} -> {fmt_ns(2 ** (i + 1)):<9} : {n:<8} |{bar:<{width}}|")
    return lines


def per_op(count, per):
    return f"{count / per:.2f}" if per else "n/a"


def render_fs(fs):
    dev = fs["device"]
    lines = [f"== {fs['label']} ({fs['fs']}) on {dev['name']} ({dev['dev']}), "
             f"mkfs: {' '.join(fs['mkfs_options']) or 'defaults'}, mount: {fs['mount_options'] or 'defaults'}",
             f"   device: write cache {dev['write_cache']}, FUA {'yes' if dev['fua'] else 'no'}, "
             f"scheduler {dev['scheduler']}"]
    own = fs["workload"]
    lines.append(f"   workload's own count: {own.get('writes', 0)} writes, {own.get('fsyncs', 0)} fsyncs "
                 f"in {own.get('elapsed_ns', 0) / 1e9:.2f} s")
    ops = fs["syscalls"]
    lines.append(f"   {'syscall':<12} {'count':>8} {'avg':>9} {'max':>9} {'total':>9}")
    for name in sorted(ops, key=lambda n: -ops[n]["total_ns"]):
        h = ops[name]
        lines.append(f"   {name:<12} {h['count']:>8} {fmt_ns(h['total_ns'] / h['count']):>9} "
                     f"{fmt_ns(h['max_ns']):>9} {fmt_ns(h['total_ns']):>9}")
    unresolved = fs.get("unresolved_syscalls", {})
    if unresolved:
        lines.append("   not placed on a filesystem (absolute path, sync, async I/O): " +
                     ", ".join(f"{n} {h['count']}" for n, h in sorted(unresolved.items())))
    fsyncs = ops.get("fsync", {}).get("count", 0) + ops.get("fdatasync", {}).get("count", 0)
    for name, counts in fs["block"].items():
        kernel = fs["kernel_counters"].get(name, {})
        flush = counts["flush"]["count"]
        others = [f"{counts[c]['count']} {c.replace('_', ' ')}" for c in BLK_CLASSES[1:] if counts[c]["count"]]
        lines.append(f"   requests to {name}: {flush} cache flushes ({per_op(flush, fsyncs)} per fsync; "
                     f"/sys/block/{name}/stat says {kernel.get('flush_ios', 'n/a')})"
                     + "".join(f", {o}" for o in others))
    for name in ("write", "fsync"):
        if name in ops:
            lines.append(f"   {name} latency:")
            lines.extend(histogram(ops[name]["log2_ns"]))
    return lines


def render(result):
    w = result["workload"]
    params = ", ".join(f"{k}={v}" for k, v in w["params"].items())
    lines = [f"fsprof {result['fsprof_version']} on Linux {result['kernel']}: workload {w['name']} ({params})"]
    if result.get("probes_skipped"):
        for prog, why in result["probes_skipped"].items():
            lines.append(f"   probe {prog} skipped: {why}")
    for fs in result["filesystems"]:
        lines.append("")
        lines.extend(render_fs(fs))
    return "\n".join(lines)
