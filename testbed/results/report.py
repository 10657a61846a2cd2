"""Summaries, comparisons and plots of finished runs, from the run folder alone.

`testbed report RUN` prints what happened; `testbed report BASE OTHER...` compares the way the
thesis does: the percent change of each instance's figures (mean FCT per size class, mean
iteration time, ...) against the first run, and what its kind adds (for runs of one seed, the
same web-search flows compared flow by flow). Plots are PNGs written next to the records.

What a workload instance reports is its kind's (workloads/<kind>/report.py, found through the
registry); this module adds the run's own parts (the links) and puts them together.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from testbed.core.runs import Run, fmt_pct, legacy, pct_change, pyplot
from testbed.workloads import kinds
from testbed.workloads.registry import load
from testbed.workloads.reporting import ReportHooks


def hooks(kind: str) -> ReportHooks:
    """The report module of a kind (workloads/reporting.py says what it provides)."""
    ref = kinds.get(kind).report
    assert ref is not None, f"workload kind {kind} has no report module"
    return load(ref)


def reported(run: Run) -> list[tuple[str, str, dict[str, Any]]]:
    """The run's instances whose kind has a report module (a kind may have none: it is then
    left out of reports, as it is of sweep.csv)."""
    return [(n, k, sec) for n, k, sec in run.instances() if kinds.get(k).report is not None]


def describe_run(run: Run) -> dict[str, Any]:
    s = run.summary
    out: dict[str, Any] = {
        "run": str(run.path), "scenario": s.get("scenario"), "run_id": s.get("run_id"),
        "status": s.get("status"), "seed": s.get("seed"), "duration_s": s.get("duration_s"),
        "time_scale": s.get("time_scale", 1.0), "workloads": {},
    }  # fmt: skip
    for name, kind, section in reported(run):
        d = hooks(kind).describe(run, name, section)
        out["workloads"][name] = {"kind": kind, **d}
        if legacy(name, kind):
            out[name] = d  # the key it had before named instances
    out["utilization"] = run.utilization()
    return out


def print_run(out: Console, r: dict[str, Any]) -> None:
    out.rule(f"{r['run']}  ({r['scenario']}, run {r['run_id']}, seed {r['seed']}, {r['status']})")
    for name, d in r.get("workloads", {}).items():
        hooks(d["kind"]).print_section(out, name, d)
    util = r.get("utilization") or {}
    if util:
        t = Table(title="link utilisation (mean share of the link over the run window)")
        t.add_column("direction")
        classes = sorted({c for d in util.values() for c in d})
        for c in classes:
            t.add_column(c, justify="right")
        for direction, per in util.items():
            t.add_row(direction, *(f"{per.get(c, 0):.1%}" for c in classes))
        out.print(t)


def comparable(run: Run) -> dict[str, float | None]:
    """Every figure a comparison takes the % change of, over the run's instances (named
    `small`, `iteration`, ... for an instance named as its kind, else `<name>.small`, ...)."""
    out: dict[str, float | None] = {}
    for name, kind, section in reported(run):
        out.update(hooks(kind).comparable(run, name, section))
    return out


def compare(runs: list[Run]) -> dict[str, Any]:
    """Each run against the first: the % change of every comparable figure, and what each
    instance's kind adds."""
    base = runs[0]
    base_figures = comparable(base)
    kinds_of = {name: kind for name, kind, _ in reported(base)}
    result: dict[str, Any] = {"baseline": str(base.path), "runs": []}
    for other in runs[1:]:
        figures = comparable(other)
        entry: dict[str, Any] = {
            "run": str(other.path),
            "change_pct": {k: pct_change(figures.get(k), v) for k, v in base_figures.items()},
            "workloads": {},
        }
        for name, kind in kinds_of.items():
            extra = hooks(kind).compare(base, other, name)
            entry["workloads"][name] = extra
            if legacy(name, kind):
                entry.update(extra)  # the keys comparisons had before named instances
        result["runs"].append(entry)
    return result


def print_comparison(out: Console, cmp: dict[str, Any], kinds_of: dict[str, str]) -> None:
    entries = cmp["runs"]
    if not entries:
        return
    keys = list(entries[0]["change_pct"])
    t = Table(title=f"% change of the mean against the baseline {cmp['baseline']}")
    t.add_column("run")
    for k in keys:
        t.add_column(k, justify="right")
    for e in entries:
        t.add_row(e["run"], *(fmt_pct(e["change_pct"].get(k)) for k in keys))
    out.print(t)
    for name, kind in kinds_of.items():
        hooks(kind).print_compare(
            out, name, [(e["run"], e["workloads"].get(name) or {}) for e in entries]
        )


def plots_for(run: Run) -> list[Path]:
    """The run's plots; none for a run that carried nothing but ARP (no workloads, no hold):
    importing matplotlib and drawing empty axes was a second of every such `up`."""
    if not run.instances() and not run.summary.get("hold"):
        return []
    d = run.path / "plots"
    d.mkdir(exist_ok=True)
    made: list[Path] = []
    for name, kind, section in reported(run):
        made += hooks(kind).plots(run, name, section, d)
    u = plot_utilization(run, d / "link_utilization.png")
    return [*made, *([u] if u else [])]


def comparison_plots(runs: list[Run], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []
    for name, kind, _ in reported(runs[0]):
        made += hooks(kind).compare_plots(runs, name, out_dir)
    return made


def plot_utilization(run: Run, out: Path) -> Path | None:
    rows = run.rows("links.csv")
    links = run.summary.get("links") or []
    if not rows or not links:
        return None
    # host links only: the thesis' per-host view (fabric links are in the summary)
    # the summary's rates are the scenario's; links.csv samples the real clock
    rate = {
        (x["node"], x["direction"]): x["rate_bps"] / run.time_scale
        for x in links
        if x.get("tier", "host") == "host"
    }
    series: dict[tuple[str, str, str], list[tuple[float, int]]] = {}
    for r in rows:
        if (r["node"], r["direction"]) not in rate:
            continue
        series.setdefault((r["node"], r["direction"], r["class"]), []).append(
            (float(r["time"]), int(r["bytes"]))
        )
    t0 = run.summary.get("started_at") or min(float(r["time"]) for r in rows)
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 3.8), sharey=True)
    for ax, direction in zip(axes, ("up", "down"), strict=True):
        classes = sorted({k[2] for k in series if k[1] == direction})
        for cls in classes:
            # mean over nodes of each node's share of its own link, per polling interval
            per_node = [v for k, v in series.items() if k[1] == direction and k[2] == cls]
            n = min(len(v) for v in per_node)
            ts, util = [], []
            for i in range(1, n):
                shares = []
                for k, v in series.items():
                    if k[1] != direction or k[2] != cls or len(v) <= i:
                        continue
                    dt = v[i][0] - v[i - 1][0]
                    if dt > 0:
                        shares.append((v[i][1] - v[i - 1][1]) * 8 / dt / rate[(k[0], k[1])])
                if shares:
                    ts.append((per_node[0][i][0] - t0) / run.time_scale)
                    util.append(100 * sum(shares) / len(shares))
            ax.plot(ts, util, lw=1, label=cls)
        ax.set_title(
            f"{'uplinks (host → switch)' if direction == 'up' else 'downlinks (switch → host)'}"
        )
        ax.set_xlabel("time since start (s)")
        ax.grid(True, alpha=0.3)
        if classes:
            ax.legend(fontsize=7)
    axes[0].set_ylabel("mean link utilisation (%)")
    fig.suptitle(f"link utilisation per class — {run.name}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
