"""The run life cycle under faults: a killed orchestrator takes every process of its run with
it and its guardian removes the rest; ids and prefixes are claimed atomically; every stop
signal tears down; nothing is reaped from under its owner; the Prometheus cross-check does not
depend on when it is asked."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.core.exporters import orchestrator_exporter
from testbed.core.state import STATE_DIR, RunState
from testbed.network.runtime.namespaces import NETNS_DIR, create_netns
from testbed.network.runtime.netns import kill_processes, pids_in, spawn_in_netns
from testbed.network.runtime.registry import teardown
from testbed.run import prometheus as prom
from testbed.run.prometheus import Prometheus, cross_check

from .helpers import ROOT, present_objects, run_cli, running, spawn_up, up_to_kill, wait_running
from .test_lifecycle import scenario

HOROVOD = """\
name: hvd
duration: 120s
measure: {{warmup: 1s, cooldown: 0s}}
topology: {{hosts: 3, link_rate: 50mbit}}
tc_profile: thesis-2band
workloads:
  horovod: {{model_size: 1MB, compute_time: 200ms, tc_class: low}}
  websearch: {{arrival_rate: 0.5, tc_class: high}}
metrics: {{prometheus: {metrics}{file_sd}}}
"""


def run_processes(st: RunState) -> list[int]:
    """Every live process of the run: in its namespaces, or recorded in its state file, or a
    fork server / Prometheus started for it (found by their command lines)."""
    pids = pids_in([n for n in st.namespaces() if (NETNS_DIR / n).exists()])
    for o in st.objects:
        if o["kind"] == "process" and running(o["pid"]):
            pids.append(o["pid"])
    return [p for p in pids if running(p)]


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus: install.sh")
def test_kill9_takes_every_process_and_the_guardian_removes_the_rest(tmp_path):
    """kill -9 of `up` during a Horovod + web-search run with Prometheus and an external file_sd
    entry: the workers, generators, fork server and Prometheus die at once (PDEATHSIG), and the
    guardian removes namespaces, bridge, file_sd file and state without `testbed down`."""
    sd = tmp_path / "sd"
    sd.mkdir()
    before = present_objects()
    run_id = "4b1d00"
    # embedded Prometheus in one run, an external file_sd entry in the other
    for i, (mode, file_sd) in enumerate((("embedded", ""), ("external", f", file_sd_dir: {sd}"))):
        rid = run_id[:-1] + str(i)
        path = tmp_path / f"h{i}.yaml"
        path.write_text(HOROVOD.format(metrics=mode, file_sd=file_sd))
        with up_to_kill(rid, str(path), "--out", str(tmp_path / f"run{i}")) as up:
            st = up.running(timeout=120)
            time.sleep(2)
            victims = run_processes(st)
            assert len(victims) >= 6, victims  # 3 workers + 3 generators at least
            if mode == "external":
                assert (sd / f"testbed-{rid}.json").exists()
                assert any(o["kind"] == "file" for o in st.objects)
            else:
                assert any(o.get("name") == "prometheus" for o in st.objects)
            assert st.guardian_pid and running(st.guardian_pid)
            up.kill9()
            took = up.guardian_finished(timeout=20)
        assert took < 15, f"the guardian did not finish within 15 s ({took:.1f} s)"
        left = [p for p in victims if running(p)]
        assert not left, f"processes of the run outlived it: {left}"
        assert not (sd / f"testbed-{rid}.json").exists(), "file_sd entry left for Prometheus"
        assert not any(NETNS_DIR.glob(f"tb-{rid}-*"))
        summary = json.loads((tmp_path / f"run{i}" / "summary.json").read_text())
        assert summary["status"] == "killed" and "running" in summary["error"]
        assert "guardian" in (tmp_path / f"run{i}" / "testbed.log").read_text()
    assert present_objects() == before
    r = run_cli("down")
    assert r.returncode == 0 and "nothing to remove" in r.stdout


def test_kill9_of_orchestrator_and_guardian_then_down(tmp_path):
    """Should the guardian die too, the state file names everything and `down` removes it."""
    run_id = "c0ffee"
    with up_to_kill(run_id, str(scenario(tmp_path, "120s")), "--out", str(tmp_path / "run")) as up:
        namespaces = up.running().namespaces()
        up.kill9(guardian=True)
    time.sleep(0.5)
    assert all(Path("/run/netns", n).exists() for n in namespaces), "nothing left to clean?"
    assert not pids_in(namespaces), "the node processes died with the orchestrator"
    assert "dead" in run_cli("status").stdout
    r = run_cli("down", "0ther0")  # another run's id: this one is not touched
    assert r.returncode == 0 and "nothing to remove" in r.stdout, r.stdout + r.stderr
    assert all(Path("/run/netns", n).exists() for n in namespaces)
    r = run_cli("down", run_id)
    assert r.returncode == 0, r.stderr
    assert f"removed run {run_id}" in r.stdout
    assert not any(Path("/run/netns", n).exists() for n in namespaces)
    assert not Path(f"/sys/class/net/tb{run_id}").exists()
    assert not (STATE_DIR / f"{run_id}.json").exists()
    assert not (STATE_DIR / f"{run_id}.lock").exists()
    r = run_cli("down")
    assert r.returncode == 0 and "nothing to remove" in r.stdout


def test_down_removes_what_a_run_left_without_its_state_file(tmp_path):
    """kill -9 of `up` and of its guardian, then the state file lost: the leaf-spine run's
    namespaces (leaves, spines, hosts), its management bridge and veths, a process still in a
    namespace. `down RUN_ID` names and removes them all (it once knew only `sw`, `h<i>` and
    `probe` namespaces, and said "nothing to remove" over a leaf-spine run's)."""
    from testbed.core.state import claiming
    from testbed.network.preflight import check_prefixes
    from testbed.network.runtime.netns import NetnsRuntime
    from testbed.network.runtime.netns import teardown as netns_teardown
    from testbed.scenario.resolve import load_scenario_data
    from testbed.scenario.topology import build_plan

    before = present_objects()
    run_id = "5742a7"
    topology = {"kind": "leaf-spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 1}
    with claiming():  # free prefixes, claimed as a run claims them
        s = check_prefixes(load_scenario_data({"name": "lost", "topology": topology}, "test"))
        st = RunState(run_id=run_id, scenario="lost", out_dir=str(tmp_path),
                      root_prefixes=[str(s.topology.management_prefix)])  # fmt: skip
        assert st.create(), f"a run {run_id} exists"
    p = build_plan(s, run_id)
    rt = NetnsRuntime(p, st)
    sleeper = None
    try:
        rt.build()
        rt.close()
        sleeper = spawn_in_netns(NETNS_DIR / p.host("h1").netns, ["sleep", "600"],
                                 tmp_path / "sleep.log")  # fmt: skip
        st.remove()  # the record is lost; `st` still knows every object, for the cleanup
        roots = [p.mgmt_bridge, *(h.mgmt_peer for h in p.hosts)]
        assert {"leaf1", "spine2", "h2"} <= {n.rsplit("-", 1)[1] for n in p.namespaces}
        assert all((NETNS_DIR / n).exists() for n in p.namespaces)
        assert all(Path("/sys/class/net", n).exists() for n in roots)
        r = run_cli("down", "0ther0")  # another run's id: these are not touched
        assert r.returncode == 0 and "nothing to remove" in r.stdout, r.stdout + r.stderr
        assert all((NETNS_DIR / n).exists() for n in p.namespaces)
        r = run_cli("down", run_id)
        assert r.returncode == 0, r.stdout + r.stderr
        missed = [n for n in [*p.namespaces, *roots] if n not in r.stdout.split()]
        assert not missed, f"`down {run_id}` did not report {missed}:\n{r.stdout}"
        assert not [n for n in p.namespaces if (NETNS_DIR / n).exists()], r.stdout
        assert not [n for n in roots if Path("/sys/class/net", n).exists()], r.stdout
        assert sleeper.wait(10) < 0, "the process in the run's namespace outlived `down`"
        r = run_cli("down", run_id)
        assert r.returncode == 0 and "nothing to remove" in r.stdout, r.stdout + r.stderr
        assert present_objects() == before
    finally:
        rt.close()
        if sleeper is not None and sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
        netns_teardown(st)  # whatever is left
        st.remove()
        (STATE_DIR / f"{run_id}.lock").unlink(missing_ok=True)


def test_same_run_id_twice_at_once_one_is_refused_the_other_intact(tmp_path):
    """Two `up --run-id X` started together: exactly one runs; the other is refused before it
    creates anything, and the one that runs completes with its namespaces intact."""
    run_id = "d0d0d0"
    procs = [
        spawn_up(str(scenario(tmp_path, "4s", name=f"{i}.yaml")), "--out",
                 str(tmp_path / f"r{i}"), "--run-id", run_id)
        for i in range(2)
    ]  # fmt: skip
    outs = [p.communicate(timeout=120) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], [(p.returncode, e) for p, (_, e) in zip(procs, outs, strict=True)]
    loser = next(i for i, p in enumerate(procs) if p.returncode == 2)
    winner = 1 - loser
    assert "--run-id" in outs[loser][1] and "Traceback" not in outs[loser][1]
    assert not (tmp_path / f"r{loser}").exists()
    summary = json.loads((tmp_path / f"r{winner}" / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["linkcheck"]["short"]["completed"] > 0


def test_two_runs_at_once_on_default_prefixes_both_complete(tmp_path):
    """Both choose their management prefix at the same moment: the claim serialises them, so
    they get different prefixes and both complete."""
    procs = [
        spawn_up(str(scenario(tmp_path, "4s", name=f"{i}.yaml")), "--out", str(tmp_path / f"r{i}"))
        for i in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in outs]
    mgmt = set()
    for i in range(2):
        text = (tmp_path / f"r{i}" / "scenario.yaml").read_text()
        mgmt.add(next(x for x in text.splitlines() if "management_prefix" in x))
        assert json.loads((tmp_path / f"r{i}" / "summary.json").read_text())["status"] == "ok"
    assert len(mgmt) == 2, mgmt


def test_sighup_tears_down(tmp_path):
    """A dropped ssh session sends SIGHUP: the run tears down like on Ctrl-C."""
    run_id = "0b0b01"
    out = tmp_path / "run"
    proc = spawn_up(str(scenario(tmp_path, "120s")), "--out", str(out), "--run-id", run_id)
    try:
        st = wait_running(run_id, proc)
        proc.send_signal(signal.SIGHUP)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert not any(Path("/run/netns", n).exists() for n in st.namespaces())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and "SIGHUP" in summary["error"]


def test_down_force_waits_for_the_runs_own_teardown(tmp_path):
    """`down --force` on a live run stops it and waits on its lock: the run's own teardown is
    never doubled, the run exits as interrupted, and nothing is left."""
    run_id = "f0ace0"
    before = present_objects()
    proc = spawn_up(
        str(scenario(tmp_path, "120s")), "--out", str(tmp_path / "run"), "--run-id", run_id
    )
    try:
        wait_running(run_id, proc)
        r = run_cli("down", "--force", run_id)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "torn down by its own process" in r.stdout, r.stdout
    assert proc.returncode == 130
    assert present_objects() == before
    assert not (STATE_DIR / f"{run_id}.lock").exists()


def test_teardown_reaps_nothing_it_does_not_own(tmp_path):
    """kill_processes stops what lives in a namespace without stealing the exit status of a
    process someone else (here: this test's Popen) started: its owner still learns it was
    killed by SIGTERM (a waitpid(-1) inside the teardown would leave Popen a code of 0)."""
    ns = f"tb-reap{os.getpid() % 100000:05d}"
    create_netns(ns)
    try:
        p = spawn_in_netns(NETNS_DIR / ns, ["sleep", "60"], tmp_path / "sleep.log")
        deadline = time.monotonic() + 5
        while not pids_in([ns]) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert pids_in([ns])
        assert kill_processes([ns]) == 0
        assert p.wait(5) == -signal.SIGTERM
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus: install.sh")
def test_cross_check_agrees_however_late_it_asks(tmp_path):
    """The check queries what was scraped, not what is current: asked 20 times, before and
    after the exporter stopped (its series then turn stale), it agrees every time."""
    collector, server, port = orchestrator_exporter("127.0.0.1")
    recorded: list[dict] = []
    sink = Prometheus(tmp_path, 0.2, recorded.append)
    try:
        assert recorded and recorded[0]["pid"] == sink.proc.pid  # recorded before ready
        sink.set_targets(
            {"orchestrator": ("orchestrator", [f"127.0.0.1:{port}"])}, {"run_id": "abcdef"}
        )
        rows = [
            ({"node": f"h{i}", "direction": d, "class": "high"},
             {"bytes": 1000 * i, "packets": i, "drops": 0, "backlog": 0})
            for i in range(1, 5) for d in ("up", "down")
        ]  # fmt: skip
        collector.update(rows)
        assert sink.wait_scraped(time.time(), timeout=20)
        summary = {"started_at": time.time() - 5, "links": [{}] * 8}
        verdicts = []
        for i in range(20):
            if i == 5:
                server.shutdown()
                server.server_close()
            verdicts.append(cross_check(sink.url, "abcdef", summary)["agree"])
            time.sleep(0.15)
        assert all(verdicts), verdicts
    finally:
        sink.stop()


def test_prometheus_that_never_gets_ready_is_not_orphaned(tmp_path, monkeypatch):
    """A `prometheus` that never answers: the readiness wait fails the run, and the process,
    recorded before the wait, is stopped by the teardown (the test process stays alive, so no
    PDEATHSIG would do it)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    marker = f"tbfakeprom{os.getpid()}"
    (fake / "prometheus").write_text(f"#!/bin/bash\nexec -a {marker} sleep 300\n")
    (fake / "prometheus").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    monkeypatch.setattr(prom, "READY_TIMEOUT_S", 2.0)
    from testbed.core.errors import RunFailure
    from testbed.run.orchestrator import run
    from testbed.scenario.resolve import load_scenario_data

    s = load_scenario_data(
        {"name": "fakeprom", "duration": "3s", "measure": {"warmup": "1s", "cooldown": "0s"},
         "topology": {"hosts": 2},
         "workloads": {"linkcheck": {"pattern": "ring"}}},
        "test",
    )  # fmt: skip
    with pytest.raises(RunFailure, match="prometheus did not become ready"):
        run(s, out=tmp_path / "run")
    r = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert r.stdout.strip() == "", f"the fake prometheus was left running: {r.stdout}"


def test_kernel_probe_namespace_is_recorded(tmp_path, monkeypatch):
    """The probe's throwaway namespace is named after the run and recorded while it exists,
    so a kill during probing leaves nothing the guardian does not know of. (No cached answer
    here: the probe runs.) A second run of this boot takes the cached answer, with no
    namespace at all."""
    from testbed.network import preflight
    from testbed.network.preflight import kernel_capabilities

    monkeypatch.setattr(preflight, "KERNEL_CACHE", tmp_path / "kernel-cache")

    seen: list[list[str]] = []

    class Watched(RunState):
        def save(self) -> None:
            super().save()
            seen.append(self.namespaces())

    st = Watched(run_id="9b0be0", scenario="p", out_dir=str(tmp_path))
    try:
        kernel_capabilities(st)
    finally:
        st.remove()
    assert seen == [["tb-9b0be0-probe"], []]  # recorded, then forgotten once removed
    assert not (NETNS_DIR / "tb-9b0be0-probe").exists()
    seen.clear()
    st = Watched(run_id="9b0be1", scenario="p", out_dir=str(tmp_path))
    try:
        again = kernel_capabilities(st)
    finally:
        st.remove()
    assert seen == [] and again.missing_required() == []


def _fake_prometheus(tmp_path: Path, marker: str) -> Path:
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "prometheus").write_text(f"#!/bin/bash\nexec -a {marker} sleep 300\n")
    (fake / "prometheus").chmod(0o755)
    return fake


def test_ctrl_c_while_prometheus_starts_stops_at_once(tmp_path):
    """Ctrl-C during a blocking wait (here: Prometheus' readiness, 30 s at most) takes effect
    at once, not when the wait ends."""
    run_id = "0c0c0c"
    fake = _fake_prometheus(tmp_path, f"tbslowprom{os.getpid()}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed.cli", "up", str(scenario(tmp_path, "10s")),
         "--out", str(tmp_path / "run"), "--run-id", run_id],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            st = RunState.load(STATE_DIR / f"{run_id}.json") if (
                STATE_DIR / f"{run_id}.json").exists() else None  # fmt: skip
            if st is not None and any(o.get("name") == "prometheus" for o in st.objects):
                break
            time.sleep(0.05)
        time.sleep(1)  # inside the readiness wait
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert took < 10, f"stopping took {took:.1f} s"


def _netlink_sockets() -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):
            inode = target[8:-1]
            if inode in Path("/proc/net/netlink").read_text():
                n += 1
    return n


def test_a_failing_metrics_stop_still_closes_netlink(tmp_path):
    """The external file_sd entry cannot be written (its name is taken by a folder) and so
    cannot be removed either: the run fails, and still every netlink socket it opened in the
    namespaces is closed (they were skipped when stopping the metrics raised)."""
    from testbed.core.errors import RunFailure
    from testbed.run.orchestrator import run
    from testbed.scenario.resolve import load_scenario_data

    sd = tmp_path / "sd"
    run_id = "5dfa11"
    (sd / f"testbed-{run_id}.json").mkdir(parents=True)
    s = load_scenario_data(
        {"name": "sdfail", "duration": "3s", "measure": {"warmup": "1s", "cooldown": "0s"},
         "topology": {"hosts": 2}, "workloads": {"linkcheck": {"pattern": "ring"}},
         "metrics": {"prometheus": "external", "file_sd_dir": str(sd)}},
        "test",
    )  # fmt: skip
    before = _netlink_sockets()
    try:
        with pytest.raises(RunFailure):
            run(s, out=tmp_path / "run", run_id=run_id)
        assert _netlink_sockets() == before
    finally:
        (sd / f"testbed-{run_id}.json").rmdir()
        # the run's owner is this (live) process, so `down` would leave it alone: finish here
        st = RunState.load(STATE_DIR / f"{run_id}.json")
        assert teardown(st) == []
        st.remove()
        (STATE_DIR / f"{run_id}.lock").unlink()


def test_a_half_written_state_copy_goes_with_the_state(tmp_path):
    """A run killed between writing its state's temporary copy and renaming it leaves
    `<id>.<pid>.tmp`; removing the run's state (guardian, down) removes that too."""
    st = RunState(run_id="7e3a11", scenario="t", out_dir=str(tmp_path))
    assert st.create()
    half = STATE_DIR / "7e3a11.99999.tmp"
    half.write_text('{"run_id": "7e3a1')
    st.remove()
    assert not half.exists() and not st.path.exists()
