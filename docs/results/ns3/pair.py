"""Paired change of the iteration time between two runs of run_cell.py with the same seed
(same flows): iteration k of one against iteration k of the other, (b - a) / a, its mean and a
95 % t interval over the iterations, as the thesis-exact pages report them.

    pair.py SAME/result.json LOW/result.json [SAME2/result.json LOW2/result.json ...]

With several pairs (one per seed) the iterations of every pair are pooled: each seed's
change and then the pooled one, over every pair's first min(len) iterations.

The ring moves in lockstep (every worker's k-th iteration is the same length: checked), so the
iterations counted are one worker's, not all eight workers'.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from testbed.results.aggregate import t95  # the sweeps' own t table: run with the project's .venv


def per_iteration(path: Path, workers: int = 8) -> list[float]:
    it = json.loads(path.read_text())["iterations_s"]
    n = len(it) // workers
    rows = [it[w * n : (w + 1) * n] for w in range(workers)]
    if any(abs(x - y) > 1e-6 for row in rows for x, y in zip(row, rows[0], strict=True)):
        sys.exit(f"{path}: the workers' iterations differ: not the lockstep ring this assumes")
    return rows[0]


def paired(a: list[float], b: list[float]) -> list[float]:
    n = min(len(a), len(b))
    return [(y - x) / x for x, y in zip(a[:n], b[:n], strict=True)]


def line(a: list[float], b: list[float], change: list[float]) -> str:
    n = len(change)
    df = n - 1
    half = t95(df) * statistics.stdev(change) / n**0.5
    return (
        f"{n} iterations: {statistics.mean(a[:n]) * 1e3:.1f} -> {statistics.mean(b[:n]) * 1e3:.1f}"
        f" ms, paired change {statistics.mean(change) * 100:+.1f} % +- {half * 100:.1f} %"
        f" (95 %, t with {df} df)"
    )


def main() -> None:
    if len(sys.argv) < 3 or len(sys.argv) % 2 == 0:
        sys.exit("usage: pair.py A/result.json B/result.json [A2/result.json B2/result.json ...]")
    runs = [per_iteration(Path(x)) for x in sys.argv[1:]]
    pooled_a: list[float] = []
    pooled_b: list[float] = []
    pooled: list[float] = []
    for a, b in zip(runs[::2], runs[1::2], strict=True):
        change = paired(a, b)
        print(line(a, b, change))
        pooled_a += a[: len(change)]
        pooled_b += b[: len(change)]
        pooled += change
    if len(runs) > 2:
        print("pooled, " + line(pooled_a, pooled_b, pooled))


if __name__ == "__main__":
    main()
