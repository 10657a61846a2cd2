"""The points of a sweep, spread over the swarm: at most one per node, each a service
(service.py) whose run folder comes back through the receiver (results.py) into the same
`DIR/runs/NNN-…/` a local sweep writes; sweep.csv, sweep.json, resuming and `expect:` as in
sweep.run_sweep.

A point runs again on another node (up to LOST_TRIES runs) when its node goes down or leaves,
when its task is orphaned, ends without sending its folder, is stopped by its node (drained:
its run ends interrupted although the sweep did not stop it), or stays unplaced for PENDING_S
(a pull that never ends, a node whose CPUs something else reserved). A point that fails for
its own sake (its `testbed up` failed) is recorded failed, as locally. On Ctrl-C, SIGTERM or
SIGHUP, and on any error of the sweep itself, every service of the sweep is removed (each
task's `testbed up` gets SIGTERM and tears down), the folders those runs still send are kept
and recorded as interrupted, and the sweep waits until the swarm has no task of it left."""

from __future__ import annotations

import collections
import json
import logging
import os
import secrets
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed.core.errors import EnvironmentProblem, ScenarioError
from testbed.core.state import proc_start_time
from testbed.core.stopping import checkpoint, signals_ignored
from testbed.results.swarm import cluster
from testbed.results.swarm.cluster import LABEL_SWEEP, Node
from testbed.results.swarm.results import Receiver
from testbed.results.swarm.service import STOP_GRACE_S, PointService
from testbed.results.sweep import (
    NOT_RUN,
    Outcome,
    Point,
    SweepSpec,
    _set_aside,
    _summary_of,
    check,
    finished_runs,
    recorded_wall,
    split,
    write_results,
)
from testbed.workloads import kinds

log = logging.getLogger(__name__)
LOST_TRIES = 3  # runs of one point on nodes that lost it, before it is recorded failed
SILENT_S = 30.0  # a task that ended and sent nothing for this long: its node lost it
PENDING_S = 1800.0  # a task not yet running after this long (the first pull takes minutes)
ENDED = ("complete", "failed", "rejected", "shutdown", "orphaned", "remove")
WAITING = ("new", "pending", "assigned", "accepted", "preparing", "ready", "starting")
LABEL_OWNER = "testbed.owner"  # host:pid:start of the sweep process (stale services found)


def new_sweep_id() -> str:
    return secrets.token_hex(3)


def owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{proc_start_time(os.getpid())}"


def portable(points: list[Point]) -> None:
    """A point carries its scenario only: a field that names a file on this machine would
    name nothing on a node."""
    for p in points:
        for name, w in p.scenario.workloads.items():
            for field in kinds.get(w.kind).files:
                if getattr(w, field, None) and Path(str(getattr(w, field))).is_file():
                    raise ScenarioError(
                        f"--swarm: workloads.{name}.{field} names a file of this machine "
                        f"({getattr(w, field)}); a swarm point carries its scenario only: use "
                        "a built-in one, or run this sweep without --swarm"
                    )


def scenario_text(p: Point) -> str:
    """The point's resolved scenario, as `testbed up` on the node will read it; prefixes the
    user left to their defaults stay defaults (the node chooses its own, as locally)."""
    data = p.scenario.model_dump(mode="json")
    for field in ("prefix", "management_prefix"):
        if field not in p.scenario.topology.model_fields_set:
            data["topology"].pop(field, None)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def remove_stale(c: Any) -> int:
    """Services and configs of swarm sweeps this machine ran whose process is gone (killed
    with SIGKILL, or the machine rebooted): they would hold their nodes. Returns how many."""
    here = socket.gethostname()
    removed = 0
    for kind in (c.services, c.configs):
        for obj in kind.list(filters={"label": LABEL_OWNER}):
            host, _, rest = obj.attrs["Spec"]["Labels"][LABEL_OWNER].partition(":")
            pid, _, start = rest.partition(":")
            if host != here or (pid.isdigit() and str(proc_start_time(int(pid))) == start):
                continue
            try:
                obj.remove()
                removed += 1
            except Exception as e:
                log.debug("removing stale %s: %s", obj, e)
    return removed


@dataclass
class Running:
    point: Point
    node: Node
    service: Any
    config: Any
    token: str
    started: float
    launched_at: float  # epoch: the service created
    ended_at: float | None = None  # monotonic: when its task was first seen ended


def task_state(service: Any) -> tuple[str, str]:
    """The state of the service's (one) task and its error: "new" before it has one,
    "unknown" when the managers cannot say now (an API error is not an ending)."""
    import docker

    try:
        tasks = service.tasks()
    except docker.errors.NotFound:
        return "remove", "the service is gone"
    except Exception as e:
        return "unknown", str(e)[:200]
    if not tasks:
        return "new", ""
    t = max(tasks, key=lambda t: t.get("CreatedAt", ""))
    status = t.get("Status", {})
    return status.get("State", "unknown"), status.get("Err", "")


class Dispatcher:
    def __init__(
        self,
        c: Any,
        spec: SweepSpec,
        points: list[Point],
        out: Path,
        ui: Any,
        image: str,
        receiver: Receiver,
        nodes_ok: list[Node],
        sweep_id: str,
        poll_s: float = 1.0,
        only: set[int] | None = None,
    ) -> None:
        self.c, self.spec, self.points, self.out, self.ui = c, spec, points, out, ui
        self.image, self.receiver, self.sweep_id, self.poll_s = image, receiver, sweep_id, poll_s
        self.eligible = {n.id for n in nodes_ok}
        self.runs_dir = out / "runs"
        self.outcomes: dict[int, Outcome] = {}
        self.running: dict[str, Running] = {}
        self.lost: collections.Counter[int] = collections.Counter()
        self.t0 = time.monotonic()
        self.owner = owner()
        self.only = only  # the indices `--only` keeps (None: all)
        self.left_out: dict[int, Outcome] = {}

    # ------------------------------------------------------------------ the loop

    def run(self) -> list[Outcome]:
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        (self.out / "sweep.yaml").write_text(
            yaml.safe_dump(self.spec.model_dump(mode="json", by_alias=True), sort_keys=False)
        )
        done_before = finished_runs(self.runs_dir)
        todo, left_out = split(self.points, done_before, self.only)
        pending: collections.deque[Point] = collections.deque(todo)
        self.left_out = {p.index: Outcome(p, NOT_RUN) for p in left_out}
        for p in self.points:
            prior = done_before.get(p.identity)
            if prior is None:
                continue
            p.folder = prior.name
            summary = json.loads((prior / "summary.json").read_text())
            o = Outcome(p, "skipped", recorded_wall(prior), None, summary)
            check(o, prior)
            self._record(o)
        try:
            while pending or self.running:
                live = {n.id: n for n in cluster.nodes(self.c)}
                for node_id, r in list(self.running.items()):
                    self._follow(r, live.get(node_id), pending)
                free = [
                    n for n in live.values()
                    if n.usable and n.id in self.eligible and n.id not in self.running
                ]  # fmt: skip
                for n in free:
                    if not pending:
                        break
                    self._launch(pending.popleft(), n)
                if pending and not self.running and not free:
                    raise EnvironmentProblem(
                        "--swarm: no node of the swarm is left to run points (every one able to "
                        "is down, drained, or lost a point); `testbed cluster` shows them"
                    )
                time.sleep(self.poll_s)
                checkpoint()
        except BaseException:
            with signals_ignored():  # a second Ctrl-C must not leave tasks running
                self._stop_all()
            raise
        finally:
            self._write()
        return self._recorded()

    def _recorded(self) -> list[Outcome]:
        """The points' outcomes in the sweep's order, those `--only` left out among them."""
        every = self.outcomes | self.left_out
        return [every[p.index] for p in self.points if p.index in every]

    def _write(self) -> None:
        write_results(
            self.spec, self.points, self._recorded(), self.out, time.monotonic() - self.t0
        )

    def _total(self) -> int:
        return len(self.points) - len(self.left_out)

    def _record(self, o: Outcome) -> None:
        self.outcomes[o.point.index] = o
        self.ui.end_point(o, len(self.outcomes), self._total())

    # ------------------------------------------------------------------ one point

    def _launch(self, p: Point, n: Node) -> None:
        folder = self.runs_dir / p.folder
        if folder.exists():
            _set_aside(folder)
        token = self.receiver.expect(folder)
        name = f"tb-{self.sweep_id}-{p.index:03d}-{self.lost[p.index]}"
        labels = {LABEL_SWEEP: self.sweep_id, LABEL_OWNER: self.owner}
        config = self.c.configs.create(name=name, data=scenario_text(p).encode(), labels=labels)
        svc = PointService(
            name=name, image=self.image, node_id=n.id, cpus=n.cpus, config_id=config.id,
            config_name=name, folder=p.folder, sweep_id=self.sweep_id, index=p.index,
            upload_url=self.receiver.url, token=token, owner=self.owner,
        )  # fmt: skip
        try:
            service = self.c.services.create(**svc.create_kwargs())
        except BaseException:
            config.remove()
            self.receiver.forget(token)
            raise
        self.running[n.id] = Running(p, n, service, config, token, time.monotonic(), time.time())
        self.ui.start_point(p, n, len(self.outcomes), self._total())
        log.info("point %d (%s) on %s: service %s", p.index, p.title, n.hostname, name)

    def _follow(self, r: Running, node: Node | None, pending: collections.deque[Point]) -> None:
        got = self.receiver.get(r.token)
        if got is not None and got.arrived.is_set():
            if got.exit_code == 130 and got.error is None:  # its node stopped it, not we
                self._lost(r, f"node {r.node.hostname} stopped its run (drained?)", pending)
            else:
                self._finish(r, got.exit_code, got.error)
            return
        state, err = task_state(r.service)
        if state in ENDED:
            r.ended_at = r.ended_at or time.monotonic()
        elif state != "unknown":
            r.ended_at = None
        now = time.monotonic()
        if node is None or node.state != "ready":
            why = f"node {r.node.hostname} is {node.state if node else 'gone from the swarm'}"
        elif state == "orphaned":
            why = f"its task on {r.node.hostname} was orphaned"
        elif r.ended_at is not None and now - r.ended_at > SILENT_S:
            why = f"its task ended ({state}{': ' + err if err else ''}) and sent no run folder"
        elif state in WAITING and now - r.started > PENDING_S:
            why = (
                f"its task did not start in {PENDING_S:.0f} s ({state}{': ' + err if err else ''})"
            )
        else:
            return
        self._lost(r, why, pending)

    def _lost(self, r: Running, why: str, pending: collections.deque[Point]) -> None:
        self._remove(r)
        self.lost[r.point.index] += 1
        self.eligible.discard(r.node.id)  # that node gets no more points of this sweep
        if self.lost[r.point.index] < LOST_TRIES:
            log.warning("point %d: %s; it runs again on another node", r.point.index, why)
            self.ui.lost(r.point, r.node, why)
            pending.appendleft(r.point)
            return
        self._record(Outcome(r.point, "failed", time.monotonic() - r.started,
                             f"{why} ({LOST_TRIES} runs lost)", {}))  # fmt: skip
        self._write()

    def _finish(self, r: Running, exit_code: int | None, error: str | None,
                status: str | None = None) -> None:  # fmt: skip
        folder = self.runs_dir / r.point.folder
        self._remove(r)
        summary = _summary_of(folder)
        p = r.point
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "point.json").write_text(json.dumps(
            {"index": p.index, "labels": p.labels, "overrides": p.overrides,
             "identity": p.identity, "node": r.node.hostname,
             "wall_s": round(time.monotonic() - r.started, 2),
             "swarm": {"sweep": self.sweep_id, "launched_at": round(r.launched_at, 3),
                       "received_at": round(time.time(), 3), "runs_before": self.lost[p.index]}},
            indent=1))  # fmt: skip
        ok = error is None and summary.get("status") == "ok" and exit_code in (0, 3)
        why = error or summary.get("error") or f"testbed up exited {exit_code} on {r.node.hostname}"
        status = status or ("ok" if ok else "failed")
        o = Outcome(p, status, time.monotonic() - r.started,
                    None if status == "ok" else why, summary)  # fmt: skip
        check(o, folder)
        self._record(o)
        self._write()

    def _remove(self, r: Running, forget: bool = True) -> None:
        self.running.pop(r.node.id, None)
        if forget:
            self.receiver.forget(r.token)
        for obj in (r.service, r.config):
            try:
                obj.remove()
            except Exception as e:  # already gone
                log.debug("removing %s: %s", obj, e)

    def _stop_all(self) -> None:
        """Every service of the sweep removed (its task gets SIGTERM: `testbed up` tears down
        and sends its folder, recorded as interrupted), then wait until the swarm holds no
        task of the sweep on a node that is up."""
        stopping = list(self.running.values())
        for r in stopping:
            self._remove(r, forget=False)
        deadline = time.monotonic() + STOP_GRACE_S + 30
        while time.monotonic() < deadline:
            for r in stopping:
                got = self.receiver.get(r.token)
                if got is not None and got.arrived.is_set() and r.point.index not in self.outcomes:
                    self._finish(r, got.exit_code, got.error, status="interrupted")
            if not self._tasks_left():
                break
            time.sleep(1)
        for r in stopping:
            self.receiver.forget(r.token)
            if r.point.index not in self.outcomes:
                self.outcomes[r.point.index] = Outcome(
                    r.point, "interrupted", time.monotonic() - r.started, "interrupted"
                )

    def _tasks_left(self) -> bool:
        """Whether the swarm still has a task of the sweep on a node that is up (a down node's
        tasks stay listed until it comes back; its containers went with it)."""
        try:
            for s in self.c.services.list(filters={"label": f"{LABEL_SWEEP}={self.sweep_id}"}):
                try:
                    s.remove()
                except Exception as e:
                    log.debug("removing %s: %s", s, e)
            up = {n.id for n in cluster.nodes(self.c) if n.state == "ready"}
            tasks = self.c.api.tasks(filters={"label": f"{LABEL_SWEEP}={self.sweep_id}"})
        except Exception as e:
            log.warning("asking the swarm for the sweep's tasks: %s", e)
            return True
        return any(t.get("NodeID") in up for t in tasks)


def probe_nodes(
    c: Any, image: str, sweep_id: str, nodes: list[Node], timeout_s: float = PENDING_S
) -> dict[str, dict[str, Any]]:
    """Each usable node's kernel capabilities, from a one-task service there (point --probe)."""
    from testbed.results.swarm.service import probe_kwargs

    services = {n.id: c.services.create(**probe_kwargs(image, n.id, sweep_id, owner()))
                for n in nodes}  # fmt: skip
    out: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < len(services) and time.monotonic() < deadline:
            for node_id, s in services.items():
                if node_id in out:
                    continue
                state, err = task_state(s)
                if state == "complete":
                    text = b"".join(s.logs(stdout=True, stderr=False)).decode(errors="replace")
                    lines = [x for x in text.splitlines() if x.strip().startswith("{")]
                    out[node_id] = json.loads(lines[-1]) if lines else {"error": "no answer"}
                elif state in ENDED:
                    out[node_id] = {"error": f"the probe {state}: {err}"}
            time.sleep(0.5)
            checkpoint()
    finally:
        for s in services.values():
            try:
                s.remove()
            except Exception as e:
                log.debug("removing %s: %s", s, e)
    for n in nodes:
        out.setdefault(n.id, {"error": f"no answer in {timeout_s:.0f} s (pulling the image?)"})
    return out
