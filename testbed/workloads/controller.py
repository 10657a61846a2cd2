"""The life cycle every workload instance follows, written once; a kind's controller adds only
what its node programs are and how their records become its summary section.

    launch    the kind spawns its node programs through `spawn` (into a node, by the runtime)
    ready     each program writes `<out>.ready` once initialised (imports, rendezvous)
    go        the orchestrator's common t0 and measured window, shifted to the instance's own
              `start`/`stop` (window.Window.shifted), written to its go file
    running   `check` names the first program that died before its time
    finish    the run is over: start no new work (most programs stop by themselves)
    draining  until every program that ends by itself has written `<out>.done`
    collect   check, stop every program, then `summarize` (the kind's) from the records
    stop      idempotent, on every exit path

An instance lives in `RUN/<name>/` and is labelled `workload=<name>` in Prometheus; its
exporters listen on a port of its own on each host's management address, so instances may
share hosts."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.core.errors import RunFailure
from testbed.core.stopping import checkpoint
from testbed.core.window import Window
from testbed.network.runtime.base import Launch, NodeProcess, Runtime
from testbed.scenario.schema import Scenario
from testbed.scenario.topology import Host, TopologyPlan
from testbed.workloads.procs import present, stop_all

log = logging.getLogger(__name__)
EXPORTER_PORT = 9101  # the first instance's exporters on each management address; +1 each
OWNER_GID = 64242  # the first instance's group (its DSCP rule matches it); +1 each


@dataclass(frozen=True)
class Context:
    """What every controller of a run is given."""

    s: Scenario  # in this machine's clock (resolve.wall_scenario)
    topo: TopologyPlan
    rt: Runtime
    run_dir: Path  # absolute: containers see it at the same path
    time_scale: float = 1.0  # node programs export durations divided by it
    ordinal: int = 0  # the instance's place in `workloads:` (its ports, its group)


@dataclass
class NodeProc:
    """A node program of the instance."""

    host: Host
    role: str  # what it is, in messages: worker, server, client, generator, ...
    popen: NodeProcess
    out: Path  # its record; its markers sit beside it: <out>.ready, <out>.done
    log: Path
    waits: bool = True  # initialises, writes .ready, waits for the go file
    finite: bool = True  # ends by itself after the run (else: runs until stopped)

    def done(self) -> bool:
        return self.out.with_suffix(".done").exists()


class Controller:
    """Base of every kind's controller (see the module's docstring)."""

    kind = ""
    exports = False  # its node programs run a Prometheus exporter on every host of it

    def __init__(self, name: str, cfg: Any, ctx: Context) -> None:
        self.name, self.cfg, self.ctx = name, cfg, ctx
        self.s, self.topo, self.rt = ctx.s, ctx.topo, ctx.rt
        self.run_dir = ctx.run_dir
        self.dir = ctx.run_dir / name
        self.time_scale = ctx.time_scale
        self.procs: list[NodeProc] = []
        self.window: Window | None = None  # the instance's own (its start and stop)
        self.run_window: Window | None = None  # the run's

    # ---------------------------------------------------------------- for the kinds

    @property
    def exporter_port(self) -> int:
        return EXPORTER_PORT + self.ctx.ordinal

    @property
    def owner_gid(self) -> int:
        return OWNER_GID + self.ctx.ordinal

    @property
    def metrics_on(self) -> bool:
        return self.s.metrics.prometheus != "off"

    @property
    def go_file(self) -> Path:
        return self.dir / "go.json"

    def hosts(self) -> list[Host]:
        """The instance's hosts (all, unless it names some), in scenario order."""
        names = getattr(self.cfg, "hosts", None)
        return [self.topo.host(n) for n in names] if names else list(self.topo.hosts)

    def metrics_arg(self, h: Host) -> list[str]:
        """`--metrics ADDR:PORT` for a node program's exporter on `h` (none when off)."""
        return ["--metrics", f"{h.mgmt_ip}:{self.exporter_port}"] if self.metrics_on else []

    def spawn(
        self,
        h: Host,
        role: str,
        module: str,
        argv: list[str],
        out: Path,
        env: Mapping[str, str] | None = None,
        preload: Sequence[str] = (),
        gid: int | None = None,
        new_uts: bool = False,
        waits: bool = True,
        finite: bool = True,
        ns: str | None = None,
    ) -> NodeProc:
        """Start `python -m module argv` in host `h`'s node (or namespace `ns`), its output
        in `RUN/<name>/<role>-<host>.log`."""
        log_path = self.dir / f"{role}-{h.name}.log"
        launch = Launch(module, argv, log_path, dict(env or {}), tuple(preload), gid, new_uts)
        popen = self.rt.spawn_python(ns or h.netns, launch)
        p = NodeProc(h, role, popen, out, log_path, waits, finite)
        self.procs.append(p)
        return p

    def summarize(self) -> dict[str, Any]:
        """The kind's summary section, from its records (the run has ended)."""
        raise NotImplementedError

    def launch(self) -> None:
        """Start the node programs (`spawn`); they initialise, then wait for the go file."""
        raise NotImplementedError

    # ---------------------------------------------------------------- the life cycle

    def targets(self) -> list[str]:
        """Its exporters' management addresses (ADDR:PORT), known before launch: Prometheus
        is told them while the programs start."""
        if not (self.exports and self.metrics_on):
            return []
        return [f"{h.mgmt_ip}:{self.exporter_port}" for h in self.hosts()]

    def ready(self) -> tuple[int, int]:
        waiting = [p for p in self.procs if p.waits]
        return present(p.out.with_suffix(".ready") for p in waiting), len(waiting)

    def go(self, window: Window) -> None:
        """The run's t0 and measured window, shifted to the instance's start and stop."""
        self.run_window = window
        self.window = window.shifted(self.cfg.start, self.cfg.stop)
        self.window.write(self.go_file)

    def progress(self) -> str:
        return ""

    def tick(self, now: float) -> None:
        """Called at every poll of the run (live.LiveRun.tick), from launch until collected,
        with the wall-clock time: where a kind acts inside the window (a policy switching
        classes, a schedule of its own). Most kinds need nothing here."""

    def check(self) -> None:
        """A program that ended before its time: killed, failed, or a finite one that left
        without its `.done` (a server, which is never finite, by ending at all). The first
        cause is named: one dead worker makes its ring peers fail moments later, so a program
        killed by a signal comes before one that exited with an error, and otherwise the one
        that ended first."""
        dead = [
            (rc >= 0, p.popen.exit_order, p, rc)
            for p in self.procs
            if (rc := p.popen.poll()) is not None and (rc != 0 or not p.finite or not p.done())
        ]
        if dead:
            *_, p, rc = min(dead, key=lambda d: d[:2])
            raise RunFailure(
                f"{self.name}: {p.role} on {p.host.name} exited with code {rc}; see {p.log}"
            )

    def finish(self) -> None:
        """The run is over: most programs stop starting work by themselves at its end."""

    def draining(self) -> bool:
        """True while a program that ends by itself has not written its `.done` yet."""
        return not all(p.done() for p in self.procs if p.finite)

    def collect(self) -> dict[str, Any]:
        """After finish and drain: every finite program has written its records. Check,
        stop the rest, summarise."""
        deadline = time.monotonic() + 30
        while self.draining() and time.monotonic() < deadline:
            self.check()
            checkpoint()
            time.sleep(0.05)
        self.check()
        self.stop()
        return self.summarize()

    def warnings(self, section: dict[str, Any]) -> list[str]:
        """What the instance's own section says is wrong with the run (physics a real
        network could not do, a clock this machine could not keep), one line each."""
        return []

    def metric_queries(self, section: dict[str, Any]) -> list[tuple[str, str, str, Any]]:
        """What Prometheus must agree on with the section, after the run: (instance, what,
        PromQL with {sel} for the run's and the instance's labels and {rng} for the range,
        the section's value). metrics/prometheus.cross_check asks them."""
        return []

    def stop(self) -> None:
        stop_all(p.popen for p in self.procs)
