"""The swarm sweep's pure parts: a point's service, its run folder's way back, the refusals
before anything starts. The swarm itself is exercised in tests/swarm/."""

from __future__ import annotations

import io
import json
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from testbed.core.errors import EnvironmentProblem, ScenarioError
from testbed.results import sweep as sw
from testbed.results.swarm import dispatch
from testbed.results.swarm.cluster import Node
from testbed.results.swarm.results import Receiver, upload
from testbed.results.swarm.run import check_kernels
from testbed.results.swarm.service import PointService
from testbed.scenario.resolve import load_scenario_data

BASE = {"name": "b", "duration": "5s", "topology": {"hosts": 3},
        "workloads": {"linkcheck": {}}}  # fmt: skip


def points(tmp_path: Path, base: dict | None = None) -> list[sw.Point]:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base or BASE))
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump({"name": "s", "base": "base.yaml", "seeds": [1, 2]}))
    return sw.expand(sw.load_spec(p), p)


def test_a_point_is_one_task_pinned_to_its_node_that_never_restarts():
    svc = PointService(
        name="tb-abc123-004-0", image="10.0.0.1:5000/testbed-runner:x", node_id="n0de",
        cpus=4, config_id="cfg", config_name="tb-abc123-004-0", folder="004-s2",
        sweep_id="abc123", index=4, upload_url="http://10.0.0.1:4000", token="t0k",
    )  # fmt: skip
    kw = svc.create_kwargs()
    assert kw["constraints"] == ["node.id==n0de"]
    assert dict(kw["mode"]) == {"replicated": {"Replicas": 1}}
    assert kw["restart_policy"]["Condition"] == "none"
    assert kw["resources"]["Reservations"]["NanoCPUs"] == 4_000_000_000  # the node's CPUs
    assert kw["cap_add"] == ["ALL"] and kw["cap_drop"] == ["SYS_RESOURCE"]
    assert "networks" not in kw  # its own network namespace: what the run makes dies with it
    (cfg,) = kw["configs"]
    assert cfg["File"]["Name"] == "/run/testbed-point/scenario.yaml"
    assert kw["command"][-6:] == ["--folder", "004-s2", "--upload", "http://10.0.0.1:4000",
                                  "--token", "t0k"]  # fmt: skip
    assert kw["labels"] == {
        "testbed.sweep": "abc123",
        "testbed.point": "4",
        "testbed.folder": "004-s2",
        "testbed.owner": "",
    }


def test_a_points_scenario_travels_as_text_and_resolves_to_the_same_point(tmp_path):
    for p in points(tmp_path):
        again = load_scenario_data(yaml.safe_load(dispatch.scenario_text(p)), "node")
        assert sw.identity_of(again) == p.identity
        assert "prefix" not in yaml.safe_load(dispatch.scenario_text(p))["topology"]


def test_a_point_that_names_a_local_file_is_refused(tmp_path):
    cdf = tmp_path / "sizes.csv"
    cdf.write_text("1000,0.5\n2000,1.0\n")
    base = {**BASE, "workloads": {"websearch": {"utilization": "1%", "sizes": str(cdf)}}}
    with pytest.raises(
        ScenarioError, match=r"workloads\.websearch\.sizes names a file of this machine"
    ):
        dispatch.portable(points(tmp_path, base))


def _folder(tmp_path: Path) -> Path:
    run = tmp_path / "node" / "000-s1"
    (run / "prometheus" / "wal").mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"status": "ok"}))
    (run / "prometheus" / "wal" / "00000000").write_bytes(b"\x00" * 1000)
    return run


def test_a_run_folder_comes_back_whole_under_its_token(tmp_path):
    r = Receiver("127.0.0.1")
    try:
        dest = tmp_path / "sweep" / "runs" / "000-s1"
        dest.parent.mkdir(parents=True)
        token = r.expect(dest)
        upload(r.url, token, _folder(tmp_path), exit_code=3)
        e = r.get(token)
        assert e is not None and e.arrived.is_set() and e.error is None and e.exit_code == 3
        assert json.loads((dest / "summary.json").read_text()) == {"status": "ok"}
        assert (dest / "prometheus" / "wal" / "00000000").stat().st_size == 1000
        with pytest.raises(urllib.error.HTTPError) as again:  # once only
            upload(r.url, token, _folder(tmp_path / "b"), exit_code=0)
        assert again.value.code == 409
        with pytest.raises(urllib.error.HTTPError) as stranger:
            upload(r.url, "not-a-token", _folder(tmp_path / "c"), exit_code=0)
        assert stranger.value.code == 403
    finally:
        r.close()


def test_a_folder_that_would_write_outside_is_refused(tmp_path):
    r = Receiver("127.0.0.1")
    try:
        dest = tmp_path / "runs" / "000"
        dest.parent.mkdir(parents=True)
        token = r.expect(dest)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            info = tarfile.TarInfo("../escaped")
            info.size = 2
            tar.addfile(info, io.BytesIO(b"hi"))
        req = urllib.request.Request(f"{r.url}/{token}", data=buf.getvalue(), method="PUT")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        assert e.value.code == 400
        assert not (tmp_path / "runs" / "escaped").exists() and not dest.exists()
        assert "did not unpack" in (r.get(token).error or "")
    finally:
        r.close()


def test_a_node_that_cannot_run_points_is_named_with_the_fix():
    nodes = [Node("a", "m1", "worker", "ready", "active", 2, "10.0.0.2"),
             Node("b", "m2", "worker", "ready", "active", 2, "10.0.0.3")]  # fmt: skip
    ok = {"present": ["veth", "bridge", "htb", "pfifo", "u32"], "missing": []}
    check_kernels({"a": ok, "b": ok}, nodes)
    bad = {
        "present": ["veth"],
        "missing": ["htb"],
        "how": {"htb": "CONFIG_NET_SCH_HTB (modprobe sch_htb)"},
    }
    with pytest.raises(EnvironmentProblem) as e:
        check_kernels({"a": ok, "b": bad}, nodes)
    assert str(e.value) == (
        "--swarm: node m2's kernel lacks htb (CONFIG_NET_SCH_HTB (modprobe sch_htb)); drain it "
        "(docker node update --availability drain m2) or fix it"
    )
