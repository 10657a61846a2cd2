"""Print the thesis-grid comparison table (Markdown) for docs/results/thesis-grid/README.md.

    .venv/bin/python docs/results/thesis-grid/compare_thesis.py runs/thesis-grid > table.md

Our figures come from `testbed report`'s aggregation of the sweep folder; the thesis' from
its chapter 5 (ns-3), as stated in the text: most cells only have a qualitative statement or a
value read off a figure covering a row or column of the grid. "Agrees" compares directions:
FCT changes agree when both are reductions; iteration time agrees when the thesis says "no
degradation" and ours is at most +5 %, or the thesis reports a slowdown and ours is above +5 %.
✓: every seed on the thesis' side; ~: the mean over seeds only; ✗: not even the mean.
"""

from __future__ import annotations

import sys
from pathlib import Path

from testbed.results.aggregate import aggregate

# (R, background %) → thesis: small Δ, large Δ, iteration Δ (text), and the direction of the
# iteration change: 0 = no degradation, 1 = slowdown. Line numbers in the thesis text.
THESIS: dict[tuple[str, str], tuple[str, str, str, int, str]] = {
    ("16", "3.125%"): ("−40 % (seeds up to −73 %)", "−10 %", "none", 0, "650–656"),
    ("16", "6.25%"): ("gain falls", "gain grows to ~−15 %", "none", 0, "650"),
    ("16", "12.5%"): ("below −10 %", "~−15 % (or −5 %)", "none", 0, "650, 772"),
    ("16", "25%"): ("below −10 %", "−15 to −25 %", "≥ +29 %", 1, "650, 785–787"),
    ("8", "3.125%"): ("up to −70 % (seeds −66/−74/−26)", "−10 to −20 %", "none", 0, "702, 712"),
    ("8", "6.25%"): ("~−20 %", "~−20 %", "none", 0, "702"),
    ("8", "12.5%"): ("~−20 %", "~−20 %", "none ('safely')", 0, "700–702"),
    ("8", "25%"): ("~−10 %", "~−25 %", "+117 %", 1, "700, 787"),
    ("4", "3.125%"): ("≤ −50 %", "≤ −25 %", "none", 0, "714"),
    ("4", "6.25%"): ("≤ −50 %", "≤ −25 %", "none", 0, "714"),
    ("4", "12.5%"): ("up to −25 %", "up to −35 %", "+15.6 %", 1, "772, 801–803, 825"),
    ("4", "25%"): ("~−10 %", "~−25 %", "> +29 %", 1, "785–787"),
    ("2", "3.125%"): ("≤ −40 %", "≤ −10 %", "none", 0, "734, 756"),
    ("2", "6.25%"): ("large (Ch. 7: up to −73 %)", "(Ch. 7: up to −40 %)", "+5 %", 1, "734, 763"),
    ("2", "12.5%"): ("~−35 %", "~−35 %", "+23.1 %", 1, "772, 845"),
    ("2", "25%"): ("~−10 %", "~−25 %", "> +29 %, network-bound", 1, "785–787, 803"),
}
SLOWDOWN_PCT = 5.0


def spread(s: dict) -> str:
    if s["mean"] is None:
        return "–"
    if s["n"] < 2:
        return f"{s['mean']:+.0f} %"
    return f"{s['mean']:+.0f} % [{s['min']:+.0f}, {s['max']:+.0f}]"


def verdict(s: dict, on_side) -> str:
    """✓ every seed on the thesis' side, ~ the mean over seeds only, ✗ not even the mean."""
    if s["mean"] is None or not on_side(s["mean"]):
        return "✗"
    if s["n"] >= 2 and on_side(s["min"]) and on_side(s["max"]):
        return "✓"
    return "~"


def main(sweep_dir: str) -> int:
    agg = aggregate(Path(sweep_dir))
    r_axis, u_axis = agg["axes"]
    cells = sorted(
        agg["cells"],
        key=lambda c: (-float(c["cell"][r_axis]), float(c["cell"][u_axis].rstrip("%"))),
    )
    print(
        "| R | load | small: ours | small: thesis | large: ours | large: thesis | "
        "medium: ours | iteration: ours | iteration: thesis | agrees (small/large/iter) | "
        "small flows (censored) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    agree = {k: {"✓": 0, "~": 0, "✗": 0} for k in ("small", "large", "iteration")}
    for c in cells:
        r, u = c["cell"][r_axis], c["cell"][u_axis]
        t_small, t_large, t_iter, t_dir, _lines = THESIS[(r, u)]
        ch = c["change_pct"]
        marks = {
            "small": verdict(ch["small"], lambda x: x < 0),
            "large": verdict(ch["large"], lambda x: x < 0),
            "iteration": verdict(
                ch["iteration"],
                (lambda x: x > SLOWDOWN_PCT) if t_dir else (lambda x: x <= SLOWDOWN_PCT),
            ),
        }
        for k, m in marks.items():
            agree[k][m] += 1
        cens = c["censored"]["small"]["baseline"] + c["censored"]["small"]["run"]
        print(
            f"| {r} | {u} | {spread(ch['small'])} | {t_small} | {spread(ch['large'])} | {t_large} | "
            f"{spread(ch['medium'])} | {spread(ch['iteration'])} | {t_iter} | "
            f"{marks['small']} / {marks['large']} / {marks['iteration']} | "
            f"{c['baseline_flows']['small']} ({cens}) |"
        )
    n = len(cells)
    print()
    print(
        "Directions that agree with the thesis (every seed ✓ + the mean only ~, of "
        f"{n} cells): "
        + "; ".join(
            f"{k} {agree[k]['✓']} ✓ + {agree[k]['~']} ~" for k in ("small", "large", "iteration")
        )
        + "."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
