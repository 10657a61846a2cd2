"""The hosts' own TCP counters, read from each host's /proc/net at the end of a run:
segments sent, retransmitted, retransmission timeouts and tail-loss probes. They say what the
kernel's TCP timers did, which time dilation does not stretch (topology.tcp_rto_min sets the
minimum RTO; the delayed-ACK timer stays the kernel's). And the losses no queue counts:
segments a receiver dropped because its buffer was full (in order, or out of order) and the
times it had to prune its queue, which a fixed topology.tcp_rcvbuf could cause. Cumulative
over the run, hosts summed."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable

# struct tcp_info (linux/tcp.h): tcpi_bytes_received, a u64 at this offset since Linux 4.1
BYTES_RECEIVED_AT = 128
FILES = ("snmp", "netstat")  # the files of /proc/net the counters are in (Runtime.proc_net)
WANTED = {
    ("Tcp", "OutSegs"): "segments_sent",
    ("Tcp", "RetransSegs"): "retransmitted_segments",
    ("TcpExt", "TCPTimeouts"): "timeouts",
    ("TcpExt", "TCPSpuriousRTOs"): "spurious_timeouts",
    ("TcpExt", "TCPLossProbes"): "loss_probes",  # tail-loss probes: retransmits, not timeouts
    ("TcpExt", "TCPRcvQDrop"): "receive_buffer_drops",
    ("TcpExt", "TCPOFODrop"): "out_of_order_drops",
    ("TcpExt", "PruneCalled"): "receive_prunes",
    # ACKs the delayed-ACK timer sent (the kernel's: 40-200 ms of real time, HZ-rounded; no
    # knob here sets it, so time dilation shrinks it in scenario time; docs/network.md)
    ("TcpExt", "DelayedACKs"): "delayed_acks",
    # segments a sender learned arrived out of order, not lost (by SACK, timestamps or
    # duplicate ACKs), and the duplicate SACKs that told it a retransmission was needless: a
    # link that reorders (network.rps_mask says how one can) shows here, a queue that drops
    # does not
    ("TcpExt", "TCPSACKReorder"): "reorders_detected",
    ("TcpExt", "TCPTSReorder"): "reorders_detected",
    ("TcpExt", "TCPRenoReorder"): "reorders_detected",
    ("TcpExt", "TCPDSACKRecv"): "dsacks_received",
}


def _table(text: str) -> dict[tuple[str, str], int]:
    """/proc/net/snmp and netstat: pairs of lines, names then values, per protocol."""
    out = {}
    lines = text.splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        proto, *keys = names.split()
        _, *nums = values.split()
        for k, v in zip(keys, nums, strict=False):
            if v.lstrip("-").isdigit():
                out[(proto.rstrip(":"), k)] = int(v)
    return out


def totals(hosts: Iterable[list[str]]) -> dict[str, int]:
    """The counters summed over `hosts`, each the texts of its FILES; absent ones count 0."""
    out = dict.fromkeys(WANTED.values(), 0)
    for texts in hosts:
        table: dict[tuple[str, str], int] = {}
        for text in texts:
            table |= _table(text)
        for key, name in WANTED.items():
            out[name] += table.get(key, 0)
    return out


def bytes_received(sock: socket.socket) -> int:
    """Payload bytes the kernel has received in order on this connection (tcpi_bytes_received):
    what crossed the links into the host, whether or not the program has read it yet. A
    receiver that counts what it read instead would count bytes its buffer held before."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, BYTES_RECEIVED_AT + 8)
    return int(struct.unpack_from("=Q", info, BYTES_RECEIVED_AT)[0])
