"""The swarm dispatcher's loop against a stand-in for the Docker engine (a swarm of fake nodes
whose tasks 'run' a few polls, then send a run folder to the real receiver): one point per
node at a time, a lost node's point run again elsewhere, a drained node's too, and every task
stopped on an interrupt with its folder kept as interrupted. The real swarm is exercised in
tests/docker/test_swarm.py; this checks the bookkeeping without root or Docker."""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.results import sweep as sw
from testbed.results.swarm import dispatch
from testbed.results.swarm.cluster import Node
from testbed.results.swarm.results import Receiver, upload

BASE = {"name": "b", "duration": "5s", "topology": {"hosts": 2}, "workloads": {"linkcheck": {}}}
ids = itertools.count()


class FakeNode:
    def __init__(self, name: str) -> None:
        self.attrs = {"ID": name, "Description": {"Hostname": name, "Resources": {"NanoCPUs": 2e9}},
                      "Spec": {"Role": "worker", "Availability": "active"},
                      "Status": {"State": "ready", "Addr": "10.0.0.1"}}  # fmt: skip


class FakeConfig:
    def __init__(self, swarm: FakeSwarm, name: str) -> None:
        self.id, self.swarm = f"cfg{next(ids)}", swarm
        swarm.configs_alive.add(self.id)

    def remove(self) -> None:
        self.swarm.configs_alive.discard(self.id)


class FakeService:
    """Runs `polls` polls, then sends a folder (summary status ok, exit 0) and completes; when
    removed while running, it 'tears down' and sends its folder with exit 130."""

    def __init__(self, swarm: FakeSwarm, kw: dict[str, Any]) -> None:
        self.swarm, self.kw = swarm, kw
        self.node = kw["constraints"][0].split("==")[1]
        self.polls, self.state = swarm.polls, "running"
        cmd = kw["command"]
        self.url, self.token = cmd[cmd.index("--upload") + 1], cmd[cmd.index("--token") + 1]
        self.folder = cmd[cmd.index("--folder") + 1]
        swarm.services.append(self)
        running = [s for s in swarm.services if s.node == self.node and s.state == "running"]
        swarm.max_per_node = max(swarm.max_per_node, len(running))

    def send(self, code: int) -> None:
        d = self.swarm.tmp / f"node-{next(ids)}" / self.folder
        d.mkdir(parents=True)
        status = "ok" if code in (0, 3) else "interrupted" if code == 130 else "failed"
        (d / "summary.json").write_text(json.dumps({"status": status, "duration_s": 5}))
        upload(self.url, self.token, d, code)

    def tick(self) -> None:
        if self.state != "running" or self.swarm.down(self.node):
            return
        self.polls -= 1
        if self.polls <= 0:
            self.send(self.swarm.exit_code(self))
            self.state = "complete"

    def tasks(self) -> list[dict[str, Any]]:
        self.tick()
        return [{"Status": {"State": self.state}, "CreatedAt": "0", "NodeID": self.node}]

    def remove(self) -> None:
        if self.state == "running" and not self.swarm.down(self.node):
            self.send(130)  # SIGTERM: `testbed up` tears down, the folder comes back
        self.state = "removed"
        if self in self.swarm.services:
            self.swarm.services.remove(self)


class FakeSwarm:
    def __init__(self, tmp: Path, nodes: list[str], polls: int = 3) -> None:
        self.tmp, self.polls = tmp, polls
        self.node_objs = {n: FakeNode(n) for n in nodes}
        self.services: list[FakeService] = []
        self.configs_alive: set[str] = set()
        self.max_per_node = 0
        self.downed: set[str] = set()
        self.exit_codes: dict[str, int] = {}  # folder → exit code its first run ends with
        self.interrupt_after: int | None = None
        self.listed = 0
        owner = self

        class Nodes:
            def list(self) -> list[FakeNode]:
                owner.listed += 1
                if owner.interrupt_after is not None and owner.listed > owner.interrupt_after:
                    owner.interrupt_after = None  # one Ctrl-C
                    raise KeyboardInterrupt
                return list(owner.node_objs.values())

        class Configs:
            def create(self, name: str, data: bytes, labels: dict[str, str]) -> FakeConfig:
                return FakeConfig(owner, name)

        class Services:
            def create(self, **kw: Any) -> FakeService:
                return FakeService(owner, kw)

            def list(self, filters: dict[str, str]) -> list[FakeService]:
                return [s for s in owner.services if s.state == "running"]

        class Api:
            def tasks(self, filters: dict[str, str]) -> list[dict[str, Any]]:
                return [{"NodeID": s.node, "Status": {"State": s.state}} for s in owner.services
                        if s.state == "running"]  # fmt: skip

        self.nodes, self.configs, self.api = Nodes(), Configs(), Api()
        self.services_api = Services()

    def down(self, node: str) -> bool:
        return node in self.downed

    def exit_code(self, s: FakeService) -> int:
        return self.exit_codes.pop(s.folder, 0)

    def take_down(self, node: str) -> None:
        self.downed.add(node)
        self.node_objs[node].attrs["Status"]["State"] = "down"


class Client:
    def __init__(self, swarm: FakeSwarm) -> None:
        self.nodes, self.configs, self.api = swarm.nodes, swarm.configs, swarm.api
        self.services = swarm.services_api


@pytest.fixture(autouse=True)
def bounded():
    """A dispatcher that never ends fails the test instead of hanging it."""
    import signal

    def late(*_: Any) -> None:
        raise TimeoutError("the dispatcher did not finish in 60 s")

    old = signal.signal(signal.SIGALRM, late)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


class UI:
    def __init__(self) -> None:
        self.lost_points: list[tuple[int, str]] = []

    def start_point(self, *a: Any) -> None:
        pass

    def end_point(self, *a: Any) -> None:
        pass

    def lost(self, point: Any, node: Any, why: str) -> None:
        self.lost_points.append((point.index, why))


def setup(tmp_path: Path, nodes: list[str], seeds: list[int], polls: int = 3):
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    f = tmp_path / "sweep.yaml"
    f.write_text(yaml.safe_dump({"name": "s", "base": "base.yaml", "seeds": seeds}))
    spec = sw.load_spec(f)
    swarm = FakeSwarm(tmp_path, nodes, polls)
    receiver = Receiver("127.0.0.1")
    ns = [Node(n, n, "worker", "ready", "active", 2, "10.0.0.1") for n in nodes]
    d = dispatch.Dispatcher(Client(swarm), spec, sw.expand(spec, f), tmp_path / "out", UI(),
                            "img", receiver, ns, "abc123", poll_s=0.005)  # fmt: skip
    return d, swarm, receiver


def rows(tmp_path: Path) -> list[dict[str, str]]:
    with open(tmp_path / "out" / "sweep.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_points_spread_one_per_node_and_come_back_as_a_local_sweeps(tmp_path):
    d, swarm, receiver = setup(tmp_path, ["m1", "m2"], [1, 2, 3, 4, 5])
    try:
        outcomes = d.run()
    finally:
        receiver.close()
    assert [o.status for o in outcomes] == ["ok"] * 5
    assert swarm.max_per_node == 1  # never two points on one node
    assert [r["status"] for r in rows(tmp_path)] == ["ok"] * 5
    nodes = {json.loads((tmp_path / "out" / "runs" / o.point.folder / "point.json").read_text())
             ["node"] for o in outcomes}  # fmt: skip
    assert nodes == {"m1", "m2"}
    assert swarm.services == [] and swarm.configs_alive == set()  # nothing left


def test_a_point_whose_node_goes_down_runs_again_on_another(tmp_path):
    d, swarm, receiver = setup(tmp_path, ["m1", "m2"], [1, 2], polls=50)
    original = swarm.services_api.create

    def create(**kw: Any) -> FakeService:
        s = original(**kw)
        if s.node == "m1" and "m1" not in swarm.downed:
            swarm.take_down("m1")  # the machine dies with its first point on it
        return s

    swarm.services_api.create = create  # type: ignore[method-assign]
    try:
        outcomes = d.run()
    finally:
        receiver.close()
    assert [o.status for o in outcomes] == ["ok", "ok"]
    assert [i for i, _ in d.ui.lost_points] == [0] and "m1 is down" in d.ui.lost_points[0][1]
    point = json.loads(
        (tmp_path / "out" / "runs" / outcomes[0].point.folder / "point.json").read_text()
    )
    assert point["node"] == "m2" and point["swarm"]["runs_before"] == 1


def test_a_run_its_node_stopped_runs_again_but_one_that_failed_does_not(tmp_path):
    d, swarm, receiver = setup(tmp_path, ["m1", "m2", "m3"], [1, 2])
    folders = [p.folder for p in d.points]
    swarm.exit_codes = {folders[0]: 130, folders[1]: 1}  # drained; failed for its own sake
    try:
        outcomes = d.run()
    finally:
        receiver.close()
    assert [o.status for o in outcomes] == ["ok", "failed"]
    assert [i for i, _ in d.ui.lost_points] == [0] and "stopped its run" in d.ui.lost_points[0][1]


def test_an_interrupt_stops_every_task_and_keeps_their_folders(tmp_path):
    d, swarm, receiver = setup(tmp_path, ["m1", "m2"], [1, 2, 3], polls=10_000)
    swarm.interrupt_after = 5  # Ctrl-C while two points run
    try:
        with pytest.raises(KeyboardInterrupt):
            d.run()
    finally:
        receiver.close()
    assert swarm.services == [] and swarm.configs_alive == set()
    assert [r["status"] for r in rows(tmp_path)] == ["interrupted", "interrupted"]
    for r in rows(tmp_path):
        assert (
            json.loads((tmp_path / "out" / r["folder"] / "summary.json").read_text())["status"]
            == "interrupted"
        )


def test_only_sends_the_points_it_keeps_and_records_the_rest_as_not_run(tmp_path):
    d, _swarm, receiver = setup(tmp_path, ["m1", "m2"], [1, 2, 3])
    d.only = sw.only_points(d.spec, d.points, ("seed=1,3",))
    try:
        outcomes = d.run()
    finally:
        receiver.close()
    assert [o.status for o in outcomes] == ["ok", sw.NOT_RUN, "ok"]
    assert [r["status"] for r in rows(tmp_path)] == ["ok", sw.NOT_RUN, "ok"]
    runs = sorted(f.name for f in (tmp_path / "out" / "runs").iterdir())
    assert runs == [d.points[0].folder, d.points[2].folder]  # seed 2 sent to no node
