"""The ensemble node program, one per host of an ensemble instance (spec.py says what the
patterns are). Threads and blocking sockets, stdlib only: a few long TCP streams per host,
where the kernel's flow control is the pipeline's back-pressure.

Roles, by the config: the storage host streams raw blocks to each reader; a preprocessor takes
a raw block (or none, without storage), spends batch / rate seconds on it (a sleep, see spec.py)
and sends the preprocessed block where the pattern says; a model counts the blocks of each
round and, once a round has every preprocessor's block, trains on it (train_rate) or takes it
at once. Every stream carries its blocks in round order, so a model can hold a stream still
(stop reading) when it is `prefetch` rounds ahead of its training without ever blocking a round
it still needs; the single-broadcast leader forwards whole rounds, in order, once it has them.

Records: one CSV row per round a model completes (ready = when its last block arrived, taken =
when training began on it, wait_s = how long training waited for it), appended as they happen;
at the end of the run, what this host had sent, received and done at the measured window's two
edges (count_window): the image rates are taken from those counters, not from the rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import queue
import signal
import socket
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

from testbed.core.exporters import start_node_exporter
from testbed.core.tcpstats import bytes_received
from testbed.core.window import Window, wait_for_go

HEADER = struct.Struct("!BIHI")  # kind (RAW, BLOCK), round, origin (index in hosts), bytes
RAW, BLOCK = 0, 1
FIELDS = ["model", "round", "images", "ready", "taken", "wait_s", "train_s", "measured"]
CONNECT_S = 10.0


class Sender(threading.Thread):
    """One TCP stream to one host: sends the blocks put on its queue, in order."""

    def __init__(self, node: Node, dst: str) -> None:
        super().__init__(daemon=True, name=f"send-{dst}")
        self.node, self.dst = node, dst
        self.q: queue.Queue[tuple[int, int, int, int]] = queue.Queue(maxsize=node.cfg["prefetch"])
        self.sent = [0, 0]  # bytes of RAW, BLOCK

    def connect(self) -> socket.socket:
        cfg = self.node.cfg
        deadline = time.monotonic() + CONNECT_S
        while True:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, cfg["dscp"] << 2)
            s.bind((self.node.bind, 0))
            try:
                s.connect((cfg["addresses"][self.dst], cfg["port"]))
                return s
            except OSError:
                s.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def run(self) -> None:
        sock = self.connect()
        payload = self.node.payload
        while True:
            kind, rnd, origin, nbytes = self.q.get()
            sock.sendall(HEADER.pack(kind, rnd, origin, nbytes))
            sock.sendall(payload[:nbytes])
            self.sent[kind] += HEADER.size + nbytes


class Model:
    """Counts the blocks of each round; releases rounds in order once complete; trains."""

    def __init__(self, node: Node, expected: int, images: int) -> None:
        self.node, self.expected, self.images = node, expected, images
        self.cond = threading.Condition()
        self.arrived: dict[int, int] = {}
        self.complete = 0  # rounds 0 … complete-1 have all their blocks
        self.consumed = 0  # rounds training has taken
        self.forwarded = 0  # single-broadcast leader: rounds handed to the senders
        self.ready_at: dict[int, float] = {}
        self.leads = False

    def horizon(self) -> int:
        done = min(self.consumed, self.forwarded) if self.leads else self.consumed
        return done + self.node.cfg["prefetch"]

    def block(self, rnd: int) -> None:
        """A block of round `rnd` is here (its stream waits while it is too far ahead)."""
        with self.cond:
            while rnd >= self.horizon():
                self.cond.wait()
            self.arrived[rnd] = self.arrived.get(rnd, 0) + 1
            while self.arrived.get(self.complete) == self.expected:
                del self.arrived[self.complete]
                self.ready_at[self.complete] = time.time()
                self.complete += 1
            self.cond.notify_all()

    def forward(self, senders: list[Sender], origins: list[int], block: int) -> None:
        """Leader: each complete round, all its blocks, to every model that preprocesses none."""
        rnd = 0
        while True:
            with self.cond:
                while self.complete <= rnd:
                    self.cond.wait()
            for s in senders:
                for o in origins:
                    s.q.put((BLOCK, rnd, o, block))
            with self.cond:
                self.forwarded = rnd + 1
                self.cond.notify_all()
            rnd += 1

    def train(self, window: Window, out: csv.writer, f: Any, rate: float | None) -> None:
        m = self.node.metrics
        rnd = 0
        while True:
            wanted = time.time()
            with self.cond:
                while self.complete <= rnd:
                    self.cond.wait(timeout=0.2)
                    if time.time() >= window.end:
                        return
                ready = self.ready_at.pop(rnd)
            taken = time.time()
            train = self.images / rate if rate else 0.0
            out.writerow([self.node.host, rnd, self.images, f"{ready:.6f}", f"{taken:.6f}",
                          f"{taken - wanted:.6f}", f"{train:.6f}", window.contains(ready)])  # fmt: skip
            f.flush()
            if m is not None:
                m["images"].labels(self.node.host).inc(self.images)
                m["wait"].labels(self.node.host).inc((taken - wanted) / self.node.scale)
            if train:
                time.sleep(train)
            with self.cond:
                self.consumed = rnd + 1
                self.cond.notify_all()
            rnd += 1
            if time.time() >= window.end:
                return


class Node:
    def __init__(self, args: argparse.Namespace, cfg: dict[str, Any]) -> None:
        self.args, self.cfg, self.host, self.bind = args, cfg, args.host, args.bind
        self.scale = cfg.get("time_scale", 1.0)
        self.names: list[str] = cfg["hosts"]  # origin index → host
        pattern, models, pre = cfg["pattern"], cfg["models"], cfg["preprocessors"]
        self.block, self.raw_block = (
            cfg["batch"] * cfg["image_size"],
            cfg["batch"] * cfg["raw_image_size"],
        )
        self.payload = memoryview(bytes(max(self.block, self.raw_block)))
        self.senders: dict[str, Sender] = {}
        self.at_edges: dict[str, dict[str, Any]] = {}
        self.streams: list[tuple[str, socket.socket]] = []  # (sending host, connection) in
        self.by_address = {a: h for h, a in cfg["addresses"].items()}
        self.produced = 0  # blocks this host preprocessed
        self.raw: queue.Queue[int] = queue.Queue(maxsize=cfg["prefetch"])
        self.metrics = start_node_exporter(registry, args.metrics)
        self.model: Model | None = None
        if self.host in models:
            expected = 1 if pattern == "duplicated" else len(pre)
            self.model = Model(self, expected, cfg["images_per_round"])
        # where this host's preprocessed blocks go, and (leader) whom it forwards to
        self.targets: list[str] = []
        if self.host in pre and pattern in ("all-shared", "multi-broadcast"):
            self.targets = [m for m in models if m != self.host]
        elif self.host in pre and pattern == "single-broadcast":
            self.targets = [p for p in pre if p != self.host]
        self.downstream = (
            [m for m in models if m not in pre] if self.host == cfg.get("leader") else []
        )
        if self.model is not None:
            # a leader with no one to forward to (p = n) must not wait for its forwarding:
            # nothing would advance it, and its stream would stall the round after prefetch
            self.model.leads = bool(self.downstream)
        self.readers: list[str] = []
        if self.host == cfg.get("storage"):
            self.readers = models if pattern == "duplicated" else pre
        for dst in {*self.targets, *self.downstream, *self.readers}:
            self.senders[dst] = Sender(self, dst)

    def send(self, dst: str, kind: int, rnd: int, origin: int, nbytes: int) -> None:
        self.senders[dst].q.put((kind, rnd, origin, nbytes))

    def listen(self) -> socket.socket:
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((self.bind, self.cfg["port"]))
        srv.listen(64)
        return srv

    def accept(self, srv: socket.socket) -> None:
        while True:
            conn, (peer, _port) = srv.accept()
            self.streams.append((self.by_address.get(peer, peer), conn))
            threading.Thread(target=self.receive, args=(conn,), daemon=True).start()

    def receive(self, conn: socket.socket) -> None:
        buf = bytearray(max(self.block, self.raw_block, HEADER.size))
        view = memoryview(buf)
        while True:
            if not _read(conn, view[: HEADER.size]):
                return
            kind, rnd, _origin, nbytes = HEADER.unpack(view[: HEADER.size])
            if not _read(conn, view[:nbytes]):
                return
            if kind == RAW:
                self.raw.put(rnd)
            elif self.model is not None:
                self.model.block(rnd)

    def produce(self, window: Window) -> None:
        """A preprocessor (or a storage host): one block per round until the run ends."""
        cfg = self.cfg
        me = self.names.index(self.host)
        if self.readers:  # storage: raw blocks to every reader, as fast as they take them
            for dst in self.readers:
                threading.Thread(target=self._stream_raw, args=(dst, window), daemon=True).start()
            return
        seconds = cfg["batch"] / cfg["preprocess_rate"]
        rnd = 0
        while time.time() < window.end:
            if cfg.get("storage"):
                got = self.raw.get()
                assert got == rnd, (got, rnd)
            time.sleep(seconds)  # the emulated preprocessing of `batch` images
            if self.model is not None:
                self.model.block(rnd)  # its own block, without the network
            for dst in self.targets:
                self.send(dst, BLOCK, rnd, me, self.block)
            self.produced += 1
            rnd += 1

    def _stream_raw(self, dst: str, window: Window) -> None:
        rnd = 0
        while time.time() < window.end:
            self.send(dst, RAW, rnd, 0, self.raw_block)
            rnd += 1

    def bytes_sent(self) -> dict[str, int]:
        return {
            "raw": sum(s.sent[RAW] for s in self.senders.values()),
            "preprocessed": sum(s.sent[BLOCK] for s in self.senders.values()),
        }

    def bytes_in(self) -> dict[str, int]:
        """Bytes received so far per sending host, as the kernel counts them: what crossed
        the links into this host, read or not (a stream still blocked in its buffer counts)."""
        out: dict[str, int] = {}
        for src, conn in list(self.streams):
            with contextlib.suppress(OSError):  # streams stay open until the process ends
                out[src] = out.get(src, 0) + bytes_received(conn)
        return out

    def count_window(self, window: Window) -> None:
        """The counters at the window's edges: their differences are what this host sent and
        received, preprocessed and completed inside the window, over the time between the two
        reads. A rate taken from them cannot exceed what the links carried in that time."""
        for edge in ("start", "stop"):
            time.sleep(max(0.0, getattr(window, edge) - time.time()))
            self.at_edges[edge] = {
                "t": time.time(),
                "sent": self.bytes_sent(),
                "received": self.bytes_in(),
                "produced": self.produced,
                "rounds": self.model.complete if self.model is not None else 0,
            }


def _read(conn: socket.socket, view: memoryview) -> bool:
    got = 0
    while got < len(view):
        n = conn.recv_into(view[got:])
        if n == 0:
            return False
        got += n
    return True


def registry() -> tuple[Any, dict[str, Any]]:
    """What a model exports: images received, and time waited for data (scenario seconds)."""
    from prometheus_client import CollectorRegistry, Counter

    reg = CollectorRegistry()
    return reg, {
        "images": Counter("testbed_ensemble_images", "Images a model received", ["host"], registry=reg),
        "wait": Counter("testbed_ensemble_wait_seconds", "Time a model waited for data", ["host"], registry=reg),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ensemble_node")
    ap.add_argument("--host", required=True)
    ap.add_argument("--bind", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--go", type=Path, required=True, help="the orchestrator's go file")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--metrics", help="ADDR:PORT for the Prometheus exporter")
    args = ap.parse_args(argv)
    cfg = json.loads(Path(args.config).read_text())
    node = Node(args, cfg)
    srv = node.listen()
    threading.Thread(target=node.accept, args=(srv,), daemon=True).start()
    f = open(args.out, "w", newline="")  # noqa: SIM115 - lives as long as the process
    out = csv.writer(f)
    out.writerow(FIELDS)
    f.flush()
    signal.signal(signal.SIGTERM, lambda _s, _f: os._exit(0))
    roles = [r for r, on in (("model", node.model), ("storage", node.readers),
                             ("preprocessor", node.host in cfg["preprocessors"])) if on]  # fmt: skip
    print(f"ensemble {args.host}: {cfg['pattern']}, {' and '.join(roles)}", flush=True)
    args.out.with_suffix(".ready").touch()
    window = wait_for_go(args.go)
    for s in node.senders.values():
        s.start()
    counting = threading.Thread(target=node.count_window, args=(window,), daemon=True)
    counting.start()
    if node.model is not None and node.downstream:
        origins = [node.names.index(p) for p in cfg["preprocessors"]]
        threading.Thread(
            target=node.model.forward,
            args=([node.senders[d] for d in node.downstream], origins, node.block),
            daemon=True,
        ).start()
    if node.readers or node.host in cfg["preprocessors"] or cfg["pattern"] == "duplicated":
        threading.Thread(target=node.produce, args=(window,), daemon=True).start()
    if node.model is not None:
        node.model.train(window, out, f, cfg.get("train_rate"))
    else:
        time.sleep(max(0.0, window.end - time.time()))
    f.close()
    counting.join(timeout=max(0.0, window.stop - time.time()) + 1)
    counters = {"run": node.bytes_sent(), **node.at_edges}
    args.out.with_name(args.out.stem + "-bytes.json").write_text(json.dumps(counters))
    args.out.with_suffix(".done").touch()
    # keep the streams open (the others may still be sending) until the controller's SIGTERM
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
