"""The incast node program, one per host of an incast instance: a responder, and an aggregator
that sends queries at Poisson times. Stdlib only (asyncio), so it starts fast.

A query: the aggregator opens a connection to each of `fanout` responders drawn from the other
hosts (all marked with the instance's DSCP) and sends each the 8-byte size it wants; every
responder sends that many bytes and closes. They answer at once, so the responses meet in the
aggregator's downlink. QCT = first connect → last byte of the last response, on the
monotonic clock. Every query is appended to a CSV when it ends: completed only if every
response arrived whole. As with web-search flows: queries that start in the measured window
get up to the drain limit after the run; the rest are written as not completed (censored).

The random stream is seeded from (seed, instance, host): the same seed gives the same queries.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import random
import signal
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

from testbed.metrics.exporters import start_node_exporter
from testbed.window import Window, wait_for_go

HEADER = struct.Struct("!Q")
CHUNK = 64 * 1024
FIELDS = ["id", "aggregator", "responders", "fanout", "size_bytes", "start", "lag_s", "end",
          "qct_s", "dscp", "completed", "bytes_received", "measured", "error"]  # fmt: skip


def _mark(sock: socket.socket, dscp: int) -> None:
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)


async def _respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, dscp: int) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        _mark(sock, dscp)
    try:
        (size,) = HEADER.unpack(await reader.readexactly(HEADER.size))
        payload = b"\0" * CHUNK
        left = size
        while left > 0:
            n = min(left, CHUNK)
            writer.write(payload[:n])
            left -= n
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, OSError):
        pass
    finally:
        writer.close()


def queries(rng: random.Random, rate: float, peers: list[str], fanout: int) -> Any:
    """(offset from t0, responders) of each query, forever; the same draws for the same seed."""
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        yield t, rng.sample(peers, fanout)


def rng_for(seed: int, name: str, host: str) -> random.Random:
    return random.Random(f"{seed}/incast/{name}/{host}")


def registry() -> tuple[Any, dict[str, Any]]:
    """What an aggregator exports: queries started and completed, and a QCT histogram (seconds
    of scenario time)."""
    from prometheus_client import CollectorRegistry, Counter, Histogram

    from testbed.metrics.exporters import DURATION_BUCKETS

    reg = CollectorRegistry()
    return reg, {
        "started": Counter("testbed_queries_started", "Incast queries started", ["host"], registry=reg),
        "completed": Counter("testbed_queries_completed", "Incast queries completed", ["host"], registry=reg),
        "qct": Histogram("testbed_query_completion_seconds", "Incast query completion time",
                         ["host"], buckets=DURATION_BUCKETS, registry=reg),
    }  # fmt: skip


class Aggregator:
    def __init__(
        self, args: argparse.Namespace, cfg: dict[str, Any], m: dict[str, Any] | None
    ) -> None:
        self.args, self.cfg, self.m = args, cfg, m
        self.peers: dict[str, str] = {k: v for k, v in cfg["peers"].items() if k != args.host}
        self.rng = rng_for(cfg["seed"], cfg["name"], args.host)
        self.scale = cfg.get("time_scale", 1.0)
        self.out = open(args.out, "w", newline="")  # noqa: SIM115 - lives as long as the process
        self.csv = csv.writer(self.out)
        self.csv.writerow(FIELDS)
        self.running: dict[str, dict[str, Any]] = {}

    def record(self, q: dict[str, Any]) -> None:
        end, qct = q.get("end"), q.get("qct")
        self.csv.writerow([
            q["id"], self.args.host, " ".join(q["responders"]), len(q["responders"]),
            self.cfg["size"] * len(q["responders"]), f"{q['start']:.6f}",
            f"{q['start'] - q['scheduled']:.6f}", f"{end:.6f}" if end else "",
            f"{qct:.6f}" if qct is not None else "", self.cfg["dscp"], q["completed"],
            q["received"], q["measured"], q.get("error", ""),
        ])  # fmt: skip
        self.out.flush()

    async def one(self, dst: str, q: dict[str, Any]) -> int:
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        writer = None
        got = 0
        try:
            _mark(sock, self.cfg["dscp"])
            sock.bind((self.args.bind, 0))
            sock.setblocking(False)
            await loop.sock_connect(sock, (self.peers[dst], self.cfg["port"]))
            reader, writer = await asyncio.open_connection(sock=sock)
            writer.write(HEADER.pack(self.cfg["size"]))
            await writer.drain()
            while got < self.cfg["size"]:
                data = await reader.read(CHUNK)
                if not data:
                    break
                got += len(data)
                q["received"] += len(data)
        finally:
            if writer is not None:
                writer.close()
            else:
                sock.close()
        return got

    async def query(self, q: dict[str, Any]) -> None:
        self.running[q["id"]] = q
        if self.m is not None:
            self.m["started"].labels(self.args.host).inc()
        try:
            got = await asyncio.gather(*(self.one(d, q) for d in q["responders"]))
            q["qct"] = time.monotonic() - q["mono"]
            q["end"] = time.time()
            q["completed"] = all(g == self.cfg["size"] for g in got)
            if q["completed"] and self.m is not None:
                self.m["completed"].labels(self.args.host).inc()
                self.m["qct"].labels(self.args.host).observe(q["qct"] / self.scale)
        except OSError as e:
            q["error"] = str(e)
        finally:
            if q.get("end") or "error" in q:
                self.running.pop(q["id"], None)
                self.record(q)

    async def run(self, window: Window) -> None:
        tasks: dict[str, asyncio.Task[None]] = {}
        for seq, (offset, responders) in enumerate(
            queries(self.rng, self.cfg["rate"], sorted(self.peers), self.cfg["fanout"])
        ):
            t = window.t0 + offset
            if t >= window.end:
                break
            delay = t - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            now = time.time()
            q = {"id": f"{self.args.host}-{seq:06d}", "responders": responders, "start": now,
                 "mono": time.monotonic(), "scheduled": t, "received": 0, "completed": False,
                 "measured": window.contains(now)}  # fmt: skip
            tasks[q["id"]] = asyncio.create_task(self.query(q))
            tasks[q["id"]].add_done_callback(lambda _t, qid=q["id"]: tasks.pop(qid, None))
        delay = window.end - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        deadline = time.monotonic() + window.drain  # measured queries get the drain to finish
        while True:
            pending = [tasks[i] for i, q in self.running.items() if q["measured"] and i in tasks]
            left = deadline - time.monotonic()
            if not pending or left <= 0:
                break
            await asyncio.wait(pending, timeout=left)
        for task in list(tasks.values()):
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        self.abandon()

    def abandon(self) -> None:
        if self.out.closed:
            return
        for q in list(self.running.values()):
            self.record(q)
        self.running.clear()
        self.out.close()


async def amain(args: argparse.Namespace) -> int:
    cfg = json.loads(Path(args.config).read_text())
    server = await asyncio.start_server(  # kept referenced: it serves until SIGTERM
        lambda r, w: _respond(r, w, cfg["dscp"]), host=args.bind, port=cfg["port"], backlog=1024
    )
    agg = Aggregator(args, cfg, start_node_exporter(registry, args.metrics))
    print(f"incast {args.host}: responding on {args.bind}:{cfg['port']}, {cfg['rate']:.3f} queries/s "
          f"to {cfg['fanout']} of {len(agg.peers)}", flush=True)  # fmt: skip

    def terminated() -> None:
        agg.abandon()
        os._exit(0)

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, terminated)
    args.out.with_suffix(".ready").touch()
    window = await asyncio.to_thread(wait_for_go, args.go)
    await agg.run(window)
    args.out.with_suffix(".done").touch()
    # keep responding (the others' queries may still be draining to us) and exporting (the
    # final scrape), until the controller stops every node with SIGTERM
    async with server:
        await asyncio.Event().wait()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="incast_node")
    ap.add_argument("--host", required=True)
    ap.add_argument("--bind", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--go", type=Path, required=True, help="the orchestrator's go file")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--metrics", help="ADDR:PORT for the Prometheus exporter (a management address)"
    )
    return asyncio.run(amain(ap.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
