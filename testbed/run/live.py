"""A live run: the network, its shaping, its workloads and metrics, from build to summary
(orchestrator.py claims the run before and tears it down after).

Every phase that waits (workloads getting ready, the window, the drain, a hold) polls through
one `LiveRun.tick`: a stop signal, a dead node, a dead workload process or Prometheus end the
run there; the link counters feed the metrics; and every workload controller that defines a
`tick(now)` hook is called with the time, the seam for policies that act inside the window.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from testbed.core import hostcpu, tcpstats
from testbed.core.errors import RunFailure
from testbed.core.state import RunState
from testbed.core.stopping import StopFlag, checkpoint
from testbed.core.summary import Summary
from testbed.core.window import Window
from testbed.network import preflight
from testbed.network.runtime.base import Runtime
from testbed.network.shaping.apply import apply_plans
from testbed.network.shaping.plan import InterfacePlan, LinkSpec, plan_links
from testbed.network.shaping.shared_limit import Counters
from testbed.network.shaping.sockops import NamespaceTimers, netns_cookie
from testbed.network.shaping.stats import over_cap
from testbed.run.metrics import MetricsSession
from testbed.scenario.schema import Scenario
from testbed.scenario.topology import TopologyPlan
from testbed.workloads import kinds
from testbed.workloads.controller import Context
from testbed.workloads.registry import load

log = logging.getLogger("testbed")

START_MARGIN_S = 0.25  # between "go" and t0: every waiting process polls its go file at 100 Hz
READY_TIMEOUT_S = 180.0  # imports and Horovod's rendezvous on a busy 2-core machine
POLL_S = 0.5

Snapshot = tuple[float, list[dict[str, dict[str, int]]]]  # (time, counters per plan)


class Workload(Protocol):
    """What a run needs of a workload instance's controller (workloads/controller.py writes
    the life cycle once for every kind)."""

    name: str  # the instance's, as in `workloads:`
    kind: str

    def targets(self) -> list[str]: ...  # its exporters' management addresses (ADDR:PORT)
    def launch(self) -> None: ...  # start the node processes; they initialise, then wait
    def ready(self) -> tuple[int, int]: ...  # (processes ready, processes to wait for)
    def go(self, window: Window) -> None: ...  # the common t0 and the measured window
    def draining(self) -> bool: ...  # after the run: still waiting for in-window work to end
    def finish(self) -> None: ...  # the run is over: start no new work, keep exporters up
    def progress(self) -> str: ...  # a few words for the live display ("12 iterations")
    def tick(self, now: float) -> None: ...  # every poll from launch to collection
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
class Measured:
    """What the phases measured, for the summary."""

    window: Window | None = None
    edges: tuple[Snapshot, Snapshot] | None = None  # counters at the window's edges
    final: Snapshot | None = None  # counters once every queue emptied
    shared_drops: list[int | None] = field(default_factory=list)  # per plan, at the end
    host_cpu: dict[str, Any] = field(default_factory=dict)
    late_edges: list[float] = field(default_factory=lambda: [0.0, 0.0])
    seconds: dict[str, float] = field(default_factory=dict)  # build, shape, ready, drain
    sections: dict[str, Any] = field(default_factory=dict)  # each instance's summary section
    held: dict[str, Any] | None = None


class LiveRun:
    """One run of `s` (in wall-clock units) on a network that exists from `build` to `close`.
    `time_scale` is what node programs and exporters need to report in scenario time."""

    def __init__(
        self,
        s: Scenario,
        topo: TopologyPlan,
        rt: Runtime,
        state: RunState,
        run_dir: Path,
        ui: UI,
        stop: StopFlag,
        warnings: list[str],
        time_scale: float = 1.0,
    ) -> None:
        self.s, self.topo, self.rt, self.state = s, topo, rt, state
        self.ui, self.stop, self.warnings, self.time_scale = ui, stop, warnings, time_scale
        self.run_id, self.run_dir = state.run_id, run_dir
        self.metrics: MetricsSession | None = None
        self.plans: list[InterfacePlan] = []
        self.shared_counters: Counters | None = None  # the shared limits' (shape)
        self.timers: NamespaceTimers | None = None  # topology.tcp_rto_initial's (build)
        self.workloads: list[Workload] = []
        self.active: list[Workload] = []  # checked and ticked: launched, not yet collected
        self.m = Measured()

    # the one poll every phase uses
    def tick(self, snap: Snapshot | None = None, feed: bool = True) -> Snapshot | None:
        """Raise if the run must end (a stop signal, a dead node, workload process or
        Prometheus); give the workloads their `tick(now)`; feed the metrics the link counters
        (`snap`, or read now) unless `feed` is off. The counters fed, or None."""
        self.stop.check()
        self.rt.check()
        for w in self.active:
            w.check()
        assert self.metrics is not None
        self.metrics.check()
        now = time.time()
        for w in self.active:
            w.tick(now)
        if not feed:
            return None
        snap = snap or self.snapshot()
        self.metrics.update(self.plans, snap)
        return snap

    def snapshot(self) -> Snapshot:
        return time.time(), [self.rt.classes.read(p) for p in self.plans]

    def settled_snapshot(self, last: Snapshot | None = None, limit_s: float = 5.0) -> Snapshot:
        """The final counters, once every queue has emptied: a 1000-packet FIFO at 50 Mbit/s
        still holds a quarter of a second of data when the last sender stops, and "bytes" must
        count what crossed the link, not what had crossed it when we looked. `last`: a
        snapshot taken after the last sender stopped (a run without workloads has none), used
        as it is when every queue in it was already empty."""
        deadline = time.monotonic() + limit_s
        while True:
            snap = last or self.snapshot()
            last = None
            queued = sum(c["backlog"] for per in snap[1] for c in per.values())
            if queued == 0 or time.monotonic() > deadline:
                return snap
            checkpoint()
            time.sleep(0.05)

    # the phases, in order
    def build(self) -> None:
        """The metrics session (an embedded Prometheus starts while the network is built),
        then the nodes and links."""
        self.metrics = MetricsSession(self.s, self.topo, self.run_dir, self.run_id, self.time_scale)
        self.metrics.begin(self.state.record)
        self._phase(f"building {len(self.topo.hosts)} hosts, {len(self.topo.switches)} switch(es)",
                    "building")  # fmt: skip
        t0 = time.monotonic()
        self.rt.build()
        self.m.seconds["build"] = time.monotonic() - t0
        self.state.hosts = [
            {"name": h.name, "netns": h.netns, "data_ip": str(h.data_ip), "mgmt_ip": str(h.mgmt_ip)}
            for h in self.topo.hosts
        ]
        self.state.save()  # for `testbed status` and `testbed exec`
        self._tcp_timers()
        self.stop.check()

    def _tcp_timers(self) -> None:
        """topology.tcp_rto_initial for every host's sockets, before any workload opens one:
        a sock_ops program for the hosts' namespaces (shaping/sockops.py). Nothing to record:
        its BPF link goes with this process's file descriptors, however the run ends."""
        us = self.topo.tcp_rto_initial_us
        if us is None:
            return
        self.timers = NamespaceTimers(rto_init_us=us).open()
        for h in self.topo.hosts:
            self.timers.add(netns_cookie(self.rt.netlink(h.netns)))

    def shape(self, netem: bool) -> None:
        """Every link direction's queueing, recorded before it exists."""
        self._phase("shaping links", "shaping")
        t = self.s.topology
        spec = LinkSpec(
            t.link_rate, t.delay, t.jitter, t.loss, t.queue_limit, t.mtu, t.link_mode == "fast"
        )
        self.plans = plan_links(self.topo.link_ends(), spec, self.s.tc_profile, netem)
        self.state.record(
            *(
                {"kind": "qdisc", "netns": p.end.netns, "ifname": p.end.ifname, "handle": "1:"}
                for p in self.plans
            )
        )
        t0 = time.monotonic()
        self.shared_counters = apply_plans(self.plans, self.rt.netlink)
        self.m.seconds["shape"] = time.monotonic() - t0
        self.stop.check()
        for note in sorted({n for p in self.plans for n in p.notes}):
            self._warn(note, unique=True)
        log.info(
            "built %d hosts and %d switch(es) in %.2f s, shaped %d link directions in %.2f s",
            len(self.topo.hosts), len(self.topo.switches), self.m.seconds["build"],
            len(self.plans), self.m.seconds["shape"],
        )  # fmt: skip

    def start_metrics(self) -> None:
        """A controller per workload instance, and the metrics' scrape targets."""
        self.workloads = make_workloads(self.s, self.topo, self.rt, self.run_dir, self.time_scale)
        assert self.metrics is not None
        self._phase("starting metrics" if self.metrics.enabled else "starting workloads",
                    "starting workloads")  # fmt: skip
        self.metrics.start({w.name: (w.kind, w.targets()) for w in self.workloads},
                           self.state.record)  # fmt: skip
        self.stop.check()

    def run_workloads(self) -> None:
        """Launch, wait until ready, open the window, run it, drain, collect."""
        for w in self.workloads:
            w.launch()
            self.active.append(w)
            self.stop.check()
        self.m.seconds["ready"] = self._wait_ready()
        # no process polls a go file without workloads: the window opens at once
        margin = START_MARGIN_S if self.workloads else 0.0
        window = self.m.window = self.s.timeline(time.time() + margin)
        for w in self.workloads:
            w.go(window)
        self.state.set_phase("running")  # every workload process exists and has its t0
        log.info(
            "workloads ready in %.1f s; t0 in %.1f s, measured window [%.1f s, %.1f s] of %.1f s",
            self.m.seconds["ready"], margin, window.warmup, window.duration - window.cooldown,
            self.s.duration,
        )  # fmt: skip
        self.ui.phase("running")
        w0, w1, self.m.host_cpu = self._run_window(window)
        self.m.edges = (w0, w1)
        self.m.late_edges = late_edges(window, w0, w1, self._warn)
        for msg in hostcpu.warnings(self.m.host_cpu, hostcpu.backlog_limit()):
            self._warn(msg)
        self.state.set_phase("draining")
        self._drain(window)
        self.m.seconds["drain"] = max(0.0, time.time() - window.end)
        self.stop.check()
        self._phase("collecting", "collecting")
        for w in self.workloads:
            w.finish()
        # without workloads, nothing sent after the stop edge if it was read at the end
        quiet = not self.workloads and w1[0] >= window.end
        self._final(self.settled_snapshot(w1 if quiet else None))
        for w in self.workloads:
            self.m.sections[w.name] = w.collect()
        self.active = []

    def hold_only(self, limit: float) -> None:
        """`--hold` without workloads: the links' counters cover the hold itself."""
        self.m.seconds.update(ready=0.0, drain=0.0)
        cpu0 = hostcpu.read()
        w0 = self.snapshot()
        self.hold(limit)
        final = self.settled_snapshot()
        self._final(final)
        self.m.window = Window(w0[0], max(final[0] - w0[0], 1e-3), 0.0, 0.0, 0.0)
        self.m.edges = (w0, final)
        self.m.host_cpu = hostcpu.between(cpu0, hostcpu.read())

    def hold(self, limit: float) -> None:
        """`up --hold`: the network stays up for the user's own tools until `limit` seconds
        have passed or a stop signal comes. That signal ends the hold, which is how a hold is
        meant to end: the run then tears down as always and counts as done (exit 0); a second
        signal during the teardown is ignored as always."""
        inf = math.isinf(limit)
        until = "a stop signal" if inf else f"{limit:g} s have passed or a stop signal"
        ends = time.strftime("%H:%M:%S", time.localtime(time.time() + limit)) if not inf else ""
        self.state.set_phase(f"held until {ends} or Ctrl-C" if ends else "held until Ctrl-C")
        first = self.topo.hosts[0].name
        log.info(
            "run %s held until %s: `testbed exec %s -- CMD`, `testbed shell %s`, "
            "`testbed status` for the hosts and their addresses",
            self.run_id, until, first, first,
        )  # fmt: skip
        self.ui.phase("held: Ctrl-C tears down" if inf else f"held for {limit:g} s")
        t0 = time.monotonic()
        ended = "duration"
        while (left := limit - (time.monotonic() - t0)) > 0:
            if self.stop.signame is not None:
                ended, self.stop.signame = self.stop.signame, None
                break
            self.tick()  # a container that died; Prometheus sees the user's traffic too
            time.sleep(min(POLL_S, left))
        took = time.monotonic() - t0
        log.info("hold of run %s ended after %.1f s (%s)", self.run_id, took, ended)
        self.m.held = {"held_s": round(took, 3), "ended_by": ended}

    def summary(self) -> Summary:
        """The run's summary (summary.py declares it) in wall-clock units (orchestrator dilates it), and the warnings
        of the links and of each workload's own section."""
        s, m = self.s, self.m
        assert m.window and m.edges and m.final and self.metrics is not None
        w0, w1 = m.edges
        sec = m.seconds
        summary: Summary = {
            "scenario": s.name,
            "run_id": self.run_id,
            "runtime": s.runtime,
            "duration_s": m.window.duration,  # a hold without workloads: the hold
            "seed": s.seed,
            "tc_profile": s.tc_profile.name,
            "topology": self.topo.kind,
            "tcp_congestion": preflight.tcp_congestion(s),
            "tcp_rto_min_s": preflight.tcp_rto_min(s),
            "tcp_rto_initial_s": s.topology.tcp_rto_initial,
            "tcp_rcvbuf_bytes": s.topology.tcp_rcvbuf,  # None: the machine's autotuning
            "tcp_sndbuf_bytes": s.topology.tcp_sndbuf,  # None: the machine's autotuning
            "tcp_segment_bytes": s.topology.tcp_segment,  # None: the MTU's
            "tcp_recovery": s.topology.tcp_recovery,
            "tcp_idle_restart": s.topology.tcp_idle_restart,
            "link_mode": s.topology.link_mode,
            "started_at": m.window.t0,
            "window": {**m.window.summary(), "edges_late_s": m.late_edges},
            "host_cpu": m.host_cpu,
            "setup_s": {"build": round(sec["build"], 3), "shape": round(sec["shape"], 3),
                        "workloads_ready": round(sec["ready"], 3)},
            "drain_s": round(sec["drain"], 3),
            "links": links_section(self.plans, m.final, w0, w1, m.shared_drops),
            "tcp": tcpstats.totals(
                self.rt.proc_net(h.netns, tcpstats.FILES) for h in self.topo.hosts
            ),
            "queues": self.metrics.queues(self.plans, w0[0], w1[0], class_limit(s)),
            "workloads": {w.name: w.kind for w in self.workloads},
            **m.sections,
        }  # fmt: skip
        largest = max((p.largest_packet for p in self.plans), default=0)
        for msg in over_cap(summary["links"], w1[0] - w0[0], largest):
            self._warn(msg)
        queries = [q for w in self.workloads for q in w.metric_queries(m.sections[w.name])]
        summary["metrics"] = self.metrics.section(summary, queries)
        # what a workload measured that no real network can do, or that its clock could not
        # keep (workloads judge their own sections)
        for w in self.workloads:
            for msg in w.warnings(m.sections[w.name]):
                self._warn(msg)
        if m.held is not None:
            summary["hold"] = m.held
        return summary

    def close(self) -> None:
        """Each part stops even when another fails: the netlink sockets close whatever
        happens."""
        for w in self.workloads:
            try:
                w.stop()
            except Exception:
                log.exception("stopping %s failed", w.name)
        try:
            if self.metrics is not None:
                self.metrics.stop()
        except Exception:
            log.exception("stopping metrics failed")
        finally:
            if self.shared_counters is not None:  # a run that ended before its final read
                self.shared_counters.close()
                self.shared_counters = None
            if self.timers is not None:
                self.timers.close()
                self.timers = None
            self.rt.close()

    # the waiting phases
    def _wait_ready(self) -> float:
        """Until every workload process has initialised (imports, Horovod's rendezvous)."""
        t0 = time.monotonic()
        while True:
            counts = {w.name: w.ready() for w in self.workloads}
            if all(n >= total for n, total in counts.values()):
                return time.monotonic() - t0
            waited = time.monotonic() - t0
            late = ", ".join(f"{k} {n}/{t}" for k, (n, t) in counts.items() if n < t)
            if waited > READY_TIMEOUT_S:
                raise RunFailure(
                    f"workloads not ready after {READY_TIMEOUT_S:.0f} s ({late} ready); "
                    "see the logs in the run folder"
                )
            self.tick(feed=False)
            self.ui.phase(f"starting workloads: {late} ready")
            time.sleep(0.1)

    def _run_window(self, window: Window) -> tuple[Snapshot, Snapshot, dict[str, Any]]:
        """From t0 to the end of the run; the link counters are read at the two edges of the
        measured window itself, so link rates cover exactly what the flows and iterations
        do, and the machine's CPU times with them (summary `host_cpu`)."""
        edges: list[Snapshot] = []
        cpu: list[hostcpu.CpuTimes] = []
        marks = [window.start, window.stop]
        while (now := time.time()) < window.end:
            # the counters first: an edge read late on a busy machine stretches the window
            # past the end of the load (see late_edges); the checks can wait a few ms
            snap = self.snapshot()
            while marks and snap[0] >= marks[0]:
                edges.append(snap)
                cpu.append(hostcpu.read())
                marks.pop(0)
            self.tick(snap)
            live = "  ".join(
                x for x in [*(w.progress() for w in self.workloads), live_info(snap)] if x
            )
            self.ui.running(max(0.0, now - window.t0), self.s.duration, live)
            wake = min([now + POLL_S, window.end, *marks])
            time.sleep(max(0.0, wake - time.time()))
        last = self.snapshot()
        while len(edges) < 2:
            edges.append(last)
            cpu.append(hostcpu.read())
        self.ui.running(self.s.duration, self.s.duration, "")
        return edges[0], edges[1], hostcpu.between(cpu[0], cpu[1])

    def _drain(self, window: Window) -> None:
        """After the run: flows that started inside the window finish (each generator gives
        up at the drain limit and counts the rest as censored). The training has stopped
        starting iterations at the end by itself (horovod_worker.StopVote); its last one may
        still run."""
        deadline = window.end + window.drain + 15.0  # the generators' own limit, then some
        while any(w.draining() for w in self.workloads):
            if time.time() > deadline:
                log.warning("workloads still draining %.0f s after the drain limit", 15.0)
                return
            self.tick()
            self.ui.phase(f"draining: in-window flows finish (at most {window.drain:g} s)")
            time.sleep(0.2)

    def _final(self, snap: Snapshot) -> None:
        assert self.metrics is not None
        self.m.final = snap
        self.m.shared_drops = [
            self.rt.classes.shared_limit_drops(p, c)
            for p, c in zip(self.plans, snap[1], strict=True)
        ]
        self._check_shared_counters(snap)
        self.metrics.update(self.plans, snap)
        self.metrics.final_scrape()

    def _check_shared_counters(self, snap: Snapshot) -> None:
        """A shared limit's counter is back at 0 once its queue is empty: else packets were
        counted in and never out, and the port held fewer than its limit (a physics check of
        shaping/shared_limit.py)."""
        if self.shared_counters is None:
            return
        empty = all(c["backlog"] == 0 for per in snap[1] for c in per.values())
        held = self.shared_counters.held()
        self.shared_counters.close()
        self.shared_counters = None
        off = {k: n for k, n in held.items() if n != 0}
        if empty and off:
            worst = max(off, key=lambda k: abs(off[k]))
            self._warn(
                f"shared limit: with every queue empty, {len(off)} port(s) still count packets "
                f"({worst}: {off[worst]}); each such port held that many fewer than its limit "
                "by the end (shaping/shared_limit.py)"
            )

    def _phase(self, shown: str, recorded: str) -> None:
        self.ui.phase(shown)
        self.state.set_phase(recorded)

    def _warn(self, msg: str, unique: bool = False) -> None:
        if unique and msg in self.warnings:
            return
        self.warnings.append(msg)
        log.warning(msg)


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


def devices(s: Scenario) -> dict[str, list[int]]:
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


STALLED_S = 1.0  # a start edge read this late: every process here stood still that long


def late_edges(
    window: Window, w0: Snapshot, w1: Snapshot, warn: Callable[[str], None] | None = None
) -> list[float]:
    """How late the link counters were read at the window's two edges. Link rates are bytes
    between the two reads over the time between them: past `stop` the load keeps running
    only for the cooldown (and what the queues still hold), so a stop edge read later than
    that counts idle time and the rates come out low. A start edge read more than STALLED_S
    late means the machine stood still (2026-12-07: 6.9 s, steal 0 %, an ensemble's nodes
    read their own edges 14 s late): the workloads' figures cover less than the window. Said
    through `warn` (the run's warnings; the log alone if none) and in the summary."""
    say = warn or log.warning
    late = [round(max(0.0, w0[0] - window.start), 3), round(max(0.0, w1[0] - window.stop), 3)]
    if late[0] > STALLED_S:
        say(
            f"the link counters were read {late[0]:.2f} s after the measured window began: "
            "the machine stood still that long (steal shows only what the hypervisor "
            f"reports); rates cover the {window.span - late[0]:.1f} s after that read, and "
            "what the workloads counted at the window's edges may cover less"
        )
    if late[1] > window.cooldown + 0.1:
        low = 100 * late[1] / (window.span + late[1])
        say(
            f"the link counters were read {late[1]:.2f} s after the measured window ended, "
            f"{late[1] - window.cooldown:.2f} s after the load stopped (a busy machine); link "
            f"rates over the window may be low by up to {low:.0f} %: a measure.cooldown of at "
            "least 1s keeps the load running past that read"
        )
    return late


def class_limit(s: Scenario) -> int:
    """The port's limit in packets: the classes' shared one (the tc profile's shared_limit;
    a host's own port may hold less, host_limit a class), else the largest queue a class may
    hold, what a port whose classes shared one limit would hold in all of them together."""
    if s.tc_profile.shared_limit is not None:
        return s.tc_profile.shared_limit
    return s.topology.queue_limit or max(c.limit for c in s.tc_profile.classes)


def links_section(
    plans: list[InterfacePlan],
    final: Snapshot,
    w0: Snapshot,
    w1: Snapshot,
    shared_drops: list[int | None] | None = None,
) -> list[dict[str, Any]]:
    """Per direction and class: the queue's counters at the end (what `tc -s class show`
    prints) and the mean rates over the measured window [w0, w1], of bits and of packets (to
    compare with what the hosts' sockets counted over the window); with a shared limit, the
    arrivals it dropped (whatever their class; None without one)."""
    out = []
    span = w1[0] - w0[0]
    for i, p in enumerate(plans):
        classes = {}
        for name, c in final[1][i].items():
            moved, sent = (
                w1[1][i].get(name, {}).get(k, 0) - w0[1][i].get(name, {}).get(k, 0)
                for k in ("bytes", "packets")
            )
            classes[name] = {
                "bytes": c["bytes"],
                "packets": c["packets"],
                "drops": c["drops"],
                "rate_bps": round(moved * 8 / span) if span > 0 else None,
                "packet_rate_hz": round(sent / span, 3) if span > 0 else None,
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
                "shared_limit_drops": shared_drops[i] if shared_drops else None,
            }
        )
    return out


def live_info(snap: Snapshot) -> str:
    """A one-line view of traffic so far: bytes per class over all link directions."""
    totals: dict[str, int] = {}
    for counters in snap[1]:
        for name, c in counters.items():
            totals[name] = totals.get(name, 0) + c["bytes"]
    return "  ".join(f"{k} {v / 1e6:.1f} MB" for k, v in totals.items())
