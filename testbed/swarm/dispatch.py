"""The points of a sweep, spread over the swarm: at most one per node, each a service
(service.py) whose run folder comes back through the receiver (results.py) into the same
`DIR/runs/NNN-…/` a local sweep writes; sweep.csv, sweep.json, resuming and `expect:` as in
sweep.run_sweep.

A point whose node goes down or leaves (or whose task is orphaned, or ends without sending
its folder) runs again on another node, up to LOST_TRIES times; a point that fails for its
own sake (its `testbed up` failed) is recorded failed, as locally. Ctrl-C removes every
service of the sweep (each task's `testbed up` gets SIGTERM and tears down) and waits for
their tasks to end."""

from __future__ import annotations

import collections
import json
import logging
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed.errors import ScenarioError
from testbed.stopping import Interrupted, checkpoint, signals_ignored
from testbed.swarm import cluster
from testbed.swarm.cluster import LABEL_SWEEP, Node
from testbed.swarm.results import Receiver
from testbed.swarm.service import STOP_GRACE_S, PointService
from testbed.sweep import (
    Outcome,
    Point,
    SweepSpec,
    _set_aside,
    _summary_of,
    check,
    finished_runs,
    write_results,
)
from testbed.workloads import kinds

log = logging.getLogger(__name__)
LOST_TRIES = 3  # runs of one point on nodes that went away, before it is recorded failed
SILENT_S = 30.0  # a task that ended and sent nothing for this long: its node lost it
ENDED = ("complete", "failed", "rejected", "shutdown", "orphaned", "remove")


def new_sweep_id() -> str:
    return secrets.token_hex(3)


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


@dataclass
class Running:
    point: Point
    node: Node
    service: Any
    config: Any
    token: str
    started: float
    launched_at: float  # epoch: the service created
    ended_at: float | None = None


def task_state(service: Any) -> tuple[str, str]:
    """The state of the service's (one) task and its error, "new" before it has one."""
    try:
        tasks = service.tasks()
    except Exception:  # the service is gone: as good as removed
        return "remove", "the service is gone"
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
    ) -> None:
        self.c, self.spec, self.points, self.out, self.ui = c, spec, points, out, ui
        self.image, self.receiver, self.sweep_id, self.poll_s = image, receiver, sweep_id, poll_s
        self.eligible = {n.id for n in nodes_ok}
        self.runs_dir = out / "runs"
        self.outcomes: dict[int, Outcome] = {}
        self.running: dict[str, Running] = {}
        self.lost: collections.Counter[int] = collections.Counter()
        self.t0 = time.monotonic()

    # ------------------------------------------------------------------ the loop

    def run(self) -> list[Outcome]:
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        (self.out / "sweep.yaml").write_text(
            yaml.safe_dump(self.spec.model_dump(mode="json"), sort_keys=False)
        )
        done_before = finished_runs(self.runs_dir)
        pending: collections.deque[Point] = collections.deque()
        for p in self.points:
            prior = done_before.get(p.identity)
            if prior is None:
                pending.append(p)
                continue
            p.folder = prior.name
            o = Outcome(p, "skipped", 0.0, None, json.loads((prior / "summary.json").read_text()))
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
                    raise ScenarioError(
                        "--swarm: no node of the swarm is left to run points (every one able to "
                        "is down or drained); `testbed cluster` shows them"
                    )
                time.sleep(self.poll_s)
                checkpoint()
        except (KeyboardInterrupt, Interrupted):
            with signals_ignored():  # a second Ctrl-C must not leave tasks running
                self._stop_all()
            raise
        finally:
            self._write()
        return [self.outcomes[p.index] for p in self.points if p.index in self.outcomes]

    def _write(self) -> None:
        done = [self.outcomes[p.index] for p in self.points if p.index in self.outcomes]
        write_results(self.spec, self.points, done, self.out, time.monotonic() - self.t0)

    def _record(self, o: Outcome) -> None:
        self.outcomes[o.point.index] = o
        self.ui.end_point(o, len(self.outcomes), len(self.points))

    # ------------------------------------------------------------------ one point

    def _launch(self, p: Point, n: Node) -> None:
        folder = self.runs_dir / p.folder
        if folder.exists():
            _set_aside(folder)
        token = self.receiver.expect(folder)
        name = f"tb-{self.sweep_id}-{p.index:03d}-{self.lost[p.index]}"
        labels = {LABEL_SWEEP: self.sweep_id}
        config = self.c.configs.create(name=name, data=scenario_text(p).encode(), labels=labels)
        svc = PointService(
            name=name, image=self.image, node_id=n.id, cpus=n.cpus, config_id=config.id,
            config_name=name, folder=p.folder, sweep_id=self.sweep_id, index=p.index,
            upload_url=self.receiver.url, token=token,
        )  # fmt: skip
        service = self.c.services.create(**svc.create_kwargs())
        self.running[n.id] = Running(p, n, service, config, token, time.monotonic(), time.time())
        self.ui.start_point(p, n, len(self.outcomes), len(self.points))
        log.info("point %d (%s) on %s: service %s", p.index, p.title, n.hostname, name)

    def _follow(self, r: Running, node: Node | None, pending: collections.deque[Point]) -> None:
        got = self.receiver.get(r.token)
        state, err = task_state(r.service)
        if got is not None and got.arrived.is_set():
            self._finish(r, got.exit_code, got.error)
            return
        if state in ENDED and r.ended_at is None:
            r.ended_at = time.monotonic()
        gone = node is None or node.state != "ready" or state == "orphaned"
        silent = r.ended_at is not None and time.monotonic() - r.ended_at > SILENT_S
        if not (gone or silent):
            return
        why = (
            f"node {r.node.hostname} is {node.state if node else 'gone'}"
            if gone
            else f"its task ended ({state}{': ' + err if err else ''}) and sent no run folder"
        )
        self._remove(r)
        self.lost[r.point.index] += 1
        if self.lost[r.point.index] < LOST_TRIES:
            log.warning("point %d: %s; it runs again on another node", r.point.index, why)
            self.ui.lost(r.point, r.node, why)
            pending.appendleft(r.point)
            if gone:
                self.eligible.discard(r.node.id)
            return
        o = Outcome(r.point, "failed", time.monotonic() - r.started,
                    f"{why}, {LOST_TRIES} times", {})  # fmt: skip
        self._record(o)
        self._write()

    def _finish(self, r: Running, exit_code: int | None, error: str | None) -> None:
        folder = self.runs_dir / r.point.folder
        self._remove(r)
        summary = _summary_of(folder)
        p = r.point
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "point.json").write_text(json.dumps(
            {"index": p.index, "labels": p.labels, "overrides": p.overrides,
             "identity": p.identity, "node": r.node.hostname,
             "swarm": {"sweep": self.sweep_id, "launched_at": round(r.launched_at, 3),
                       "received_at": round(time.time(), 3), "runs_before": self.lost[p.index]}},
            indent=1))  # fmt: skip
        ok = error is None and summary.get("status") == "ok" and exit_code in (0, 3)
        why = error or summary.get("error") or f"testbed up exited {exit_code} on {r.node.hostname}"
        o = Outcome(p, "ok" if ok else "failed", time.monotonic() - r.started,
                    None if ok else why, summary)  # fmt: skip
        check(o, folder)
        self._record(o)
        self._write()

    def _remove(self, r: Running) -> None:
        self.running.pop(r.node.id, None)
        self.receiver.forget(r.token)
        for obj in (r.service, r.config):
            try:
                obj.remove()
            except Exception as e:  # already gone
                log.debug("removing %s: %s", obj, e)

    def _stop_all(self) -> None:
        """Ctrl-C: every service of the sweep removed (its task gets SIGTERM: `testbed up`
        tears down), then wait until none of their tasks runs."""
        for r in list(self.running.values()):
            self._remove(r)
        deadline = time.monotonic() + STOP_GRACE_S + 10
        while time.monotonic() < deadline:
            left = [
                s for s in self.c.services.list(filters={"label": f"{LABEL_SWEEP}={self.sweep_id}"})
            ]
            if not left and not self._containers_left():
                return
            for s in left:
                try:
                    s.remove()
                except Exception as e:
                    log.debug("removing %s: %s", s, e)
            time.sleep(1)

    def _containers_left(self) -> bool:
        """Whether any task of the sweep still runs anywhere (the managers know each task)."""
        try:
            tasks = self.c.api.tasks(filters={"label": f"{LABEL_SWEEP}={self.sweep_id}"})
        except Exception:
            return False
        return any(t.get("Status", {}).get("State") in ("running", "starting") for t in tasks)


def probe_nodes(
    c: Any, image: str, sweep_id: str, nodes: list[Node], timeout_s: float = 300
) -> dict[str, dict[str, Any]]:
    """Each usable node's kernel capabilities, from a one-task service there (point --probe)."""
    from testbed.swarm.service import probe_kwargs

    services = {n.id: c.services.create(**probe_kwargs(image, n.id, sweep_id)) for n in nodes}
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
