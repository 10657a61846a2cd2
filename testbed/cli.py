"""The `testbed` command. Exit codes: 0 ok, 2 bad input (one line naming the field), 1 runtime
failure, 130 interrupted. Errors print as one line, never as a traceback."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import logging
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
import yaml
from rich.console import Console
from rich.logging import RichHandler
from rich.table import Table

from testbed.core.errors import ScenarioError, TestbedError
from testbed.core.units import parse_duration
from testbed.results import views
from testbed.scenario.resolve import load_scenario, with_overrides
from testbed.scenario.schema import dump_scenario, json_schema

if TYPE_CHECKING:
    from testbed.core.state import RunLock, RunState

err_console = Console(stderr=True)
F = TypeVar("F", bound=Callable[..., Any])


def _friendly(fn: F) -> F:
    """Turn testbed errors into one line on stderr and the matching exit code."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from testbed.run.orchestrator import Interrupted

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
    if s.machines is not None:  # as YAML comments: the output still loads
        from testbed.scenario.partition import describe
        from testbed.scenario.resolve import machine_plan

        for line in describe(machine_plan(s), s.time_scale if s.time_scale != "auto" else 1):
            click.echo(f"# {line}")


def _refuse_machines(s: Any, source: str) -> None:
    """One run over several machines is placed (validate prints it) but not yet run, unless
    its machines are emulated here (machines.emulate, runtime netns)."""
    if s.machines is not None and not s.machines.emulate:
        raise ScenarioError(
            f"{source}: machines: a run over several machines is not built yet (only its "
            "placement: `testbed validate` prints it, and machines.emulate: true runs it on "
            "emulated machines here; docs/swarm.md); remove machines: to run it on this one"
        )


@main.command("kinds")
def kinds_() -> None:
    """List the workload kinds a scenario's `workloads:` may name (docs/scenario-reference.md
    has their fields)."""
    from testbed.workloads import kinds

    for name in kinds.names():
        click.echo(f"{name:<11} {' '.join(kinds.get(name).doc.split())}")


@main.command()
@click.option("--markdown", is_flag=True, help="the reference in docs/ instead, as Markdown")
def schema(markdown: bool) -> None:
    """Print the JSON Schema of scenario files (for editors and CI validation)."""
    if markdown:
        from testbed.scenario.reference import markdown as reference

        click.echo(reference(), nl=False)
        return
    click.echo(json.dumps(json_schema(), indent=2))


@main.command()
@click.argument("scenario")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
@_friendly
def predict(scenario: str, as_json: bool) -> None:
    """Predict each workload instance of SCENARIO that a model exists for: a training job's
    iteration time from the event model (thesis ch. 4: layer-wise backward, tensor fusion, ring
    allreduce per fused buffer at the ring's bottleneck), the job alone on the network."""
    from testbed.workloads import kinds
    from testbed.workloads.registry import load

    s = load_scenario(scenario)
    preds: dict[str, tuple[Any, dict[str, Any]]] = {}
    notes = []
    for name, w in s.workloads.items():
        kind = kinds.get(w.kind)
        if kind.predict is None:
            continue
        if kind.predictable is not None and not kind.predictable(w):
            notes.append(
                f"{name}: no prediction (a real job is predicted from the compute it states: "
                "give it compute_time or compute_to_network_ratio)"
            )
            continue
        try:
            preds[name] = (load(kind.predict.partition(":")[0]), load(kind.predict)(name, s))
        except ValueError as e:
            raise ScenarioError(f"{scenario}: {e}") from None
    if not preds:
        raise ScenarioError(
            f"{scenario}: workloads: nothing to predict (the model predicts training jobs: "
            "synthetic, or real with its compute stated)"
            + (f"; {'; '.join(notes)}" if notes else "")
        )
    if as_json:
        docs = {name: p for name, (_, p) in preds.items()}
        doc = next(iter(docs.values())) if len(docs) == 1 else {"instances": docs}
        click.echo(json.dumps(doc, indent=2))
        return
    out = Console()
    for name, (module, p) in preds.items():
        module.print_prediction(out, s.name if len(preds) == 1 else f"{s.name}, {name}", p)
    for note in notes:
        out.print(note, highlight=False)


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
@click.option(
    "--junit",
    type=click.Path(dir_okay=False, path_type=Path),
    help="write the scenario's expect: checks as JUnit XML to this file",
)
@click.option(
    "--hold",
    is_flag=False,
    flag_value="forever",
    default=None,
    metavar="[DURATION]",
    help="after the workloads (at once if there are none) keep the hosts up for your own "
    "tools (testbed exec/shell) until Ctrl-C, SIGTERM or DURATION",
)
@click.option("--no-plots", is_flag=True, help="write no plots (a sweep's runs have none)")
@_friendly
def up(
    scenario: str,
    out: Path | None,
    duration: str | None,
    seed: int | None,
    run_id: str | None,
    verbose: bool,
    junit: Path | None,
    hold: str | None,
    no_plots: bool,
) -> None:
    """Build the network of SCENARIO, run its workloads, write the run folder, tear down.

    Exit codes: 0 done (and every expect: check passed; a held run ended by Ctrl-C too), 1 the
    run failed or this machine cannot run it, 2 bad input, 3 an expect: check failed, 130
    stopped by a signal."""
    from testbed.run.orchestrator import run

    hold_s = None
    if hold is not None:
        try:
            hold_s = math.inf if hold == "forever" else parse_duration(hold)
        except ValueError as e:
            raise ScenarioError(
                f"--hold: {e}; write e.g. --hold 10m, or --hold alone (until Ctrl-C) after "
                "the scenario"
            ) from None
        if hold_s <= 0:
            raise ScenarioError("--hold: the duration must be positive, e.g. 10m")
    s = load_scenario(scenario)
    _refuse_machines(s, scenario)
    d = None
    if duration is not None:
        try:
            d = parse_duration(duration)
        except ValueError as e:
            raise ScenarioError(f"--duration: {e}") from None
    changes = {k: v for k, v in (("duration", d), ("seed", seed)) if v is not None}
    if changes:
        s = with_overrides(s, changes)
    _console_logging(verbose)
    with views.run_progress(err_console) as progress:
        ui = views.RichUI(progress)
        s, link_budget = budget_for(s, ui.phase, held=hold_s is not None)
        result = run(s, out=out, run_id=run_id, ui=ui, hold=hold_s, link_budget=link_budget)
        ui.done()
    run_dir = shown(result.run_dir)
    from testbed.core.runs import Run
    from testbed.results import report as rp

    run = Run(run_dir)
    described = rp.describe_run(run) if run.instances() else None
    if described is not None:
        rp.print_run(Console(), described)
    Console().print(f"run folder: {run_dir}")
    if not no_plots:
        plots = _plots_after_run(run_dir)
        page = _recorded(lambda out: described is not None and rp.print_run(out, described))
        _html_page(run_dir / "report.html", [run], page, plots)
    if s.expect:
        _expectations(s, run_dir, result.summary, junit)
    elif junit is not None:
        _write_junit(junit, [], s.name, run_dir)


def budget_for(s: Any, progress: Callable[[str], None], held: bool = False) -> tuple[Any, Any]:
    """This machine's link budget for the scenario's link mode (measured once per boot, as
    root), and the scenario with `time_scale: auto` resolved by it."""
    from testbed.network.preflight import require_root
    from testbed.run import budget_probe

    require_root("testbed up")
    fitted, b = budget_probe.for_run(s, progress, held)
    if s.time_scale == "auto":
        logging.getLogger("testbed").info(
            "time_scale: auto → %g (the link budget, docs/time-dilation.md)", fitted.time_scale
        )
    return fitted, b


def shown(path: Path) -> Path:
    """A run folder as the user would type it: relative when it lies under the working
    folder (the run itself uses the absolute path everywhere)."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def _write_junit(path: Path, outcomes: list[Any], suite: str, run_dir: Path) -> None:
    from testbed.scenario import expect

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(expect.junit(outcomes, suite, str(run_dir)))


def _expectations(
    s: Any, run_dir: Path, summary: dict[str, Any], junit: Path | None, keep: bool = True
) -> None:
    """Print each check with what was measured, keep them in the run folder (`up`; `report`
    leaves the folder as it is), exit 3 on any failure."""
    from testbed.scenario import expect

    outcomes = expect.verdict(s, summary)
    if keep:
        (run_dir / "expectations.json").write_text(json.dumps(expect.to_json(outcomes), indent=2))
    out = Console(highlight=False)
    for o in outcomes:
        colour = "green" if o.passed else "red"
        out.print(f"[{colour}]{o.line()}[/]", soft_wrap=True)
    if junit is not None:
        _write_junit(junit, outcomes, s.name, run_dir)
    failed = sum(not o.passed for o in outcomes)
    if failed:
        err_console.print(f"[bold red]{failed} of {len(outcomes)} expectations failed[/]")
        sys.exit(3)
    out.print(f"all {len(outcomes)} expectations passed")


def _report_expect(runs: tuple[Path, ...], expect_file: Path, junit: Path | None) -> None:
    """Checks from a file on an existing run: validated against the run's own scenario."""
    if len(runs) != 1:
        raise ScenarioError("--expect: give one RUN folder")
    run_dir = runs[0]
    summary_path, scenario_path = run_dir / "summary.json", run_dir / "scenario.yaml"
    if not summary_path.is_file() or not scenario_path.is_file():
        raise ScenarioError(f"{run_dir}: not a run folder (no summary.json and scenario.yaml)")
    if not expect_file.is_file():
        raise ScenarioError(f"--expect: {expect_file}: no such file")
    try:
        data = yaml.safe_load(expect_file.read_text())
    except yaml.YAMLError as e:
        raise ScenarioError(f"--expect: {expect_file}: not valid YAML: {e}") from None
    checks = data.get("expect") if isinstance(data, dict) else data
    if not isinstance(checks, list):
        raise ScenarioError(
            f"{expect_file}: write an expect: list, e.g. expect: ['websearch.censored == 0']"
        )
    from testbed.scenario.resolve import load_scenario_data

    base = yaml.safe_load(scenario_path.read_text())
    base.pop("expect", None)
    s = load_scenario_data({**base, "expect": checks}, str(expect_file))
    summary = json.loads(summary_path.read_text())
    _expectations(s, run_dir, summary, junit, keep=False)


def _plots_after_run(run_dir: Path) -> list[Path]:
    """Plots are a convenience: a plotting problem is reported, never fails the run."""
    from testbed.core.runs import Run
    from testbed.results import report as rp

    try:
        plots = rp.plots_for(Run(run_dir))
    except Exception as e:
        err_console.print(f"[yellow]warning:[/] plots not written: {e}")
        return []
    for p in plots:
        Console().print(f"plot: {p}")
    return plots


PAGE_WIDTH = 160  # the HTML report's columns: its tables as a wide terminal prints them


def _recorded(show: Callable[[Console], Any]) -> Console:
    """What `show` prints, recorded off screen at PAGE_WIDTH for the HTML report: the same
    printing code as the terminal's, not a second rendering of the figures."""
    page = Console(record=True, width=PAGE_WIDTH, file=io.StringIO(), force_terminal=True)
    show(page)
    return page


def _sweep_page(path: Path, name: str | None, agg: dict[str, Any], printed: Console) -> None:
    """The sweep's report as one HTML file beside sweep.json (report-NAME.html for a sweep
    named on the command line, as its plots have a folder of their own)."""
    from testbed.results import htmlpage

    r = agg["runs"]
    page = path / ("report.html" if name is None else f"report-{name}.html")
    htmlpage.write(
        page,
        f"sweep {agg['name']}",
        f"{r['ok']} of {r['points']} runs ok; {agg['compare']['axis']} compared against "
        f"{agg['compare']['baseline']!r}; testbed report {path}",
        htmlpage.terminal_html(printed),
        [Path(p) for p in agg["plots"]],
        [("sweep file (as run)", path / "sweep.yaml")],
        [],  # a flagged pair is in the verdict table, beside the verdict it weakens
    )
    Console().print(f"report: {shown(page)}")


def _html_page(path: Path, runs: list[Any], printed: Console, plots: list[Path]) -> None:
    """The runs' report as one HTML file (htmlpage.py): what `printed` printed, the plots, the
    scenarios and warnings. A convenience like the plots: a problem is reported, never fails."""
    from testbed.results import htmlpage

    first = runs[0].summary
    title = (
        f"run {first.get('run_id')} of {first.get('scenario')}"
        if len(runs) == 1
        else f"{len(runs)} runs of {first.get('scenario')} against {runs[0].path.name}"
    )
    try:
        htmlpage.write(
            path,
            title,
            f"seed {first.get('seed')}, status {first.get('status')}, "
            f"time_scale {first.get('time_scale', 1)}; testbed report {' '.join(str(r.path) for r in runs)}",
            htmlpage.terminal_html(printed),
            plots,
            [(f"scenario ({r.path.name})", r.path / "scenario.yaml") for r in runs],
            [f"{r.path.name}: {w}" if len(runs) > 1 else w
             for r in runs for w in r.summary.get("warnings") or []],
        )  # fmt: skip
    except Exception as e:
        err_console.print(f"[yellow]warning:[/] HTML report not written: {e}")
        return
    Console().print(f"report: {shown(path)}")


class _Once(logging.Filter):
    """A sweep's runs repeat the same warnings (a missing netem, say): show each once."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if msg in self.seen:
            return False
        self.seen.add(msg)
        return True


def _console_logging(verbose: bool, quiet: bool = False) -> None:
    h = RichHandler(console=err_console, show_path=False, show_time=False, markup=False)
    h.setLevel(logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO)
    if quiet:
        h.addFilter(_Once())
    lg = logging.getLogger("testbed")
    lg.addHandler(h)
    lg.setLevel(logging.DEBUG)


@main.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of tables")
@click.option("--no-plots", is_flag=True, help="do not write PNG plots")
@click.option(
    "--expect",
    "expect_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="YAML file with an expect: list of checks to evaluate on the RUN folder (exit 3 on a failure)",
)
@click.option(
    "--junit",
    type=click.Path(dir_okay=False, path_type=Path),
    help="with --expect: write the checks as JUnit XML to this file",
)
@click.option(
    "--aim",
    "aims",
    multiple=True,
    metavar="AIM",
    help="with a sweep folder: judge this aim too (as a sweep file's aims: writes it, e.g. "
    "'horovod.iteration_time_s.mean change <= 2%% (low)'); repeat for more",
)
@click.option(
    "--sweep",
    "sweep_name",
    help="a sweep folder several sweeps wrote into: report the sweep of this name "
    "(default: the last to run there)",
)
@click.option(
    "--html",
    "as_html",
    is_flag=True,
    help="also write the report as one self-contained HTML file (tables, plots inline, the "
    "scenario or sweep file, warnings) in the (first) folder: report.html",
)
@click.option(
    "--markdown",
    "as_markdown",
    is_flag=True,
    help="with a sweep folder: print its aims' verdicts as a Markdown table only (for a "
    "results page generated from the data)",
)
@_friendly
def report(
    runs: tuple[Path, ...],
    as_json: bool,
    no_plots: bool,
    expect_file: Path | None,
    junit: Path | None,
    aims: tuple[str, ...],
    sweep_name: str | None,
    as_html: bool,
    as_markdown: bool = False,
) -> None:
    """Summarise RUN folders; with several, compare them against the first (the baseline).
    Given a sweep folder, compare its runs cell by cell and draw the operating-boundary map
    (of the last sweep to run there, or --sweep NAME's). With --expect FILE, evaluate the
    checks in FILE on one RUN folder instead."""
    from testbed.core.runs import Run
    from testbed.results import aggregate as ag
    from testbed.results import report as rp

    if as_html and (as_json or expect_file is not None):
        raise ScenarioError("--html: writes the tables' report; leave out --json and --expect")
    if expect_file is not None:
        _report_expect(runs, expect_file, junit)
        return
    if junit is not None:
        raise ScenarioError("--junit: goes with --expect FILE")

    if as_markdown:
        if len(runs) != 1 or not ag.is_sweep(runs[0]) or as_json or as_html:
            raise ScenarioError(
                "--markdown: prints one sweep folder's verdicts; give one sweep folder, "
                "without --json or --html"
            )
        v = ag.verdicts(runs[0], sweep_name, list(aims))
        if not v["aims"]:
            raise ScenarioError(f"--markdown: {runs[0]} has no aims to judge: give them with --aim")
        click.echo(views.verdict_markdown(v), nl=False)
        return
    if len(runs) == 1 and ag.is_sweep(runs[0]):
        _report_sweep(runs[0], as_json, no_plots, sweep_name, list(aims), as_html)
        return
    if sweep_name is not None:
        raise ScenarioError("--sweep: goes with one sweep folder (one that has a sweep.json)")
    if aims:
        raise ScenarioError("--aim: goes with one sweep folder (one that has a sweep.json)")
    loaded = [Run(p) for p in runs]
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

    def show(out: Console) -> None:
        for r in data["runs"]:
            rp.print_run(out, r)
        if "comparison" in data:
            kinds_of = {n: k for n, k, _ in loaded[0].instances()}
            rp.print_comparison(out, data["comparison"], kinds_of)

    show(Console())
    for p in plots:
        Console().print(f"plot: {p}")
    if as_html:
        page = "report.html" if len(loaded) == 1 else "report-compare.html"
        _html_page(loaded[0].path / page, loaded, _recorded(show), plots)


def _report_sweep(
    path: Path,
    as_json: bool,
    no_plots: bool,
    name: str | None,
    aims: list[str],
    as_html: bool = False,
) -> None:
    from testbed.results.sweep import sweep_doc

    doc = sweep_doc(path, name)
    if not doc["spec"].get("compare"):
        if aims:
            raise ScenarioError("--aim: the sweep compares nothing (no compare: in its file)")
        _print_points(doc, as_json)
        return
    agg, show, why_not = _sweep_report(path, name, aims, no_plots)
    if as_json:
        click.echo(json.dumps(agg, indent=2))
        return
    show(Console())
    out = Console()
    for p in agg["plots"]:
        out.print(f"plot: {p}")
    if why_not:
        out.print(why_not)
    if as_html:
        _sweep_page(path, name, agg, _recorded(show))
    others = [n for n in agg["sweeps_in_folder"] if n != agg["name"]]
    if others:
        out.print(
            f"this folder's runs are shared with the sweeps {', '.join(others)}: "
            f"`testbed report {path} --sweep NAME` reports one of them"
        )


def _sweep_report(
    path: Path, name: str | None, aims: list[str], no_plots: bool
) -> tuple[dict[str, Any], Callable[[Console], None], str | None]:
    """A comparing sweep's aggregate (with its plots drawn and verdicts judged), the code that
    prints its tables, and why no map was drawn (None when one was)."""
    from testbed.results import aggregate as ag

    agg = ag.aggregate(path, name)
    # a sweep named on the command line draws into a folder of its own, so that reporting
    # each sweep of a shared folder keeps every sweep's plots
    plot_dir = path / "plots" if name is None else path / "plots" / name
    plots, why_not = ([], None) if no_plots else ag.plot_maps(agg, plot_dir)
    if not no_plots and (tradeoff := ag.plot_tradeoff(agg, plot_dir / "tradeoff.png")):
        plots.append(tradeoff)
    agg["plots"] = [str(p) for p in plots]
    agg["verdicts"] = ag.verdicts(path, name, aims)
    cmp = agg["compare"]
    r = agg["runs"]

    def show(out: Console) -> None:
        out.print(
            f"sweep {agg['name']}: {r['ok']} of {r['points']} runs ok, {r['failed']} failed"
            + (f", {r['not_run']} not run yet" if r["not_run"] else "")
            + f"; {cmp['axis']} compared against {cmp['baseline']!r}"
        )
        out.print(views.compare_table(agg))
        if agg["verdicts"]["aims"]:
            out.print(views.verdict_table(agg["verdicts"]))

    return agg, show, why_not


def _print_points(doc: dict[str, Any], as_json: bool) -> None:
    """A sweep that compares nothing (no `compare:`): its points' figures, as sweep.csv has
    them, one row each."""
    rows = doc["results"]
    if as_json:
        click.echo(json.dumps({"name": doc["name"], "points": rows}, indent=2))
        return
    t = views.points_table(doc)
    Console().print(t)


@main.command()
@click.argument("sweep_file", type=click.Path(path_type=Path))
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="sweep folder (default: runs/sweep-NAME); an existing one is resumed",
)
@click.option("--plots", is_flag=True, help="also write each run's plots (slower)")
@click.option(
    "--dry-run", is_flag=True, help="list the points and their measured flows; run nothing"
)
@click.option("-v", "--verbose", is_flag=True, help="show each run's log messages")
@click.option(
    "--swarm", is_flag=True, help="run the points on the nodes of this manager's Docker Swarm"
)
@click.option(
    "--only",
    multiple=True,
    metavar="AXIS=VALUE[,VALUE...]",
    help="run only the points whose AXIS has one of the VALUEs (repeat for more axes: each "
    "must hold); the file's other points stay in its record, as finished earlier or not run",
)
@click.option(
    "--budget",
    metavar="DURATION",
    help="with seeds: {until: decided}: add no round of seeds that would not end within "
    "this time, e.g. 6h (estimated from the runs already finished)",
)
@_friendly
def sweep(
    sweep_file: Path,
    out: Path | None,
    plots: bool,
    dry_run: bool,
    verbose: bool,
    swarm: bool,
    only: tuple[str, ...],
    budget: str | None,
) -> None:
    """Run every point of SWEEP_FILE (axes × paired axes × seeds), one after another.

    A run that finished before (same resolved scenario) is not run again, so an interrupted
    sweep resumes where it stopped; a failed run is recorded and the sweep goes on, and so does
    a point whose expect: checks fail (exit 3 at the end). Writes one run folder per point,
    sweep.csv and sweep.json; `testbed report OUT` aggregates them. With --only, the points
    the filters keep, and the record still holds every point of the file (report compares
    every finished one), so a long sweep can be run in parts. With `aims:`, the verdicts are
    printed at the end and kept in sweep.json; with `seeds: {until: decided}`, seeds are added
    in rounds until every aim is decided, `max` seeds ran or --budget is spent."""
    from testbed.core.units import parse_duration
    from testbed.results import sweep as sw

    spec = sw.load_spec(sweep_file)
    planned = isinstance(spec.seeds, sw.SeedPlan)
    budget_s = None
    if budget is not None:
        if not planned:
            raise ScenarioError(
                "--budget: goes with seeds: {until: decided} (a list of seeds runs whole)"
            )
        try:
            budget_s = parse_duration(budget)
        except ValueError as e:
            raise ScenarioError(f"--budget {budget}: {e} (e.g. 6h or 90min)") from None
    points = sw.expand(spec, sweep_file)
    for p in points:  # an axis may add a machines: section to some points only
        _refuse_machines(p.scenario, str(sweep_file))
    if planned:  # every seed the plan may add must resolve before the first run
        sw.expand(spec, sweep_file, spec.all_seeds())
    out = out or sw.default_out(spec)
    if dry_run:
        kept = sw.only_points(spec, points, only) if only else None
        _print_dry_run(spec, [p for p in points if kept is None or p.index in kept], out)
        return
    from testbed.network.preflight import require_root
    from testbed.run.orchestrator import run

    require_root("testbed sweep")
    _console_logging(verbose, quiet=not verbose)

    def run_one(scenario: Any, folder: Path, point_ui: Any) -> dict[str, Any]:
        scenario, link_budget = budget_for(scenario, point_ui.phase)
        result = run(scenario, out=folder, ui=point_ui, link_budget=link_budget)
        if plots:
            _plots_after_run(folder)
        return result.summary

    def run_round(points: list[Any]) -> list[Any]:
        kept = sw.only_points(spec, points, only) if only else None
        if swarm:
            from testbed.results.swarm import run as swarm_run

            with views.sweep_progress(err_console) as progress:
                outcomes = swarm_run.sweep(
                    spec, points, out, views.SwarmUI(progress),
                    lambda m: progress.console.print(m), only=kept,
                )  # fmt: skip
            if plots:
                for o in outcomes:
                    if o.status == "ok":
                        _plots_after_run(out / "runs" / o.point.folder)
            return outcomes
        with views.sweep_progress(err_console) as progress:
            return sw.run_sweep(spec, points, out, run_one, views.SweepUI(progress), kept)

    if planned:
        from testbed.results.decide import run_until_decided

        d = run_until_decided(
            spec, sweep_file, out, run_round, budget_s, err_console.print,
            keep=lambda pts: sw.only_points(spec, pts, only) if only else None,
        )  # fmt: skip
        decided = "every aim decided" + (" in the cells --only kept" if only else "")
        ended = {"decided": decided, "max": "the plan's max reached",
                 "budget": "the budget reached", "failed": "a run failed"}  # fmt: skip
        err_console.print(f"{d.seeds} seeds run: {ended[d.stopped]}")
        _sweep_done(spec, d.points, d.outcomes, out)
        return
    outcomes = run_round(points)
    _sweep_done(spec, points, outcomes, out)


def _sweep_done(spec: Any, points: list[Any], outcomes: list[Any], out: Path) -> None:
    """The sweep's last lines (its verdicts, where it has aims), and its exit: 1 if a run
    failed, 3 if a check failed."""
    from testbed.results.sweep import NOT_RUN

    ran = [o for o in outcomes if o.status in ("ok", "failed")]
    failed = [o for o in outcomes if o.status == "failed"]
    unmet = [o for o in outcomes if o.failed_checks]
    left = sum(o.status == NOT_RUN for o in outcomes)
    if spec.aims and (out / "sweep.json").is_file():
        from testbed.results.aggregate import record_verdicts

        # a seed plan's rounds recorded theirs with how they ended (decide.py)
        v = _doc(out).get("verdicts") or record_verdicts(out, spec.name)
        Console().print(views.verdict_table(v))
    if spec.compare is not None and ran and (out / "sweep.json").is_file():
        agg, show, _ = _sweep_report(out, None, [], no_plots=False)
        _sweep_page(out, None, agg, _recorded(show))
    Console().print(
        f"sweep {spec.name}: {len(points)} points, {len(ran)} run now "
        f"({len(outcomes) - len(ran) - left} finished earlier"
        + (f", {left} left out by --only" if left else "")
        + f"), {len(failed)} failed"
        + (f", {len(unmet)} failed their expect: checks" if unmet else "")
        + f"; results in {out}/sweep.csv — aggregate with `testbed report {out}`"
    )
    if failed:
        sys.exit(1)
    if unmet:
        sys.exit(3)


def _doc(out: Path) -> dict[str, Any]:
    return dict(json.loads((out / "sweep.json").read_text()))


def _print_dry_run(spec: Any, points: list[Any], out: Path) -> None:
    """Each point's length on this machine's clock, and what its instances plan to measure
    (a kind's report module may say, through `planned`: web-search counts its flows); then
    what the sweep would cost at the wall time of the runs already finished in `out`."""
    from testbed.workloads import kinds
    from testbed.workloads.registry import load

    planned: list[dict[str, int]] = []
    for p in points:
        counts: dict[str, int] = {}
        for name, w in p.scenario.workloads.items():
            ref = kinds.get(w.kind).report
            hook = getattr(load(ref), "planned", None) if ref else None
            if hook is not None:
                for what, n in hook(name, p.scenario).items():
                    counts[what if len(p.scenario.workloads) == 1 else f"{name} {what}"] = n
        planned.append(counts)
    columns = list(dict.fromkeys(c for counts in planned for c in counts))
    loads = [_budget_load(p.scenario) for p in points]
    t = Table(title=f"sweep {spec.name}: {len(points)} runs")
    for col in ("#", "point", "duration", "real time", "budget load", *columns):
        t.add_column(col, justify="right" if col != "point" else "left")
    cells: dict[tuple[str, ...], dict[str, int]] = {}
    total_s = 0.0
    for p, counts, at in zip(points, planned, loads, strict=True):
        cell = cells.setdefault(tuple(v for k, v in p.labels.items() if k != "seed"), {})
        for c, n in counts.items():
            cell[c] = cell.get(c, 0) + n
        real = _real_time(p.scenario)  # a dilated run takes time_scale × its duration
        total_s += real or 0.0
        shown_real = views.fmt_duration(real) if real is not None else "auto: at the run"
        shown_load = "–" if at is None else f"{at[0]:.2f}" + (" over" if at[0] > 1 else "")
        t.add_row(str(p.index), p.title, f"{p.scenario.duration:g} s", shown_real, shown_load,
                  *(str(counts.get(c, "–")) for c in columns))  # fmt: skip
    Console().print(t)
    _print_loads(points, loads)
    for c in columns:  # the thinnest cell of each count, over its seeds
        fewest = min(cells.items(), key=lambda kv: kv[1].get(c, 0))
        Console().print(
            f"fewest {c} measured in one cell over its seeds: {fewest[1].get(c, 0)} "
            f"({', '.join(fewest[0])})"
        )
    Console().print(
        f"{views.fmt_duration(total_s)} of run time on this machine's clock in all (setup, drain "
        "and teardown come on top)"
    )
    _print_cost(spec, points, out)


def _print_cost(spec: Any, points: list[Any], out: Path) -> None:
    """The expected cost from the points already run in `out` (their mean wall time, setup
    and teardown included): of what is left, and for a seed plan at its min and its max."""
    from testbed.results.decide import mean_wall
    from testbed.results.sweep import SeedPlan, finished_runs

    per_run = mean_wall(out)
    if per_run is None:
        Console().print(f"no run finished in {out} yet: the cost is known after the first")
        return
    done = finished_runs(out / "runs")
    left = sum(p.identity not in done for p in points)
    cells = len(points) // max(len(spec.seed_list()), 1)  # runs a seed adds
    line = (
        f"at {views.fmt_duration(per_run)} a run (the mean of {len(done)} finished in {out}): "
        f"{left} of {len(points)} runs left, about {views.fmt_duration(left * per_run)}"
    )
    if isinstance(spec.seeds, SeedPlan):
        most = cells * spec.seeds.max - (len(points) - left)
        line += (
            f"; up to max {spec.seeds.max} seeds {max(most, 0)} runs more, about "
            f"{views.fmt_duration(max(most, 0) * per_run)}"
        )
    Console().print(line)


def _budget_load(s: Any) -> tuple[float, float | None, list[str]] | None:
    """A point's link-budget load (over 1: more than this machine carries, the run's figures
    may bend and the report flags its pairs), the time_scale that fits, and the kinds whose
    CPU is left out (not probed since this boot); None where no budget is kept since boot."""
    from testbed.scenario import budget

    b = budget.cached(s.topology.link_mode)
    if b is None:
        return None
    s = budget.with_fitting_scale(s, b)
    a = budget.assess(s, b)
    unpriced = [k for k in budget.probed_kinds(s) if k not in b.kind_costs]
    return a["load"], a["fitting_time_scale"], unpriced


def _print_loads(points: list[Any], loads: list[Any]) -> None:
    """One line on the points' budget loads: how many are over and the time_scale that fits
    them, or why no load is shown (found 2026-12-08: a committed sweep whose every pair ran at
    load 1.46 was seen only in its report)."""
    known = [x for x in loads if x is not None]
    if not known:
        Console().print(
            "budget load: this machine's link budget is not measured since boot (`testbed up` "
            "of a scenario that needs it measures it and keeps it until the next boot)"
        )
        return
    if len(known) < len(loads):
        Console().print(
            "budget load: – where the point's topology.link_mode has no budget measured since boot"
        )
    over = [x for x in known if x[0] > 1]
    if over:
        fits = [x[1] for x in over if x[1] is not None]
        Console().print(
            f"budget load: {len(over)} of {len(points)} runs ask more than this machine carries "
            "(load over 1): their figures may bend and the report flags their pairs"
            + (f"; time_scale {max(fits):g} fits them all" if fits else "")
        )
    unpriced = sorted({k for x in known for k in x[2]})
    if unpriced:
        Console().print(
            f"budget load: the CPU of {', '.join(unpriced)} is left out (not probed since boot)"
        )


def _real_time(s: Any) -> float | None:
    """A point's run time on this machine's clock; `time_scale: auto` by the link budget kept
    since this boot (None: not measured yet, so not known until the point runs)."""
    from testbed.scenario import budget
    from testbed.scenario.dilation import wall_duration

    if s.time_scale == "auto":
        b = budget.cached(s.topology.link_mode)
        if b is None:
            return None
        s = budget.with_fitting_scale(s, b)
    return wall_duration(s)


@main.command("cluster")
@click.option(
    "--probe", is_flag=True, help="also probe each node's kernel (pulls the runner image)"
)
@_friendly
def cluster_(probe: bool) -> None:
    """Show the Docker Swarm this machine manages: its nodes, which can run sweep points, and
    which point runs where (`testbed sweep FILE --swarm` runs them; docs/swarm.md)."""
    from testbed.results.swarm import cluster, dispatch
    from testbed.results.swarm.image import Registry, runner_image

    c = cluster.client()
    manager = cluster.manager_address(c)
    nodes = cluster.nodes(c)
    kernels: dict[str, dict[str, Any]] = {}
    if probe:
        usable = [n for n in nodes if n.usable]
        with Registry(manager) as registry:
            ref = registry.push(c, runner_image(c, click.echo), click.echo)
            kernels = dispatch.probe_nodes(c, ref, dispatch.new_sweep_id(), usable)
    running = {r["node"]: r for r in cluster.points_running(c) if r["state"] == "running"}
    t = Table(title=f"swarm managed from {manager}")
    for col in (
        "node",
        "role",
        "state",
        "availability",
        "CPUs",
        "address",
        "can run points",
        "running",
    ):
        t.add_column(col)
    for n in nodes:
        k = kernels.get(n.id)
        can = "yes" if n.usable else "no (not ready and active)"
        if k is not None:
            can = (
                "yes"
                if not k.get("error") and not k.get("missing")
                else (k.get("error") or f"no: lacks {', '.join(k['missing'])}")
            )
        r = running.get(n.id)
        t.add_row(n.hostname, n.role, n.state, n.availability, f"{n.cpus:g}", n.address, can,
                  f"sweep {r['sweep']} #{r['point']} ({r['folder']})" if r else "–")  # fmt: skip
    Console().print(t)


@main.group()
def images() -> None:
    """The docker runtime's node image (built here, without a registry)."""


@images.command("build")
@click.option("--base", help="base image (default: a Debian bookworm root made with debootstrap)")
@click.option("--force", is_flag=True, help="rebuild even when the tagged image exists")
@_friendly
def images_build(base: str | None, force: bool) -> None:
    """Build the node image: Debian bookworm, Python, torch (CPU), Horovod and testbed itself.
    The tag carries a hash of what went in, so an unchanged image is not rebuilt."""
    from testbed.network.images import build_images
    from testbed.network.preflight import require_root
    from testbed.network.runtime.engine import client

    require_root("testbed images build")
    engine = client()
    try:
        r = build_images(engine, base=base, force=force, progress=click.echo)
    finally:
        engine.close()
    what = f"built in {r.seconds:.0f} s" if r.built else "up to date"
    click.echo(f"{r.tag}: {what}, {r.size_mb:.0f} MB")


def _down_recorded(st: RunState, force: bool) -> tuple[int, bool]:
    """One run with a state file: torn down unless it is alive (--force stops it first);
    one its guardian is tearing down is waited for. (runs cleaned, whether something failed)"""
    from testbed.core.state import RunLock

    lock = RunLock(st.run_id)
    if st.alive():
        if not force:
            click.echo(
                f"run {st.run_id} is live (pid {st.pid}); left alone (stop it, or use --force)"
            )
            return 0, False
        click.echo(
            f"run {st.run_id} is live: sending SIGTERM to pid {st.pid} and waiting for its teardown"
        )
        with contextlib.suppress(ProcessLookupError):
            os.kill(st.pid, signal.SIGTERM)
    elif lock.held_elsewhere():
        click.echo(f"run {st.run_id} is being torn down by its guardian; waiting for it")
    # whoever holds the lock is tearing the run down: never a second teardown beside it
    if not lock.acquire(timeout=60):
        click.echo(
            f"run {st.run_id}: still being torn down after 60 s; left alone, try again",
            err=True,
        )
        return 0, True
    try:
        return _down_locked(st, lock)
    finally:
        lock.release(unlink=not st.path.exists())  # a no-op when end_run released it
        # the guardian lets go of the lock a moment before its process ends
        if not st.wait_for_guardian(timeout=10):
            click.echo(
                f"run {st.run_id}: its guardian (pid {st.guardian_pid}) is still running",
                err=True,
            )


def _down_locked(st: RunState, lock: RunLock) -> tuple[int, bool]:
    """The ending of a dead run (ending.py), its lock held; the record read again under it."""
    from testbed.core.state import RunState
    from testbed.run.ending import end_run

    try:
        now = RunState.load(st.path)
    except (OSError, ValueError, TypeError):
        click.echo(f"run {st.run_id} ({st.scenario}) was torn down by its own process")
        return 1, False
    if not now.same_run(st) or now.alive():
        return 0, False  # the id names another run now, or its owner lives after all
    ending = end_run(now, lock)
    for p in ending.problems:
        click.echo(f"run {st.run_id}: {p}", err=True)
    if ending.problems:
        return 0, True
    containers = sum(1 for o in now.objects if o["kind"] == "container")
    click.echo(
        f"removed run {now.run_id} ({now.scenario}): {len(now.namespaces())} namespaces, "
        f"{sum(1 for o in now.objects if o['kind'] == 'link')} host-side links"
        + (f", {containers} containers" if containers else "")
    )
    return 1, False


def _down_labelled(wanted: set[str]) -> tuple[int, bool]:
    """What a runtime finds by its own labels (containers carry their run id): a run whose
    state file is gone still has those found, and only those testbed labelled."""
    from testbed.network.runtime import registry as runtimes

    cleaned, failed = 0, False
    for kind in runtimes.RUNTIMES.values():
        for rid, names in kind.orphans().items():
            if wanted and rid not in wanted:
                continue
            problems = kind.remove_orphans(rid)
            for p in problems:
                click.echo(f"run {rid}: {p}", err=True)
            failed = failed or bool(problems)
            cleaned += not problems
            click.echo(
                f"removed {len(names)} {kind.name} object(s) of run {rid} found by label: "
                f"{' '.join(sorted(names))}"
            )
    return cleaned, failed


def _down_strays(wanted: set[str]) -> tuple[int, bool]:
    """Namespaces (of every role) and root-namespace interfaces named as testbed names them,
    of runs without a state file (lost with its run): every object is recorded before it
    exists, so no run that has one can own them. Still, down deletes what a record names:
    these it reports, and removes only for a run the user names (a dead probe's carries its
    process id, so it is removed)."""
    from testbed.network.runtime import registry as runtimes

    cleaned, failed = 0, False
    for rid, names in runtimes.strays().items():
        if wanted and rid not in wanted:
            continue
        if rid and not wanted:
            click.echo(
                f"run {rid} has no state file, but its objects are still here (left alone; "
                f"`testbed down {rid}` removes them): {' '.join(sorted(names))}"
            )
            continue
        whose = (
            f"run {rid}, which has no state file" if rid else "kernel probes whose process is gone"
        )
        problems = runtimes.remove_strays(rid, names)
        for p in problems:
            click.echo(f"{whose}: {p}", err=True)
        failed = failed or bool(problems)
        if not problems:
            cleaned += 1
            click.echo(f"removed {len(names)} object(s) of {whose}: {' '.join(sorted(names))}")
    return cleaned, failed


@main.command()
@click.option("--force", is_flag=True, help="also stop runs whose orchestrator is still alive")
@click.argument("run_ids", nargs=-1, metavar="[RUN_ID]...")
@_friendly
def down(force: bool, run_ids: tuple[str, ...]) -> None:
    """Remove everything earlier runs left behind (after kill -9, a crash, a reboot of testbed);
    only the runs RUN_ID... when given (`testbed status` lists them).

    Only objects recorded in a run's state file are touched, containers that carry testbed's
    labels and names for a run that is not alive, and namespaces and interfaces named as
    testbed names them for a run that has no state file. Idempotent."""
    from testbed.core.state import all_states
    from testbed.network.preflight import require_root

    require_root("testbed down")
    wanted = set(run_ids)
    cleaned, failed = 0, False
    for st in all_states():
        if not wanted or st.run_id in wanted:
            done, bad = _down_recorded(st, force)
            cleaned, failed = cleaned + done, failed or bad
    for done, bad in (_down_labelled(wanted), _down_strays(wanted)):
        cleaned, failed = cleaned + done, failed or bad
    if not cleaned and not failed:
        click.echo("nothing to remove")
    elif cleaned:
        click.echo(f"cleaned {cleaned} run(s)")
    if failed:
        sys.exit(1)


@main.command(
    "exec", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)
@click.option("--run", "run_id", help="the run (default: the only live one)")
@click.argument("host")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@_friendly
def exec_(run_id: str | None, host: str, command: tuple[str, ...]) -> None:
    """Run COMMAND inside HOST of a live run: `testbed exec h1 -- iperf3 -c h2`.

    Its input, output and exit status are the command's own. An argument that is exactly a
    host's name stands for that host's data address. Teardown ends whatever it started."""
    from testbed.run.access import run_in_host

    cmd = list(command)
    if cmd[:1] == ["--"]:  # click keeps the separator among unprocessed arguments
        cmd = cmd[1:]
    run_in_host(run_id, host, cmd)


@main.command()
@click.option("--run", "run_id", help="the run (default: the only live one)")
@click.argument("host")
@_friendly
def shell(run_id: str | None, host: str) -> None:
    """An interactive shell inside HOST of a live run (exit it to come back)."""
    from testbed.run.access import run_in_host

    run_in_host(run_id, host, [], shell=True)


@main.command()
@_friendly
def status() -> None:
    """List runs that exist on this machine (live, or dead and awaiting `testbed down`)."""
    from testbed.core.state import RunLock, all_states

    states = all_states()
    if not states:
        click.echo("no runs")
        return
    t = Table()
    for col in (
        "run id", "scenario", "runtime", "state", "phase", "pid", "started", "hosts", "run folder"
    ):  # fmt: skip
        t.add_column(col)
    for st in states:
        if st.alive():
            state = "[green]live[/]"
        elif RunLock(st.run_id).held_elsewhere():
            state = "[yellow]dead[/], its guardian is tearing it down"
        else:
            state = "[red]dead[/] (testbed down)"
        t.add_row(
            st.run_id,
            st.scenario,
            st.runtime,
            state,
            st.phase,
            str(st.pid),
            time.strftime("%H:%M:%S", time.localtime(st.started_at)),
            str(max(0, len(st.namespaces()) - 1)),
            st.out_dir,
        )
    Console().print(t)
    for st in states:
        if not st.alive() or not st.hosts:
            continue
        h = Table(title=f"run {st.run_id}: hosts ({st.runtime})", title_justify="left")
        for col in ("host", "data address", "management address"):
            h.add_column(col)
        for x in st.hosts:
            h.add_row(x["name"], x["data_ip"], x["mgmt_ip"])
        Console().print(h)
        click.echo(
            f"reach a host: testbed exec --run {st.run_id} HOST -- CMD, or testbed shell "
            f"--run {st.run_id} HOST"
        )


def entry() -> None:
    """The `testbed` command (and `python -m testbed.cli`): `main`, then a prompt exit.

    Finalizing the interpreter (clearing the modules of pydantic, pyroute2, rich and their
    objects) took 0.15-0.2 s after every command, a tenth of a short `up`. By then the command
    has released everything it made (the run's teardown and state file, its log handlers), so
    the process flushes its output and leaves without it. An exception that escapes `main`
    (a bug: testbed's own errors end in SystemExit) still ends the normal way, with its
    traceback."""
    try:
        main()
    except SystemExit as e:
        code = e.code
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code or 0)


if __name__ == "__main__":
    entry()
