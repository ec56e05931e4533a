"""Attribution: every nanosecond of a traced syscall's wall time assigned to a cause.

  wall = off-CPU (classified by the switch-out stack, profiler/analysis/rules/*.toml)
       + on-CPU  (wall - off-CPU, divided by the on-CPU samples' stacks)

The rules are data; this module only applies them. See docs/attribution.md.
"""

import fnmatch
import re
import tomllib
from collections.abc import Hashable, Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

from .. import filesystems
from ..causes import check as known_cause
from ..trace.maps import STACK_NOT_WALKED

RULES_DIR = Path(__file__).parent / "rules"
CPU_CONTENTION = known_cause("cpu contention")
OTHER_WAIT = known_cause("other wait")
DELAYED_ALLOC = known_cause("delayed allocation")
FS_CPU = known_cause("filesystem CPU")
OTHER_CPU = known_cause("other kernel CPU")
UNSAMPLED_CPU = known_cause("CPU (too short to sample)")
NO_STACK_CPU = known_cause("CPU (stack not captured)")
NO_STACK = "[stack not captured]"
NOT_WALKED = "[stack not walked: sampled out, no walked wait of its kind to divide it by]"
RULE_TABLE_OF = {fs.name: fs.rules for fs in filesystems.TABLE.values()}
K = TypeVar("K", bound=Hashable)  # the keys apportion() shares a total among


def _patterns(globs):
    return re.compile("|".join(fnmatch.translate(g) for g in globs)) if globs else None


class Rule:
    def __init__(self, spec: dict[str, Any], table: str | None) -> None:
        self.cause = known_cause(spec["cause"], f"analysis/rules/{table}.toml")
        self.order = spec.get("order", 50)
        self.table = table
        self.globs = list(spec.get("frames", []))
        self.frames = _patterns(self.globs)
        self.within = _patterns(spec.get("within", []))
        # A rule by who ended the wait: a frame of the waker's stack matches one of these.
        self.waker_frames = _patterns(spec.get("waker_frames", []))
        # A lock's wait names its site: the frame that took the lock (the innermost frame outside
        # the site rules' frames and the generic ones).
        self.site = bool(spec.get("site", False))

    def matches(self, frames: Sequence[str], waker: Sequence[str] = ()) -> bool:
        """frames: innermost first. True when a frame matches and (if `within`) an outer one does
        too; a rule by its waker's frames, when one of the waker's stack does."""
        if self.waker_frames is not None:
            return any(self.waker_frames.match(f) for f in waker)
        for i, f in enumerate(frames):
            if self.frames.match(f):
                if self.within is None or any(self.within.match(g) for g in frames[i + 1 :]):
                    return True
        return False


class Rules:
    """The common table merged with one filesystem's."""

    def __init__(self, fs: str) -> None:
        common = tomllib.loads((RULES_DIR / "common.toml").read_text())
        own_name = RULE_TABLE_OF.get(fs)
        own = tomllib.loads((RULES_DIR / f"{own_name}.toml").read_text()) if own_name else {}
        self.offcpu = sorted(
            [Rule(s, "common") for s in common.get("offcpu", [])] + [Rule(s, own_name) for s in own.get("offcpu", [])],
            key=lambda r: r.order,
        )
        self.oncpu = [Rule(s, own_name) for s in own.get("oncpu", [])] + [
            Rule(s, "common") for s in common.get("oncpu", [])
        ]
        # Filesystem workers' own off-CPU time inside their windows (a jbd2 commit, ...).
        self.worker = sorted(
            [Rule(s, "common") for s in common.get("worker", [])] + [Rule(s, own_name) for s in own.get("worker", [])],
            key=lambda r: r.order,
        )
        self.generic = _patterns(common.get("generic_frames", []))
        # Every site-naming rule's frames (a PREEMPT_RT rwsem wait goes through rwbase_* of one
        # rule and rt_mutex_* and down_write of another): none of them is where the lock was taken.
        site_rules = [r for r in self.offcpu + self.worker if r.site]
        self.lock_frames = _patterns([g for r in site_rules for g in r.globs])
        self.fs_frames = _patterns(own.get("fs_frames", []))

    def classify_off(self, frames: Sequence[str], runnable: int, waker: Sequence[str] = ()) -> tuple[str, str | None]:
        """(cause, detail): detail names the frame for "other wait", the site for a lock. waker:
        the stack of the task that ended the wait, if walked."""
        if runnable:
            return CPU_CONTENTION, None
        if not frames:
            return OTHER_WAIT, NO_STACK
        for rule in self.offcpu:
            if rule.matches(frames, waker):
                return rule.cause, self.site_of(rule, frames)
        return OTHER_WAIT, self.meaningful_frame(frames)

    def classify_worker(
        self, frames: Sequence[str], runnable: int, waker: Sequence[str] = ()
    ) -> tuple[str, str | None]:
        if runnable:
            return CPU_CONTENTION, None
        if not frames:
            return OTHER_WAIT, NO_STACK
        for rule in self.worker:
            if rule.matches(frames, waker):
                return rule.cause, self.site_of(rule, frames)
        return OTHER_WAIT, self.meaningful_frame(frames)

    def meaningful_frame(self, frames: Sequence[str]) -> str:
        return next((f for f in frames if not self.generic.match(f)), frames[0])

    def site_of(self, rule: Rule, frames: Sequence[str]) -> str | None:
        if not rule.site:
            return None
        return next((f for f in frames if not self.generic.match(f) and not self.lock_frames.match(f)), None)

    def classify_on(self, frames: Sequence[str]) -> str:
        for rule in self.oncpu:
            if rule.matches(frames):
                return rule.cause
        if self.fs_frames and any(self.fs_frames.match(f) for f in frames):
            return FS_CPU
        return OTHER_CPU


@lru_cache(maxsize=8)
def rules_for(fs: str) -> Rules:
    return Rules(fs)


# A wakeup from interrupt context runs on whatever task the interrupt found: its stack shows it.
_IRQ_FRAMES = _patterns(
    [
        "asm_sysvec_*",
        "asm_common_interrupt",
        "common_interrupt",
        "sysvec_*",
        "__irq_exit_rcu",
        "irq_exit_rcu",
        "handle_softirqs",
        "__do_softirq",
        "do_softirq*",
    ]
)
_KWORKER_SUFFIX = re.compile(r"^(kworker/[^:]*):.*$")


_TIMER_FRAMES = _patterns(["process_timeout", "hrtimer_wakeup", "call_timer_fn", "__run_timers"])


def waker_name(comm: str, frames: Sequence[str] | None) -> str:
    """Who ended a wait, as a reader wants it grouped: kworkers by pool, timers and interrupts as such."""
    if frames and any(_TIMER_FRAMES.match(f) for f in frames):
        return "[timer]"
    if frames and any(_IRQ_FRAMES.match(f) for f in frames):
        return "[interrupt]"
    if not comm:
        return "[not seen]"
    return _KWORKER_SUFFIX.sub(r"\1:*", comm)


def classify_off(
    rules: Rules, rec: dict[str, Any], frames: Sequence[str], worker: bool = False, waker: Sequence[str] | None = None
) -> tuple[str, str | None]:
    """(cause, detail) of an off-CPU record of a syscall (or, with worker, of a worker's window);
    waker: its waker's frames, if its waker's stack was walked."""
    if rec["stack"] == STACK_NOT_WALKED and not rec["runnable"]:
        return OTHER_WAIT, NOT_WALKED
    return (rules.classify_worker if worker else rules.classify_off)(frames, rec["runnable"], waker or ())


def _add_detail(
    other: dict[str, int], sites: dict[str, dict[str, int]], cause: str, detail: str | None, ns: int
) -> None:
    """An interval's detail: the frame naming an "other wait", or the site of a lock's wait."""
    if not detail:
        return
    into = other if cause == OTHER_WAIT else sites.setdefault(cause, {})
    into[detail] = into.get(detail, 0) + ns


def _sites_field(sites: dict[str, dict[str, int]]) -> dict[str, Any]:
    """{"sites": {cause: {frame: ns}}}, largest first, or nothing when no wait had a site."""
    if not sites:
        return {}
    return {"sites": {c: dict(sorted(by.items(), key=lambda kv: -kv[1])) for c, by in sites.items()}}


def apportion(total: int, weights: dict[K, int]) -> dict[K, int]:
    """{key: int} summing exactly to `total`, in proportion to weights {key: number > 0}: each
    share rounded down, the remainder to the largest weight."""
    whole = sum(weights.values())
    shares = {k: total * w // whole for k, w in weights.items()}
    shares[max(weights, key=weights.__getitem__)] += total - sum(shares.values())
    return shares


def split_unwalked(offcpu: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stack sampling (--stack-sample N): the intervals of the calls (a worker's windows) whose
    stacks were not walked come as records with stack STACK_NOT_WALKED. Each (dev, phase, op or
    worker kind, runnable) group's such time is divided among the same group's walked records in
    proportion to their time, and its interval count in proportion to their counts: the calls were
    chosen at random, so the walked ones are a sample of the rest. A walked record keeps what it
    received in "estimated_ns". A group with no walked record keeps its own (blocked time with no
    cause but "other wait", named NOT_WALKED). Totals stay exact; only the division between stacks
    is estimated. The tail (records with "tail": blocked intervals of at least the tail threshold,
    whose stacks every call took) is exact: it neither receives unwalked time nor weighs in its
    division, which is of the shorter waits only."""
    group = lambda r: (r.get("dev"), r["phase"], r.get("op"), r.get("kind"), r["runnable"])  # noqa: E731
    walked = [dict(r) for r in offcpu if r["stack"] != STACK_NOT_WALKED]
    members: dict[tuple[Any, ...], list[int]]
    unwalked: dict[tuple[Any, ...], dict[str, Any]]
    members, unwalked = {}, {}
    for i, r in enumerate(walked):
        if not r.get("tail"):
            members.setdefault(group(r), []).append(i)
    for r in offcpu:
        if r["stack"] == STACK_NOT_WALKED:
            u = unwalked.setdefault(group(r), {**r, "count": 0, "total_ns": 0})
            u["count"] += r["count"]
            u["total_ns"] += r["total_ns"]
    out = walked
    for g, u in unwalked.items():
        mine = [i for i in members.get(g, []) if walked[i]["total_ns"] > 0]
        if not mine:
            out.append({**u, "estimated_ns": u["total_ns"]})
            continue
        by_ns = apportion(u["total_ns"], {i: walked[i]["total_ns"] for i in mine})
        by_count = apportion(u["count"], {i: walked[i]["count"] or 1 for i in mine})
        for i in mine:
            walked[i]["total_ns"] += by_ns[i]
            walked[i]["count"] += by_count[i]
            walked[i]["estimated_ns"] = walked[i].get("estimated_ns", 0) + by_ns[i]
    return out


def attribute(
    fs: str,
    wall: dict[str, Any],
    offcpu: list[dict[str, Any]],
    samples: list[dict[str, Any]],
    stacks: dict[int, list[str]],
    spans: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One (filesystem, syscall, phase): wall = {count, total_ns}; offcpu = [{stack, runnable,
    count, total_ns}]; samples = [{stack, count}]; stacks = {id: [function, ...]}; spans =
    {cause: ns} of on-CPU time measured exactly by bracketing tracepoints (behind.cpu_spans).
    Returns the breakdown: causes in ns summing to the wall time, with the figures behind them.
    Measured spans take their exact time out of the on-CPU time; the samples split the rest
    (their samples in a measured cause dropped, being counted already)."""
    rules = rules_for(fs)
    causes: dict[str, int]
    other: dict[str, int]
    wakers: dict[str, dict[str, int]]
    waits: dict[str, int]
    sites: dict[str, dict[str, int]]
    causes, other, sites, wakers, waits, off_ns, off_count = {}, {}, {}, {}, {}, 0, 0
    estimated = sum(rec.get("estimated_ns", 0) for rec in offcpu)
    tail = [rec for rec in offcpu if rec.get("tail")]
    tail_causes: dict[str, int] = {}
    for rec in offcpu:
        cause, detail = classify_off(
            rules, rec, stacks.get(rec["stack"], []), waker=stacks.get(rec.get("waker_stack", -1))
        )
        causes[cause] = causes.get(cause, 0) + rec["total_ns"]
        if rec.get("tail"):
            tail_causes[cause] = tail_causes.get(cause, 0) + rec["total_ns"]
        if not rec["runnable"]:
            waits[cause] = waits.get(cause, 0) + rec["count"]
            by = wakers.setdefault(cause, {})
            who = waker_name(rec.get("waker_comm", ""), stacks.get(rec.get("waker_stack", -1)))
            by[who] = by.get(who, 0) + rec["total_ns"]
        _add_detail(other, sites, cause, detail, rec["total_ns"])
        off_ns += rec["total_ns"]
        off_count += rec["count"]

    on_ns = wall["total_ns"] - off_ns
    spans = {c: ns for c, ns in (spans or {}).items() if ns > 0}
    measured = sum(spans.values())
    if on_ns > 0 and measured:
        # Never more than the on-CPU time there is (a span's interrupts are the syscall's too).
        scale = min(1.0, on_ns / measured)
        for c, ns in spans.items():
            causes[c] = causes.get(c, 0) + int(ns * scale)
        on_ns -= sum(int(ns * scale) for ns in spans.values())
    by_cpu_cause: dict[str, int]
    by_cpu_cause, n_samples = {}, 0
    for rec in samples:
        frames = stacks.get(rec["stack"])
        cause = rules.classify_on(frames) if frames else NO_STACK_CPU
        if cause in spans:
            continue
        by_cpu_cause[cause] = by_cpu_cause.get(cause, 0) + rec["count"]
        n_samples += rec["count"]
    if on_ns > 0:
        if n_samples:
            for k, v in apportion(on_ns, by_cpu_cause).items():
                causes[k] = causes.get(k, 0) + v
        else:
            causes[UNSAMPLED_CPU] = causes.get(UNSAMPLED_CPU, 0) + on_ns
    total = sum(causes.values())
    out = {
        "count": wall["count"],
        "wall_ns": wall["total_ns"],
        "offcpu_ns": off_ns,
        "offcpu_intervals": off_count,
        "oncpu_ns": max(wall["total_ns"] - off_ns, 0),
        "oncpu_samples": sum(r["count"] for r in samples),
        "causes": dict(sorted(causes.items(), key=lambda kv: -kv[1])),
        "other_wait_frames": dict(sorted(other.items(), key=lambda kv: -kv[1])),
        **_sites_field(sites),
        # Who ended the blocked time of each cause: {cause: {waker: ns}}.
        "wakers": {c: dict(sorted(w.items(), key=lambda kv: -kv[1])) for c, w in wakers.items()},
        # How many times it blocked, by cause (each a wait the op itself had).
        "waits": dict(sorted(waits.items(), key=lambda kv: -kv[1])),
        # Off-CPU time can only exceed wall time if intervals were keyed to the wrong syscall: the
        # invariant the tests assert (causes sum to the wall time within 1%).
        "sum_error": (total - wall["total_ns"]) / wall["total_ns"] if wall["total_ns"] else 0.0,
    }
    if spans:
        out["cpu_spans"] = spans
    if estimated:
        # Off-CPU time of calls whose stacks sampling passed over: its causes are estimated.
        out["offcpu_estimated_ns"] = estimated
    if tail:
        # Blocked intervals at or above the tail threshold: each with its own stacks, never estimated.
        out["tail"] = {
            "waits": sum(r["count"] for r in tail),
            "ns": sum(r["total_ns"] for r in tail),
            "causes": dict(sorted(tail_causes.items(), key=lambda kv: -kv[1])),
        }
    return out


def attribute_worker(
    fs: str, offcpu: list[dict[str, Any]], stacks: dict[int, list[str]], syscall_rules: bool = False
) -> dict[str, Any]:
    """A filesystem worker's off-CPU time inside its windows (offcpu = [{stack, runnable, count,
    total_ns}]), split by the `[[worker]]` rules. Its on-CPU time is the window total minus this,
    which only the probe that opened the windows knows. syscall_rules: a worker that runs a
    call's own code (an io-wq worker doing an io_uring request's fsync), split as a syscall's."""
    rules = rules_for(fs)
    causes: dict[str, int]
    other: dict[str, int]
    sites: dict[str, dict[str, int]]
    waits: dict[str, int]
    causes, other, sites, waits, off_ns, count = {}, {}, {}, {}, 0, 0
    for rec in offcpu:
        cause, detail = classify_off(
            rules,
            rec,
            stacks.get(rec["stack"], []),
            worker=not syscall_rules,
            waker=stacks.get(rec.get("waker_stack", -1)),
        )
        causes[cause] = causes.get(cause, 0) + rec["total_ns"]
        if not rec["runnable"]:
            waits[cause] = waits.get(cause, 0) + rec["count"]
        _add_detail(other, sites, cause, detail, rec["total_ns"])
        off_ns += rec["total_ns"]
        count += rec["count"]
    out = {
        "offcpu_ns": off_ns,
        "offcpu_intervals": count,
        "causes": dict(sorted(causes.items(), key=lambda kv: -kv[1])),
        "other_wait_frames": dict(sorted(other.items(), key=lambda kv: -kv[1])),
        **_sites_field(sites),
    }
    if syscall_rules:  # how many times it blocked, by cause, as a syscall's "waits"
        out["waits"] = dict(sorted(waits.items(), key=lambda kv: -kv[1]))
    estimated = sum(rec.get("estimated_ns", 0) for rec in offcpu)
    if estimated:
        out["offcpu_estimated_ns"] = estimated
    return out


def merge_requests(parts: Iterable[dict[str, dict[str, int]]]) -> dict[str, dict[str, int]]:
    """{class: {count, bytes, ...}} summed over several (maps.requests_of: older runs have count
    and bytes only)."""
    out: dict[str, dict[str, int]] = {}
    for part in parts:
        for cls, v in part.items():
            e = out.setdefault(cls, {})
            for key, n in v.items():
                e[key] = e.get(key, 0) + n
    return out


def merge(breakdowns: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Sum of several breakdowns of the same syscall (e.g. over phases)."""
    breakdowns = list(breakdowns)
    out: dict[str, Any] = {
        "count": 0,
        "wall_ns": 0,
        "offcpu_ns": 0,
        "offcpu_intervals": 0,
        "oncpu_ns": 0,
        "oncpu_samples": 0,
        "causes": {},
        "other_wait_frames": {},
        "wakers": {},
        "waits": {},
    }
    if breakdowns and all("requests" in b for b in breakdowns):
        out["requests"] = merge_requests(b["requests"] for b in breakdowns)
    for b in breakdowns:
        for cause, ns in b.get("cpu_spans", {}).items():
            spans = out.setdefault("cpu_spans", {})
            spans[cause] = spans.get(cause, 0) + ns
        for k in ("count", "wall_ns", "offcpu_ns", "offcpu_intervals", "oncpu_ns", "oncpu_samples"):
            out[k] += b[k]
        if b.get("offcpu_estimated_ns"):
            out["offcpu_estimated_ns"] = out.get("offcpu_estimated_ns", 0) + b["offcpu_estimated_ns"]
        if b.get("tail"):
            t = out.setdefault("tail", {"waits": 0, "ns": 0, "causes": {}})
            t["waits"] += b["tail"]["waits"]
            t["ns"] += b["tail"]["ns"]
            for cause, ns in b["tail"].get("causes", {}).items():
                t["causes"][cause] = t["causes"].get(cause, 0) + ns
        for field in ("wakers", "sites"):
            for cause, by in b.get(field, {}).items():
                mine = out.setdefault(field, {}).setdefault(cause, {})
                for who, ns in by.items():
                    mine[who] = mine.get(who, 0) + ns
        for field in ("causes", "other_wait_frames", "waits"):
            for k, v in b.get(field, {}).items():
                out[field][k] = out[field].get(k, 0) + v
    for field in ("causes", "other_wait_frames", "waits"):
        out[field] = dict(sorted(out[field].items(), key=lambda kv: -kv[1]))
    out["wakers"] = {c: dict(sorted(w.items(), key=lambda kv: -kv[1])) for c, w in out["wakers"].items()}
    if "sites" in out:
        out.update(_sites_field(out["sites"]))
    total = sum(out["causes"].values())
    out["sum_error"] = (total - out["wall_ns"]) / out["wall_ns"] if out["wall_ns"] else 0.0
    return out
