"""Results: statistics over raw records (here), exporters (exporters.py), Prometheus (prometheus.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence

# pFabric's (and so the thesis') flow-size bins: small (0, 100 KB], medium (100 KB, 10 MB],
# large (10 MB, ∞), each closed at the top. KB and MB are decimal (10^3 and 10^6 bytes), as in
# the thesis' web-search CDF (its points are 10,000 ... 30,000,000 bytes) and its mean of 1.7 MB
# in formula 5.3, and as `KB`/`MB` in scenario sizes.
SMALL_FLOW, LARGE_FLOW = 100_000, 10_000_000


def size_class(nbytes: int) -> str:
    """pFabric size classes: small ≤ 100 KB, medium ≤ 10 MB, large > 10 MB (decimal units)."""
    return "small" if nbytes <= SMALL_FLOW else "medium" if nbytes <= LARGE_FLOW else "large"


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0–100), as numpy's default."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def describe(values: Sequence[float]) -> dict[str, float | int | None]:
    """count, mean, p50, p99, max; None where there is nothing to describe."""
    if not values:
        return {"count": 0, "mean": None, "p50": None, "p99": None, "max": None}
    return {
        "count": len(values),
        "mean": sum(values) / len(values),
        "p50": percentile(values, 50),
        "p99": percentile(values, 99),
        "max": max(values),
    }
