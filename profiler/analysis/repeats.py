"""What repeated runs of two configurations say about a difference between them.

A run-to-run spread (max - min) is a poor judge: one outlier repeat widens it until a difference
that every repeat shows is called noise. This module judges by ranks instead:

- an exact two-sided Mann-Whitney U test (every way of splitting the pooled repeats into two
  groups of the same sizes is enumerated; ties count one half). It does not care how far an
  outlier lies, only on which side. When every repeat of one configuration lies beyond every
  repeat of the other, p is the smallest the repeat counts allow: 2 / C(n + m, n), 0.10 with
  three repeats each, 0.33 with two;
- a 95% percentile-bootstrap interval for the ratio of the medians (resampling each side's
  repeats), seeded so that a comparison prints the same figures every time.

Hand-written (about 40 lines) rather than taken from scipy: fsprof has no other dependency
outside the standard library, and these two routines on a handful of repeats need none.
"""

import itertools
import math
import random
import statistics
from collections.abc import Sequence
from typing import Any

ALPHA = 0.10  # three repeats each, every one beyond the other side's: significant
BOOTSTRAP_RESAMPLES = 2000
EXACT_LIMIT = 16  # pooled repeats enumerated exactly; beyond, the normal approximation


def u_statistic(a: Sequence[float], b: Sequence[float]) -> float:
    """How many (x in a, y in b) pairs have y > x, ties counting one half."""
    return sum(1.0 if y > x else 0.5 if y == x else 0.0 for x in a for y in b)


def rank_test(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Two-sided p-value of the Mann-Whitney U test of b against a (None with fewer than 2 each)."""
    n, m = len(a), len(b)
    if n < 2 or m < 2:
        return None
    mean = n * m / 2
    observed = abs(u_statistic(a, b) - mean)
    if n + m > EXACT_LIMIT:
        sd = math.sqrt(n * m * (n + m + 1) / 12)
        z = max(observed - 0.5, 0) / sd
        return math.erfc(z / math.sqrt(2))
    pooled = list(a) + list(b)
    extreme = total = 0
    for chosen in itertools.combinations(range(n + m), m):
        picked = set(chosen)
        ys = [pooled[i] for i in chosen]
        xs = [pooled[i] for i in range(n + m) if i not in picked]
        total += 1
        extreme += abs(u_statistic(xs, ys) - mean) >= observed - 1e-9
    return extreme / total


def separated(a: Sequence[float], b: Sequence[float]) -> int:
    """1 if every b is above every a, -1 if every b is below, 0 otherwise."""
    if min(b) > max(a):
        return 1
    if max(b) < min(a):
        return -1
    return 0


def ratio_interval(
    a: Sequence[float], b: Sequence[float], level: float = 0.95, seed: int = 0
) -> tuple[float, float] | None:
    """(low, high) of a percentile bootstrap of median(b) / median(a), or None."""
    if len(a) < 2 or len(b) < 2:
        return None
    rng = random.Random(seed)
    ratios: list[float] = []
    for _ in range(BOOTSTRAP_RESAMPLES):
        ma = statistics.median(rng.choices(a, k=len(a)))
        mb = statistics.median(rng.choices(b, k=len(b)))
        if ma > 0:
            ratios.append(mb / ma)
    if not ratios:
        return None
    ratios.sort()
    tail = (1 - level) / 2
    return ratios[int(tail * (len(ratios) - 1))], ratios[int((1 - tail) * (len(ratios) - 1))]


def repeats_needed() -> int:
    """The fewest repeats per side at which a clean separation reaches ALPHA."""
    n = 2
    while 2 / math.comb(2 * n, n) > ALPHA:
        n += 1
    return n


def judge(a: Sequence[float], b: Sequence[float], min_effect: float) -> dict[str, Any]:
    """The verdict on values a (base) and b (other), one per repeat. min_effect: the smallest
    difference of medians worth calling a difference at all (absolute, in the values' unit).

    Returns {"repeats", "median", "p", "ratio_ci", "separated", "measured", "significant"}:
    measured is False with fewer than two repeats on a side (no noise estimate exists); then
    significant says only whether the difference exceeds min_effect."""
    ma, mb = statistics.median(a), statistics.median(b)
    p = rank_test(a, b)
    large = abs(mb - ma) >= min_effect
    return {
        "repeats": [len(a), len(b)],
        "median": [ma, mb],
        "p": p,
        "ratio_ci": ratio_interval(a, b),
        "separated": separated(a, b) if p is not None else 0,
        "measured": p is not None,
        "significant": large and (p is None or p <= ALPHA + 1e-9),
    }
