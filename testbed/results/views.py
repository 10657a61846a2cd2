"""The command's Rich views: progress of a run and of a sweep, and the tables `report` and
`sweep` print. Kept apart from cli.py, which reads options and calls the layers below: a
view takes data and draws it, nothing more."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table


def run_progress(console: Console) -> Progress:
    """One run's display: a spinner line per phase, the running phase as a bar with elapsed
    and remaining time."""
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    return Progress(*columns, console=console, transient=False)


def sweep_progress(console: Console) -> Progress:
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    return Progress(*columns, console=console, transient=False)


class RichUI:
    """Phases as a spinner line, the running phase as a bar with elapsed and remaining time."""

    def __init__(self, progress: Progress) -> None:
        self.p = progress
        self.task: TaskID | None = None
        self.run_task: TaskID | None = None
        self.t0 = time.monotonic()

    def phase(self, name: str) -> None:
        if self.task is not None:
            self.p.update(self.task, completed=1, total=1)
        if name == "running":
            self.task = None
            return
        self.task = self.p.add_task(name, total=None)

    def running(self, elapsed: float, total: float, info: str) -> None:
        if self.run_task is None:
            self.run_task = self.p.add_task("running", total=total)
        self.p.update(self.run_task, completed=min(elapsed, total), description=f"running  {info}")

    def done(self) -> None:
        if self.task is not None:
            self.p.update(self.task, completed=1, total=1)


def cell(v: Any) -> str:
    if v is None or v == "":
        return "–"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def spread_text(s: dict[str, Any]) -> str:
    from testbed.core.runs import fmt_pct

    if s["mean"] is None:
        return "–"
    if s["n"] == 1:
        return fmt_pct(s["mean"])
    return f"{fmt_pct(s['mean'])} [{s['min']:+.0f}, {s['max']:+.0f}]"


def print_outcome(console: Console, outcome: Any, done: int, total: int) -> None:
    """One line per finished point (also where no live display is drawn), its failed checks."""
    p = outcome.point
    if outcome.status == "failed":
        console.print(
            f"[red]run #{p.index} failed[/] ({p.title}): {outcome.error}", highlight=False
        )
    elif outcome.status == "ok":
        console.print(
            f"[{done}/{total}] ok in {outcome.wall_s:.0f} s: #{p.index} {p.title}"
            + (f", expect: {outcome.expect_column}" if outcome.checks else ""),
            highlight=False,
        )
    for line in outcome.failed_checks:
        console.print(f"  [red]{line}[/]", highlight=False, soft_wrap=True)


class PointUI:
    """One sweep point's phases and running bar, on a single line of the sweep display."""

    def __init__(self, progress: Progress, task: TaskID, title: str) -> None:
        self.p, self.task, self.title = progress, task, title

    def phase(self, name: str) -> None:
        self.p.update(self.task, description=f"  {self.title}: {name}")

    def running(self, elapsed: float, total: float, info: str) -> None:
        self.p.update(
            self.task,
            total=total,
            completed=min(elapsed, total),
            description=f"  {self.title}: running {info}",
        )


class SwarmUI:
    """One line per node that runs a point (its point and time), and the sweep's total."""

    def __init__(self, progress: Progress) -> None:
        self.p = progress
        self.overall: TaskID | None = None
        self.on: dict[int, TaskID] = {}  # point index → its line

    def _total(self, done: int, total: int) -> None:
        text = f"sweep: {done}/{total} points done"
        if self.overall is None:
            self.overall = self.p.add_task(text, total=total, completed=done)
        self.p.update(self.overall, description=text, completed=done)

    def start_point(self, point: Any, node: Any, done: int, total: int) -> None:
        self._total(done, total)
        self.on[point.index] = self.p.add_task(
            f"  {node.hostname}: #{point.index} {point.title}", total=None
        )

    def end_point(self, outcome: Any, done: int, total: int) -> None:
        self._total(done, total)
        p = outcome.point
        if p.index in self.on:
            self.p.remove_task(self.on.pop(p.index))
        if outcome.status == "failed":
            self.p.console.print(
                f"[red]run #{p.index} failed[/] ({p.title}): {outcome.error}", highlight=False
            )
        elif outcome.status == "ok":
            self.p.console.print(
                f"[{done}/{total}] ok in {outcome.wall_s:.0f} s: #{p.index} {p.title}"
                + (f", expect: {outcome.expect_column}" if outcome.checks else ""),
                highlight=False,
            )
        for line in outcome.failed_checks:
            self.p.console.print(f"  [red]{line}[/]", highlight=False, soft_wrap=True)

    def lost(self, point: Any, node: Any, why: str) -> None:
        if point.index in self.on:
            self.p.remove_task(self.on.pop(point.index))
        self.p.console.print(f"[yellow]#{point.index} again elsewhere[/]: {why}", highlight=False)


class SweepUI:
    """The sweep's total (runs done, failed, time left) and the running point's line."""

    def __init__(self, progress: Progress) -> None:
        self.p = progress
        self.overall: TaskID | None = None
        self.current: TaskID | None = None
        self.failed = 0

    def start_point(self, point: Any, done: int, total: int, eta_s: float | None) -> PointUI:
        eta = f", about {fmt_duration(eta_s)} left" if eta_s is not None else ""
        text = f"sweep: {done}/{total} runs done{f', {self.failed} failed' if self.failed else ''}{eta}"
        if self.overall is None:
            self.overall = self.p.add_task(text, total=total, completed=done)
        self.p.update(self.overall, description=text, completed=done)
        if self.current is not None:
            self.p.remove_task(self.current)
        self.current = self.p.add_task(f"  {point.title}", total=None)
        return PointUI(self.p, self.current, f"#{point.index} {point.title}")

    def end_point(self, outcome: Any, done: int, total: int) -> None:
        self.failed += outcome.status == "failed"
        if self.overall is None:
            self.overall = self.p.add_task("sweep", total=total)
        self.p.update(self.overall, completed=done)
        print_outcome(self.p.console, outcome, done, total)


def fmt_duration(seconds: float) -> str:
    m, sec = divmod(round(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{sec:02d}s"


def compare_table(agg: dict[str, Any]) -> Table:
    """A compared sweep (aggregate.py's document): each cell's change against the baseline."""
    from testbed.results.sweep import short_name

    cmp = agg["compare"]
    t = Table(
        title="% change of the mean against the baseline, mean over seeds [min, max]; "
        "matched change (the same flows) and flows without a value (baseline/other) below"
    )
    for a in agg["axes"]:
        t.add_column(short_name(a))
    t.add_column(cmp["axis"])
    t.add_column("seeds", justify="right")
    metrics = list(dict.fromkeys(m for c in agg["cells"] for m in c["change_pct"]))
    for col in metrics:
        t.add_column(col, justify="right")
    counted = [m for m in metrics if any(m in c["baseline_flows"] for c in agg["cells"])]
    if counted:
        t.add_column(f"{counted[0]} flows", justify="right")
    for c in agg["cells"]:
        ch, mc = c["change_pct"], c["matched_change_pct"]

        def text(
            m: str, ch: dict[str, Any] = ch, mc: dict[str, Any] = mc, c: dict[str, Any] = c
        ) -> str:
            if m not in ch:
                return "–"
            if m not in mc:
                return spread_text(ch[m])
            cens = c["censored"][m]
            return f"{spread_text(ch[m])}\n{spread_text(mc[m])} ({cens['baseline']}/{cens['run']})"

        row = [*(c["cell"][a] for a in agg["axes"]), c[cmp["axis"]], str(len(c["seeds"]))]
        row += [text(m) for m in metrics]
        if counted:
            row.append(str(c["baseline_flows"].get(counted[0], "–")))
        t.add_row(*row)
    return t


def points_table(doc: dict[str, Any]) -> Table:
    """A sweep that compares nothing: its points' figures, as sweep.csv has them."""
    rows = doc["results"]
    skip = {"index", "folder", "wall_s", "error"}
    columns = [c for c in dict.fromkeys(k for r in rows for k in r) if c not in skip]
    columns = [c for c in columns if any(r.get(c) not in (None, "") for r in rows)]
    t = Table(title=f"sweep {doc['name']}: {doc['ok']} of {doc['points']} runs ok, "
              f"{doc['failed']} failed (no compare: in the sweep file, so its points as run)")  # fmt: skip
    for c in columns:
        t.add_column(c, justify="right")
    for r in rows:
        t.add_row(*(cell(r.get(c)) for c in columns))
    return t


def _verdict_rows(v: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """The cell axes of a sweep's judged aims, and each judged aim's cells as text: its cell
    labels, `value` (vs its baseline), `aim`, `per seed`, `mean` [interval], `verdict` and the
    flagged pairs (one source for the terminal's table and the Markdown one)."""
    axes = list(dict.fromkeys(a for j in v["judged"] for a in j["cell"]))
    rows = []
    for j in v["judged"]:
        per = ", ".join(
            f"{s}: {'–' if x is None else f'{x:+.1f}'}" for s, x in j["per_seed"].items()
        )
        if j["mean"] is None:
            mean = "–"
        elif j["interval"] is None:
            mean = f"{j['mean']:+.1f}"
        else:
            lo, hi = j["interval"]
            mean = f"{j['mean']:+.1f} [{lo:+.1f}, {hi:+.1f}]"
        rows.append({
            "cells": [j["cell"].get(a, "–") for a in axes],
            "value": f"{j['value']} vs {j['baseline']}",
            "aim": j["aim"],
            "per seed": per,
            "mean": mean,
            "verdict": j["verdict"],
            "text": j["text"],
            "flags": [f"seed {f['seed']}: {f['why']}" for f in j.get("flagged_pairs", [])],
        })  # fmt: skip
    return axes, rows


def _verdict_title(v: dict[str, Any]) -> str:
    seeds = v.get("seeds") or []
    until = v.get("until")
    title = f"aims over {len(seeds)} seed{'s' if len(seeds) != 1 else ''}: paired % change, "
    title += "mean [95 % t interval]; holds / misses: the whole interval on one side"
    if until:
        title += f"; seeds added until decided: stopped ({until['stopped']})"
    return title


def verdict_table(v: dict[str, Any]) -> Table:
    """A sweep's aims judged (aggregate.verdicts): per cell, value and aim, each seed's paired
    figure, the mean with its 95 % interval, and the verdict."""
    from testbed.results.sweep import short_name

    t = Table(title=_verdict_title(v))
    axes, rows = _verdict_rows(v)
    for a in axes:
        t.add_column(short_name(a))
    for col in ("value", "aim", "per seed", "mean [interval]", "verdict"):
        t.add_column(col, justify="left" if col in ("value", "aim", "verdict") else "right")
    colour = {"holds": "green", "misses": "red", "undecided": "yellow"}
    for r in rows:
        flags = "".join(f"\n  {f}" for f in r["flags"])
        t.add_row(*r["cells"], r["value"], r["aim"], r["per seed"], r["mean"],
                  f"[{colour[r['verdict']]}]{r['text']}[/]{flags}")  # fmt: skip
    return t


def verdict_markdown(v: dict[str, Any]) -> str:
    """The same table in Markdown, for a results page generated from the data (`testbed
    report DIR --markdown`): a flagged pair's reason goes in the verdict's cell."""
    from testbed.results.sweep import short_name

    axes, rows = _verdict_rows(v)
    head = [*(short_name(a) for a in axes), "value", "aim", "per seed", "mean [95 % interval]",
            "verdict"]  # fmt: skip

    def esc(text: str) -> str:
        return text.replace("|", "\\|")

    lines = [f"{_verdict_title(v)}.", "", "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]  # fmt: skip
    for r in rows:
        verdict = r["text"] + "".join(f"; {f}" for f in r["flags"])
        cells = [*r["cells"], r["value"], r["aim"], r["per seed"], r["mean"], verdict]
        lines.append("| " + " | ".join(esc(str(c)) for c in cells) + " |")
    return "\n".join(lines) + "\n"
