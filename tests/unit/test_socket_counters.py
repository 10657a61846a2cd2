"""A connection's own TCP counters (tcpstats.SOCKET_FIELDS), from tcp_info bytes laid out by
hand at linux/tcp.h's offsets, and from this process's real sockets."""

from __future__ import annotations

import fcntl
import os
import select
import socket
import struct

from testbed.core import tcpstats


def info(length: int = 280, **fields: int) -> bytes:
    """A tcp_info of `length` bytes with the named fields set (offsets from linux/tcp.h)."""
    at = {"segs_out": (136, "I"), "total_retrans": (100, "I"),
          "total_rto": (240, "H"), "total_rto_time": (244, "I")}  # fmt: skip
    buf = bytearray(length)
    for name, value in fields.items():
        offset, fmt = at[name]
        if offset + struct.calcsize(fmt) <= length:
            struct.pack_into("=" + fmt, buf, offset, value)
    return bytes(buf)


def test_counters_at_the_kernels_offsets():
    c = tcpstats.socket_counters(
        info(segs_out=5000, total_retrans=37, total_rto=4, total_rto_time=1250)
    )
    assert c == {"segments_sent": 5000, "retransmitted_segments": 37, "timeouts": 4,
                 "timeout_ms": 1250}  # fmt: skip


def test_a_kernel_before_6_7_has_no_timeouts_per_socket():
    # Linux 6.6's struct ends after tcpi_rehash (240 bytes)
    c = tcpstats.socket_counters(info(240, segs_out=10, total_retrans=1))
    assert c == {"segments_sent": 10, "retransmitted_segments": 1, "timeouts": None,
                 "timeout_ms": None}  # fmt: skip
    s = tcpstats.socket_section([c, c])
    assert s["retransmitted_segments"] == 2 and s["timeouts"] is None
    assert s["timeout_time_s"] is None


def test_the_window_is_the_difference_of_its_edges():
    start = {"a": {"timeouts": 2, "timeout_ms": 400, "retransmitted_segments": 10,
                   "segments_sent": 100}}  # fmt: skip
    stop = {
        "a": {"timeouts": 5, "timeout_ms": 1000, "retransmitted_segments": 16,
              "segments_sent": 300},
        # opened inside the window: counts from zero
        "b": {"timeouts": 1, "timeout_ms": 200, "retransmitted_segments": 1,
              "segments_sent": 50},
    }  # fmt: skip
    w = tcpstats.window_counters(start, stop)
    assert w["a"] == {"timeouts": 3, "timeout_ms": 600, "retransmitted_segments": 6,
                      "segments_sent": 200}  # fmt: skip
    assert w["b"] == stop["b"]
    s = tcpstats.socket_section(w.values())
    assert s == {"sockets": 2, "segments_sent": 250, "retransmitted_segments": 7,
                 "timeouts": 4, "timeout_time_s": 0.8}  # fmt: skip
    assert tcpstats.socket_section([]) == {"sockets": 0, "segments_sent": 0,
                                           "retransmitted_segments": 0, "timeouts": 0,
                                           "timeout_time_s": 0.0}  # fmt: skip


def test_this_process_own_sockets_are_read_and_left_as_they_were():
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    try:
        client.sendall(b"x" * 100_000)
        got = 0
        while got < 100_000:
            got += len(accepted.recv(65536))
        accepted.setblocking(False)
        client_key = f"127.0.0.1:{client.getsockname()[1]}>127.0.0.1:{server.getsockname()[1]}"
        reads = tcpstats.own_sockets()
        # both ends of the connection, not the listening socket
        assert client_key in reads
        assert sum(1 for k in reads if k.startswith(f"127.0.0.1:{server.getsockname()[1]}>")) == 1
        mine = reads[client_key]
        assert mine["segments_sent"] is not None and mine["segments_sent"] >= 2
        assert mine["retransmitted_segments"] == 0
        assert mine["timeouts"] in (0, None)  # None before Linux 6.7
        # read through a copy of each descriptor: every socket keeps its mode (the flag is
        # the open file's, shared with a copy) and stays open
        assert fcntl.fcntl(accepted.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK
        assert not fcntl.fcntl(client.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK
        client.sendall(b"y")
        assert select.select([accepted], [], [], 5)[0] and accepted.recv(1) == b"y"
    finally:
        for s in (client, accepted, server):
            s.close()
