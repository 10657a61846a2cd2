"""What an incast instance reports: query completion times, their change against a baseline
run, the sweep's columns, the QCT CDF."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from testbed.core.runs import Run, fmt_ms, fmt_pct, pct_change, prefixed, pyplot
from testbed.workloads.incast.spec import queries_file

COLUMNS = ("qct_mean_s", "qct_p99_s", "queries_measured")  # sweep.csv


def describe(run: Run, name: str, q: dict[str, Any]) -> dict[str, Any]:
    return {k: q.get(k) for k in ("fanout", "response_size_bytes", "queries_measured", "censored",
                                  "failed", "qct_s", "class")}  # fmt: skip


def print_section(out: Console, name: str, q: dict[str, Any]) -> None:
    t = Table(
        title=f"{name} (incast): {q['queries_measured']} queries in the measured window, each to "
        f"{q['fanout']} responders of {q['response_size_bytes']} B; censored {q['censored']}, "
        f"failed {q['failed']}; class {q['class']}"
    )
    for col in ("completed", "QCT mean (ms)", "p50 (ms)", "p99 (ms)", "max (ms)"):
        t.add_column(col, justify="right")
    s = q["qct_s"]
    t.add_row(
        str(s["count"]), fmt_ms(s["mean"]), fmt_ms(s["p50"]), fmt_ms(s["p99"]), fmt_ms(s["max"])
    )
    out.print(t)


def comparable(run: Run, name: str, q: dict[str, Any]) -> dict[str, float | None]:
    return {prefixed(name, "incast", "qct"): (q.get("qct_s") or {}).get("mean")}


def compare(base: Run, other: Run, name: str) -> dict[str, Any]:
    b, o = dict(base.of_kind("incast")).get(name), dict(other.of_kind("incast")).get(name)
    if not b or not o:
        return {}
    return {
        "qct_mean_change_pct": pct_change(o["qct_s"]["mean"], b["qct_s"]["mean"]),
        "qct_p99_change_pct": pct_change(o["qct_s"]["p99"], b["qct_s"]["p99"]),
        "censored": {"baseline": b["censored"], "run": o["censored"]},
    }


def print_compare(out: Console, name: str, entries: list[tuple[str, dict[str, Any]]]) -> None:
    t = Table(title=f"{name}: change of the query completion time against the baseline")
    for col in ("run", "mean", "p99", "censored (base/run)"):
        t.add_column(col, justify="right" if col != "run" else "left")
    for run, e in entries:
        c = e.get("censored") or {}
        t.add_row(run, fmt_pct(e.get("qct_mean_change_pct")), fmt_pct(e.get("qct_p99_change_pct")),
                  f"{c.get('baseline', '–')}/{c.get('run', '–')}")  # fmt: skip
    out.print(t)


def key_metrics(name: str, q: dict[str, Any]) -> dict[str, Any]:
    s = q.get("qct_s") or {}
    out = {
        "qct_mean_s": s.get("mean"),
        "qct_p99_s": s.get("p99"),
        "queries_measured": q.get("queries_measured"),
    }
    return {prefixed(name, "incast", k): v for k, v in out.items()}


def counts(name: str, q: dict[str, Any]) -> dict[str, int]:
    return {prefixed(name, "incast", "qct"): (q.get("qct_s") or {}).get("count") or 0}


def plots(run: Run, name: str, q: dict[str, Any], out_dir: Path) -> list[Path]:
    p = plot_qct_cdf([run], out_dir / f"qct_cdf{'' if name == 'incast' else '-' + name}.png", name)
    return [p] if p else []


def compare_plots(runs: list[Run], name: str, out_dir: Path) -> list[Path]:
    p = plot_qct_cdf(
        runs, out_dir / f"qct_cdf_compare{'' if name == 'incast' else '-' + name}.png", name
    )
    return [p] if p else []


def plot_qct_cdf(runs: list[Run], out: Path, name: str) -> Path | None:
    series = []
    for r in runs:
        xs = sorted(float(q["qct_s"]) for q in r.rows(queries_file(name))
                    if q["measured"] == "True" and q["completed"] == "True")  # fmt: skip
        if xs:
            series.append((r.name, xs))
    if not series:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for label, xs in series:
        ax.step(
            xs,
            [(i + 1) / len(xs) for i in range(len(xs))],
            where="post",
            label=f"{label} (n={len(xs)})",
        )
    ax.set_xscale("log")
    ax.set_xlabel("query completion time (s)")
    ax.set_ylabel("CDF")
    ax.set_title(f"{name}: incast queries")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
