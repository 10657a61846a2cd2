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

from testbed.core.errors import ScenarioError
from testbed.core.runs import Run, pct_change
from testbed.results.report import comparable, hooks, reported
from testbed.results.sweep import (
    SweepSpec,
    axis_values,
    cell_axes,
    short_name,
    sweep_doc,
    sweeps_in,
)
from testbed.scenario import aims as aims_mod
from testbed.scenario.aims import t95
from testbed.workloads.reporting import MatchedChange


def is_sweep(path: Path) -> bool:
    return (path / "sweep.json").is_file()


def _spread(xs: list[float | None]) -> dict[str, Any]:
    """Over the seeds: the mean of the paired changes, their range, and the mean's 95 %
    interval (Student's t; None with fewer than two seeds)."""
    vals = [x for x in xs if x is not None and not math.isnan(x)]
    if not vals:
        return {"mean": None, "min": None, "max": None, "n": 0, "interval": None, "per_seed": xs}
    n, mean = len(vals), sum(vals) / len(vals)
    interval = None
    if n > 1:
        sd = math.sqrt(sum((x - mean) ** 2 for x in vals) / (n - 1))
        half = t95(n - 1) * sd / math.sqrt(n)
        interval = [mean - half, mean + half]
    return {
        "mean": mean,
        "min": min(vals),
        "max": max(vals),
        "n": n,
        "interval": interval,
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


def labels(doc: dict[str, Any]) -> list[dict[str, str]]:
    """Each result row's labels by full axis name."""
    spec = doc["spec"]
    names = [*spec["axes"], "seed", *spec["paired"]]
    return doc.get("labels") or [  # sweep.json from before full labels were written
        {a: str(row[short_name(a) if a in spec["axes"] else a]) for a in names}
        for row in doc["results"]
    ]


def aggregate(sweep_dir: Path, name: str | None = None) -> dict[str, Any]:
    """The sweep `name` of the folder (None: the last to run there; sweep.sweep_doc)."""
    doc = sweep_doc(sweep_dir, name)
    spec = doc["spec"]
    compare = spec.get("compare")
    if not compare:
        raise ScenarioError(
            f"{sweep_dir}: the sweep names nothing to compare; add compare: {{axis: ..., baseline: ...}}"
        )
    axis, baseline = compare["axis"], compare["baseline"]
    axes = [a for a in [*spec["axes"], *spec["paired"]] if a != axis]
    labels_of = labels(doc)
    runs: dict[tuple[tuple[str, str], ...], dict[str, dict[str, Run]]] = {}
    for row, lb in zip(doc["results"], labels_of, strict=True):
        if row["status"] != "ok":
            continue
        cell = tuple((a, lb[a]) for a in axes)
        runs.setdefault(cell, {}).setdefault(lb[axis], {})[lb["seed"]] = Run(
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
        # every sweep that wrote into the folder (they share its runs; `report --sweep NAME`)
        "sweeps_in_folder": sweeps_in(sweep_dir) or [doc["name"]],
        "compare": compare,
        "axes": axes,
        "map": spec.get("map"),
        "runs": {
            "points": doc["points"],
            "ok": doc["ok"],
            "failed": doc["failed"],
            "not_run": doc.get("not_run", 0),  # left out by --only, not finished before
        },
        "cells": cells,
    }


def verdicts(
    sweep_dir: Path, name: str | None = None, extra: list[str] | None = None
) -> dict[str, Any]:
    """The sweep's aims judged cell by cell (aims.py): per cell, compared value and aim, each
    seed's paired figure, the mean, its 95 % interval and the verdict, with the seeds whose
    pair is not a fair one (aims.pair_flags) flagged. Reads each finished run's summary.
    `extra`: aims to judge besides the sweep file's (`report --aim`), e.g. on a sweep that
    ran before it had any."""
    doc = sweep_doc(sweep_dir, name)
    spec = doc["spec"]  # as the sweep wrote it (a record from before aims has none)
    texts = [*(spec.get("aims") or []), *(extra or [])]
    if extra and not spec.get("compare"):
        raise ScenarioError("--aim: the sweep compares nothing (no compare: in its file)")
    if not texts or not spec.get("compare"):
        return {"aims": [], "judged": [], "decided": True, "undecided": 0}
    axis, baseline = spec["compare"]["axis"], spec["compare"]["baseline"]
    full = SweepSpec.model_validate({"name": doc["name"], "base": "-", **spec})
    values = axis_values(full, axis)
    try:
        aims = aims_mod.parse(texts, values, baseline, cell_axes(full))
    except aims_mod.AimError as e:
        raise ScenarioError(f"--aim: {e}" if extra else str(e)) from None
    axes = [a for a in [*spec["axes"], *spec["paired"]] if a != axis]
    # cell → compared value → seed → summary
    summaries: dict[tuple[tuple[str, str], ...], dict[str, dict[int, dict[str, Any]]]] = {}
    for row, lb in zip(doc["results"], labels(doc), strict=True):
        if row["status"] != "ok":
            continue
        cell = tuple((a, lb[a]) for a in axes)
        try:
            summary = json.loads((sweep_dir / row["folder"] / "summary.json").read_text())
        except (OSError, ValueError):
            continue
        summaries.setdefault(cell, {}).setdefault(lb[axis], {})[int(lb["seed"])] = summary
    for lb in labels(doc):  # every cell of the sweep, run or not: an aim there is undecided
        summaries.setdefault(tuple((a, lb[a]) for a in axes), {})
    judged = []
    for cell, by_value in summaries.items():
        for aim in aims:
            if not aim.judges(dict(cell)):
                continue
            base = by_value.get(aim.baseline or baseline, {})
            targets = [aim.value] if aim.value else [v for v in values if v != aim.baseline]
            changes: dict[str, dict[int, float | None]] = {}
            flags: dict[str, dict[int, list[str]]] = {}
            for v in values:
                for seed, b in base.items():
                    o = by_value.get(v, {}).get(seed)
                    if o is None or v == aim.baseline:
                        continue
                    changes.setdefault(v, {})[seed] = aims_mod.pct_change(
                        aims_mod.value_at(o, aim.path), aims_mod.value_at(b, aim.path)
                    )
                    if why := aims_mod.pair_flags(b, o):
                        flags.setdefault(v, {})[seed] = [f"{v}: {w}" for w in why]
            for v in targets:
                seed_flags = dict(flags.get(v, {}))
                if aim.other:  # the other value's pairs carry the figure too
                    for seed, why in flags.get(aim.other, {}).items():
                        seed_flags[seed] = [*seed_flags.get(seed, []), *why]
                j = aims_mod.judge(aim, aims_mod.figures(aim, v, changes), seed_flags)
                judged.append({"cell": dict(cell), "value": v,
                               "baseline": aim.baseline, **j.to_json(), "text": j.text()})  # fmt: skip
    undecided = sum(j["verdict"] == aims_mod.UNDECIDED for j in judged)
    return {
        "aims": [a.label() for a in aims],
        "judged": judged,
        "decided": bool(judged) and undecided == 0,
        "undecided": undecided,
        # the seeds with a finished run (a seed plan's round may hold some not run yet)
        "seeds": sorted(
            {
                int(lb["seed"])
                for row, lb in zip(doc["results"], labels(doc), strict=True)
                if row["status"] == "ok"
            }
        ),
    }


def record_verdicts(
    sweep_dir: Path, name: str, until: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The verdicts, kept in the sweep's record (sweep.json and sweeps/NAME.json); `until`:
    how a seed plan's rounds ended (decide.py), with the seeds they ran."""
    v = verdicts(sweep_dir, name)
    if until is not None:
        v["until"] = {**until, "seeds": len(v.get("seeds", []))}
    for path in (sweep_dir / "sweep.json", sweep_dir / "sweeps" / f"{name}.json"):
        if not path.is_file():
            continue
        doc = json.loads(path.read_text())
        if doc.get("name") != name:
            continue
        doc["verdicts"] = v
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        tmp.replace(path)
    return v


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
    from testbed.core.runs import pyplot

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


def plot_tradeoff(agg: dict[str, Any], out: Path) -> Path | None:
    """The trade-off of each compared value against the baseline (issue 32's plot): per cell,
    one point per value and seed at (iteration change, small flows' mean FCT change), so a
    policy that keeps the flows' gain at no cost to the job sits low on the left. None when
    the sweep has no training job or no web search to put on the axes."""
    figures = {k for c in agg["cells"] for k in c["change_pct"]}
    x_key = next((k for k in sorted(figures) if k.rsplit(".", 1)[-1] == "iteration"), None)
    y_key = next((k for k in sorted(figures) if k.rsplit(".", 1)[-1] == "small"), None)
    if x_key is None or y_key is None:
        return None
    from testbed.core.runs import pyplot

    plt = pyplot()
    axis = agg["compare"]["axis"]
    cells = list(dict.fromkeys(json.dumps(c["cell"], sort_keys=True) for c in agg["cells"]))
    values = list(dict.fromkeys(c[axis] for c in agg["cells"]))
    fig, axes = plt.subplots(1, len(cells), figsize=(4.6 * len(cells) + 1.4, 4.2), squeeze=False)
    legend: dict[str, Any] = {}  # every value plotted in any cell, not only the last one's
    for ax, cell in zip(axes[0], cells, strict=True):
        for i, value in enumerate(values):
            mine = [c for c in agg["cells"]
                    if json.dumps(c["cell"], sort_keys=True) == cell and c[axis] == value]  # fmt: skip
            if not mine:
                continue
            xs = mine[0]["change_pct"].get(x_key, {}).get("per_seed") or []
            ys = mine[0]["change_pct"].get(y_key, {}).get("per_seed") or []
            pts = [(x, y) for x, y in zip(xs, ys, strict=False) if x is not None and y is not None]
            if pts:
                dots = ax.scatter(*zip(*pts, strict=True), color=f"C{i}", s=28)
                legend.setdefault(str(value), dots)
        ax.axvline(0, color="grey", lw=0.6)
        ax.axhline(0, color="grey", lw=0.6)
        ax.set_title(", ".join(f"{short_name(k)}={v}" for k, v in json.loads(cell).items()),
                     fontsize=9)  # fmt: skip
        ax.set_xlabel(f"{x_key} time change (%)")
        ax.set_ylabel(f"{y_key} flows' mean FCT change (%)")
    axes[0][-1].legend(list(legend.values()), list(legend), fontsize=8,
                       title=f"{axis}, one point a seed", title_fontsize=8)  # fmt: skip
    fig.suptitle(f"{agg['name']}: against {agg['compare']['baseline']!r}, paired by seed",
                 fontsize=10)  # fmt: skip
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
