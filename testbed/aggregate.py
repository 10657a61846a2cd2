"""`testbed report SWEEP_DIR`: a sweep's runs, compared cell by cell as the thesis does.

A cell is one combination of the axes other than the compared one (e.g. the priority scheme)
and the seed. In each cell and for each seed, every non-baseline value is compared with the
baseline run of the same seed:
- the % change of the mean FCT per pFabric size class, and of the mean iteration time;
- the same FCT change flow-matched: the two runs share a seed, so they carry the same flows
  (ids, sizes, destinations, arrival times), and the means are taken over the flows that
  completed in both; the flows censored in either run are counted beside it.
Over the seeds: the mean of those changes and their spread (min, max), as the thesis reports
averages over three seeds and warns how much they vary.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from testbed.errors import ScenarioError
from testbed.metrics import size_class
from testbed.report import CLASSES, Run

METRICS = (*CLASSES, "iteration")


def is_sweep(path: Path) -> bool:
    return (path / "sweep.json").is_file()


def _pct(new: float | None, base: float | None) -> float | None:
    if new is None or base is None or base == 0:
        return None
    return (new - base) / base * 100


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


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def matched_change(base: Run, other: Run) -> dict[str, dict[str, Any]]:
    """Per size class: % change of the mean FCT over the flows completed in both runs."""
    a = {f["id"]: f for f in base.flows_in_window()}
    b = {f["id"]: f for f in other.rows("flows.csv")}
    out = {}
    for c in CLASSES:
        xa, xb, cens_a, cens_b = [], [], 0, 0
        for fid, fa in a.items():
            if c != "all" and size_class(int(fa["size_bytes"])) != c:
                continue
            fb = b.get(fid)
            done_a = fa["completed"] == "True"
            done_b = fb is not None and fb["completed"] == "True"
            cens_a += not done_a
            cens_b += not done_b
            if done_a and done_b:
                xa.append(float(fa["fct_s"]))
                xb.append(float(fb["fct_s"]))  # type: ignore[index]
        out[c] = {
            "change_pct": _pct(_mean(xb), _mean(xa)),
            "matched": len(xa),
            "censored": {"baseline": cens_a, "run": cens_b},
        }
    return out


def _run_means(run: Run) -> dict[str, float | None]:
    w, h = run.websearch or {}, run.horovod or {}
    out: dict[str, float | None] = {
        c: (w.get("fct_s") or {}).get(c, {}).get("mean") for c in CLASSES
    }
    out["iteration"] = (h.get("iteration_time_s") or {}).get("mean")
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
    short = {a: a.rsplit(".", 1)[-1] for a in spec["axes"]}
    runs: dict[tuple[tuple[str, str], ...], dict[str, dict[str, Run]]] = {}
    for row in doc["results"]:
        if row["status"] != "ok":
            continue
        cell = tuple((a, str(row[short.get(a, a)])) for a in axes)
        runs.setdefault(cell, {}).setdefault(str(row[axis]), {})[str(row["seed"])] = Run(
            sweep_dir / row["folder"]
        )
    cells = []
    for cell, by_value in runs.items():
        base_runs = by_value.get(baseline, {})
        for value, other_runs in by_value.items():
            if value == baseline:
                continue
            seeds = sorted(set(base_runs) & set(other_runs), key=lambda x: int(x))
            plain: dict[str, list[float | None]] = {m: [] for m in METRICS}
            matched: dict[str, list[float | None]] = {c: [] for c in CLASSES}
            censored = {c: {"baseline": 0, "run": 0} for c in CLASSES}
            counts = {c: 0 for c in CLASSES}
            for seed in seeds:
                b, o = base_runs[seed], other_runs[seed]
                mb, mo = _run_means(b), _run_means(o)
                for m in METRICS:
                    plain[m].append(_pct(mo[m], mb[m]))
                mc = matched_change(b, o)
                for c in CLASSES:
                    matched[c].append(mc[c]["change_pct"])
                    for k in ("baseline", "run"):
                        censored[c][k] += mc[c]["censored"][k]
                    counts[c] += ((b.websearch or {}).get("fct_s") or {}).get(c, {}).get(
                        "count"
                    ) or 0
            cells.append(
                {
                    "cell": dict(cell),
                    axis: value,
                    "seeds": [int(x) for x in seeds],
                    "change_pct": {m: _spread(plain[m]) for m in METRICS},
                    "matched_change_pct": {c: _spread(matched[c]) for c in CLASSES},
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


def plot_map(agg: dict[str, Any], out: Path) -> Path | None:
    """The operating-boundary map (thesis Fig. 5.19): one square per cell, coloured by the
    iteration slowdown of the compared scheme, annotated with the small- and large-flow FCT
    change (means over the seeds)."""
    if agg.get("map"):
        x_axis, y_axis = agg["map"]["x"], agg["map"]["y"]
    elif len(agg["axes"]) == 2:
        y_axis, x_axis = agg["axes"]
    else:
        return None
    cells = agg["cells"]
    xs = _ordered({c["cell"][x_axis] for c in cells})
    ys = _ordered({c["cell"][y_axis] for c in cells})
    from testbed.report import pyplot

    plt = pyplot()
    import matplotlib.colors as mcolors

    grid = [[math.nan] * len(xs) for _ in ys]
    for c in cells:
        v = c["change_pct"]["iteration"]["mean"]
        grid[ys.index(c["cell"][y_axis])][xs.index(c["cell"][x_axis])] = (
            math.nan if v is None else v
        )
    fig, ax = plt.subplots(figsize=(1.9 * len(xs) + 2.2, 1.3 * len(ys) + 1.6))
    cmap = mcolors.LinearSegmentedColormap.from_list("slowdown", ["#2e9e4f", "#f4e04d", "#d7301f"])
    im = ax.imshow(grid, cmap=cmap, vmin=0, vmax=40, aspect="auto")
    for c in cells:
        i, j = ys.index(c["cell"][y_axis]), xs.index(c["cell"][x_axis])
        ch = c["change_pct"]
        ax.text(j, i, "\n".join([
            f"iter {_fmt(ch['iteration']['mean'])}",
            f"small {_fmt(ch['small']['mean'])}",
            f"large {_fmt(ch['large']['mean'])}",
        ]), ha="center", va="center", fontsize=8)  # fmt: skip
    ax.set_xticks(range(len(xs)), xs)
    ax.set_yticks(range(len(ys)), ys)
    ax.set_xlabel(x_axis.rsplit(".", 1)[-1] + " (background load per host link)")
    ax.set_ylabel(y_axis.rsplit(".", 1)[-1])
    cmp = agg["compare"]
    others = sorted({c[cmp["axis"]] for c in cells})
    ax.set_title(
        f"{agg['name']}: {', '.join(others)} vs {cmp['baseline']} — colour: iteration time change",
        fontsize=9,
    )
    fig.colorbar(im, ax=ax, label="iteration time change (%)")
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
