"""The life cycle of one run: claim → preflight → the live run (live.py: build → shape →
start → run → collect) → tear down → the summary in scenario time.

Teardown runs on every exit path (success, failure, Ctrl-C, SIGTERM, SIGHUP), with those
signals ignored while it works, so a second Ctrl-C cannot leave half a network behind. A run
killed with SIGKILL is torn down by its guardian (guardian.py); if even that fails, the state
file stays and `testbed down` finishes the job.
"""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from testbed.core import hostcpu
from testbed.core.errors import RunFailure, ScenarioError, TestbedError
from testbed.core.state import RunLock, RunState, all_states, claiming
from testbed.core.stopping import Interrupted, StopFlag, checkpoint, signals_flag, signals_ignored
from testbed.core.units import format_rate
from testbed.network import preflight
from testbed.network.runtime import registry as runtimes
from testbed.run.ending import end_run
from testbed.run.live import UI, LiveRun, QuietUI, devices
from testbed.scenario import budget, dilation, expect
from testbed.scenario.budget import Budget
from testbed.scenario.resolve import wall_scenario
from testbed.scenario.schema import Scenario, dump_scenario
from testbed.scenario.topology import build_plan, names_for, new_run_id, valid_run_id

log = logging.getLogger("testbed")


@dataclass
class RunResult:
    run_dir: Path
    run_id: str
    summary: dict[str, Any] = field(default_factory=dict)


def default_run_dir(s: Scenario, run_id: str) -> Path:
    return Path("runs") / f"{s.name}-{datetime.now():%Y%m%d-%H%M%S}-{run_id}"


def check_run_id(run_id: str) -> None:
    """Refuse an id whose names exist (namespaces, the management bridge) or whose state file
    another run holds. Call under `claiming()`; the state file's exclusive creation is what
    finally decides."""
    if not valid_run_id(run_id):
        raise ScenarioError(f"--run-id: {run_id!r} must be 6 lowercase hex digits, e.g. 3fa9c1")
    n = names_for(run_id)
    held = [f"state of run {st.run_id}" for st in all_states() if st.run_id == run_id]
    if RunLock(run_id).held_elsewhere():
        held.append(f"lock of run {run_id}")
    held += runtimes.namespaces_named(n["prefix"])
    if Path(f"/sys/class/net/{n['mgmt_bridge']}").exists():
        held.append(n["mgmt_bridge"])
    if held:
        raise ScenarioError(
            f"--run-id: names of run {run_id} are held by another run ({', '.join(held)}); "
            "pick another id, or run `testbed down` if that run is dead"
        )


class Claim:
    """A run id this process owns: its state file (created exclusively), the lock on it, and
    the guardian that tears the run down should this process die first."""

    def __init__(self, state: RunState, lock: RunLock, run_dir: Path) -> None:
        self.state, self.lock, self.run_dir = state, lock, run_dir
        self.guardian: subprocess.Popen[bytes] | None = None

    def start_guardian(self) -> None:
        self.guardian = subprocess.Popen(
            [sys.executable, "-m", "testbed.run.guardian", self.state.run_id,
             str(self.state.pid), str(self.state.pid_start)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,  # not in the terminal's process group: Ctrl-C misses it
        )  # fmt: skip
        self.state.guardian_pid = self.guardian.pid
        self.state.save()

    def release(self) -> None:
        """The end of the run in this process: whatever is still recorded is torn down (a
        failure before the network phase can leave the probe's record), the state file goes
        when nothing is left, then the lock; the guardian, finding no state, exits."""
        if self.state.path.exists():
            for p in end_run(self.state, self.lock).problems:
                log.error("teardown: %s", p)
        else:
            self.lock.release(unlink=True)
        if self.guardian is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.guardian.wait(timeout=5)


def claim(s: Scenario, run_id: str | None, out: Path | None) -> tuple[Scenario, Claim]:
    """Take a run id (the given one, or a fresh random one) and the management prefix,
    atomically with respect to other `up`s on this machine, and start the run's guardian.
    Returns the scenario with the prefixes it will use."""
    with claiming():
        given = run_id is not None
        for _ in range(100):
            rid = run_id if given else new_run_id()
            assert rid is not None
            try:
                check_run_id(rid)
            except ScenarioError:
                if given:
                    raise
                continue
            lock = RunLock(rid)
            if not lock.acquire(0):
                if given:
                    raise ScenarioError(
                        f"--run-id: run {rid} is held by another process; pick another id"
                    )
                continue
            try:
                s = preflight.check_prefixes(s)
                # absolute from here on: Prometheus resolves its config's paths against the
                # config's folder, containers and the guardian have other working folders
                run_dir = (out or default_run_dir(s, rid)).resolve()
                state = RunState(
                    run_id=rid,
                    scenario=s.name,
                    out_dir=str(run_dir),
                    runtime=s.runtime,
                    root_prefixes=[str(s.topology.management_prefix)],
                )
                if not state.create():
                    raise ScenarioError(
                        f"--run-id: run {rid} has a state file already; "
                        "pick another id, or run `testbed down` if that run is dead"
                    )
            except BaseException:
                lock.release(unlink=True)  # refused: leave no lock file either
                raise
            break
        else:
            raise ScenarioError("--run-id: no free run id found; run `testbed down`")
    c = Claim(state, lock, run_dir)
    try:
        c.start_guardian()
    except BaseException:
        c.release()
        raise
    return s, c


def _attach_log(run_dir: Path) -> logging.Handler:
    h = logging.FileHandler(run_dir / "testbed.log")
    h.setLevel(logging.DEBUG)
    h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("testbed").addHandler(h)
    logging.getLogger("testbed").setLevel(logging.DEBUG)
    return h


def prepare(s: Scenario, out: Path | None, run_id: str | None) -> tuple[Scenario, Claim]:
    """Every check that can refuse the run, then the claim of its id and prefixes. Nothing
    but the claim (state file, lock, guardian) exists afterwards; `Claim.release` ends it."""
    preflight.require_root("testbed up")
    preflight.require_binaries(s)
    preflight.check_workloads(s)
    preflight.tcp_congestion(s)
    preflight.tcp_rto_min(s)
    preflight.tcp_rto_initial(s)
    preflight.tcp_recovery(s)
    if run_id is not None and not valid_run_id(run_id):
        raise ScenarioError(f"--run-id: {run_id!r} must be 6 lowercase hex digits, e.g. 3fa9c1")
    if out is not None and out.exists() and any(out.iterdir()):
        raise ScenarioError(f"--out: {out} exists and is not empty; choose a new folder")
    return claim(s, run_id, out)


def run(
    s: Scenario,
    out: Path | None = None,
    run_id: str | None = None,
    ui: UI | None = None,
    hold: float | None = None,
    link_budget: Budget | None = None,
) -> RunResult:
    """One run. `hold` (seconds, math.inf for until a signal): after the workloads, or at once
    when there are none, keep the network up for the user's own tools (`testbed exec`).
    `link_budget`: this machine's (budget_probe.py; `up` and `sweep` measure it): the run
    warns when the scenario asks more, records `link_budget`, and resolves `time_scale:
    auto`; without it the summary's `link_budget` is null."""
    ui = ui or QuietUI()
    if link_budget is not None:
        s = budget.with_fitting_scale(s, link_budget, hold is not None)
    if s.time_scale == "auto":
        raise ScenarioError(
            "time_scale: auto needs this machine's link budget: `testbed up` and `testbed "
            "sweep` measure it (or give a number)"
        )
    with signals_flag() as stop:
        s, c = prepare(s, out, run_id)
        try:
            return _claimed(s, c, ui, stop, hold, link_budget)
        finally:
            with signals_ignored():
                c.release()


def _claimed(
    s: Scenario, c: Claim, ui: UI, stop: StopFlag, hold: float | None, b: Budget | None
) -> RunResult:
    """`s` is the scenario in its own units; the machine runs its dilated twin (`wall`, the
    same when time_scale is 1) and the summary and records come back in scenario time."""
    state, run_id, run_dir = c.state, c.state.run_id, c.run_dir
    k = float(s.time_scale)
    wall = wall_scenario(s)

    def progress(line: str) -> None:
        checkpoint()  # building a node image takes minutes: Ctrl-C must not wait for it
        ui.phase(line)

    prepared = runtimes.get(s.runtime).prepare(wall, run_id, progress)
    stop.check()
    ui.phase("probing kernel")
    state.set_phase("probing kernel")
    caps = preflight.kernel_capabilities(state)
    preflight.require_bpf(s, caps)
    stop.check()
    warnings: list[str] = preflight.check_workloads(s) + preflight.kernel_warnings(
        caps, hostcpu.backlog_limit()
    )
    fit = budget.assess(s, b, hold is not None) if b is not None else None
    if fit is not None and (w := budget.warning(s, fit)):
        warnings.append(w)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "scenario.yaml").write_text(dump_scenario(s))
    handler = _attach_log(run_dir)
    for w in warnings:
        log.warning(w)
    result = RunResult(run_dir, run_id)
    log.info("run %s of scenario %s → %s", run_id, s.name, run_dir)
    if k != 1:
        log.info(
            "time_scale %g: links at %s, the run takes %.0f s on this machine's clock",
            k, format_rate(wall.topology.link_rate), dilation.wall_duration(s),
        )  # fmt: skip
    status, error = "ok", None
    try:
        result.summary = _live(wall, c, caps.has("netem"), ui, warnings, stop, prepared, hold, k)
    except Interrupted as e:
        status, error = "interrupted", f"stopped by {e.signame}"
        log.warning("run %s: %s; tearing down", run_id, error)
    except ScenarioError as e:  # refused on what the run measured first (admission)
        status, error = "refused", str(e)
        log.error("run %s refused: %s", run_id, e)
    except TestbedError as e:
        status, error = "failed", str(e)
        log.error("run %s failed: %s", run_id, e)
    except Exception as e:
        status, error = "failed", f"{type(e).__name__}: {e}"
        log.exception("run %s failed unexpectedly", run_id)
    finally:
        with signals_ignored():
            problems, t_teardown = _teardown(state, ui)
    summary = _in_scenario_time(s, result.summary, run_id, run_dir)
    summary.update(status=status, error=error, warnings=warnings, teardown_s=round(t_teardown, 3),
                   link_budget=fit)  # fmt: skip
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    logging.getLogger("testbed").removeHandler(handler)
    handler.close()
    result.summary = summary
    if status == "interrupted":
        raise Interrupted(error or "")
    if status == "failed":
        raise RunFailure(f"{error} (run folder: {run_dir})")
    if status == "refused":
        raise ScenarioError(error or "")
    if problems:
        raise RunFailure(f"teardown incomplete: {'; '.join(problems)}; run `testbed down`")
    return result


def _teardown(state: RunState, ui: UI) -> tuple[list[str], float]:
    """Everything the run's state file records, removed; the file too when that worked.
    (what could not be removed, seconds it took)"""
    ui.phase("tearing down")
    state.set_phase("tearing down")
    ending = end_run(state, None)  # the lock is released with the claim, after the summary
    for p in ending.problems:
        log.error("teardown: %s", p)
    log.info("teardown took %.2f s%s", ending.seconds, " (incomplete)" if ending.problems else "")
    return ending.problems, ending.seconds


def _in_scenario_time(
    s: Scenario, wall: dict[str, Any], run_id: str, run_dir: Path
) -> dict[str, Any]:
    """The summary (and the run's records) in scenario time; a run that ended before it had
    one gets what it was."""
    k = s.time_scale
    if not wall:
        return {"scenario": s.name, "run_id": run_id, "runtime": s.runtime,
                "duration_s": s.duration, "time_scale": k}  # fmt: skip
    summary = dilation.scenario_summary(wall, k, expect.template_for(s))
    dilation.scenario_records(run_dir, k, dilation.record_files(s))
    return summary


def _live(
    s: Scenario,
    c: Claim,
    netem: bool,
    ui: UI,
    warnings: list[str],
    stop: StopFlag,
    image: str | None,
    hold: float | None = None,
    time_scale: float = 1.0,
) -> dict[str, Any]:
    """One run of `s` in wall-clock units, its summary in the same units; `time_scale` is what
    the node programs and the exporters need to report their durations and rates in scenario
    time. With `hold`, the network stays up after the workloads (or without any) until the
    hold ends."""
    topo = build_plan(s, c.state.run_id)
    rt = runtimes.get(s.runtime).create(topo, c.state, s, c.run_dir, image, devices(s), time_scale)
    live = LiveRun(s, topo, rt, c.state, c.run_dir, ui, stop, warnings, time_scale)
    try:
        live.build()
        live.shape(netem)
        live.start_metrics()
        if live.workloads or hold is None:
            live.run_workloads()
        else:
            live.hold_only(hold)
        summary = live.summary()
        if hold is not None and live.m.held is None:
            live.hold(hold)
            summary["hold"] = live.m.held
        return summary
    finally:
        live.close()
