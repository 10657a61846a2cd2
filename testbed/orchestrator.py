"""The life cycle of one run: claim → preflight → build → shape → start → run → collect →
tear down.

Teardown runs on every exit path (success, failure, Ctrl-C, SIGTERM, SIGHUP), with those
signals ignored while it works, so a second Ctrl-C cannot leave half a network behind. A run
killed with SIGKILL is torn down by its guardian (guardian.py); if even that fails, the state
file stays and `testbed down` finishes the job.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from testbed import dilation, expect, hostcpu, preflight, tcpstats
from testbed.errors import RunFailure, ScenarioError, TestbedError
from testbed.metrics.session import MetricsSession
from testbed.namespaces import NETNS_DIR
from testbed.resolve import wall_scenario
from testbed.runtime import registry as runtimes
from testbed.runtime.base import Runtime
from testbed.scenario import Scenario, dump_scenario
from testbed.shaping.apply import apply_plans
from testbed.shaping.plan import InterfacePlan, LinkSpec, plan_links
from testbed.shaping.stats import over_cap
from testbed.state import RunLock, RunState, all_states, claiming
from testbed.stopping import Interrupted, StopFlag, checkpoint, signals_flag, signals_ignored
from testbed.topology import TopologyPlan, build_plan, names_for, new_run_id, valid_run_id
from testbed.units import format_rate
from testbed.window import Window
from testbed.workloads import kinds
from testbed.workloads.controller import Context
from testbed.workloads.registry import load

log = logging.getLogger("testbed")
START_MARGIN_S = 0.25  # between "go" and t0: every waiting process polls its go file at 100 Hz
READY_TIMEOUT_S = 180.0  # imports and Horovod's rendezvous on a busy 2-core machine
POLL_S = 0.5


class Workload(Protocol):
    """What the orchestrator needs of a workload instance's controller
    (workloads/controller.py writes the life cycle once for every kind)."""

    name: str  # the instance's, as in `workloads:`
    kind: str

    def targets(self) -> list[str]: ...  # its exporters' management addresses (ADDR:PORT)
    def launch(self) -> None: ...  # start the node processes; they initialise, then wait
    def ready(self) -> tuple[int, int]: ...  # (processes ready, processes to wait for)
    def go(self, window: Window) -> None: ...  # the common t0 and the measured window
    def draining(self) -> bool: ...  # after the run: still waiting for in-window work to end
    def finish(self) -> None: ...  # the run is over: start no new work, keep exporters up
    def progress(self) -> str: ...  # a few words for the live display ("12 iterations")
    def check(self) -> None: ...  # raise RunFailure if a process died before its time
    def collect(self) -> dict[str, Any]: ...  # after the run: stop, merge records, summarise
    def warnings(self, section: dict[str, Any]) -> list[str]: ...  # what its section says is off
    def metric_queries(self, section: dict[str, Any]) -> list[tuple[str, str, str, Any]]: ...
    def stop(self) -> None: ...  # idempotent; on any exit path


class UI(Protocol):
    def phase(self, name: str) -> None: ...
    def running(self, elapsed: float, total: float, info: str) -> None: ...


class QuietUI:
    def phase(self, name: str) -> None:
        pass

    def running(self, elapsed: float, total: float, info: str) -> None:
        pass


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
    held += [p.name for p in NETNS_DIR.glob(f"{n['prefix']}*")] if NETNS_DIR.is_dir() else []
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
            [sys.executable, "-m", "testbed.guardian", self.state.run_id,
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
        st = self.state
        if st.path.exists():
            problems = runtimes.teardown(st) if st.objects else []
            if problems:
                for p in problems:
                    log.error("teardown: %s", p)
            else:
                st.remove()
        self.lock.release(unlink=not st.path.exists())
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
) -> RunResult:
    """One run. `hold` (seconds, math.inf for until a signal): after the workloads, or at once
    when there are none, keep the network up for the user's own tools (`testbed exec`)."""
    ui = ui or QuietUI()
    with signals_flag() as stop:
        s, c = prepare(s, out, run_id)
        try:
            return _claimed(s, c, ui, stop, hold)
        finally:
            with signals_ignored():
                c.release()


def _claimed(s: Scenario, c: Claim, ui: UI, stop: StopFlag, hold: float | None) -> RunResult:
    """`s` is the scenario in its own units; the machine runs its dilated twin (`wall`, the
    same when time_scale is 1) and the summary and records come back in scenario time."""
    state, run_id, run_dir = c.state, c.state.run_id, c.run_dir
    k = s.time_scale
    wall = wall_scenario(s)

    def progress(line: str) -> None:
        checkpoint()  # building a node image takes minutes: Ctrl-C must not wait for it
        ui.phase(line)

    prepared = runtimes.get(s.runtime).prepare(wall, run_id, progress)
    stop.check()
    ui.phase("probing kernel")
    state.set_phase("probing kernel")
    caps = preflight.kernel_capabilities(state)
    stop.check()
    warnings: list[str] = preflight.check_workloads(s)
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
        result.summary = _live(
            wall, run_id, run_dir, state, caps.has("netem"), ui, warnings, stop, prepared, hold, k
        )
    except Interrupted as e:
        status, error = "interrupted", f"stopped by {e.signame}"
        log.warning("run %s: %s; tearing down", run_id, error)
    except TestbedError as e:
        status, error = "failed", str(e)
        log.error("run %s failed: %s", run_id, e)
    except Exception as e:
        status, error = "failed", f"{type(e).__name__}: {e}"
        log.exception("run %s failed unexpectedly", run_id)
    finally:
        with signals_ignored():
            ui.phase("tearing down")
            state.set_phase("tearing down")
            t0 = time.monotonic()
            problems = runtimes.teardown(state)
            t_teardown = time.monotonic() - t0
            if problems:
                for p in problems:
                    log.error("teardown: %s", p)
            else:
                state.remove()
            log.info(
                "teardown took %.2f s%s",
                t_teardown,
                "" if not problems else " (incomplete)",
            )
    if result.summary:
        summary = dilation.scenario_summary(result.summary, k, expect.template_for(s))
        dilation.scenario_records(run_dir, k, dilation.record_files(s))
    else:
        summary = {
            "scenario": s.name,
            "run_id": run_id,
            "runtime": s.runtime,
            "duration_s": s.duration,
            "time_scale": k,
        }
    summary.update(status=status, error=error, warnings=warnings, teardown_s=round(t_teardown, 3))
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    logging.getLogger("testbed").removeHandler(handler)
    handler.close()
    result.summary = summary
    if status == "interrupted":
        raise Interrupted(error or "")
    if status == "failed":
        raise RunFailure(f"{error} (run folder: {run_dir})")
    if problems:
        raise RunFailure(f"teardown incomplete: {'; '.join(problems)}; run `testbed down`")
    return result


def _live(
    s: Scenario,
    run_id: str,
    run_dir: Path,
    state: RunState,
    netem: bool,
    ui: UI,
    warnings: list[str],
    stop: StopFlag,
    image: str | None,
    hold: float | None = None,
    time_scale: float = 1.0,
) -> dict[str, Any]:
    """One run of `s` in wall-clock units; `time_scale` is what the node programs and the
    exporters need to report their durations and rates in scenario time."""
    topo = build_plan(s, run_id)
    rt = runtimes.get(s.runtime).create(topo, state, s, run_dir, image, _devices(s))
    workloads: list[Workload] = []
    metrics: MetricsSession | None = None
    try:
        metrics = MetricsSession(s, topo, run_dir, run_id, time_scale)
        metrics.begin(state.record)  # an embedded Prometheus starts up while we build
        ui.phase(f"building {len(topo.hosts)} hosts, {len(topo.switches)} switch(es)")
        state.set_phase("building")
        t0 = time.monotonic()
        rt.build()
        t_build = time.monotonic() - t0
        state.hosts = [
            {"name": h.name, "netns": h.netns, "data_ip": str(h.data_ip), "mgmt_ip": str(h.mgmt_ip)}
            for h in topo.hosts
        ]
        state.save()  # for `testbed status` and `testbed exec`
        stop.check()

        ui.phase("shaping links")
        state.set_phase("shaping")
        t = s.topology
        spec = LinkSpec(t.link_rate, t.delay, t.jitter, t.loss, t.queue_limit, t.mtu)
        plans = plan_links(topo.link_ends(), spec, s.tc_profile, netem)
        state.record(
            *(
                {"kind": "qdisc", "netns": p.end.netns, "ifname": p.end.ifname, "handle": "1:"}
                for p in plans
            )
        )
        t0 = time.monotonic()
        apply_plans(plans, rt.netlink)
        t_shape = time.monotonic() - t0
        stop.check()
        for note in sorted({n for p in plans for n in p.notes}):
            if note not in warnings:
                warnings.append(note)
                log.warning(note)
        log.info(
            "built %d hosts and %d switch(es) in %.2f s, shaped %d link directions in %.2f s",
            len(topo.hosts),
            len(topo.switches),
            t_build,
            len(plans),
            t_shape,
        )

        workloads = make_workloads(s, topo, rt, run_dir, time_scale)
        ui.phase("starting metrics" if metrics.enabled else "starting workloads")
        state.set_phase("starting workloads")
        metrics.start({w.name: (w.kind, w.targets()) for w in workloads}, state.record)
        stop.check()
        held: dict[str, Any] | None = None
        sections: dict[str, Any] = {}
        if workloads or hold is None:
            for w in workloads:
                w.launch()
                stop.check()
            t_ready = _wait_ready(workloads, metrics, ui, stop, rt)
            # no process polls a go file without workloads: the window opens at once
            margin = START_MARGIN_S if workloads else 0.0
            window = s.timeline(time.time() + margin)
            for w in workloads:
                w.go(window)
            state.set_phase("running")  # every workload process exists and has its t0
            log.info(
                "workloads ready in %.1f s; t0 in %.1f s, measured window [%.1f s, %.1f s] of %.1f s",
                t_ready, margin, window.warmup, window.duration - window.cooldown, s.duration,
            )  # fmt: skip
            ui.phase("running")
            *snaps, host_cpu = _run_window(s, window, workloads, metrics, rt, plans, ui, stop)
            late_edges = _late_edges(window, *snaps)
            for msg in hostcpu.warnings(host_cpu):
                warnings.append(msg)
                log.warning(msg)
            state.set_phase("draining")
            _drain(window, workloads, metrics, rt, plans, ui, stop)
            t_drain = max(0.0, time.time() - window.end)

            stop.check()
            ui.phase("collecting")
            state.set_phase("collecting")
            for w in workloads:
                w.finish()
            # without workloads, nothing sent after the stop edge if it was read at the end
            quiet = not workloads and snaps[1][0] >= window.end
            final = _settled_snapshot(rt, plans, snaps[1] if quiet else None)
            metrics.update(plans, final)
            metrics.final_scrape()
            for w in workloads:
                sections[w.name] = w.collect()
        else:  # --hold without workloads: the links' counters cover the hold itself
            t_ready = t_drain = 0.0
            late_edges = [0.0, 0.0]
            cpu0 = hostcpu.read()
            w0 = _snapshot(rt, plans)
            held = _hold(hold, run_id, topo, state, ui, stop, rt, metrics, plans)
            final = _settled_snapshot(rt, plans)
            metrics.update(plans, final)
            metrics.final_scrape()
            window = Window(w0[0], max(final[0] - w0[0], 1e-3), 0.0, 0.0, 0.0)
            snaps = [w0, final]
            host_cpu = hostcpu.between(cpu0, hostcpu.read())
        summary = {
            "scenario": s.name,
            "run_id": run_id,
            "runtime": s.runtime,
            "duration_s": window.duration,  # a hold without workloads: the hold
            "seed": s.seed,
            "tc_profile": s.tc_profile.name,
            "topology": topo.kind,
            "tcp_congestion": preflight.tcp_congestion(s),
            "tcp_rto_min_s": preflight.tcp_rto_min(s),
            "tcp_rcvbuf_bytes": s.topology.tcp_rcvbuf,  # None: the machine's autotuning
            "tcp_sndbuf_bytes": s.topology.tcp_sndbuf,  # None: the machine's autotuning
            "tcp_segment_bytes": s.topology.tcp_segment,  # None: the MTU's
            "started_at": window.t0,
            "window": {**window.summary(), "edges_late_s": late_edges},
            "host_cpu": host_cpu,
            "setup_s": {"build": round(t_build, 3), "shape": round(t_shape, 3),
                        "workloads_ready": round(t_ready, 3)},
            "drain_s": round(t_drain, 3),
            "links": _links(plans, final, *snaps),
            "tcp": tcpstats.totals([h.netns for h in topo.hosts]),
            "queues": metrics.queues(plans, snaps[0][0], snaps[1][0], _class_limit(s)),
            "workloads": {w.name: w.kind for w in workloads},
            **sections,
        }  # fmt: skip
        for msg in over_cap(summary["links"], snaps[1][0] - snaps[0][0]):
            warnings.append(msg)
            log.warning(msg)
        queries = [q for w in workloads for q in w.metric_queries(sections[w.name])]
        summary["metrics"] = metrics.section(summary, queries)
        # what a workload measured that no real network can do, or that its clock could not
        # keep (workloads judge their own sections)
        for w in workloads:
            for msg in w.warnings(sections[w.name]):
                warnings.append(msg)
                log.warning(msg)
        if hold is not None and held is None:
            held = _hold(hold, run_id, topo, state, ui, stop, rt, metrics, plans)
        if held is not None:
            summary["hold"] = held
        return summary
    finally:
        # each part stops even when another fails: the netlink sockets close whatever happens
        for w in workloads:
            try:
                w.stop()
            except Exception:
                log.exception("stopping %s failed", w.name)
        try:
            if metrics is not None:
                metrics.stop()
        except Exception:
            log.exception("stopping metrics failed")
        finally:
            rt.close()


def _hold(
    limit: float,
    run_id: str,
    topo: TopologyPlan,
    state: RunState,
    ui: UI,
    stop: StopFlag,
    rt: Runtime,
    metrics: MetricsSession,
    plans: list[InterfacePlan],
) -> dict[str, Any]:
    """`up --hold`: the network stays up for the user's own tools until `limit` seconds have
    passed or a stop signal comes. That signal ends the hold, which is how a hold is meant to
    end: the run then tears down as always and counts as done (exit 0); a second signal
    during the teardown is ignored as always."""
    until = "a stop signal" if math.isinf(limit) else f"{limit:g} s have passed or a stop signal"
    ends = time.strftime("%H:%M:%S", time.localtime(time.time() + limit)) if limit < 1e9 else ""
    state.set_phase(f"held until {ends} or Ctrl-C" if ends else "held until Ctrl-C")
    first = topo.hosts[0].name
    log.info(
        "run %s held until %s: `testbed exec %s -- CMD`, `testbed shell %s`, `testbed status` "
        "for the hosts and their addresses",
        run_id, until, first, first,
    )  # fmt: skip
    ui.phase("held: Ctrl-C tears down" if math.isinf(limit) else f"held for {limit:g} s")
    t0 = time.monotonic()
    ended = "duration"
    while (left := limit - (time.monotonic() - t0)) > 0:
        if stop.signame is not None:
            ended, stop.signame = stop.signame, None
            break
        rt.check()  # a container that died
        metrics.update(plans, _snapshot(rt, plans))  # Prometheus sees the user's traffic too
        time.sleep(min(POLL_S, left))
    took = time.monotonic() - t0
    log.info("hold of run %s ended after %.1f s (%s)", run_id, took, ended)
    return {"held_s": round(took, 3), "ended_by": ended}


def _wait_ready(
    workloads: list[Workload], metrics: MetricsSession, ui: UI, stop: StopFlag, rt: Runtime
) -> float:
    """Until every workload process has initialised (imports, Horovod's rendezvous)."""
    t0 = time.monotonic()
    while True:
        counts = {w.name: w.ready() for w in workloads}
        if all(n >= total for n, total in counts.values()):
            return time.monotonic() - t0
        waited = time.monotonic() - t0
        late = ", ".join(f"{k} {n}/{t}" for k, (n, t) in counts.items() if n < t)
        if waited > READY_TIMEOUT_S:
            raise RunFailure(
                f"workloads not ready after {READY_TIMEOUT_S:.0f} s ({late} ready); "
                "see the logs in the run folder"
            )
        stop.check()
        rt.check()
        for w in workloads:
            w.check()
        metrics.check()
        ui.phase(f"starting workloads: {late} ready")
        time.sleep(0.1)


def _run_window(
    s: Scenario,
    window: Window,
    workloads: list[Workload],
    metrics: MetricsSession,
    rt: Runtime,
    plans: list[InterfacePlan],
    ui: UI,
    stop: StopFlag,
) -> tuple[Snapshot, Snapshot, dict[str, Any]]:
    """From t0 to the end of the run; the link counters are read at the two edges of the
    measured window itself, so link rates cover exactly what the flows and iterations do,
    and the machine's CPU times with them (summary `host_cpu`)."""
    edges: list[Snapshot] = []
    cpu: list[hostcpu.CpuTimes] = []
    marks = [window.start, window.stop]
    while (now := time.time()) < window.end:
        # the counters first: an edge read late on a busy machine stretches the window
        # past the end of the load (see _late_edges); the checks can wait a few ms
        snap = _snapshot(rt, plans)
        while marks and snap[0] >= marks[0]:
            edges.append(snap)
            cpu.append(hostcpu.read())
            marks.pop(0)
        stop.check()
        rt.check()
        for w in workloads:
            w.check()
        metrics.check()
        metrics.update(plans, snap)
        live = "  ".join(x for x in [*(w.progress() for w in workloads), _live_info(snap)] if x)
        ui.running(max(0.0, now - window.t0), s.duration, live)
        wake = min([now + POLL_S, window.end, *marks])
        time.sleep(max(0.0, wake - time.time()))
    last = _snapshot(rt, plans)
    while len(edges) < 2:
        edges.append(last)
        cpu.append(hostcpu.read())
    ui.running(s.duration, s.duration, "")
    return edges[0], edges[1], hostcpu.between(cpu[0], cpu[1])


def _late_edges(window: Window, w0: Snapshot, w1: Snapshot) -> list[float]:
    """How late the link counters were read at the window's two edges. Link rates are bytes
    between the two reads over the time between them: past `stop` the load keeps running
    only for the cooldown (and what the queues still hold), so a stop edge read later than
    that counts idle time and the rates come out low. Said in the log and the summary."""
    late = [round(max(0.0, w0[0] - window.start), 3), round(max(0.0, w1[0] - window.stop), 3)]
    if late[1] > window.cooldown + 0.1:
        log.warning(
            "the link counters were read %.2f s after the measured window ended, %.2f s after "
            "the load stopped (a busy machine); link rates over the window may be low by up to "
            "%.0f %%: a measure.cooldown of at least 1s keeps the load running past that read",
            late[1], late[1] - window.cooldown, 100 * late[1] / (window.span + late[1]),
        )  # fmt: skip
    return late


def _drain(
    window: Window,
    workloads: list[Workload],
    metrics: MetricsSession,
    rt: Runtime,
    plans: list[InterfacePlan],
    ui: UI,
    stop: StopFlag,
) -> None:
    """After the run: flows that started inside the window finish (each generator gives up at
    the drain limit and counts the rest as censored). The training has stopped starting
    iterations at the end by itself (horovod_worker.StopVote); its last one may still run."""
    deadline = window.end + window.drain + 15.0  # the generators' own limit, then some
    while any(w.draining() for w in workloads):
        if time.time() > deadline:
            log.warning("workloads still draining %.0f s after the drain limit", 15.0)
            return
        stop.check()
        rt.check()
        for w in workloads:
            w.check()
        metrics.check()
        metrics.update(plans, _snapshot(rt, plans))
        ui.phase(f"draining: in-window flows finish (at most {window.drain:g} s)")
        time.sleep(0.2)


def make_workloads(
    s: Scenario, topo: TopologyPlan, rt: Runtime, run_dir: Path, time_scale: float = 1.0
) -> list[Workload]:
    """A controller per workload instance, from its kind (workloads/kinds.py); a kind's
    controller module is imported only when a run uses it."""
    out: list[Workload] = []
    for ordinal, (name, cfg) in enumerate(s.workloads.items()):
        ctx = Context(s, topo, rt, run_dir, time_scale, ordinal)
        out.append(load(kinds.get(cfg.kind).controller)(name, cfg, ctx))
    return out


def _devices(s: Scenario) -> dict[str, list[int]]:
    """The GPUs each host's node is given: those of the instances that ask for any."""
    out: dict[str, list[int]] = {}
    for cfg in s.workloads.values():
        hook = kinds.get(cfg.kind).devices
        if hook is None:
            continue
        hosts = cfg.hosts or [f"h{i}" for i in range(1, s.topology.hosts + 1)]
        for host, devs in load(hook)(cfg, hosts).items():
            out.setdefault(host, [])
            out[host] += [d for d in devs if d not in out[host]]
    return out


Snapshot = tuple[float, list[dict[str, dict[str, int]]]]  # (time, counters per plan)


def _snapshot(rt: Runtime, plans: list[InterfacePlan]) -> Snapshot:
    return time.time(), [rt.classes.read(p) for p in plans]


def _settled_snapshot(
    rt: Runtime, plans: list[InterfacePlan], last: Snapshot | None = None, limit_s: float = 5.0
) -> Snapshot:
    """The final counters, once every queue has emptied: a 1000-packet FIFO at 50 Mbit/s still
    holds a quarter of a second of data when the last sender stops, and "bytes" must count
    what crossed the link, not what had crossed it when we looked. `last`: a snapshot taken
    after the last sender stopped (a run without workloads has none), used as it is when
    every queue in it was already empty."""
    deadline = time.monotonic() + limit_s
    while True:
        snap = last or _snapshot(rt, plans)
        last = None
        queued = sum(c["backlog"] for per in snap[1] for c in per.values())
        if queued == 0 or time.monotonic() > deadline:
            return snap
        checkpoint()
        time.sleep(0.05)


def _class_limit(s: Scenario) -> int:
    """The largest queue a class of a port may hold, in packets: what a port whose classes
    shared one limit would hold in all of them together."""
    return s.topology.queue_limit or max(c.limit for c in s.tc_profile.classes)


def _links(
    plans: list[InterfacePlan], final: Snapshot, w0: Snapshot, w1: Snapshot
) -> list[dict[str, Any]]:
    """Per direction and class: the queue's counters at the end (what `tc -s class show`
    prints) and the mean rate over the measured window [w0, w1]."""
    out = []
    span = w1[0] - w0[0]
    for i, p in enumerate(plans):
        classes = {}
        for name, c in final[1][i].items():
            moved = w1[1][i].get(name, {}).get("bytes", 0) - w0[1][i].get(name, {}).get("bytes", 0)
            classes[name] = {
                "bytes": c["bytes"],
                "packets": c["packets"],
                "drops": c["drops"],
                "rate_bps": round(moved * 8 / span) if span > 0 else None,
            }
        out.append(
            {
                "node": p.end.node,
                "direction": p.end.direction,
                "from": p.end.src,
                "to": p.end.dst,
                "tier": p.end.tier,
                "rate_bps": p.rate_bps,
                "netns": p.end.netns,
                "ifname": p.end.ifname,
                "classes": classes,
            }
        )
    return out


def _live_info(snap: Snapshot) -> str:
    """A one-line view of traffic so far: bytes per class over all link directions."""
    totals: dict[str, int] = {}
    for counters in snap[1]:
        for name, c in counters.items():
            totals[name] = totals.get(name, 0) + c["bytes"]
    return "  ".join(f"{k} {v / 1e6:.1f} MB" for k, v in totals.items())
