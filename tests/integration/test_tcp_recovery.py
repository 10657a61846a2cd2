"""topology.tcp_recovery and topology.tcp_idle_restart (issue 31: the thesis' TCP is ns-3.30's,
which has no RACK, tail-loss probe, F-RTO or duplicate SACKs, and keeps its window across an
idle spell): each reaches every host's kernel, and the kernel then behaves so on the wire."""

from __future__ import annotations

import socket
import struct
import threading
import time
from pathlib import Path

from testbed.network.runtime.namespaces import inside
from testbed.scenario.topology import CLASSIC_RECOVERY

from .helpers import built_network, run_scenario

SND_CWND_AT = 80  # struct tcp_info (linux/tcp.h): tcpi_snd_cwnd, a u32, in segments
PORT = 5301


def sysctl(key: str) -> str:
    return Path("/proc/sys", key.replace(".", "/")).read_text().strip()


def test_the_settings_reach_every_host_and_only_the_hosts():
    keys = [*CLASSIC_RECOVERY[::2], "net.ipv4.tcp_slow_start_after_idle"]
    machine = {k: sysctl(k) for k in keys}
    topology = {"hosts": 2, "tcp_recovery": "classic", "tcp_idle_restart": False}
    with built_network(topology, "7c1a55") as (topo, _):
        for h in topo.hosts:
            with inside(h.netns):
                assert {k: sysctl(k) for k in keys} == dict.fromkeys(keys, "0"), h.name
    assert {k: sysctl(k) for k in keys} == machine  # the machine's own are untouched


def lossy_incast(tmp_path: Path, recovery: str) -> dict:
    """Three senders answer each query with 100 KB at once into one 100 Mbit/s port that
    queues 10 packets: most responses lose their tails."""
    return run_scenario(tmp_path / recovery, {
        "duration": "3s", "measure": {"warmup": "0.5s", "cooldown": "0.5s"},
        "topology": {"hosts": 4, "link_rate": "100mbit", "queue_limit": 10,
                     "tcp_rto_min": "5ms", "tcp_recovery": recovery},
        "workloads": {"incast": {"kind": "incast", "response_size": "100KB",
                                 "utilization": "20%"}},
    })  # fmt: skip


def test_classic_recovery_repairs_tail_losses_by_timeouts_not_probes(tmp_path):
    """Linux's own recovery sends tail-loss probes where losses end a response; classic
    recovery (ns-3.30's) has none: what three duplicate ACKs do not repair, the
    retransmission timeout does."""
    linux, classic = (lossy_incast(tmp_path, r) for r in ("linux", "classic"))
    assert linux["tcp_recovery"] == "linux" and classic["tcp_recovery"] == "classic"
    for s in (linux, classic):
        assert s["status"] == "ok" and s["incast"]["queries_completed"] > 0
        assert s["tcp"]["retransmitted_segments"] > 0, s["tcp"]  # the port did drop
    assert linux["tcp"]["loss_probes"] > 0, linux["tcp"]
    c = classic["tcp"]
    # no probe, no F-RTO (its spurious-timeout count). D-SACKs received are not asserted:
    # a thesis run with tcp_dsack 0 in every host counted 54 (a sender reads some SACK
    # blocks as duplicates by their position alone)
    assert c["loss_probes"] == 0 and c["spurious_timeouts"] == 0 and c["timeouts"] > 0, c


def cwnd_after_idle(topo, idle_s: float) -> tuple[int, int]:
    """h1 sends h2 4 MB, waits `idle_s` with nothing in flight, then one byte more: its
    congestion window before the idle spell and after that byte."""
    h1, h2 = topo.hosts[:2]
    with inside(h2.netns):
        server = socket.create_server((str(h2.data_ip), PORT))
    got = threading.Event()

    def drain() -> None:
        conn, _ = server.accept()
        with conn:
            n = 0
            while chunk := conn.recv(1 << 20):
                n += len(chunk)
                if n >= 4_000_001:
                    got.set()

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    with inside(h1.netns):
        client = socket.create_connection((str(h2.data_ip), PORT), timeout=10)
    with client, server:
        client.sendall(b"x" * 4_000_000)

        def cwnd() -> int:
            info = client.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, SND_CWND_AT + 4)
            return int(struct.unpack_from("=I", info, SND_CWND_AT)[0])

        time.sleep(0.05)  # the last ACKs
        before = cwnd()
        time.sleep(idle_s)
        client.sendall(b"y")
        after = cwnd()
        assert got.wait(10)
        client.shutdown(socket.SHUT_WR)
        t.join(10)
    return before, after


def test_without_idle_restart_a_connection_keeps_its_window_across_an_idle_spell():
    """Idle for 60 minimum RTOs (5 ms each), Linux's connection starts again from its initial
    window of 10 segments (RFC 2861); ns-3.30's, and testbed's with tcp_idle_restart: false,
    sends on with the window it had."""
    out = {}
    for restart, run_id in ((True, "7c1a56"), (False, "7c1a57")):
        topology = {"hosts": 2, "tcp_rto_min": "5ms", "tcp_idle_restart": restart}
        with built_network(topology, run_id) as (topo, _):
            out[restart] = cwnd_after_idle(topo, 0.3)
    (grown, restarted), (kept_before, kept) = out[True], out[False]
    assert grown > 20 and kept_before > 20, out  # slow start grew both windows
    assert restarted <= 10, out
    assert kept == kept_before, out
