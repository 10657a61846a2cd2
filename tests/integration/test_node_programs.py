"""Node programs on their own: the fork server's protocol, and a web-search generator that is
stopped before its drain ends. Loopback addresses only (127.0.0.x), real TCP."""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.core.errors import RunFailure
from testbed.core.window import Window
from testbed.network.runtime.base import Launch
from testbed.network.runtime.forkserver import ForkServer

from .helpers import ROOT

CHILD = """
import os, socket, sys
print("noise from an import")  # must not disturb the server's protocol


def main(argv):
    out = open(argv[0], "w")
    out.write(f"{socket.gethostname()} {os.getgid()} {os.environ.get('SEEN', '')}")
    out.close()
    if argv[1] == "fail":
        raise RuntimeError("failed on purpose")
    return int(argv[1])
"""


@pytest.fixture
def server(tmp_path, monkeypatch):
    (tmp_path / "tbchild.py").write_text(CHILD)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    fs = ForkServer(["tbchild"], tmp_path / "server.log")
    fs.wait_ready(timeout=30)
    yield fs
    fs.close()


def test_fork_server_runs_programs_as_asked(server, tmp_path):
    netns = Path("/proc/self/ns/net")  # our own namespace: setns into it is allowed to root
    hostname = os.uname().nodename
    ok = server.spawn(netns, Launch("tbchild", [str(tmp_path / "a"), "0"], tmp_path / "a.log",
                                    {"SEEN": "yes"}, gid=64242, new_uts=True))  # fmt: skip
    code = server.spawn(netns, Launch("tbchild", [str(tmp_path / "b"), "7"], tmp_path / "b.log"))
    boom = server.spawn(netns, Launch("tbchild", [str(tmp_path / "c"), "fail"], tmp_path / "c.log"))
    assert (ok.wait(10), code.wait(10), boom.wait(10)) == (0, 7, 1)
    name, gid, seen = (tmp_path / "a").read_text().split()
    assert (name, gid, seen) == (hostname, "64242", "yes")  # own UTS namespace, same name
    assert "failed on purpose" in (tmp_path / "c.log").read_text()  # traceback in its log
    assert os.uname().nodename == hostname


def test_fork_server_reports_a_child_killed_by_a_signal(server, tmp_path):
    p = server.spawn(Path("/proc/self/ns/net"), Launch("time", [], tmp_path / "t.log"))
    # `time` has no main(): the child fails at once with a traceback in its own log
    assert p.wait(10) == 1 and "main" in (tmp_path / "t.log").read_text()
    bad = Path("/run/netns/tb-no-such-namespace")
    q = server.spawn(bad, Launch("tbchild", [str(tmp_path / "x"), "0"], tmp_path / "x.log"))
    assert q.wait(10) == 1 and "No such file" in (tmp_path / "x.log").read_text()


def test_fork_server_that_cannot_start_says_so(tmp_path):
    fs = ForkServer(["no_such_module_here"], tmp_path / "server.log")
    with pytest.raises(RunFailure, match="fork server for no_such_module_here failed"):
        fs.wait_ready(timeout=30)
    fs.close()
    assert "No module named 'no_such_module_here'" in (tmp_path / "server.log").read_text()


def test_a_generator_stopped_during_its_drain_writes_its_running_flows(tmp_path):
    """SIGTERM (the orchestrator's last resort after the drain limit) must not lose the flows
    that were still running: they are written as not completed, i.e. counted as censored.
    The only peer here accepts connections and never answers, so every flow keeps running."""
    cfg = {
        "cdf": [[10_000, 0.0], [10_000, 1.0]],
        "peers": {"a": "127.0.0.2", "mute": "127.0.0.3"},
        "rate_per_host": 5.0,
        "dscp": 0,
        "port": 45301,
        "seed": 1,
    }
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    mute = socket.socket()
    mute.bind(("127.0.0.3", 45301))
    mute.listen(128)  # the kernel completes handshakes; nothing is ever sent back
    go = tmp_path / "go.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed.workloads.websearch.node", "--host", "a",
         "--bind", "127.0.0.2", "--config", str(tmp_path / "cfg.json"), "--go", str(go),
         "--out", str(tmp_path / "flows-a.csv")],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "flows-a.ready").exists():
            assert time.monotonic() < deadline, "the generator never became ready"
            assert proc.poll() is None
            time.sleep(0.05)
        Window(time.time() + 0.1, 2.0, 0.0, 0.0, 3600.0).write(go)
        time.sleep(3.0)  # past the end of the run: draining
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        mute.close()
    with open(tmp_path / "flows-a.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 3  # ~10 flows drawn in 2 s
    assert all(r["completed"] == "False" and r["measured"] == "True" for r in rows)
    assert all(not r["error"] for r in rows)  # censored, not failed
    assert not (tmp_path / "flows-a.done").exists()  # it never finished its drain
