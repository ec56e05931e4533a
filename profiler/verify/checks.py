"""`fsprof verify`'s checks: for each setting, what the configuration says (mount table, the
kernel's own option list, sysfs, sysctl), what the kernel did during the probe (counts from
bpf/verify.bpf.c), and the verdict. Plain data in, plain data out: profiler/verify/probe.py runs
the probes, profiler/verify/__init__.py picks the checks and renders them. docs/verify.md has the rules.

Over 500 lines: one judge per setting, each short, all with the same shape (plain data in,
a verdict out); splitting them by setting would scatter docs/verify.md's rules.
"""

import dataclasses
import math
import subprocess
from pathlib import Path
from typing import Any

from ..units import parse_size
from .probe import (
    COMPRESS_TYPES,
    EV_BTRFS_COMMIT,
    EV_INODE_WRITEBACK,
    EV_JBD2_COMMIT,
    EV_SYNC_FS,
    EV_WB_PERIODIC,
    PAGE,
    ROLE_EXPIRE,
    FsTarget,
    queue_setting,
)

TOOK_EFFECT, NOT_IN_EFFECT, CANNOT_TELL, OBSERVED = "took effect", "not in effect", "cannot tell", "observed"
EXT4_DEFAULT_COMMIT_S, BTRFS_DEFAULT_COMMIT_S = 5, 30
RUN_GAP_S = 0.1  # writeback_start events closer than this belong to one flusher run
RATIO_TOLERANCE = 0.10  # a ratio-derived threshold may differ this much from our estimate of it


@dataclasses.dataclass
class Check:
    setting: str  # the expectation key, e.g. "barrier", "vm.dirty_bytes", "commit"
    expected: str | None  # the expected value (None: report what is in effect)
    configured: str  # what the mount table / the kernel's option list / sysfs / sysctl says
    kernel_did: str  # the evidence, as counts
    state: str  # what is in effect, by what the kernel did
    verdict: str  # TOOK_EFFECT, NOT_IN_EFFECT, CANNOT_TELL or OBSERVED
    why: str
    evidence: dict = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Evidence:
    """What the probes saw on one filesystem, and what the configuration says, for the judges."""

    def __init__(self, target: FsTarget, phases: dict[str, Any], sysctls: dict[str, int]) -> None:
        self.target = target
        self.fsync = phases.get("fsync")
        self.dirty = phases.get("dirty")
        self.atime = phases.get("atime")
        self.timing = phases.get("timing")
        self.sysctls = sysctls  # {"vm.dirty_bytes": int, ...} read when the probes ran
        self._ext4_options: dict[str, str | bool] | None = None
        self._features: set[str] | None = None

    # -- what the configuration says --

    def ext4_options(self) -> dict[str, str | bool]:
        """The ext4 driver's own list of the options in force (/proc/fs/ext4/<dev>/options)."""
        if self._ext4_options is None:
            self._ext4_options = {}
            try:
                text = Path(f"/proc/fs/ext4/{self.target.devices[0][0]}/options").read_text()
            except OSError:
                text = ""
            for line in text.split():
                name, eq, value = line.partition("=")
                self._ext4_options[name] = value if eq else True
        return self._ext4_options

    def ext_features(self) -> set[str]:
        """The superblock's feature list, as dumpe2fs -h prints it (read only)."""
        if self._features is None:
            proc = subprocess.run(
                ["dumpe2fs", "-h", f"/dev/{self.target.devices[0][0]}"],
                capture_output=True,
                text=True,
                stdin=subprocess.DEVNULL,
            )
            line = next((x for x in proc.stdout.splitlines() if x.startswith("Filesystem features:")), "")
            self._features = set(line.partition(":")[2].split())
        return self._features

    def queue(self, what: str) -> dict[str, str | None]:
        """{disk: /sys/block/<disk>/queue/<what>} of the devices under test."""
        return {name: queue_setting(name, what) for name, _ in self.target.devices}

    def disk_names(self) -> str:
        return ", ".join(name for name, _ in self.target.disks)


def _c(phase):
    return phase["counts"]


def _plural(n, word):
    return f"{n} {word}{'' if n == 1 else 's'}"


def _size(nbytes):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.1f} {unit}".replace(".0 ", " ")
    return f"{nbytes} bytes"


def _secs(values):
    return ", ".join(f"{v:.2f}" for v in values) + " s"


def decide(
    expected: str | None, state_matches: bool, why_ok: str, why_not: str, undecided: str | None = None
) -> tuple[str, str]:
    """The verdict of an expectation: undecided (a reason) wins, then whether the state matches."""
    if expected is None:
        return OBSERVED, undecided or why_ok
    if undecided:
        return CANNOT_TELL, undecided
    return (TOOK_EFFECT, why_ok) if state_matches else (NOT_IN_EFFECT, why_not)


# ---------------------------------------------------------------------------------------------
# barriers


def barrier_configured(ev: Evidence) -> tuple[bool, str]:
    """(on?, sentence) as the configuration has it."""
    t = ev.target
    if t.fs == "xfs":
        return True, "always (XFS has no nobarrier)"
    if t.ext:
        opts = ev.ext4_options()
        on = "nobarrier" not in opts
        return on, f"{'barrier' if on else 'nobarrier'} (/proc/fs/ext4 options)"
    on = "nobarrier" not in t.option_words()
    return on, "barrier (default)" if on else "nobarrier (mount table)"


def judge_barrier(ev: Evidence, expected: str | None) -> Check:
    f = ev.fsync
    assert f is not None
    c, n = _c(f), f["fsyncs"]
    cache, fua = ev.queue("write_cache"), ev.queue("fua")
    on_configured, said = barrier_configured(ev)
    volatile = any(v == "write back" for v in cache.values())
    asked = c["bio_flush"] + c["bio_fua"]
    received = c["rq_flush"] + c["rq_fua"]
    configured = (
        f"{said}; write cache "
        + ", ".join(f'{d} "{v}"' for d, v in cache.items())
        + "; FUA "
        + ("yes" if any(v == "1" for v in fua.values()) else "no")
    )
    did = (
        f"{_plural(c['bio_flush'], 'flush bio')} ({c['bio_empty_flush']} empty) and "
        f"{_plural(c['bio_fua'], 'FUA bio')} from the filesystem, {_plural(c['rq_flush'], 'flush request')} "
        f"and {_plural(c['rq_fua'], 'FUA write')} at {ev.disk_names()}, over {_plural(n, 'fsync')}"
    )
    evidence = {
        "fsyncs": n,
        "flush_bios": c["bio_flush"],
        "empty_flush_bios": c["bio_empty_flush"],
        "fua_bios": c["bio_fua"],
        "flush_requests": c["rq_flush"],
        "fua_requests": c["rq_fua"],
        "write_cache": cache,
        "fua": fua,
    }
    undecided = None
    if not volatile:
        state = "on, but dropped: no volatile cache" if on_configured and not asked else ("on" if asked else "off")
        why = (
            "the device has no volatile write cache, so the block layer drops cache flushes and FUA "
            f"before they are queued: {received} reached the device over {n} fsyncs"
        )
    elif asked and received:
        state, why = "on", f"{asked / n:.1f} flushes or FUA writes asked per fsync, {received} reached the device"
    elif not asked:
        state = "off"
        why = f"no fsync asked for a cache flush: 0 flushes over {n} fsyncs"
        if received:
            why += f" (the {received} at {ev.disk_names()} came from another filesystem on the same disk)"
    else:
        state, why = "cannot tell", ""
        undecided = f"{asked} flushes asked, none reached {ev.disk_names()} although its cache is volatile"
    if expected is None:
        return Check("barrier", None, configured, did, state, OBSERVED, undecided or why, evidence)
    want_on = expected == "on"
    if undecided:
        verdict = CANNOT_TELL
    elif want_on:
        verdict = TOOK_EFFECT if state == "on" else NOT_IN_EFFECT
        if state == "off":
            why = f"barriers are off: zero flushes over {n} fsyncs"
        elif state.startswith("on, but dropped"):
            why = "barriers are on but " + why
    else:
        verdict = TOOK_EFFECT if state == "off" else NOT_IN_EFFECT
        if ev.target.fs == "xfs" and state != "off":
            why = (
                "XFS has no nobarrier option on this kernel (removed in Linux 4.19): it always asks for "
                f"cache flushes; {why}"
            )
        elif state.startswith("on, but dropped"):
            why = "barriers are on in the filesystem; " + why
    return Check("barrier", expected, configured, did, state, verdict, undecided or why, evidence)


# ---------------------------------------------------------------------------------------------
# dirty limits


def dirtyable_pages(meminfo: dict[str, int]) -> int:
    """Our estimate of the kernel's global_dirtyable_memory(): free memory plus the file LRUs (the
    kernel also subtracts its reserves, which it does not show: hence RATIO_TOLERANCE)."""
    return (meminfo.get("MemFree", 0) + meminfo.get("Active(file)", 0) + meminfo.get("Inactive(file)", 0)) // PAGE


def _pages_of(nbytes):
    return math.ceil(nbytes / PAGE)


def judge_dirty(ev: Evidence, key: str, expected: str | None) -> Check:
    """vm.dirty_bytes / dirty_ratio (the dirty limit) and vm.dirty_background_* (the background
    threshold), from global_dirty_state in the probe's own writes."""
    d, s = ev.dirty, ev.sysctls
    assert d is not None
    background = "background" in key
    field = "bg_thresh" if background else "dirty_thresh"
    what = "background threshold" if background else "dirty limit"
    bytes_key = "vm.dirty_background_bytes" if background else "vm.dirty_bytes"
    ratio_key = "vm.dirty_background_ratio" if background else "vm.dirty_ratio"
    configured = f"{bytes_key}={s.get(bytes_key)}, {ratio_key}={s.get(ratio_key)}"
    stats, c = d["stats"], _c(d)
    if field not in stats:
        did = f"0 global_dirty_state events in {_size(d['bytes'])} of buffered writes"
        return Check(
            key,
            expected,
            configured,
            did,
            "cannot tell",
            CANNOT_TELL if expected else OBSERVED,
            "the probe's writes never reached balance_dirty_pages",
            {"events": 0},
        )
    lo, hi = stats[field]["min"], stats[field]["max"]
    thresh = stats["dirty_thresh"]["max"]
    dirtyable = dirtyable_pages(d["meminfo"])
    pages = f"{lo}" if lo == hi else f"{lo}-{hi}"
    did = (
        f"{_plural(c['gds'], 'global_dirty_state event')} in the probe's {_size(d['bytes'])} of writes: "
        f"{what} {pages} pages ({_size(hi * PAGE)}); balance_dirty_pages throttled "
        f"{c['bdp_paused']} of {c['bdp']} checks"
    )
    evidence = {
        "events": c["gds"],
        "pages_min": lo,
        "pages_max": hi,
        "dirty_thresh": thresh,
        "bdp": c["bdp"],
        "bdp_paused": c["bdp_paused"],
        "dirtyable_pages": dirtyable,
        "bytes_written": d["bytes"],
    }
    share = 100 * hi / dirtyable if dirtyable else 0
    state = f"{hi} pages ({_size(hi * PAGE)}, {share:.1f}% of dirtyable memory)"
    by_bytes = s.get(bytes_key, 0)
    if expected is None:
        if by_bytes:
            why = f"{bytes_key}={by_bytes} gives {_pages_of(by_bytes)} pages"
        else:
            why = f"{ratio_key}={s.get(ratio_key)}% of about {dirtyable} dirtyable pages"
        return Check(key, None, configured, did, state, OBSERVED, why, evidence)
    want = int(expected)
    if key.endswith("_bytes") and want:
        target_pages = _pages_of(want)
        halved = background and target_pages >= thresh
        if halved:
            target_pages = thresh // 2
        ok = lo == hi == target_pages and not halved
        why_ok = f"the kernel's {what} is {target_pages} pages = {want} bytes rounded up to pages"
        why_not = f"the kernel's {what} is {pages} pages, and {key}={want} gives {_pages_of(want)}" + (
            " (at or above the dirty limit, so the kernel uses half the dirty limit instead)" if halved else ""
        )
        return Check(key, expected, configured, did, state, *decide(expected, ok, why_ok, why_not), evidence)
    # A ratio (or bytes = 0, which leaves the ratio in charge).
    ratio = want if key.endswith("_ratio") else s.get(ratio_key, 0)
    if key.endswith("_ratio") and by_bytes:
        return Check(
            key,
            expected,
            configured,
            did,
            state,
            NOT_IN_EFFECT,
            f"{bytes_key}={by_bytes} overrides {key}: the {what} is {_pages_of(by_bytes)} pages",
            evidence,
        )
    estimate = ratio / 100 * dirtyable
    ok = bool(estimate) and abs(hi - estimate) <= RATIO_TOLERANCE * estimate and lo >= (1 - RATIO_TOLERANCE) * estimate
    why_ok = f"{hi} pages is {share:.1f}% of about {dirtyable} dirtyable pages, as {ratio_key}={ratio} gives"
    why_not = f"{hi} pages is {share:.1f}% of about {dirtyable} dirtyable pages, not {ratio}%"
    return Check(key, expected, configured, did, state, *decide(expected, ok, why_ok, why_not), evidence)


# ---------------------------------------------------------------------------------------------
# timing: the flusher's period, the dirty expiry, journal commits


def flusher_runs(events: list[dict[str, int]]) -> list[int]:
    """Start times (ns) of the flusher's periodic runs: writeback_start events with for_kupdate,
    those within RUN_GAP_S of the previous one being the same run."""
    starts, last = [], None
    for e in sorted((e for e in events if e["kind"] == EV_WB_PERIODIC), key=lambda e: e["ns"]):
        if last is None or e["ns"] - last > RUN_GAP_S * 1e9:
            starts.append(e["ns"])
        last = e["ns"]
    return starts


def outside_syncs(events: list[dict[str, int]]) -> int:
    return sum(1 for e in events if e["kind"] == EV_SYNC_FS)


def _window_s(t):
    return (t["end_ns"] - t["start_ns"]) / 1e9


def judge_writeback_interval(ev: Evidence, expected: str | None) -> Check:
    t = ev.timing
    assert t is not None
    key = "vm.dirty_writeback_centisecs"
    configured = f"{key}={ev.sysctls.get(key)}"
    runs = flusher_runs(t["events"])
    gaps = [(b - a) / 1e9 for a, b in zip(runs, runs[1:])]
    window = _window_s(t)
    did = (
        f"{_plural(len(runs), 'periodic flusher run')} in {window:.1f} s while the probe kept "
        f"{ev.target.bdi} dirty" + (f"; {_secs(gaps)} apart" if gaps else "")
    )
    evidence = {
        "runs": len(runs),
        "gaps_s": gaps,
        "window_s": window,
        "run_offsets_s": [(r - t["start_ns"]) / 1e9 for r in runs],
    }
    state = f"every {min(gaps):.2f} s" if gaps else ("no periodic run" if not runs else "one periodic run")
    want = None if expected is None else int(expected) / 100
    if want == 0:
        ok = not runs
        return Check(
            key,
            expected,
            configured,
            did,
            state,
            *decide(
                expected,
                ok,
                "no periodic run: periodic writeback is off",
                f"{len(runs)} periodic runs although 0 turns them off",
                None if runs or window >= 5 else f"only {window:.1f} s watched",
            ),
            evidence,
        )
    if gaps:
        g = min(gaps)
        ok = want is not None and want - 0.05 <= g <= want + max(0.3, 0.1 * want)
        why_ok = f"the shortest gap between periodic runs is {g:.2f} s"
        why_not = why_ok + (f", not {want:g} s" if want is not None else "")
        return Check(key, expected, configured, did, state, *decide(expected, ok, why_ok, why_not), evidence)
    period = want if want is not None else ev.sysctls.get(key, 500) / 100
    need = 2 * period + 0.5
    undecided = (
        None
        if window >= need
        else (f"{len(runs)} periodic run(s) in {window:.1f} s; two take up to {need:.1f} s to see (raise --patience)")
    )
    why_not = (
        f"{'only one periodic run' if runs else 'no periodic run'} in {window:.1f} s; every {period:g} s would give two"
    )
    return Check(key, expected, configured, did, state, *decide(expected, False, why_not, why_not, undecided), evidence)


def judge_expire(ev: Evidence, expected: str | None) -> Check:
    t = ev.timing
    assert t is not None
    key = "vm.dirty_expire_centisecs"
    configured = f"{key}={ev.sysctls.get(key)}"
    hz, window = t["hz"], _window_s(t)
    written = [e for e in t["events"] if e["kind"] == EV_INODE_WRITEBACK and e["d"] == ROLE_EXPIRE]
    interval = ev.sysctls.get("vm.dirty_writeback_centisecs", 500) / 100
    want = None if expected is None else int(expected) / 100
    evidence = {"window_s": window, "hz": hz}
    if not written or not hz:
        did = f"the file dirtied at the start was still dirty after {window:.1f} s"
        expiry = want if want is not None else ev.sysctls.get(key, 3000) / 100
        need = expiry + interval + 0.5
        undecided = (
            None
            if window >= need and hz
            else (f"not written within {window:.1f} s; that can take up to {need:.1f} s (raise --patience)")
        )
        state = f"over {window:.1f} s"
        why_not = f"still dirty after {window:.1f} s; an expiry of {expiry:g} s would have had it written"
        return Check(
            key, expected, configured, did, state, *decide(expected, False, why_not, why_not, undecided), evidence
        )
    e = written[0]
    age = e["b"] / hz
    own = (e["ns"] - t["dirtied_ns"]) / 1e9
    how = (
        "the flusher's periodic run"
        if e["c"] & 1
        else ("background writeback" if e["c"] & 2 else "a sync" if e["c"] & 4 else "writeback")
    )
    did = f"the file dirtied at the start was written by {how} at age {age:.2f} s ({e['b']} jiffies)"
    evidence.update(age_s=age, age_jiffies=e["b"], own_clock_age_s=own, kupdate=bool(e["c"] & 1))
    state = f"written at {age:.2f} s"
    undecided = None
    if not e["c"] & 1:
        undecided = f"written by {how} before it expired" + (
            " (the system was over its background threshold)" if e["c"] & 2 else ""
        )
    if want is None:
        return Check(
            key,
            None,
            configured,
            did,
            state,
            OBSERVED,
            undecided or f"dirty inodes are written once older than about {age:.2f} s",
            evidence,
        )
    ok = want - 0.05 <= age <= want + interval + 0.5
    why_ok = f"written at {age:.2f} s, the first periodic run after {want:g} s (runs every {interval:g} s)"
    why_not = f"written at {age:.2f} s; {want:g} s would have it written between {want:g} and {want + interval:g} s"
    return Check(key, expected, configured, did, state, *decide(expected, ok, why_ok, why_not, undecided), evidence)


def commit_configured(ev: Evidence) -> tuple[int, str]:
    if ev.target.ext:
        value = ev.ext4_options().get("commit")
        return int(value) if value else EXT4_DEFAULT_COMMIT_S, f"commit={value} (/proc/fs/ext4 options)"
    value = ev.target.option_words().get("commit")
    return (int(value), f"commit={value}") if value else (BTRFS_DEFAULT_COMMIT_S, "commit=30 (default)")


def judge_commit(ev: Evidence, expected: str | None) -> Check:
    return (_judge_ext4_commit if ev.target.ext else _judge_btrfs_commit)(ev, expected)


def _judge_ext4_commit(ev, expected):
    t = ev.timing
    conf, configured = commit_configured(ev)
    hz, window = t["hz"], _window_s(t)
    commits = [e for e in t["events"] if e["kind"] == EV_JBD2_COMMIT]
    ages = [e["b"] / hz for e in commits] if hz else []
    syncs = outside_syncs(t["events"])
    did = (
        f"{_plural(len(commits), 'journal commit')} in {window:.1f} s while the probe kept a transaction open"
        + (f"; each transaction ran {_secs(ages)} before its commit" if ages else "")
        + (f"; {_plural(syncs, 'sync')} by another process" if syncs else "")
    )
    evidence = {"commits": len(commits), "ages_s": ages, "window_s": window, "outside_syncs": syncs}
    state = f"commits after {sorted(ages)[len(ages) // 2]:.2f} s" if ages else f"no commit in {window:.1f} s"
    want = None if expected is None else (int(expected) or EXT4_DEFAULT_COMMIT_S)
    if want is None:
        return Check(
            "commit",
            None,
            configured,
            did,
            state,
            OBSERVED,
            "the journal's timer commits a transaction this long after it starts"
            if ages
            else f"commit={conf} would commit after about {conf} s",
            evidence,
        )
    on_time = [a for a in ages if want - 0.05 <= a <= want + 1.1]
    undecided = None
    if not on_time:
        if ages and syncs:
            undecided = f"{syncs} sync(s) by another process committed early"
        elif not ages and window < want + 1.2:
            undecided = f"no commit in {window:.1f} s; commit={want} can take {want + 1} s (raise --patience)"
    why_ok = f"transactions committed {_secs(on_time)} after they started: the commit timer of commit={want}"
    why_not = (
        f"transactions committed {_secs(ages)} after they started, not {want} s"
        if ages
        else f"no commit in {window:.1f} s although a transaction was open; commit={want} commits within {want + 1} s"
    )
    return Check(
        "commit",
        expected,
        configured,
        did,
        state,
        *decide(expected, bool(on_time), why_ok, why_not, undecided),
        evidence,
    )


def btrfs_commit_within(interval: float) -> float:
    """The latest a btrfs transaction opened at a random moment is committed by the kthread."""
    return 2 * interval + 2.2


def _judge_btrfs_commit(ev, expected):
    t = ev.timing
    conf, configured = commit_configured(ev)
    window = _window_s(t)
    commits = [e for e in t["events"] if e["kind"] == EV_BTRFS_COMMIT]
    timed = [(e["ns"] - t["start_ns"]) / 1e9 for e in commits if e["b"]]
    gaps = [b - a for a, b in zip(timed, timed[1:])]
    syncs = outside_syncs(t["events"])
    did = (
        f"{_plural(len(commits), 'transaction commit')} in {window:.1f} s while the probe kept a transaction "
        f"open, {len(timed)} by the btrfs-transaction thread"
        + (f" at {_secs(timed)}" if timed else "")
        + (f"; {_plural(syncs, 'sync')} by another process" if syncs else "")
    )
    evidence = {
        "commits": len(commits),
        "by_kthread_at_s": timed,
        "gaps_s": gaps,
        "window_s": window,
        "outside_syncs": syncs,
    }
    state = (
        f"commits every {min(gaps):.2f} s"
        if gaps
        else f"first timed commit after {timed[0]:.2f} s"
        if timed
        else f"no timed commit in {window:.1f} s"
    )
    want = None if expected is None else (int(expected) or BTRFS_DEFAULT_COMMIT_S)
    if want is None:
        return Check(
            "commit",
            None,
            configured,
            did,
            state,
            OBSERVED,
            "the btrfs-transaction thread commits the running transaction once it is commit= seconds old"
            if timed
            else f"commit={conf} would commit within {btrfs_commit_within(conf):.0f} s",
            evidence,
        )
    if gaps:
        # Transactions follow one another: the thread commits each about commit= seconds apart.
        g = min(gaps)
        ok = want - 0.05 <= g <= want + max(0.3, 0.1 * want)
        why = f"the btrfs-transaction thread committed every {g:.2f} s" + ("" if ok else f", not every {want} s")
        return Check("commit", expected, configured, did, state, *decide(expected, ok, why, why), evidence)
    # The thread commits a transaction once it is commit= whole seconds old (ktime_get_seconds: the
    # real age can be up to 1 s less); a young one sends it back to sleep for up to commit= + 1
    # seconds: the first timed commit of the transaction opened by the probe comes N-1 .. 2N+2 s in.
    low, high = want - 1, btrfs_commit_within(want)
    first = timed[0] if timed else None
    ok = first is not None and low <= first <= high
    undecided = None
    if not ok and syncs:
        undecided = f"{syncs} sync(s) by another process committed the transaction early"
    elif first is None and window < high:
        undecided = f"no timed commit in {window:.1f} s; commit={want} can take {high:.0f} s (raise --patience)"
    why_ok = f"the btrfs-transaction thread committed {first:.2f} s after the probe opened a transaction" if ok else ""
    why_not = (
        f"the btrfs-transaction thread committed after {first:.2f} s; commit={want} commits between "
        f"{low:g} and {high:.0f} s"
        if first is not None
        else f"no timed commit in {window:.1f} s; commit={want} commits within {high:.0f} s"
    )
    return Check(
        "commit", expected, configured, did, state, *decide(expected, ok, why_ok, why_not, undecided), evidence
    )


# ---------------------------------------------------------------------------------------------
# journal, log, delayed allocation, compression, atime, scheduler


def judge_data(ev: Evidence, expected: str | None) -> Check:
    f = ev.fsync
    assert f is not None
    c = _c(f)
    mode = ev.ext4_options().get("data", "ordered")
    configured = f"data={mode} (/proc/fs/ext4 options)"
    blocks = f["bytes_per_fsync"] // f["block_size"]
    per_commit = c["jbd2_logged"] / c["jbd2_commits"] if c["jbd2_commits"] else 0
    did = (
        f"{_plural(c['jbd2_commits'], 'commit')} logging {per_commit:.1f} blocks each for {blocks} data blocks "
        f"per fsync; {_plural(c['journalled_write_end'], 'journalled write')}"
    )
    evidence = {
        "commits": c["jbd2_commits"],
        "blocks_logged": c["jbd2_logged"],
        "data_blocks_per_fsync": blocks,
        "journalled_writes": c["journalled_write_end"],
        "fsyncs": f["fsyncs"],
    }
    if not c["jbd2_commits"]:
        return Check(
            "data",
            expected,
            configured,
            did,
            "cannot tell",
            CANNOT_TELL if expected else OBSERVED,
            "no journal commit: the filesystem has no journal",
            evidence,
        )
    journalled = c["journalled_write_end"] > 0 or per_commit >= blocks
    state = "journal" if journalled else mode if mode in ("ordered", "writeback") else "not journalled"
    if journalled:
        why = f"the journal logged {per_commit:.1f} blocks per commit, the data blocks included"
    else:
        why = (
            f"the journal logged {per_commit:.1f} blocks per commit, fewer than the {blocks} data blocks: data "
            f"is not journalled (ordered and writeback look alike here: data={mode} is the kernel's own option)"
        )
    ok = state == expected
    return Check("data", expected, configured, did, state, *decide(expected, ok, why, why), evidence)


def judge_journal(ev: Evidence, expected: str | None) -> Check:
    f = ev.fsync
    assert f is not None
    c = _c(f)
    if ev.target.fs == "ext2":
        configured = "ext2 has no journal"
    else:
        configured = ("has_journal" if "has_journal" in ev.ext_features() else "no has_journal") + " (dumpe2fs)"
    did = f"{_plural(c['jbd2_commits'], 'journal commit')} over {_plural(f['fsyncs'], 'fsync')}"
    state = "on" if c["jbd2_commits"] else "off"
    why = (
        f"fsyncs committed the journal ({c['jbd2_logged']} blocks logged)"
        if c["jbd2_commits"]
        else "no fsync committed a journal"
    )
    return Check(
        "journal",
        expected,
        configured,
        did,
        state,
        *decide(expected, state == expected, why, why),
        {"commits": c["jbd2_commits"], "blocks_logged": c["jbd2_logged"], "fsyncs": f["fsyncs"]},
    )


def judge_fast_commit(ev: Evidence, expected: str | None) -> Check:
    f = ev.fsync
    assert f is not None
    c = _c(f)
    configured = ("fast_commit" if "fast_commit" in ev.ext_features() else "no fast_commit") + " (dumpe2fs)"
    did = (
        f"{_plural(c['fc_start'], 'fast commit')} tried over {_plural(f['fsyncs'], 'fsync')}: {c['fc_ok']} "
        f"written ({c['fc_blocks']} blocks), {c['fc_other']} fell back to a full commit; "
        f"{_plural(c['jbd2_commits'], 'full commit')}"
    )
    state = "on" if c["fc_start"] else "off"
    why = (
        "fsyncs went through ext4_fc_commit"
        if c["fc_start"]
        else "no fsync tried a fast commit (ext4_fc_commit_start never fired)"
    )
    return Check(
        "fast_commit",
        expected,
        configured,
        did,
        state,
        *decide(expected, state == expected, why, why),
        {
            "fast_commits": c["fc_start"],
            "ok": c["fc_ok"],
            "fell_back": c["fc_other"],
            "fc_blocks": c["fc_blocks"],
            "full_commits": c["jbd2_commits"],
            "fsyncs": f["fsyncs"],
        },
    )


def judge_delalloc(ev: Evidence, expected: str | None) -> Check:
    f = ev.fsync
    assert f is not None
    c = _c(f)
    configured = ("nodelalloc" if "nodelalloc" in ev.ext4_options() else "delalloc") + " (/proc/fs/ext4 options)"
    did = (
        f"{c['da_write_begin']} ext4_da_write_begin and {c['write_begin']} ext4_write_begin in the probe's "
        f"{_plural(f['fsyncs'], 'write')}"
    )
    if c["da_write_begin"] and not c["write_begin"]:
        state, why = "on", "every write went through ext4_da_write_begin: blocks are allocated at writeback"
    elif c["write_begin"] and not c["da_write_begin"]:
        state, why = "off", "every write went through ext4_write_begin: blocks are allocated as they are written"
    else:
        state, why = "cannot tell", "the writes took both paths, or neither"
    undecided = why if state == "cannot tell" else None
    return Check(
        "delalloc",
        expected,
        configured,
        did,
        state,
        *decide(expected, state == expected, why, why, undecided),
        {"da_write_begin": c["da_write_begin"], "write_begin": c["write_begin"], "writes": f["fsyncs"]},
    )


def judge_logbsize(ev: Evidence, expected: str | None) -> Check:
    f = ev.fsync
    assert f is not None
    c, st = _c(f), f["stats"]
    configured = f"logbsize={ev.target.option_words().get('logbsize', '?')} (mount table)"
    if "iclog_size" not in st:
        return Check(
            "logbsize",
            expected,
            configured,
            "no log write",
            "cannot tell",
            CANNOT_TELL if expected else OBSERVED,
            "the probe's fsyncs wrote no log",
            {"log_writes": 0},
        )
    size = st["iclog_size"]["last"]
    did = f"{_plural(c['xlog_sync'], 'log write')} from iclogs of {_size(size)} (the log's l_iclog_size)"
    state = _size(size)
    ok = expected is not None and size == parse_size(expected)
    why = f"the log writes from {_size(size)} buffers"
    return Check(
        "logbsize",
        expected,
        configured,
        did,
        state,
        *decide(expected, ok, why, why),
        {"log_writes": c["xlog_sync"], "iclog_size": size},
    )


def judge_logbufs(ev: Evidence, expected: str | None) -> Check:
    f = ev.fsync
    assert f is not None
    c, st = _c(f), f["stats"]
    configured = f"logbufs={ev.target.option_words().get('logbufs', '?')} (mount table)"
    used = len(f["iclogs"])
    bufs = st.get("iclog_bufs", {}).get("last", 0)
    did = f"{_plural(c['xlog_sync'], 'log write')} from {used} distinct iclogs (the log has l_iclog_bufs={bufs})"
    evidence = {"log_writes": c["xlog_sync"], "distinct_iclogs": used, "iclog_bufs": bufs}
    state = f"{used} buffers in rotation"
    want = None if expected is None else int(expected)
    undecided = None
    if not c["xlog_sync"] or (want and c["xlog_sync"] < want and used < want):
        undecided = f"only {c['xlog_sync']} log writes: too few to go round {want or bufs} buffers"
    ok = want is not None and used == want
    why_ok = f"the log went round {used} in-core log buffers"
    why_not = f"the log went round {used} in-core log buffers, not {want}"
    return Check(
        "logbufs", expected, configured, did, state, *decide(expected, ok, why_ok, why_not, undecided), evidence
    )


def compress_name(value: str) -> str:
    v = str(value).partition(":")[0].lower()
    return "none" if v in ("no", "none", "") else v


def judge_compress(ev: Evidence, expected: str | None) -> Check:
    f = ev.fsync
    assert f is not None
    c = _c(f)
    words = ev.target.option_words()
    conf = words.get("compress-force") or words.get("compress")
    configured = f"compress={conf}" if conf else "no compress option"
    by_type = {COMPRESS_TYPES[i] if i < len(COMPRESS_TYPES) else f"type {i}": n for i, n in c["compress"].items()}
    did = (
        f"{_plural(c['oe'], 'ordered extent')} of the probe's data ({_size(c['oe_bytes'])} in "
        f"{_size(c['oe_disk_bytes'])} on disk): " + ", ".join(f"{n} {t}" for t, n in by_type.items())
    )
    evidence = {
        "ordered_extents": c["oe"],
        "by_type": by_type,
        "bytes": c["oe_bytes"],
        "disk_bytes": c["oe_disk_bytes"],
    }
    if not c["oe"]:
        return Check(
            "compress",
            expected,
            configured,
            did or "no ordered extent",
            "cannot tell",
            CANNOT_TELL if expected else OBSERVED,
            "the probe's writes made no ordered extent",
            evidence,
        )
    used = [t for t in by_type if t != "none"]
    state = ",".join(used) if used else "none"
    ok = expected is not None and (compress_name(expected) in used if compress_name(expected) != "none" else not used)
    why = (
        f"{sum(by_type[t] for t in used)} of {c['oe']} extents of compressible data were written compressed ({state})"
        if used
        else f"all {c['oe']} extents of compressible data were written uncompressed"
    )
    return Check("compress", expected, configured, did, state, *decide(expected, ok, why, why), evidence)


def atime_configured(words: dict[str, str | bool]) -> tuple[str, str]:
    mode = "noatime" if "noatime" in words else "relatime" if "relatime" in words else "strictatime"
    return mode, mode + (",lazytime" if "lazytime" in words else "") + " (mount table)"


def _dirtied(counts):
    return (
        counts["atime_dirty_sync"]
        + counts["atime_dirty_time"]
        + counts["xfs_update_time"]
        + counts["btrfs_delayed_inode"]
    )


def judge_atime(ev: Evidence, expected: str | None) -> Check:
    a = ev.atime
    assert a is not None
    _, configured = atime_configured(ev.target.option_words())
    da, db = _dirtied(a["a"]["read"]), _dirtied(a["b"]["read"])
    wa, wb = a["a"]["sync"]["bio_write"], a["b"]["sync"]["bio_write"]
    did = (
        f"read with atime older than mtime: inode dirtied {da}x, the syncfs after it wrote {_plural(wa, 'bio')}; "
        f"read with atime newer than mtime and ctime: dirtied {db}x, then {_plural(wb, 'bio')}"
    )
    evidence = {
        "dirtied_a": da,
        "written_a": wa,
        "dirtied_b": db,
        "written_b": wb,
        "time_only_a": a["a"]["read"]["atime_dirty_time"],
        "time_only_b": a["b"]["read"]["atime_dirty_time"],
        "atime_changed_a": a["a"]["atime_changed"],
        "atime_changed_b": a["b"]["atime_changed"],
    }
    state = {(True, True): "strictatime", (True, False): "relatime", (False, False): "noatime"}.get((da > 0, db > 0))
    undecided = None if state else "the inode was dirtied on the second read only"
    why = {
        "strictatime": "every read updates the access time",
        "relatime": "a read updates the access time only when it is older than mtime or ctime (or a day old)",
        "noatime": "no read updates the access time",
    }.get(state or "", "")
    if state and evidence["time_only_a"] + evidence["time_only_b"] and not (wa + wb):
        why += " (lazytime: the new time stays in memory)"
    return Check(
        "atime",
        expected,
        configured,
        did,
        state or "cannot tell",
        *decide(expected, state == expected, why, why, undecided),
        evidence,
    )


def judge_scheduler(ev: Evidence, expected: str | None) -> Check:
    f = ev.fsync
    assert f is not None
    c = _c(f)
    configured = "; ".join(f"{d}: {queue_setting(d, 'scheduler')}" for d, _ in ev.target.disks)
    did = (
        f"{_plural(c['rq_data'], 'data request')} issued to {ev.disk_names()}, {c['rq_sched']} through an "
        f"I/O scheduler" + (f" ({f['elevator']})" if f["elevator"] else "") + f", {c['rq_insert']} inserted"
    )
    evidence = {
        "requests": c["rq_data"],
        "through_scheduler": c["rq_sched"],
        "inserted": c["rq_insert"],
        "elevator": f["elevator"],
    }
    if not c["rq_data"]:
        return Check(
            "scheduler",
            expected,
            configured,
            did,
            "cannot tell",
            CANNOT_TELL if expected else OBSERVED,
            "no request reached a disk: a bio-based device (zram, device-mapper) has no scheduler",
            evidence,
        )
    state = f["elevator"] if c["rq_sched"] else "none"
    why = (
        f"{c['rq_sched']} of {c['rq_data']} requests passed the {state} elevator (flush-sequence writes never do)"
        if c["rq_sched"]
        else "no request passed an elevator"
    )
    return Check(
        "scheduler", expected, configured, did, state, *decide(expected, state == expected, why, why), evidence
    )
