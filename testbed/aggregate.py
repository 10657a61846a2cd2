"""`testbed report SWEEP_DIR`: a sweep's runs, compared cell by cell as the thesis does.

A cell is one combination of the axes other than the compared one (e.g. the priority scheme)
and the seed. What is compared are the workload instances' comparable figures (report.py:
mean FCT per size class, mean iteration time, each kind's own). In each cell and for each
seed, every non-baseline value is compared with the baseline run of the same seed:
- the % change of the mean FCT per pFabric size class, and of the mean iteration time (the
  thesis' figure: each run's own mean, its censored flows left out of it and counted);
- the matched change: the two runs share a seed, so they carry the same flows (ids, sizes,
  destinations, arrival times); the % change of the mean FCT over the flows completed in
  both, with the flows that have no FCT in either run counted beside it.
Over the seeds: the mean of those changes and their spread (min, max), as the thesis reports
averages over three seeds and warns how much they vary.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from testbed.errors import ScenarioError
from testbed.report import comparable, hooks, reported
from testbed.runs import Run, pct_change
from testbed.sweep import short_name
from testbed.workloads.reporting import MatchedChange


def is_sweep(path: Path) -> bool:
    return (path / "sweep.json").is_file()


def _spread(xs: list[float | None]) -> dict[str, Any]:
    vals = [x for x in xs if x is not None and not math.isnan(x)]
    if not vals:
        return {"mean": None, "min": None, "max": None, "n": 0, "per_seed": xs}
    return {
        "mean": sum(vals) / len(vals),
        "min": min(vals),
        "max": max(vals),
        "n": len(vals),
        "per_seed": xs,
    }


def matched_change(base: Run, other: Run) -> dict[str, dict[str, Any]]:
    """The kinds' matched comparisons (web-search: the flows completed in both runs of one
    seed), per figure: change_pct, matched, censored."""
    out: dict[str, dict[str, Any]] = {}
    for name, kind, _ in reported(base):
        h = hooks(kind)
        if isinstance(h, MatchedChange):  # an optional hook
            out.update(h.matched_change(base, other, name))
    return out


def _counts(run: Run) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, kind, section in reported(run):
        out.update(hooks(kind).counts(name, section))
    return out


def aggregate(sweep_dir: Path) -> dict[str, Any]:
    doc = json.loads((sweep_dir / "sweep.json").read_text())
    spec = doc["spec"]
    compare = spec.get("compare")
    if not compare:
        raise ScenarioError(
            f"{sweep_dir}: the sweep names nothing to compare; add compare: {{axis: ..., baseline: ...}}"
        )
    axis, baseline = compare["axis"], compare["baseline"]
    axes = [a for a in [*spec["axes"], *spec["paired"]] if a != axis]
    names = [*spec["axes"], "seed", *spec["paired"]]
    labels_of = doc.get("labels") or [  # sweep.json from before full labels were written
        {a: str(row[short_name(a) if a in spec["axes"] else a]) for a in names}
        for row in doc["results"]
    ]
    runs: dict[tuple[tuple[str, str], ...], dict[str, dict[str, Run]]] = {}
    for row, labels in zip(doc["results"], labels_of, strict=True):
        if row["status"] != "ok":
            continue
        cell = tuple((a, labels[a]) for a in axes)
        runs.setdefault(cell, {}).setdefault(labels[axis], {})[labels["seed"]] = Run(
            sweep_dir / row["folder"]
        )
    cells = []
    for cell, by_value in runs.items():
        base_runs = by_value.get(baseline, {})
        for value, other_runs in by_value.items():
            if value == baseline:
                continue
            seeds = sorted(set(base_runs) & set(other_runs), key=int)
            plain: dict[str, list[float | None]] = {}
            matched: dict[str, list[float | None]] = {}
            censored: dict[str, dict[str, int]] = {}
            counts: dict[str, int] = {}
            for seed in seeds:
                b, o = base_runs[seed], other_runs[seed]
                mb, mo = comparable(b), comparable(o)
                for m in mb:
                    plain.setdefault(m, []).append(pct_change(mo.get(m), mb[m]))
                for m, mc in matched_change(b, o).items():
                    matched.setdefault(m, []).append(mc["change_pct"])
                    c = censored.setdefault(m, {"baseline": 0, "run": 0})
                    for k in ("baseline", "run"):
                        c[k] += mc["censored"][k]
                for m, n in _counts(b).items():
                    counts[m] = counts.get(m, 0) + n
            cells.append(
                {
                    "cell": dict(cell),
                    axis: value,
                    "seeds": [int(x) for x in seeds],
                    "change_pct": {m: _spread(v) for m, v in plain.items()},
                    "matched_change_pct": {m: _spread(v) for m, v in matched.items()},
                    "censored": censored,
                    "baseline_flows": counts,
                }
            )
    return {
        "sweep": str(sweep_dir),
        "name": doc["name"],
        "compare": compare,
        "axes": axes,
        "map": spec.get("map"),
        "runs": {"points": doc["points"], "ok": doc["ok"], "failed": doc["failed"]},
        "cells": cells,
    }


def plot_maps(agg: dict[str, Any], out_dir: Path) -> tuple[list[Path], str | None]:
    """The operating-boundary map (thesis Fig. 5.19), one per compared value: one square per
    cell, coloured by that value's iteration slowdown against the baseline, annotated with the
    small- and large-flow FCT change (means over the seeds). Returns the plots, or why none."""
    if agg.get("map"):
        x_axis, y_axis = agg["map"]["x"], agg["map"]["y"]
    elif len(agg["axes"]) == 2:
        y_axis, x_axis = agg["axes"]
    else:
        return [], "no map: name its axes in the sweep file (map: {x: ..., y: ...})"
    rest = [a for a in agg["axes"] if a not in (x_axis, y_axis)]
    if rest:
        return [], f"no map: the axes {rest} would put several cells on one square"
    cmp = agg["compare"]
    values = sorted({c[cmp["axis"]] for c in agg["cells"]})
    made = []
    for value in values:
        cells = [c for c in agg["cells"] if c[cmp["axis"]] == value]
        name = "map.png" if len(values) == 1 else f"map-{value}.png"
        made.append(_plot_map(agg, cells, value, x_axis, y_axis, out_dir / name))
    return made, None


def _plot_map(
    agg: dict[str, Any],
    cells: list[dict[str, Any]],
    value: str,
    x_axis: str,
    y_axis: str,
    out: Path,
) -> Path:
    from testbed.runs import pyplot

    plt = pyplot()
    import matplotlib.colors as mcolors

    xs = _ordered({c["cell"][x_axis] for c in cells})
    ys = _ordered({c["cell"][y_axis] for c in cells})
    grid = [[math.nan] * len(xs) for _ in ys]
    figures = list(dict.fromkeys(k for c in cells for k in c["change_pct"]))
    # colour: the (first) training instance's iteration change; text: every figure (up to 4)
    colour = next((k for k in figures if k.rsplit(".", 1)[-1] == "iteration"), None)
    thesis = [k for k in figures if k.rsplit(".", 1)[-1] in ("iteration", "small", "large")]
    shown = (thesis or figures)[:4]
    for c in cells:
        v = c["change_pct"].get(colour, {}).get("mean") if colour else None
        grid[ys.index(c["cell"][y_axis])][xs.index(c["cell"][x_axis])] = (
            math.nan if v is None else v
        )
    fig, ax = plt.subplots(figsize=(1.9 * len(xs) + 2.2, 1.3 * len(ys) + 1.6))
    cmap = mcolors.LinearSegmentedColormap.from_list("slowdown", ["#2e9e4f", "#f4e04d", "#d7301f"])
    im = ax.imshow(grid, cmap=cmap, vmin=0, vmax=40, aspect="auto")
    for c in cells:
        i, j = ys.index(c["cell"][y_axis]), xs.index(c["cell"][x_axis])
        ch = c["change_pct"]
        ax.text(j, i, "\n".join(
            f"{key} {_fmt(ch.get(key, {}).get('mean'))}" for key in shown
        ), ha="center", va="center", fontsize=8)  # fmt: skip
    ax.set_xticks(range(len(xs)), xs)
    ax.set_yticks(range(len(ys)), ys)
    ax.set_xlabel(short_name(x_axis))
    ax.set_ylabel(short_name(y_axis))
    cmp = agg["compare"]
    ax.set_title(
        f"{agg['name']}: {cmp['axis']}={value} vs {cmp['baseline']}; colour: "
        f"{colour or 'no iteration'} change, text: mean changes over seeds",
        fontsize=9,
    )
    fig.colorbar(im, ax=ax, label=f"{colour or 'iteration'} time change (%)")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def _ordered(values: set[str]) -> list[str]:
    def key(v: str) -> tuple[int, float | str]:
        try:
            return (0, float(v.rstrip("%")))
        except ValueError:
            return (1, v)

    return sorted(values, key=key)


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:+.1f}%"
