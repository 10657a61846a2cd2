"""The linkcheck program that runs *inside* a node: a server and a client. Stdlib only, so it
starts fast; it reports through JSON files in the run folder, never over the network.

Protocol: the client opens a TCP connection and sends a 16-byte header
(magic b"TBLC", mode, DSCP, 8-byte size). mode 1 (bulk): the client streams until its
deadline and the server counts bytes in 100 ms samples. mode 2 (short): the server answers
with `size` bytes and closes; the client times connect start → last byte. Both ends set
IP_TOS = DSCP << 2 on their socket, so data and ACKs are marked in both directions.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import socketserver
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

from testbed.core.window import wait_for_go

HEADER = struct.Struct("!4sBBxxQ")
MAGIC = b"TBLC"
BULK, SHORT = 1, 2
CHUNK = 64 * 1024
SAMPLE_S = 0.1


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise ConnectionError("peer closed during header")
        buf += part
    return buf


def _mark(sock: socket.socket, dscp: int) -> None:
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        sock: socket.socket = self.request
        try:
            magic, mode, dscp, size = HEADER.unpack(_recv_exact(sock, HEADER.size))
        except (ConnectionError, OSError, struct.error):
            return
        if magic != MAGIC:
            return
        _mark(sock, dscp)
        if mode == SHORT:
            payload = b"\0" * min(size, CHUNK)
            left = size
            try:
                while left > 0:
                    n = min(left, len(payload))
                    sock.sendall(payload[:n])
                    left -= n
                sock.shutdown(socket.SHUT_WR)
                sock.recv(1)  # wait for the client to close: it has every byte then
            except OSError:
                pass
            return
        if mode == BULK:
            self._sink(sock, dscp)

    def _sink(self, sock: socket.socket, dscp: int) -> None:
        rec: dict[str, Any] = {
            "src": self.client_address[0],
            "dscp": dscp,
            "bytes": 0,
            "start": time.time(),
            "samples": [],  # [time, cumulative bytes]
        }
        with self.server.lock:
            self.server.bulk.append(rec)
        buf = bytearray(CHUNK)
        total = 0
        next_sample = rec["start"]
        try:
            while True:
                n = sock.recv_into(buf)
                if n == 0:
                    break
                total += n
                now = time.time()
                if now >= next_sample:
                    rec["samples"].append([now, total])
                    next_sample = now + SAMPLE_S
                rec["bytes"] = total
        except OSError:
            pass
        now = time.time()
        rec["samples"].append([now, total])
        rec["end"] = now


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int]) -> None:
        super().__init__(addr, _Handler)
        self.lock = threading.Lock()
        self.bulk: list[dict[str, Any]] = []


def serve(bind: str, port: int, out: Path) -> int:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    srv = _Server((bind, port))
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    print(f"linkcheck server listening on {bind}:{port}", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    srv.shutdown()
    with srv.lock:
        records = [dict(r) for r in srv.bulk]
    out.write_text(json.dumps({"bind": bind, "bulk": records}))
    return 0


def _connect(src: str, dst: str, port: int, dscp: int, deadline: float) -> socket.socket:
    """Connect, retrying while the server is still starting (until `deadline`)."""
    while True:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        _mark(s, dscp)
        s.bind((src, 0))
        s.settimeout(10)
        try:
            s.connect((dst, port))
            return s
        except (ConnectionRefusedError, TimeoutError):
            s.close()
            if time.time() > deadline:
                raise
            time.sleep(0.05)


def _bulk(src: str, dst: str, port: int, dscp: int, until: float, rec: dict[str, Any]) -> None:
    try:
        s = _connect(src, dst, port, dscp, until)
    except OSError as e:
        rec["error"] = f"connect: {e}"
        return
    payload = b"\0" * CHUNK
    sent = 0
    try:
        s.sendall(HEADER.pack(MAGIC, BULK, dscp, 0))
        while time.time() < until:
            s.sendall(payload)
            sent += len(payload)
    except OSError as e:
        rec["error"] = f"send: {e}"
    finally:
        rec["bytes_sent"] = sent
        rec["end"] = time.time()
        s.close()


def _short(
    src: str,
    dst: str,
    port: int,
    dscp: int,
    size: int,
    interval: float,
    until: float,
    out: list[dict[str, Any]],
) -> None:
    next_start = time.time()
    while True:
        now = time.time()
        if next_start > now:
            time.sleep(next_start - now)
        start = time.time()
        mono = time.monotonic()
        if start >= until:
            return
        next_start = start + interval
        rec: dict[str, Any] = {
            "dst": dst,
            "dscp": dscp,
            "size": size,
            "start": start,
            "completed": False,
        }
        out.append(rec)
        try:
            s = _connect(src, dst, port, dscp, start + 5)
            s.sendall(HEADER.pack(MAGIC, SHORT, dscp, size))
            got = 0
            while got < size:
                chunk = s.recv(CHUNK)
                if not chunk:
                    break
                got += len(chunk)
            fct = time.monotonic() - mono
            end = time.time()
            s.close()
            rec.update(bytes=got, end=end, fct_s=fct, completed=got == size)
        except OSError as e:
            rec["error"] = str(e)


def client(args: argparse.Namespace) -> int:
    args.out.with_suffix(".ready").touch()
    window = wait_for_go(args.go)  # returns at the run's common t0
    until = window.end
    threads: list[threading.Thread] = []
    bulk: list[dict[str, Any]] = []
    for spec in args.bulk or []:
        dst, dscp = spec.split(":")
        rec: dict[str, Any] = {"dst": dst, "dscp": int(dscp), "start": time.time()}
        bulk.append(rec)
        threads.append(
            threading.Thread(target=_bulk, args=(args.bind, dst, args.port, int(dscp), until, rec))
        )
    short: list[dict[str, Any]] = []
    if args.short:
        dst, dscp, size, interval = args.short.split(":")
        threads.append(
            threading.Thread(
                target=_short,
                args=(
                    args.bind,
                    dst,
                    args.port,
                    int(dscp),
                    int(size),
                    float(interval),
                    until,
                    short,
                ),
            )
        )
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    args.out.write_text(json.dumps({"bind": args.bind, "bulk": bulk, "short": short}))
    args.out.with_suffix(".done").touch()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="linkcheck_node")
    sub = ap.add_subparsers(dest="role", required=True)
    s = sub.add_parser("server")
    s.add_argument("--bind", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("client")
    c.add_argument("--bind", required=True)
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--go", type=Path, required=True, help="the orchestrator's go file")
    c.add_argument("--bulk", action="append", help="DST:DSCP, one per bulk flow")
    c.add_argument("--short", help="DST:DSCP:SIZE:INTERVAL")
    c.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.role == "server":
        return serve(args.bind, args.port, args.out)
    return client(args)


if __name__ == "__main__":
    sys.exit(main())
