"""sockops.TcpTimers: the TCP sockets that a process in the cgroup opens, in a namespace of its
own, get the delayed-ACK maximum, minimum RTO and initial RTO asked for; the same child
outside the cgroup keeps Linux's defaults (ato 40 ms, RTO ≥ 200 ms, SYN RTO 1 s). Independent
evidence: the kernel's own tcp_info through `ss -tin` (ato, rto, retrans), the time a
write-write-read exchange waits for a delayed ACK (Nagle holds the second write until the first
is ACKed), and how often a SYN, or a listener's SYN-ACK, into a black hole was sent again."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from testbed.core import hostcpu
from testbed.network.shaping.sockops import TcpTimers, cgroup2_root, join, kernel_hz
from tests.bounds import time_at_most
from tests.needs import need_binary

need_binary("ss", "apt-get install iproute2")

DELACK_MAX_US, RTO_MIN_US, RTO_INIT_US = 8_000, 20_000, 200_000
BLACK_HOLE = "10.77.0.2"  # a static neighbour whose MAC nobody has: SYNs vanish

# Runs inside the namespace: a loopback pair, 40 write-write-read rounds, a SYN into the
# black hole, then the kernel's view of each socket (ss) and the rounds' times, as JSON.
CHILD = r"""
import json, socket, subprocess, sys, time

def ss(*filt):
    out = subprocess.run(["ss", "-tinH", *filt], capture_output=True, text=True, check=True)
    return " ".join(out.stdout.split())

lst = socket.socket()
lst.bind(("127.0.0.1", 0))
lst.listen()
port = lst.getsockname()[1]
cli = socket.create_connection(("127.0.0.1", port))
srv, _ = lst.accept()
rounds = []
for _ in range(40):
    t = time.monotonic()
    cli.send(b"a")
    cli.send(b"b")
    got = b""
    while len(got) < 2:
        got += srv.recv(2 - len(got))
    srv.send(b"c")
    cli.recv(1)
    rounds.append(time.monotonic() - t)
syn = socket.socket()
syn.setblocking(False)
syn.connect_ex((sys.argv[1], 9))
time.sleep(0.5)
print(json.dumps({
    "rounds": rounds,
    "server": ss("state", "established", "sport", "=", f":{port}"),
    "client": ss("state", "established", "dport", "=", f":{port}"),
    "syn": ss("state", "syn-sent"),
}))
"""


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


@contextmanager
def namespaces(tag: str, *suffixes: str) -> Iterator[list[str]]:
    """Network namespaces with lo up, deleted (and all in them) on the way out."""
    names: list[str] = []
    try:
        for suffix in suffixes:
            names.append(f"tb-sockops-{tag}{suffix}")
            sh("ip", "netns", "add", names[-1])
            sh("ip", "-n", names[-1], "link", "set", "lo", "up")
        yield names
    finally:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


def ss_until(netns: str, count: int, *args: str) -> str:
    """`ss -tnoH ARGS` in `netns` once it lists `count` sockets (10 s at most)."""
    deadline = time.monotonic() + 10
    while True:
        out = subprocess.run(
            ["ip", "netns", "exec", netns, "ss", "-tnoH", *args],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
        if len(out.splitlines()) >= count or time.monotonic() > deadline:
            return out
        time.sleep(0.02)


def black_hole(netns: str, dev: str, addr: str) -> None:
    """Frames to `addr` leave `dev` for a MAC that nobody has, and vanish."""
    sh("ip", "-n", netns, "neigh", "add", addr, "lladdr", "02:00:00:00:00:02",
       "dev", dev, "nud", "permanent")  # fmt: skip


def field(line: str, name: str) -> float:
    m = re.search(rf"\b{name}:([\d.]+)", line)
    assert m, f"no {name}: in {line!r}"
    return float(m.group(1))


def sockets(netns: str, cgroup: Path | None) -> dict[str, Any]:
    out = subprocess.run(
        ["ip", "netns", "exec", netns, sys.executable, "-c", CHILD, BLACK_HOLE],
        preexec_fn=None if cgroup is None else lambda: join(cgroup),  # before the exec
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    seen: dict[str, Any] = json.loads(out)
    seen["round_s"] = sorted(seen["rounds"][20:])[10]  # median of the last 20: quick ACKs over
    return seen


def test_a_cgroup_s_sockets_get_the_timers_and_the_others_keep_the_defaults():
    hz = kernel_hz()
    jiffy_ms = 1000 / hz
    rto_min_ms = -(-RTO_MIN_US * hz // 1_000_000) * jiffy_ms
    # the kernel keeps the delayed ACK under the minimum RTO less one jiffy (tcp_delack_max)
    delack_ms = min(-(-DELACK_MAX_US * hz // 1_000_000) * jiffy_ms, rto_min_ms - jiffy_ms)
    rto_init_ms = -(-RTO_INIT_US * hz // 1_000_000) * jiffy_ms
    tag = uuid.uuid4().hex[:6]
    timers = TcpTimers(
        cgroup2_root() / f"tb-sockops-{tag}",
        delack_max_us=DELACK_MAX_US, rto_min_us=RTO_MIN_US, rto_init_us=RTO_INIT_US,
    )  # fmt: skip
    with namespaces(tag, "") as (netns,):
        sh("ip", "-n", netns, "link", "add", "va", "type", "veth", "peer", "name", "vb")
        sh("ip", "-n", netns, "addr", "add", "10.77.0.1/24", "dev", "va")
        sh("ip", "-n", netns, "link", "set", "va", "up")
        sh("ip", "-n", netns, "link", "set", "vb", "up")
        black_hole(netns, "va", BLACK_HOLE)
        with timers:
            control = sockets(netns, None)
            before = hostcpu.read()
            tuned = sockets(netns, timers.cgroup)
            window = {"host_cpu": hostcpu.between(before, hostcpu.read())}
            assert (timers.cgroup / "cgroup.procs").read_text() == "", "the child has exited"
        assert not timers.cgroup.exists()
    evidence = json.dumps({"control": control, "tuned": tuned})

    for side in ("server", "client"):
        # the defaults outside the cgroup: ato ≥ TCP_ATO_MIN (HZ/25), RTO ≥ TCP_RTO_MIN (HZ/5)
        assert field(control[side], "ato") >= 40 and field(control[side], "rto") >= 200, evidence
        # tcp_info's ato is min(ato, the socket's delayed-ACK maximum); the RTO is the RTT's
        # estimate (a delayed ACK included) plus at least the minimum RTO
        assert field(tuned[side], "ato") == delack_ms, evidence
        assert rto_min_ms <= field(tuned[side], "rto") < 100, evidence

    # each round waits for the server's delayed ACK: 40 ms by default, the maximum when tuned
    assert control["round_s"] >= 0.030, evidence  # the premise: Nagle meets a delayed ACK
    time_at_most(tuned["round_s"], (delack_ms + 2 * jiffy_ms + 2) / 1000, window,
                 f"a write-write-read round with delayed ACKs of {delack_ms} ms")  # fmt: skip

    # a SYN-SENT socket keeps its initial RTO for its first tcp_syn_linear_timeouts (4 since
    # 6.7) timeouts: by 0.5 s the control sent none again, the tuned one two (0.2 s, 0.4 s)
    assert field(control["syn"], "rto") == 1000 and "retrans:" not in control["syn"], evidence
    assert field(tuned["syn"], "rto") == rto_init_ms, evidence
    assert re.search(r"\bretrans:\d+/2\b", tuned["syn"]), evidence


def test_a_listener_in_the_cgroup_sends_its_syn_ack_again_after_the_initial_rto():
    """The passive side: a SYN-ACK's timeout is asked of the listener's cgroup. Two listeners
    in one namespace whose SYN-ACKs vanish, one of them opened in the cgroup; `ss -o` shows
    each request's timer and how often its SYN-ACK was sent again."""
    tag = uuid.uuid4().hex[:6]
    listen = "import socket, sys, time; s = socket.socket(); s.bind(('10.78.0.1', int(sys.argv[1]))); s.listen(); time.sleep(30)"  # noqa: E501
    connect = "import socket, sys; socket.socket().connect_ex(('10.78.0.1', int(sys.argv[1])))"
    procs: list[subprocess.Popen[bytes]] = []
    with TcpTimers(cgroup2_root() / f"tb-sockops-{tag}", rto_init_us=RTO_INIT_US) as timers:
        try:
            with namespaces(tag, "s", "c") as (server, client):
                sh("ip", "-n", server, "link", "add", "va", "type", "veth",
                   "peer", "name", "vb", "netns", client)  # fmt: skip
                sh("ip", "-n", server, "addr", "add", "10.78.0.1/24", "dev", "va")
                sh("ip", "-n", client, "addr", "add", "10.78.0.2/24", "dev", "vb")
                sh("ip", "-n", server, "link", "set", "va", "up")
                sh("ip", "-n", client, "link", "set", "vb", "up")
                black_hole(server, "va", "10.78.0.2")
                for port, cgroup in (("7001", None), ("7002", timers.cgroup)):
                    procs.append(subprocess.Popen(
                        ["ip", "netns", "exec", server, sys.executable, "-c", listen, port],
                        preexec_fn=None if cgroup is None else lambda: join(timers.cgroup),
                    ))  # fmt: skip
                ss_until(server, 2, "state", "listening")
                for port in ("7001", "7002"):  # not in the cgroup: the SYNs' own RTO is 1 s
                    procs.append(subprocess.Popen(
                        ["ip", "netns", "exec", client, sys.executable, "-c", connect, port]
                    ))  # fmt: skip
                ss_until(server, 2, "state", "syn-recv")
                time.sleep(RTO_INIT_US * 2e-6)  # one timeout (0.2 s), not the next (0.6 s)
                out = ss_until(server, 2, "state", "syn-recv")
        finally:
            for p in procs:
                p.kill()
                p.wait()
    timer = dict(re.findall(r":(700[12]) \S+ timer:\(on,\S+,(\d+)\)", out))
    assert timer == {"7001": "0", "7002": "1"}, out


# A run's hosts: topology.tcp_rto_initial reaches every socket a host opens, through the
# sock_ops program behind its namespace filter (sockops.NamespaceTimers), and goes with the run.
HELD = """name: rto-init
time_scale: 10
topology: {hosts: 2, link_rate: 500mbit, tcp_rto_initial: 30ms}
"""
# in a host: a SYN to an address of the data network nobody has (ARP unanswered: nothing is
# sent beyond the host's own link), then the kernel's view of the socket
SYN = (
    "import socket, subprocess, sys, time\n"
    "s = socket.socket(); s.setblocking(False); s.connect_ex((sys.argv[1], 9)); time.sleep(0.3)\n"
    "print(subprocess.run(['ss', '-tinH', 'state', 'syn-sent'], capture_output=True,"
    " text=True).stdout)\n"
)


def _syn_rto(run_id: str, host: str, addr: str) -> float:
    from tests.integration.helpers import run_cli

    r = run_cli("exec", "--run", run_id, host, "--", sys.executable, "-c", SYN, addr)
    assert r.returncode == 0, r.stdout + r.stderr
    return field(r.stdout, "rto")


def test_a_runs_hosts_get_the_initial_rto_in_scenario_time_and_nothing_stays(tmp_path):
    """30 ms of scenario time at K = 10: a host's SYN waits 300 ms of real time before it is
    sent again, where the kernel's default is 1 s; this test's own namespace keeps 1 s while
    the run holds; and the program is gone after the run ends (SIGINT), and after a kill -9
    of another run (its BPF link closes with the process)."""
    import json
    import signal

    from testbed.network.shaping.sockops import attached
    from tests.integration.helpers import spawn_up, up_to_kill, wait_phase

    before = attached()
    (tmp_path / "held.yaml").write_text(HELD)
    out = tmp_path / "run"
    proc = spawn_up(str(tmp_path / "held.yaml"), "--hold", "--out", str(out), "--run-id", "50c0a1")
    try:
        st = wait_phase("50c0a1", proc, "held", 60)
        assert attached() == before + 1
        gone = st.hosts[0]["data_ip"].rsplit(".", 1)[0] + ".250"
        assert _syn_rto("50c0a1", "h1", gone) == 300
        assert _syn_rto("50c0a1", "h2", gone) == 300
        outside = socket_rto_here(gone)
        assert outside >= 1000, outside
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
        assert proc.returncode == 0, proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    s = json.loads((out / "summary.json").read_text())
    assert s["tcp_rto_initial_s"] == 0.03 and s["time_scale"] == 10
    assert attached() == before

    with up_to_kill("50c0a2", str(tmp_path / "held.yaml"), "--hold",
                    "--out", str(tmp_path / "k")) as up:  # fmt: skip
        up.state = wait_phase("50c0a2", up.proc, "held", 60)
        assert attached() == before + 1
        up.kill9()
        up.guardian_finished()
    assert attached() == before


def socket_rto_here(addr: str) -> float:
    """The RTO of a SYN sent from this process's namespace (to an address its routes do not
    reach beyond the machine: refused at once, or waiting for ARP, either way not sent out)."""
    with namespaces(uuid.uuid4().hex[:6], "x") as (ns,):
        out = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-c", SYN, addr],
            capture_output=True, text=True, timeout=30,
        ).stdout  # fmt: skip
    return field(out, "rto") if "rto:" in out else float("inf")
