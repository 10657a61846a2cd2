"""`up --hold`, `exec` and `shell`: the user's own tools inside a live run's hosts, measured
against the link's cap by iperf3 (another tool than testbed's own), and nothing of theirs left
after the teardown."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.core import hostcpu
from testbed.core.state import STATE_DIR, RunState
from tests.bounds import rate_at_least, time_at_most
from tests.integration.helpers import foreign_runs, run_cli, running, spawn_up, wait_phase

RATE = 50e6
# iperf3 counts TCP payload; HTB counts whole frames: 1448 B of payload (MSS 1460 less 12 B of
# timestamps) in 1514 B on the wire (+ 20 IP + 32 TCP + 14 Ethernet)
PAYLOAD_SHARE = 1448 / 1514


def _scenario(tmp_path: Path, extra: str = "") -> Path:
    p = tmp_path / "held.yaml"
    p.write_text(f"name: held\ntopology: {{hosts: 3, link_rate: 50mbit}}\n{extra}")
    return p


def wait_held(run_id: str, proc: subprocess.Popen[str], timeout: float = 60) -> RunState:
    return wait_phase(run_id, proc, "held", timeout)


def tb_exec(run_id: str, *cmd: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return run_cli("exec", "--run", run_id, *cmd, timeout=timeout)


def _iperf(run_id: str, client: str, server: str, reverse: bool) -> float:
    """Receiver goodput in bit/s, from iperf3's own JSON report."""
    r = tb_exec(run_id, client, "--", "iperf3", "-c", server, "-t", "4", "-O", "1", "-J",
                *(["-R"] if reverse else []))  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    return json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"]


def test_iperf3_through_exec_measures_the_cap_both_ways_and_teardown_ends_it(tmp_path):
    run_id = "401d01"
    out = tmp_path / "run"
    proc = spawn_up(str(_scenario(tmp_path)), "--hold", "--out", str(out), "--run-id", run_id)
    try:
        st = wait_held(run_id, proc)
        assert [h["name"] for h in st.hosts] == ["h1", "h2", "h3"]
        status = run_cli("status")
        assert st.hosts[1]["data_ip"] in status.stdout and "testbed exec --run" in status.stdout

        # a host name stands for its data address; exit status and output pass through
        ping = tb_exec(run_id, "h1", "--", "ping", "-c", "2", "-W", "2", "h3")
        assert ping.returncode == 0 and "2 received" in ping.stdout, ping.stdout + ping.stderr
        assert tb_exec(run_id, "h1", "--", "sh", "-c", "exit 7").returncode == 7
        name = tb_exec(run_id, "h2", "--", "ip", "-4", "-o", "addr", "show", "eth0")
        assert st.hosts[1]["data_ip"] in name.stdout

        assert tb_exec(run_id, "h2", "--", "iperf3", "-s", "-D").returncode == 0
        time.sleep(0.5)
        # A busy 2-core machine only takes rate away (a stalled sender or receiver): each
        # direction gets three tries and its best must be within 5 % of the cap; none of them
        # may beat it. Short bursts of steal idle the link (in CI, when TCP Small Queues still
        # held the sender to about 1 ms of data in its queue, iperf3 -R gave 0.72-0.77 of the
        # cap at 9-14 % steal, and 0.91-0.93 at 3.6-5 %). The lower bound is judged last, by the steal
        # over the best try itself (tests.bounds), after the rest of the test has run.
        best: dict[bool, tuple[float, dict]] = {}
        for reverse in (False, True):  # h1 → h2 (h1's uplink, h2's downlink), then back
            for _ in range(3):
                cpu0 = hostcpu.read()
                got = _iperf(run_id, "h1", "h2", reverse=reverse)
                cpu = hostcpu.between(cpu0, hostcpu.read())
                assert got <= 1.05 * RATE * PAYLOAD_SHARE, (reverse, got)
                if reverse not in best or got > best[reverse][0]:
                    best[reverse] = (got, cpu)
                if got >= 0.95 * RATE * PAYLOAD_SHARE:
                    break

        sleeper = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "testbed.cli",
                "exec",
                "--run",
                run_id,
                "h3",
                "--",
                "sleep",
                "600",
            ],
            cwd=Path(__file__).resolve().parents[2],
        )
        # `testbed exec` starts a Python interpreter first: on a busy machine the sleep can
        # take more than a second to appear (CI: only iperf3 after 1.0 s)
        deadline = time.monotonic() + 20
        while True:
            daemons = subprocess.run(["pgrep", "-f", "iperf3 -s -D|^sleep 600"], capture_output=True,
                                     text=True).stdout.split()  # fmt: skip
            if len(daemons) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert len(daemons) == 2, daemons
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
        assert proc.returncode == 0, proc.communicate()
        sleeper.wait(10)  # its command was ended by the teardown
        assert not [p for p in daemons if running(p)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "ok" and s["hold"]["ended_by"] == "SIGINT"
    # the links were counted over the hold: iperf3's 2 × 4 s at 50 Mbit/s crossed h1's links
    h1_up = next(x for x in s["links"] if x["node"] == "h1" and x["direction"] == "up")
    assert sum(c["bytes"] for c in h1_up["classes"].values()) > 0.8 * 4 * RATE / 8
    for reverse, (got, cpu) in best.items():
        rate_at_least(
            got, 0.95 * RATE * PAYLOAD_SHARE, cpu, f"iperf3 {'h2 → h1' if reverse else 'h1 → h2'}"
        )


def test_a_hold_with_a_duration_ends_by_itself(tmp_path):
    out = tmp_path / "run"
    r = run_cli("up", str(_scenario(tmp_path)), "--hold", "2s", "--out", str(out), timeout=60)
    assert r.returncode == 0, r.stderr
    s = json.loads((out / "summary.json").read_text())
    hold = s["hold"]
    assert hold["ended_by"] == "duration" and hold["held_s"] >= 2.0
    time_at_most(hold["held_s"], 4.0, s, "a 2 s hold, seconds held")
    assert s["duration_s"] == pytest.approx(hold["held_s"], abs=0.5)  # the links' window


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--run", "abcdef", "h1", "--", "true"), "no run abcdef"),
        (("h1", "--", "true"), "no live run"),
    ],
)
def test_exec_without_a_run_is_one_line_and_exit_2(args, needle):
    if needle == "no live run" and foreign_runs()[0]:
        pytest.skip("a run this session did not start is live here: exec would pick it")
    r = run_cli("exec", *args)
    assert r.returncode == 2 and needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_exec_on_an_unknown_host_names_the_hosts_and_shell_runs_there(tmp_path):
    run_id = "401d02"
    proc = spawn_up(str(_scenario(tmp_path)), "--hold", "--out", str(tmp_path / "r"),
                    "--run-id", run_id)  # fmt: skip
    try:
        wait_held(run_id, proc)
        r = tb_exec(run_id, "h9", "--", "true")
        assert r.returncode == 2 and "no host 'h9'" in r.stderr and "h1 h2 h3" in r.stderr
        # `shell` reads its commands from stdin when it is not a terminal
        st = RunState.load(STATE_DIR / f"{run_id}.json")
        r = run_cli("shell", "--run", run_id, "h2", input="ip -4 -o addr show eth0\nexit 4\n")
        assert r.returncode == 4 and st.hosts[1]["data_ip"] in r.stdout, r.stdout + r.stderr
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
