"""Summaries, comparisons and plots of finished runs, from the run folder alone.

`testbed report RUN` prints what happened; `testbed report BASE OTHER...` compares the way the
thesis does: percent change of mean FCT per size class and of mean iteration time against
the first run, and, when the seeds match (so the flows are the same flows), per-flow changes.
Plots are PNGs written next to the records.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.errors import ScenarioError, TestbedError
from testbed.metrics import describe, size_class

CLASSES = ("small", "medium", "large", "all")


class Run:
    def __init__(self, path: Path) -> None:
        self.path = path
        summary = path / "summary.json"
        if not summary.is_file():
            raise ScenarioError(f"{path}: not a run folder (no summary.json)")
        self.summary: dict[str, Any] = json.loads(summary.read_text())
        self.name = path.name

    def rows(self, fname: str) -> list[dict[str, str]]:
        p = self.path / fname
        if not p.is_file():
            return []
        with open(p, newline="") as f:
            return list(csv.DictReader(f))

    @property
    def horovod(self) -> dict[str, Any] | None:
        return self.summary.get("horovod")

    @property
    def websearch(self) -> dict[str, Any] | None:
        return self.summary.get("websearch")

    @property
    def time_scale(self) -> float:
        """The run's time dilation: its summary is in scenario time, the timestamps in its
        records (start, end, links.csv's time) on the real clock; divide their differences
        by this."""
        return float(self.summary.get("time_scale") or 1.0)

    def utilization(self) -> dict[str, dict[str, float]]:
        """Mean share of the link per direction and class over the run window (0–1): host
        links as "up"/"down" (the thesis' view), fabric links, where there are any, as
        "fabric up"/"fabric down"."""
        out: dict[str, dict[str, float]] = {}
        for tier, direction in (
            ("host", "up"),
            ("host", "down"),
            ("fabric", "up"),
            ("fabric", "down"),
        ):
            links = [
                x
                for x in self.summary.get("links", [])
                if x["direction"] == direction and x.get("tier", "host") == tier
            ]
            if not links:
                continue
            key = direction if tier == "host" else f"fabric {direction}"
            classes = sorted({c for x in links for c in x["classes"]})
            out[key] = {
                c: sum(
                    (x["classes"].get(c, {}).get("rate_bps") or 0) / x["rate_bps"] for x in links
                )
                / len(links)
                for c in classes
            }
        return out

    def scenario(self) -> dict[str, Any]:
        import yaml

        p = self.path / "scenario.yaml"
        return yaml.safe_load(p.read_text()) if p.is_file() else {}

    def predicted_iteration(self) -> float | None:
        """The event model's iteration time for this run's scenario, alone on its links."""
        from testbed.scenario import load_scenario
        from testbed.workloads.training.predict import for_scenario

        try:
            return for_scenario(load_scenario(self.path / "scenario.yaml"))["iteration_s"]
        except (TestbedError, ValueError, OSError):
            return None

    def flows_in_window(self) -> list[dict[str, str]]:
        """The measured flows: those that started inside the window, completed or not."""
        flows = self.rows("flows.csv")
        if flows and "measured" not in flows[0]:
            raise ScenarioError(
                f"{self.path}: written by an older testbed (flows.csv has no 'measured' column); "
                "run the scenario again to compare it"
            )
        return [f for f in flows if f["measured"] == "True"]


def describe_run(run: Run) -> dict[str, Any]:
    s = run.summary
    out: dict[str, Any] = {
        "run": str(run.path), "scenario": s.get("scenario"), "run_id": s.get("run_id"),
        "status": s.get("status"), "seed": s.get("seed"), "duration_s": s.get("duration_s"),
    }  # fmt: skip
    if run.horovod:
        h = run.horovod
        out["horovod"] = {"workers": h["workers"], "iterations": h["iterations"], "class": h.get("class"),
                          "iteration_time_s": h["iteration_time_s"],
                          "predicted_iteration_s": run.predicted_iteration()}  # fmt: skip
    if run.websearch:
        w = run.websearch
        out["websearch"] = {"flows_started": w["flows_started"], "flows_completed": w["flows_completed"],
                            "flows_measured": w.get("flows_measured"), "censored": w.get("censored"),
                            "class": w.get("class"), "fct_s": w["fct_s"]}  # fmt: skip
    out["utilization"] = run.utilization()
    return out


def pct_change(new: float | None, base: float | None) -> float | None:
    if new is None or base is None or base == 0:
        return None
    return (new - base) / base * 100


def compare(runs: list[Run]) -> dict[str, Any]:
    base = runs[0]
    result: dict[str, Any] = {"baseline": str(base.path), "runs": []}
    for other in runs[1:]:
        entry: dict[str, Any] = {"run": str(other.path)}
        if base.websearch and other.websearch:
            entry["fct_mean_change_pct"] = {
                c: pct_change(
                    other.websearch["fct_s"][c]["mean"], base.websearch["fct_s"][c]["mean"]
                )
                for c in CLASSES
            }
            # a censored flow has no FCT: the means above leave it out, so say how many
            entry["censored"] = {
                c: {
                    "baseline": base.websearch["fct_s"][c].get("censored", 0),
                    "run": other.websearch["fct_s"][c].get("censored", 0),
                }
                for c in CLASSES
            }
        if base.horovod and other.horovod:
            entry["iteration_time_mean_change_pct"] = pct_change(
                other.horovod["iteration_time_s"]["mean"], base.horovod["iteration_time_s"]["mean"]
            )
        if (
            base.summary.get("seed") == other.summary.get("seed")
            and base.websearch
            and other.websearch
        ):
            entry["per_flow"] = per_flow(base, other)
        result["runs"].append(entry)
    return result


@dataclass
class Matched:
    """The measured flows of a baseline run, paired by id with the same flows of another run
    of the same seed (same sizes, destinations and arrival offsets)."""

    pairs: list[tuple[float, float]]  # (baseline FCT, other FCT) of flows completed in both
    censored: dict[str, int]  # measured flows without an FCT, per run


def matched_flows(base: Run, other: Run, cls: str) -> Matched:
    """Pair flow by flow. A flow that has no FCT in either run (censored, or failed) is not
    compared but counted, so the flows that suffered most cannot vanish unseen."""
    b = {f["id"]: f for f in other.rows("flows.csv")}
    out = Matched([], {"baseline": 0, "run": 0})
    for fa in base.flows_in_window():
        if cls != "all" and size_class(int(fa["size_bytes"])) != cls:
            continue
        fb = b.get(fa["id"])
        if fb is not None and fb["size_bytes"] != fa["size_bytes"]:
            raise ScenarioError(
                f"{other.path}: flow {fa['id']} has another size than in {base.path}; "
                "these runs did not use the same seed and flow sizes"
            )
        done_a = fa["completed"] == "True"
        done_b = fb is not None and fb["completed"] == "True"
        out.censored["baseline"] += not done_a
        out.censored["run"] += not done_b
        if done_a and done_b:
            out.pairs.append((float(fa["fct_s"]), float(fb["fct_s"])))  # type: ignore[index]
    return out


def per_flow(base: Run, other: Run) -> dict[str, Any]:
    """Same seed → the same flows: per size class, the mean and median of the per-flow % change
    of FCT over the flows completed in both runs, how many got faster, and how many had no
    FCT in each run."""
    out: dict[str, Any] = {}
    for c in CLASSES:
        m = matched_flows(base, other, c)
        changes = [(fb - fa) / fa * 100 for fa, fb in m.pairs]
        d = describe(changes)
        out[c] = {"matched": d["count"], "mean_change_pct": d["mean"], "median_change_pct": d["p50"],
                  "faster": sum(1 for x in changes if x < 0), "censored": m.censored}  # fmt: skip
    return out


# ---------------------------------------------------------------- plots


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_fct_cdf(runs: list[Run], out: Path) -> Path | None:
    if not any(r.websearch for r in runs):
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, cls in zip(axes, ("small", "medium", "large"), strict=True):
        for r in runs:
            xs = sorted(float(f["fct_s"]) for f in r.flows_in_window()
                        if f["completed"] == "True" and size_class(int(f["size_bytes"])) == cls)  # fmt: skip
            if xs:
                ax.step(
                    xs,
                    [(i + 1) / len(xs) for i in range(len(xs))],
                    where="post",
                    label=f"{r.name} (n={len(xs)})",
                )
        ax.set_xscale("log")
        ax.set_title(f"{cls} flows")
        ax.set_xlabel("flow completion time (s)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("CDF")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_iterations(run: Run, out: Path) -> Path | None:
    its = run.rows("iterations.csv")
    if not its:
        return None
    plt = pyplot()
    t0 = run.summary.get("started_at") or min(float(r["start"]) for r in its)
    fig, ax = plt.subplots(figsize=(9, 3.8))
    for worker in sorted({r["worker"] for r in its}):
        rs = [r for r in its if r["worker"] == worker]
        ax.plot([(float(r["start"]) - t0) / run.time_scale for r in rs],
                [float(r["duration_s"]) * 1e3 for r in rs], ".-", lw=0.8, ms=3, label=worker)  # fmt: skip
    compute = (run.horovod or {}).get("compute_time_s")
    if compute:
        ax.axhline(compute * 1e3, color="k", ls="--", lw=0.8, label="configured compute")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("iteration time (ms)")
    ax.set_title(f"Horovod iteration time — {run.name}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


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


def plot_timeline(run: Run, out: Path, iterations: int = 5) -> Path | None:
    """Compute vs waiting for allreduce per worker, a few iterations (thesis Fig. 4.8 style)."""
    its = run.rows("iterations.csv")
    if not its:
        return None
    numbers = sorted({int(r["iteration"]) for r in its})
    mid = numbers[len(numbers) // 2 : len(numbers) // 2 + iterations]
    chosen = [r for r in its if int(r["iteration"]) in mid]
    if not chosen:
        return None
    t0 = min(float(r["start"]) for r in chosen)
    workers = sorted({r["worker"] for r in chosen})
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 0.6 + 0.5 * len(workers)))
    for y, worker in enumerate(workers):
        for r in (r for r in chosen if r["worker"] == worker):
            start = (float(r["start"]) - t0) / run.time_scale
            comp, wait = float(r["compute_s"]), float(r["wait_s"])
            ax.broken_barh([(start * 1e3, comp * 1e3)], (y - 0.35, 0.7), color="tab:blue")
            ax.broken_barh(
                [((start + comp) * 1e3, wait * 1e3)], (y - 0.35, 0.7), color="tab:orange"
            )
    ax.set_yticks(range(len(workers)), workers)
    ax.set_xlabel("time (ms)")
    ax.set_title(f"iterations {mid[0]}–{mid[-1]}: compute (blue) vs waiting for allreduce (orange) — {run.name}",
                 fontsize=9)  # fmt: skip
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


WORKLOAD_SECTIONS = ("linkcheck", "horovod", "websearch")


def plots_for(run: Run) -> list[Path]:
    """The run's plots; none for a run that carried nothing but ARP (no workloads, no hold):
    importing matplotlib and drawing empty axes was a second of every such `up`."""
    if not any(run.summary.get(k) for k in (*WORKLOAD_SECTIONS, "hold")):
        return []
    d = run.path / "plots"
    d.mkdir(exist_ok=True)
    made = [
        plot_fct_cdf([run], d / "fct_cdf.png"),
        plot_iterations(run, d / "iterations.png"),
        plot_utilization(run, d / "link_utilization.png"),
        plot_timeline(run, d / "horovod_timeline.png"),
    ]
    return [p for p in made if p is not None]


def comparison_plots(runs: list[Run], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    p = plot_fct_cdf(runs, out_dir / "fct_cdf_compare.png")
    return [p] if p else []


def fmt_ms(x: float | None) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 1e3:.1f}"


def fmt_pct(x: float | None) -> str:
    return "–" if x is None else f"{x:+.1f}%"
