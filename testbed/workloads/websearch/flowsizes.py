"""Flow-size distributions: empirical CDFs sampled by inverse transform with linear
interpolation between points (as ns-3's EmpiricalRandomVariable, which the thesis used)."""

from __future__ import annotations

import itertools
import random
from bisect import bisect_left
from pathlib import Path

CDF = list[tuple[float, float]]  # (bytes, cumulative probability), increasing

# DCTCP web search (Alizadeh et al. 2010) as used by pFabric and the thesis; mean ≈ 1.7 MB.
WEBSEARCH: CDF = [
    (4_000, 0.00), (10_000, 0.15), (20_000, 0.20), (30_000, 0.30), (50_000, 0.40),
    (80_000, 0.53), (200_000, 0.60), (1_000_000, 0.70), (2_000_000, 0.80),
    (5_000_000, 0.90), (10_000_000, 0.97), (30_000_000, 1.00),
]  # fmt: skip
# VL2 data mining (Greenberg et al. 2009) as used by pFabric; heavy-tailed, mean ≈ 12.7 MB.
DATAMINING: CDF = [
    (100, 0.0), (180, 0.1), (216, 0.2), (560, 0.3), (900, 0.4), (1_100, 0.5), (1_870, 0.6),
    (3_160, 0.7), (10_000, 0.8), (400_000, 0.9), (3_160_000, 0.95), (100_000_000, 0.98),
    (1_000_000_000, 1.0),
]  # fmt: skip
BUILTIN = {"websearch": WEBSEARCH, "datamining": DATAMINING}


def check(cdf: CDF, where: str) -> CDF:
    if len(cdf) < 2:
        raise ValueError(f"{where}: a CDF needs at least two points")
    for (x0, p0), (x1, p1) in itertools.pairwise(cdf):
        if x1 < x0 or p1 < p0:
            raise ValueError(
                f"{where}: sizes and probabilities must not decrease ({x0},{p0} → {x1},{p1})"
            )
    if cdf[0][0] < 1 or not 0 <= cdf[0][1] <= 1 or abs(cdf[-1][1] - 1.0) > 1e-9:
        raise ValueError(f"{where}: sizes must be ≥ 1 byte and the CDF must end at 1.0")
    return cdf


def load_csv(path: Path) -> CDF:
    rows: CDF = []
    for lineno, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.replace(",", " ").split()
        try:
            rows.append((float(parts[0]), float(parts[1])))
        except (ValueError, IndexError):
            if not rows and lineno == 1:
                continue  # header
            raise ValueError(f"{path}:{lineno}: expected 'bytes,cdf'") from None
    return check(rows, str(path))


def resolve(spec: str, base_dir: Path | None) -> tuple[CDF, str]:
    """A built-in name or a CSV path → (cdf, canonical spec for the resolved scenario)."""
    if spec in BUILTIN:
        return BUILTIN[spec], spec
    p = Path(spec)
    if not p.is_absolute():
        p = (base_dir or Path.cwd()) / p
    if not p.is_file():
        raise ValueError(
            f"{spec!r} is neither a built-in CDF ({', '.join(BUILTIN)}) nor a CSV file"
        )
    return load_csv(p), str(p.resolve())


def mean(cdf: CDF) -> float:
    """Mean of the piecewise-linear distribution (a point mass at the first size, if p0 > 0)."""
    m = cdf[0][0] * cdf[0][1]
    for (x0, p0), (x1, p1) in itertools.pairwise(cdf):
        m += (x0 + x1) / 2 * (p1 - p0)
    return m


def quantile(cdf: CDF, u: float) -> float:
    probs = [p for _, p in cdf]
    i = bisect_left(probs, u)
    if i == 0:
        return cdf[0][0]
    if i >= len(cdf):
        return cdf[-1][0]
    (x0, p0), (x1, p1) = cdf[i - 1], cdf[i]
    return x0 if p1 == p0 else x0 + (x1 - x0) * (u - p0) / (p1 - p0)


def sample(cdf: CDF, rng: random.Random) -> int:
    return max(1, round(quantile(cdf, rng.random())))


def cdf_at(cdf: CDF, x: float) -> float:
    """The distribution function itself, for the Kolmogorov–Smirnov check."""
    if x < cdf[0][0]:
        return 0.0
    for (x0, p0), (x1, p1) in itertools.pairwise(cdf):
        if x0 <= x <= x1:
            return p1 if x1 == x0 else p0 + (p1 - p0) * (x - x0) / (x1 - x0)
    return 1.0
