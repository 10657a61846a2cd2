"""The `testbed` command. Exit codes: 0 ok, 2 bad input (one line naming the field), 1 runtime
failure, 130 interrupted. Errors print as one line, never as a traceback."""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.logging import RichHandler
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

from testbed.errors import ScenarioError, TestbedError
from testbed.scenario import dump_scenario, json_schema, load_scenario
from testbed.units import parse_duration

err_console = Console(stderr=True)
F = TypeVar("F", bound=Callable[..., Any])


def _friendly(fn: F) -> F:
    """Turn testbed errors into one line on stderr and the matching exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from testbed.orchestrator import Interrupted

        try:
            return fn(*args, **kwargs)
        except TestbedError as e:
            err_console.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
            sys.exit(e.exit_code)
        except (Interrupted, KeyboardInterrupt) as e:
            err_console.print(
                f"[yellow]interrupted[/] ({e}); everything was torn down", highlight=False
            )
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="testbed")
def main() -> None:
    """Emulate a data-center network in Linux namespaces: shaped links, DSCP priority queues,
    real TCP workloads, and a run folder with the results."""


@main.command()
@click.argument("scenario")
@_friendly
def validate(scenario: str) -> None:
    """Check SCENARIO and print it resolved (defaults filled in, tc profile expanded)."""
    s = load_scenario(scenario)
    click.echo(dump_scenario(s), nl=False)


@main.command()
def schema() -> None:
    """Print the JSON Schema of scenario files (for editors and CI validation)."""
    click.echo(json.dumps(json_schema(), indent=2))


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


@main.command()
@click.argument("scenario")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="run folder (default: runs/NAME-TIME-ID)",
)
@click.option("--duration", help="override the scenario's duration, e.g. 30s")
@click.option("--seed", type=int, help="override the scenario's seed")
@click.option("--run-id", help="fix the run id (6 hex digits) instead of a random one")
@click.option("-v", "--verbose", is_flag=True, help="show debug messages")
@_friendly
def up(
    scenario: str,
    out: Path | None,
    duration: str | None,
    seed: int | None,
    run_id: str | None,
    verbose: bool,
) -> None:
    """Build the network of SCENARIO, run its workloads, write the run folder, tear down."""
    from testbed.orchestrator import run

    s = load_scenario(scenario)
    d = None
    if duration is not None:
        try:
            d = parse_duration(duration)
        except ValueError as e:
            raise ScenarioError(f"--duration: {e}") from None
    if d is not None or seed is not None:
        s = s.with_overrides(duration=d, seed=seed)
    _console_logging(verbose)
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=err_console, transient=False) as progress:
        ui = RichUI(progress)
        result = run(s, out=out, run_id=run_id, ui=ui)
        ui.done()
    _print_result(result.run_dir, result.summary)
    if result.summary.get("horovod") or result.summary.get("websearch"):
        from testbed import report as rp

        _print_run(Console(), rp.describe_run(rp.Run(result.run_dir)))
    _plots_after_run(result.run_dir)


def _plots_after_run(run_dir: Path) -> None:
    """Plots are a convenience: a plotting problem is reported, never fails the run."""
    from testbed import report as rp

    try:
        for p in rp.plots_for(rp.Run(run_dir)):
            Console().print(f"plot: {p}")
    except Exception as e:
        err_console.print(f"[yellow]warning:[/] plots not written: {e}")


def _console_logging(verbose: bool) -> None:
    h = RichHandler(console=err_console, show_path=False, show_time=False, markup=False)
    h.setLevel(logging.DEBUG if verbose else logging.INFO)
    lg = logging.getLogger("testbed")
    lg.addHandler(h)
    lg.setLevel(logging.DEBUG)


def _fmt_rate(bps: float) -> str:
    return f"{bps / 1e6:.1f} Mbit/s" if bps < 1e9 else f"{bps / 1e9:.2f} Gbit/s"


def _print_result(run_dir: Path, summary: dict[str, Any]) -> None:
    out = Console()
    lc = summary.get("linkcheck")
    if lc:
        t = Table(
            title=f"linkcheck: goodput per pair and class (link {_fmt_rate(lc['link_rate_bps'])})"
        )
        for col in ("src", "dst", "class", "dscp", "goodput", "of link"):
            t.add_column(col, justify="right" if col in ("dscp", "goodput", "of link") else "left")
        for f in lc["bulk"]:
            t.add_row(
                f["src"],
                f["dst"],
                f["class"],
                str(f["dscp"]),
                _fmt_rate(f["goodput_bps"]),
                f"{f['goodput_bps'] / lc['link_rate_bps']:.1%}",
            )
        out.print(t)
        sh = lc["short"]
        if sh["class"] is not None:
            st = sh["fct_s"]
            if st["count"]:
                out.print(
                    f"short transfers ({sh['size_bytes']} B, class {sh['class']}): "
                    f"{sh['completed']}/{sh['started']} completed, completion time "
                    f"mean {st['mean'] * 1e3:.2f} ms, p50 {st['p50'] * 1e3:.2f} ms, p99 {st['p99'] * 1e3:.2f} ms"
                )
            else:
                out.print(f"short transfers: {sh['completed']}/{sh['started']} completed")
    out.print(f"run folder: {run_dir}")


@main.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of tables")
@click.option("--no-plots", is_flag=True, help="do not write PNG plots")
@_friendly
def report(runs: tuple[Path, ...], as_json: bool, no_plots: bool) -> None:
    """Summarise RUN folders; with several, compare them against the first (the baseline)."""
    from testbed import report as rp

    loaded = [rp.Run(p) for p in runs]
    data: dict[str, Any] = {"runs": [rp.describe_run(r) for r in loaded]}
    if len(loaded) > 1:
        data["comparison"] = rp.compare(loaded)
    plots: list[Path] = []
    if not no_plots:
        for r in loaded:
            plots += rp.plots_for(r)
        if len(loaded) > 1:
            plots += rp.comparison_plots(loaded, loaded[0].path / "plots" / "compare")
    data["plots"] = [str(p) for p in plots]
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    out = Console()
    for r in data["runs"]:
        _print_run(out, r)
    if "comparison" in data:
        _print_comparison(out, data["comparison"])
    for p in plots:
        out.print(f"plot: {p}")


def _print_run(out: Console, r: dict[str, Any]) -> None:
    from testbed.report import fmt_ms

    out.rule(f"{r['run']}  ({r['scenario']}, run {r['run_id']}, seed {r['seed']}, {r['status']})")
    h = r.get("horovod")
    if h:
        it = h["iteration_time_s"]
        out.print(
            f"Horovod: {h['workers']} workers, {h['iterations']} iterations, class {h['class']}; "
            f"iteration time mean {fmt_ms(it['mean'])} ms, p50 {fmt_ms(it['p50'])} ms, p99 {fmt_ms(it['p99'])} ms"
        )
    w = r.get("websearch")
    if w:
        t = Table(
            title=f"web-search flows: {w['flows_completed']}/{w['flows_started']} completed, class {w['class']}"
        )
        for col in ("size class", "flows", "FCT mean (ms)", "p50 (ms)", "p99 (ms)"):
            t.add_column(col, justify="right")
        for cls, st in w["fct_s"].items():
            t.add_row(
                cls, str(st["count"]), fmt_ms(st["mean"]), fmt_ms(st["p50"]), fmt_ms(st["p99"])
            )
        out.print(t)
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


def _print_comparison(out: Console, cmp: dict[str, Any]) -> None:
    from testbed.report import CLASSES, fmt_pct

    t = Table(title=f"change against the baseline {cmp['baseline']}")
    t.add_column("run")
    for c in CLASSES:
        t.add_column(f"FCT {c}", justify="right")
    t.add_column("iteration time", justify="right")
    for e in cmp["runs"]:
        fct = e.get("fct_mean_change_pct") or {}
        t.add_row(
            e["run"],
            *(fmt_pct(fct.get(c)) for c in CLASSES),
            fmt_pct(e.get("iteration_time_mean_change_pct")),
        )
    out.print(t)
    for e in cmp["runs"]:
        pf = e.get("per_flow")
        if not pf:
            continue
        t = Table(title=f"same seed, flow by flow: {e['run']} against the baseline")
        for col in ("size class", "matched flows", "mean change", "median change", "faster"):
            t.add_column(col, justify="right")
        for c in CLASSES:
            st = pf[c]
            t.add_row(
                c,
                str(st["matched"]),
                fmt_pct(st["mean_change_pct"]),
                fmt_pct(st["median_change_pct"]),
                f"{st['faster']}/{st['matched']}",
            )
        out.print(t)


@main.command()
@click.option("--force", is_flag=True, help="also stop runs whose orchestrator is still alive")
@_friendly
def down(force: bool) -> None:
    """Remove everything earlier runs left behind (after kill -9, a crash, a reboot of testbed).

    Only objects recorded in a run's state file are touched. Idempotent."""
    from testbed.preflight import require_root
    from testbed.runtime.netns import NETNS_DIR, teardown
    from testbed.state import all_states

    require_root("testbed down")
    states = all_states()
    cleaned = 0
    failed = False
    for st in states:
        if st.alive():
            if not force:
                click.echo(
                    f"run {st.run_id} is live (pid {st.pid}); left alone (stop it, or use --force)"
                )
                continue
            click.echo(
                f"run {st.run_id} is live: sending SIGTERM to pid {st.pid} and waiting for its teardown"
            )
            os.kill(st.pid, signal.SIGTERM)
            deadline = time.monotonic() + 30
            while st.alive() and time.monotonic() < deadline:
                time.sleep(0.2)
        problems = teardown(st)
        if problems:
            failed = True
            for p in problems:
                click.echo(f"run {st.run_id}: {p}", err=True)
            continue
        st.remove()
        cleaned += 1
        click.echo(
            f"removed run {st.run_id} ({st.scenario}): {len(st.namespaces())} namespaces, "
            f"{sum(1 for o in st.objects if o['kind'] == 'link')} host-side links"
        )
    recorded = {ns for st in all_states() for ns in st.namespaces()}
    pattern = re.compile(r"^tb-[0-9a-f]{6}-(sw|h\d+)$")
    strays = (
        sorted(
            p.name
            for p in NETNS_DIR.glob("tb-*")
            if pattern.match(p.name) and p.name not in recorded
        )
        if NETNS_DIR.is_dir()
        else []
    )
    if strays:
        click.echo(
            "namespaces named like testbed's but recorded by no run (left alone; remove with "
            f"`ip netns del NAME` if they are yours): {' '.join(strays)}"
        )
    if not states:
        click.echo("nothing to remove")
    elif cleaned:
        click.echo(f"cleaned {cleaned} run(s)")
    if failed:
        sys.exit(1)


@main.command()
@_friendly
def status() -> None:
    """List runs that exist on this machine (live, or dead and awaiting `testbed down`)."""
    from testbed.state import all_states

    states = all_states()
    if not states:
        click.echo("no runs")
        return
    t = Table()
    for col in ("run id", "scenario", "state", "phase", "pid", "started", "hosts", "run folder"):
        t.add_column(col)
    for st in states:
        alive = st.alive()
        t.add_row(
            st.run_id,
            st.scenario,
            "[green]live[/]" if alive else "[red]dead[/] (testbed down)",
            st.phase,
            str(st.pid),
            time.strftime("%H:%M:%S", time.localtime(st.started_at)),
            str(max(0, len(st.namespaces()) - 1)),
            st.out_dir,
        )
    Console().print(t)


if __name__ == "__main__":
    main()
