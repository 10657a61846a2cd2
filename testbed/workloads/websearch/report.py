"""What a web-search instance reports (report.py calls these for every instance of the kind):
FCT per pFabric size class, its change against a baseline run (and, with the same seed, flow
by flow: the same flows), the sweep's columns, the FCT CDF plot."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from testbed.core.errors import ScenarioError
from testbed.core.runs import Run, fmt_ms, fmt_pct, pct_change, prefixed, pyplot
from testbed.core.stats import describe as stats
from testbed.core.stats import size_class
from testbed.workloads.websearch.spec import flows_file

CLASSES = ("small", "medium", "large", "all")
COLUMNS = (  # sweep.csv
    "flows_measured", "censored", "failed", "max_flow_rate_over_link",
    *(f"fct_{c}_{k}" for c in CLASSES for k in ("mean_s", "count")),
)  # fmt: skip


def flows_in_window(run: Run, name: str) -> list[dict[str, str]]:
    """The measured flows: those that started inside the window, completed or not."""
    flows = run.rows(flows_file(name))
    if flows and "measured" not in flows[0]:
        raise ScenarioError(
            f"{run.path}: written by an older testbed (flows.csv has no 'measured' column); "
            "run the scenario again to compare it"
        )
    return [f for f in flows if f["measured"] == "True"]


def describe(run: Run, name: str, w: dict[str, Any]) -> dict[str, Any]:
    return {"flows_started": w["flows_started"], "flows_completed": w["flows_completed"],
            "flows_measured": w.get("flows_measured"), "censored": w.get("censored"),
            "class": w.get("class"), "fct_s": w["fct_s"]}  # fmt: skip


def print_section(out: Console, name: str, w: dict[str, Any]) -> None:
    who = "web-search" if name == "websearch" else f"{name} (web-search)"
    t = Table(
        title=f"{who} flows started inside the measured window: {w['flows_measured']}, "
        f"of which censored (unfinished at the drain limit): {w['censored']}; class {w['class']}"
    )
    cols = ("size class", "completed", "censored", "FCT mean (ms)", "p50 (ms)", "p99 (ms)",
            "with a timeout")  # fmt: skip
    for col in cols:
        t.add_column(col, justify="right")
    for cls, st in w["fct_s"].items():
        timed_out = st.get("timed_out")
        t.add_row(cls, str(st["count"]), str(st.get("censored", "–")), fmt_ms(st["mean"]),
                  fmt_ms(st["p50"]), fmt_ms(st["p99"]),
                  "–" if timed_out is None else str(timed_out))  # fmt: skip
    out.print(t)


def comparable(run: Run, name: str, w: dict[str, Any]) -> dict[str, float | None]:
    """The figures a comparison takes the % change of: the mean FCT per size class."""
    return {
        prefixed(name, "websearch", c): (w.get("fct_s") or {}).get(c, {}).get("mean")
        for c in CLASSES
    }


def compare(base: Run, other: Run, name: str) -> dict[str, Any]:
    """Against a baseline run: % change of the mean FCT per class, the flows without an FCT in
    each (a mean leaves them out, so they are counted), and, for runs of one seed (the same
    flows), the change flow by flow."""
    b, o = dict(base.of_kind("websearch")).get(name), dict(other.of_kind("websearch")).get(name)
    if not b or not o:
        return {}
    out: dict[str, Any] = {
        "fct_mean_change_pct": {
            c: pct_change(o["fct_s"][c]["mean"], b["fct_s"][c]["mean"]) for c in CLASSES
        },
        "censored": {
            c: {
                "baseline": b["fct_s"][c].get("censored", 0),
                "run": o["fct_s"][c].get("censored", 0),
            }
            for c in CLASSES
        },
    }
    if base.summary.get("seed") == other.summary.get("seed"):
        out["per_flow"] = per_flow(base, other, name)
    return out


@dataclass
class Matched:
    """The measured flows of a baseline run, paired by id with the same flows of another run
    of the same seed (same sizes, destinations and arrival offsets)."""

    pairs: list[tuple[float, float]]  # (baseline FCT, other FCT) of flows completed in both
    censored: dict[str, int]  # measured flows without an FCT, per run


def matched_flows(base: Run, other: Run, cls: str, name: str = "websearch") -> Matched:
    """Pair flow by flow. A flow that has no FCT in either run (censored, or failed) is not
    compared but counted, so the flows that suffered most cannot vanish unseen."""
    b = {f["id"]: f for f in other.rows(flows_file(name))}
    out = Matched([], {"baseline": 0, "run": 0})
    for fa in flows_in_window(base, name):
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


def per_flow(base: Run, other: Run, name: str = "websearch") -> dict[str, Any]:
    """Same seed → the same flows: per size class, the mean and median of the per-flow % change
    of FCT over the flows completed in both runs, how many got faster, and how many had no
    FCT in each run."""
    out: dict[str, Any] = {}
    for c in CLASSES:
        m = matched_flows(base, other, c, name)
        changes = [(fb - fa) / fa * 100 for fa, fb in m.pairs]
        d = stats(changes)
        out[c] = {"matched": d["count"], "mean_change_pct": d["mean"], "median_change_pct": d["p50"],
                  "faster": sum(1 for x in changes if x < 0), "censored": m.censored}  # fmt: skip
    return out


def matched_change(base: Run, other: Run, name: str) -> dict[str, dict[str, Any]]:
    """For a sweep's cells, per size class: % change of the mean FCT over the flows completed
    in both runs, how many matched, and the flows without an FCT in each."""
    out = {}
    for c in CLASSES:
        m = matched_flows(base, other, c, name)
        a = [x for x, _ in m.pairs]
        b = [y for _, y in m.pairs]
        out[prefixed(name, "websearch", c)] = {
            "change_pct": pct_change(
                sum(b) / len(b) if b else None, sum(a) / len(a) if a else None
            ),
            "matched": len(m.pairs),
            "censored": m.censored,
        }
    return out


def print_compare(out: Console, name: str, entries: list[tuple[str, dict[str, Any]]]) -> None:
    """The comparison's tables: per run, the change of the mean FCT per class (censored flows
    of baseline and run in brackets); with the same seed, flow by flow."""
    t = Table(title=f"{name}: change of the mean FCT against the baseline (censored base/run)")
    t.add_column("run")
    for c in CLASSES:
        t.add_column(f"FCT {c}", justify="right")
    for run, e in entries:
        fct, cens = e.get("fct_mean_change_pct") or {}, e.get("censored") or {}
        t.add_row(run, *(f"{fmt_pct(fct.get(c))} {_censored(cens.get(c))}" for c in CLASSES))
    out.print(t)
    for run, e in entries:
        pf = e.get("per_flow")
        if not pf:
            continue
        t = Table(title=f"{name}, same seed, flow by flow: {run} against the baseline")
        for col in ("size class", "matched flows", "censored (base/run)", "mean change",
                    "median change", "faster"):  # fmt: skip
            t.add_column(col, justify="right")
        for c in CLASSES:
            st = pf[c]
            t.add_row(c, str(st["matched"]), _censored(st.get("censored")), fmt_pct(st["mean_change_pct"]),
                      fmt_pct(st["median_change_pct"]), f"{st['faster']}/{st['matched']}")  # fmt: skip
        out.print(t)


def _censored(c: dict[str, int] | None) -> str:
    return "" if not c else f"({c['baseline']}/{c['run']})"


def key_metrics(name: str, w: dict[str, Any]) -> dict[str, Any]:
    """sweep.csv's columns of the instance."""
    fct = w.get("fct_s") or {}
    out: dict[str, Any] = {
        "flows_measured": w.get("flows_measured"),
        "censored": w.get("censored"),
        "failed": w.get("failed"),
        "max_flow_rate_over_link": w.get("max_flow_rate_over_link"),
    }
    for c in CLASSES:
        out[f"fct_{c}_mean_s"] = (fct.get(c) or {}).get("mean")
        out[f"fct_{c}_count"] = (fct.get(c) or {}).get("count")
    return {prefixed(name, "websearch", k): v for k, v in out.items()}


def counts(name: str, w: dict[str, Any]) -> dict[str, int]:
    """A sweep cell's sample sizes: the baseline's completed flows per class."""
    return {prefixed(name, "websearch", c): ((w.get("fct_s") or {}).get(c) or {}).get("count") or 0
            for c in CLASSES}  # fmt: skip


def plots(run: Run, name: str, w: dict[str, Any], out_dir: Path) -> list[Path]:
    p = plot_fct_cdf(
        [run], out_dir / ("fct_cdf.png" if name == "websearch" else f"fct_cdf-{name}.png"), name
    )
    return [p] if p else []


def compare_plots(runs: list[Run], name: str, out_dir: Path) -> list[Path]:
    p = plot_fct_cdf(
        runs,
        out_dir / ("fct_cdf_compare.png" if name == "websearch" else f"fct_cdf_compare-{name}.png"),
        name,
    )
    return [p] if p else []


def plot_fct_cdf(runs: list[Run], out: Path, name: str = "websearch") -> Path | None:
    if not any(dict(r.of_kind("websearch")).get(name) for r in runs):
        return None
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, cls in zip(axes, ("small", "medium", "large"), strict=True):
        for r in runs:
            xs = sorted(float(f["fct_s"]) for f in flows_in_window(r, name)
                        if f["completed"] == "True" and size_class(int(f["size_bytes"])) == cls)  # fmt: skip
            if xs:
                ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post",
                        label=f"{r.name} (n={len(xs)})")  # fmt: skip
        ax.set_xscale("log")
        ax.set_title(f"{cls} flows" if name == "websearch" else f"{name}: {cls} flows")
        ax.set_xlabel("flow completion time (s)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("CDF")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def planned(name: str, s: Any) -> dict[str, int]:
    """What `sweep --dry-run` shows of a point before it runs: the flows the instance's
    generators will start in the measured window (the same draws), and how many are small."""
    from testbed.workloads.websearch.controller import planned_flows

    flows = planned_flows(s, name)
    return {
        "flows": len(flows),
        "small flows": sum(1 for _, _, size in flows if size_class(size) == "small"),
    }
