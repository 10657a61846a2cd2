"""The hosts' own TCP counters, read from each host's /proc/net at the end of a run:
segments sent, retransmitted, retransmission timeouts and tail-loss probes. They say what the
kernel's TCP timers did, which time dilation does not stretch (topology.tcp_rto_min sets the
minimum RTO; the delayed-ACK timer stays the kernel's). And the losses no queue counts:
segments a receiver dropped because its buffer was full (in order, or out of order) and the
times it had to prune its queue, which a fixed topology.tcp_rcvbuf could cause. Cumulative
over the run, hosts summed."""

from __future__ import annotations

import os
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


# A connection's own counters (struct tcp_info, linux/tcp.h; the struct only grows, so a
# field is there when the kernel's copy is long enough): offset, format, the name in records.
# A host's /proc/net counters mix every class its sockets send in; these are one socket's.
SOCKET_FIELDS = (
    (136, "I", "segments_sent"),  # tcpi_segs_out: data and pure ACKs, retransmits included
    (100, "I", "retransmitted_segments"),  # tcpi_total_retrans
    (240, "H", "timeouts"),  # tcpi_total_rto (Linux 6.7): retransmission timeouts that fired
    (244, "I", "timeout_ms"),  # tcpi_total_rto_time: ms spent recovering from them
)
SOCKET_NAMES = tuple(name for _, _, name in SOCKET_FIELDS)
# the key of a workload's sockets whose class changes while they live (a demoted flow, a
# job whose policy switches its class): their counters cannot be split between the classes
SWITCHED = "switched"
TCP_INFO_LEN = 280  # Linux 6.18's struct; a longer one is cut, a shorter one comes back short


def socket_counters(info: bytes) -> dict[str, int | None]:
    """SOCKET_FIELDS of a tcp_info as getsockopt returned it; None for a field this kernel's
    struct does not reach (the timeouts before Linux 6.7)."""
    out: dict[str, int | None] = {}
    for at, fmt, name in SOCKET_FIELDS:
        end = at + struct.calcsize(fmt)
        out[name] = struct.unpack_from("=" + fmt, info, at)[0] if len(info) >= end else None
    return out


def read_socket(sock: socket.socket) -> dict[str, int | None]:
    return socket_counters(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN))


def own_sockets() -> dict[str, dict[str, int | None]]:
    """The counters of every connected TCP socket this process holds, by "local>peer"
    (address:port each): what a library opened (Gloo, NCCL) included, which the program never
    sees. Each descriptor is duplicated to be read and the copy closed; the socket itself is
    not touched (socket(fileno=) leaves its blocking mode alone while no default timeout is
    set: socket.setdefaulttimeout is not used in testbed)."""
    out = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=os.dup(int(name)))
        except (OSError, ValueError):  # closed meanwhile, or not a socket after all
            continue
        with sock:
            if sock.type != socket.SOCK_STREAM or sock.family not in (
                socket.AF_INET,
                socket.AF_INET6,
            ):
                continue
            try:
                own, peer = sock.getsockname(), sock.getpeername()
                out[f"{own[0]}:{own[1]}>{peer[0]}:{peer[1]}"] = read_socket(sock)
            except OSError:  # listening, or not connected
                continue
    return out


def window_counters(
    start: dict[str, dict[str, int | None]], stop: dict[str, dict[str, int | None]]
) -> dict[str, dict[str, int | None]]:
    """Each socket's counters over a window, from its reads at the two edges: a socket opened
    inside the window counts from zero; one gone by its end cannot be read and is left out
    (a job's connections live as long as the job)."""
    out = {}
    for key, b in stop.items():
        a = start.get(key, {})
        out[key] = {k: None if v is None else v - (a.get(k) or 0) for k, v in b.items()}
    return out


def socket_section(counters: Iterable[dict[str, int | None]]) -> dict[str, float | int | None]:
    """A workload's sockets in its summary (SOCKET_UNITS): their counters summed (None: not
    on this kernel); the time spent recovering from timeouts in the machine's seconds, like
    every duration a summary section holds before a dilated run's are scaled."""
    total: dict[str, int | None] = dict.fromkeys(SOCKET_NAMES, 0)
    n = 0
    for c in counters:
        for k, v in c.items():
            have = total[k]
            total[k] = None if v is None or have is None else have + v
        n += 1
    ms = total.pop("timeout_ms")
    return {"sockets": n, **total, "timeout_time_s": None if ms is None else ms / 1e3}


# socket_section's units, for a kind's summary declaration (under "tcp_by_class": {"*": ...},
# "*" being a class of the profile, or SWITCHED)
SOCKET_UNITS = {
    "sockets": "1",
    "segments_sent": "1",
    "retransmitted_segments": "1",
    "timeouts": "1",
    "timeout_time_s": "s",
}
