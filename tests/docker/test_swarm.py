"""`testbed sweep --swarm` on three machines emulated here (machines.py): a sweep spreads over
them and reports as a local one does; a machine killed mid-point has its point run again on
another; Ctrl-C leaves no service, container, namespace or link on any machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.integration.helpers import ROOT

from .machines import Machines

BASE = {
    "name": "swarm-points", "duration": "3s", "measure": {"warmup": "1s", "cooldown": "0.5s"},
    "topology": {"hosts": 2, "link_rate": "20mbit"}, "workloads": {"linkcheck": {}},
}  # fmt: skip


@pytest.fixture(scope="module")
def machines():
    with Machines(3) as m:
        yield m


def write_sweep(tmp_path: Path, seeds: list[int], duration: str = "3s") -> Path:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({**BASE, "duration": duration}))
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump({"name": "s", "base": "base.yaml", "seeds": seeds}))
    return p


def sweep(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "testbed.cli", "sweep", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def files(run: Path) -> set[str]:
    """A run folder's files, but those inside Prometheus' TSDB (block names are random)."""
    names = {str(p.relative_to(run)) for p in run.rglob("*") if p.is_file()}
    return {n for n in names if not n.startswith("prometheus/")}


def running_points(c) -> list[dict]:
    """The running tasks of sweep points (not the kernel probes), with their service."""
    out = []
    for svc in c.services.list(filters={"label": "testbed.sweep"}):
        if "probe" in svc.name:
            continue
        out += [t for t in svc.tasks() if t["Status"]["State"] == "running"]
    return out


EMPTY = {"containers": "", "processes": ""}


def nothing_left(m: Machines, alive: list[str] | None = None, within_s: float = 60) -> None:
    """No service or config of a sweep on the manager; no container or run process on any
    machine (the agents remove a task's container a little after its service: polled)."""
    assert m.c.services.list(filters={"label": "testbed.sweep"}) == []
    assert m.c.configs.list(filters={"label": "testbed.sweep"}) == []
    names = alive if alive is not None else m.names()
    deadline = time.monotonic() + within_s
    while True:
        left = {n: m.leftovers(n) for n in names}
        if all(v == EMPTY for v in left.values()):
            return
        assert time.monotonic() < deadline, left
        time.sleep(1)


def test_an_engine_in_no_swarm_is_refused_in_one_line(tmp_path):
    """First in the file, before the machines fixture makes this engine a manager."""
    import docker

    if (docker.from_env().info().get("Swarm") or {}).get("LocalNodeState") == "active":
        pytest.fail("this engine is in a swarm already: the tests make their own")
    r = sweep(str(write_sweep(tmp_path, [1])), "--swarm", "--out", str(tmp_path / "out"))
    assert r.returncode == 1, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "not in a swarm" in lines[0] and "docker swarm init" in lines[0]
    assert "Traceback" not in r.stderr and not (tmp_path / "out").exists()


def test_a_swarm_with_no_node_that_can_run_points_is_refused(machines, tmp_path):
    """Every node drained (the manager is already): one line, exit 1, no service started."""
    drained = []
    try:
        for n in machines.c.nodes.list():
            spec = n.attrs["Spec"]
            if spec.get("Availability") == "active":
                n.update({**spec, "Availability": "drain"})
                drained.append(n.id)
        r = sweep(str(write_sweep(tmp_path, [1])), "--swarm", "--out", str(tmp_path / "out"))
        assert r.returncode == 1, r.stdout + r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
        assert machines.c.services.list(filters={"label": "testbed.sweep"}) == []
        assert not (tmp_path / "out").exists()
    finally:
        for node_id in drained:
            n = machines.c.nodes.get(node_id)
            n.update({**n.attrs["Spec"], "Availability": "active"})


def test_a_sweep_spreads_over_the_machines_and_reports_as_a_local_one(machines, tmp_path):
    f = write_sweep(tmp_path, [1, 2, 3, 4])
    r = sweep(str(f), "--swarm", "--out", str(tmp_path / "swarm"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    runs = sorted((tmp_path / "swarm" / "runs").iterdir())
    assert len(runs) == 4
    nodes = {json.loads((p / "point.json").read_text())["node"] for p in runs}
    assert nodes <= set(machines.names()) and len(nodes) >= 2, nodes
    for p in runs:
        s = json.loads((p / "summary.json").read_text())
        assert s["status"] == "ok" and s["metrics"]["cross_check"]["agree"], p.name
    # the same sweep here: the same files in every run folder, the same report
    local = sweep(str(f), "--out", str(tmp_path / "local"))
    assert local.returncode == 0, local.stderr[-3000:]
    for a, b in zip(runs, sorted((tmp_path / "local" / "runs").iterdir()), strict=True):
        assert a.name == b.name and files(a) == files(b), a.name
        assert set(json.loads((a / "summary.json").read_text())) == set(
            json.loads((b / "summary.json").read_text())
        )
    rep = [subprocess.run([sys.executable, "-m", "testbed.cli", "report", str(tmp_path / d),
                           "--json"], capture_output=True, text=True, cwd=ROOT)
           for d in ("swarm", "local")]  # fmt: skip
    assert [x.returncode for x in rep] == [0, 0], rep[0].stderr + rep[1].stderr
    a, b = (json.loads(x.stdout) for x in rep)
    assert [sorted(p) for p in a["points"]] == [sorted(p) for p in b["points"]]
    nothing_left(machines)


def test_ctrl_c_leaves_nothing_on_any_machine(machines, tmp_path):
    m = machines
    f = write_sweep(tmp_path, [1, 2], duration="60s")
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "sweep", str(f), "--swarm",
                             "--out", str(tmp_path / "out")], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "120"})  # fmt: skip
    try:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            if len(running_points(m.c)) == 2:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.5)
        time.sleep(5)  # inside both runs
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-3000:]
    nothing_left(m)


def test_a_machine_killed_mid_point_has_its_point_run_elsewhere(machines, tmp_path):
    f = write_sweep(tmp_path, [7], duration="30s")
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", "sweep", str(f), "--swarm",
                             "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 900
        victim = None
        while victim is None and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            for t in running_points(machines.c):
                victim = machines.c.nodes.get(t["NodeID"]).attrs["Description"]["Hostname"]
            time.sleep(0.5)
        assert victim is not None, "the point never ran"
        time.sleep(5)  # well inside its run
        t_kill = time.monotonic()
        machines.kill(victim)
        stdout, stderr = proc.communicate(timeout=900)
        recovered = time.monotonic() - t_kill
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    point = json.loads((out / "runs" / "000-s7" / "point.json").read_text())
    assert point["node"] != victim
    assert "again elsewhere" in stderr and victim in stderr
    assert json.loads((out / "runs" / "000-s7" / "summary.json").read_text())["status"] == "ok"
    print(f"recovered in {recovered:.0f} s")
    nothing_left(machines, [n for n in machines.names() if n != victim])
