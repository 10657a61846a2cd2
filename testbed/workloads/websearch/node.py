"""The web-search load generator that runs *inside* a node: a server, and a client that opens a
new TCP connection per flow to a uniformly random other host at Poisson arrival times. Stdlib
only (asyncio), so it starts fast.

A flow: the client connects (marked with the scenario's DSCP), sends the 8-byte size it
wants, the server (marking its socket the same way) sends that many bytes and closes. FCT =
connect start → last byte received at the client, on the monotonic clock. Every flow is
appended to a CSV when it ends, with how late it started after its Poisson arrival time
(`lag_s`: a machine that cannot keep the load's clock shows here).

Life: bind the server, say ready (a `.ready` marker), wait for the orchestrator's go file,
then start flows at Poisson times (the rate is this host's own) until the end of the run.
After that no new flow starts, but the flows that started inside the measured window are
given up to the drain limit to finish; only then is everything still running cancelled and
written with completed = false (censored, if it started inside the window).

The random streams are seeded from (seed, host), so the same seed gives the same flows (ids,
sizes, destinations, arrival times) on every run: runs can be compared flow by flow.

With `--metrics` the node exports flow counters and an FCT histogram on its management
address; after the run it writes a `.done` marker and keeps the exporter up until SIGTERM.
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from testbed.metrics import size_class
from testbed.metrics.exporters import start_node_exporter
from testbed.window import Window, wait_for_go
from testbed.workloads.websearch.flowsizes import sample

HEADER = struct.Struct("!Q")
CHUNK = 64 * 1024
FIELDS = [
    "id",
    "src",
    "dst",
    "size_bytes",
    "start",
    "lag_s",
    "end",
    "fct_s",
    "dscp",
    "completed",
    "bytes_received",
    "measured",
    "error",
]


def _mark(sock: socket.socket, dscp: int) -> None:
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)


async def _serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, dscp: int) -> None:
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
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, OSError):
        pass
    finally:
        writer.close()


def arrivals(
    rng: random.Random, rate: float, cdf: list[tuple[float, float]], peers: list[str]
) -> Iterator[tuple[float, int, str]]:
    """(offset from t0, size, destination) of each flow a host starts, forever. One fixed
    order of draws per flow keeps the streams identical across runs with the same seed (and
    lets `testbed sweep --dry-run` count a run's flows without running it)."""
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        size = sample(cdf, rng)
        yield t, size, peers[rng.randrange(len(peers))]


def host_rng(seed: int, host: str, stream: str = "websearch") -> random.Random:
    """A host's own random stream: its arrivals, sizes and destinations. The instance named
    websearch keeps the stream of the scenarios before named instances (the same flows);
    another instance draws its own."""
    key = f"{seed}/{host}" if stream == "websearch" else f"{seed}/{stream}/{host}"
    return random.Random(key)


def registry() -> tuple[Any, dict[str, Any]]:
    """What a generator exports: flows started and completed, and an FCT histogram per size
    class (seconds of scenario time)."""
    from prometheus_client import CollectorRegistry, Counter, Histogram

    from testbed.metrics.exporters import DURATION_BUCKETS

    reg = CollectorRegistry()
    return reg, {
        "fct": Histogram("testbed_flow_completion_seconds", "Flow completion time (connect to last byte)",
                         ["host", "size_class"], buckets=DURATION_BUCKETS, registry=reg),
        "started": Counter("testbed_flows_started", "Flows started", ["host"], registry=reg),
        "completed": Counter("testbed_flows_completed", "Flows completed", ["host"], registry=reg),
    }  # fmt: skip


class Generator:
    def __init__(
        self, args: argparse.Namespace, cfg: dict[str, Any], metrics: dict[str, Any] | None
    ) -> None:
        self.args = args
        self.metrics = metrics
        self.cdf = [(float(x), float(p)) for x, p in cfg["cdf"]]
        self.peers: dict[str, str] = {k: v for k, v in cfg["peers"].items() if k != args.host}
        self.rate: float = cfg["rate_per_host"]
        self.dscp: int = cfg["dscp"]
        self.port: int = cfg["port"]
        self.rng = host_rng(cfg["seed"], args.host, cfg.get("stream", "websearch"))
        self.time_scale: float = cfg.get("time_scale", 1.0)
        self.out = open(args.out, "w", newline="")  # noqa: SIM115 - lives as long as the process
        self.csv = csv.writer(self.out)
        self.csv.writerow(FIELDS)
        self.running: dict[str, dict[str, Any]] = {}

    def record(self, rec: dict[str, Any]) -> None:
        end = rec.get("end")
        fct = rec.get("fct")
        self.csv.writerow([
            rec["id"], self.args.host, rec["dst"], rec["size"], f"{rec['start']:.6f}",
            f"{rec['start'] - rec['scheduled']:.6f}",
            f"{end:.6f}" if end else "", f"{fct:.6f}" if fct is not None else "",
            self.dscp, rec["completed"], rec["received"], rec["measured"], rec.get("error", ""),
        ])  # fmt: skip
        self.out.flush()

    def abandon(self) -> None:
        """Stopped before the drain ended (SIGTERM): the flows still running are written as
        not completed, so a measured one is counted as censored rather than lost."""
        if self.out.closed:
            return
        for rec in list(self.running.values()):
            self.record(rec)
        self.running.clear()
        self.out.close()

    async def flow(self, rec: dict[str, Any]) -> None:
        self.running[rec["id"]] = rec
        if self.metrics is not None:
            self.metrics["started"].labels(self.args.host).inc()
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        writer = None
        try:
            _mark(sock, self.dscp)
            sock.bind((self.args.bind, 0))
            sock.setblocking(False)
            await loop.sock_connect(sock, (self.peers[rec["dst"]], self.port))
            reader, writer = await asyncio.open_connection(sock=sock)
            writer.write(HEADER.pack(rec["size"]))
            await writer.drain()
            while rec["received"] < rec["size"]:
                data = await reader.read(CHUNK)
                if not data:
                    break
                rec["received"] += len(data)
            rec["fct"] = time.monotonic() - rec["mono"]
            rec["end"] = time.time()
            rec["completed"] = rec["received"] == rec["size"]
            if rec["completed"] and self.metrics is not None:
                self.metrics["completed"].labels(self.args.host).inc()
                self.metrics["fct"].labels(self.args.host, size_class(rec["size"])).observe(
                    rec["fct"] / self.time_scale
                )
        except OSError as e:
            rec["error"] = str(e)
        finally:
            if writer is not None:
                writer.close()
            else:
                sock.close()
            if rec.get("end") or "error" in rec:
                self.running.pop(rec["id"], None)
                self.record(rec)

    async def run(self, window: Window) -> None:
        tasks: dict[str, asyncio.Task[None]] = {}
        flows = arrivals(self.rng, self.rate, self.cdf, sorted(self.peers))
        for seq, (offset, size, dst) in enumerate(flows):
            t = window.t0 + offset
            if t >= window.end:
                break
            delay = t - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            now = time.time()
            rec = {
                "id": f"{self.args.host}-{seq:06d}",
                "dst": dst,
                "size": size,
                "start": now,
                "mono": time.monotonic(),
                "scheduled": t,
                "received": 0,
                "completed": False,
                "measured": window.contains(now),
            }
            tasks[rec["id"]] = asyncio.create_task(self.flow(rec))
            tasks[rec["id"]].add_done_callback(lambda task, fid=rec["id"]: tasks.pop(fid, None))
        delay = window.end - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        # Drain: the measured flows still running get up to the drain limit to finish.
        deadline = time.monotonic() + window.drain
        while True:
            pending = [tasks[f] for f, r in self.running.items() if r["measured"] and f in tasks]
            left = deadline - time.monotonic()
            if not pending or left <= 0:
                break
            await asyncio.wait(pending, timeout=left)
        for task in list(tasks.values()):
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        for rec in list(self.running.values()):  # cut off: completed = false
            self.record(rec)
        self.running.clear()
        self.out.close()


async def amain(args: argparse.Namespace) -> int:
    cfg = json.loads(Path(args.config).read_text())
    server = await asyncio.start_server(  # kept referenced: it serves until SIGTERM
        lambda r, w: _serve_one(r, w, cfg["dscp"]), host=args.bind, port=cfg["port"], backlog=1024
    )
    metrics = start_node_exporter(registry, args.metrics)
    gen = Generator(args, cfg, metrics)
    print(
        f"websearch {args.host}: serving on {args.bind}:{cfg['port']}, "
        f"{cfg['rate_per_host']:.3f} flows/s out",
        flush=True,
    )

    def terminated() -> None:
        gen.abandon()
        os._exit(0)

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, terminated)
    args.out.with_suffix(".ready").touch()
    window = await asyncio.to_thread(wait_for_go, args.go)
    await gen.run(window)
    args.out.with_suffix(".done").touch()
    # keep serving (other hosts' flows to this one may still be draining) and exporting (the
    # final scrape), until the controller stops every generator with SIGTERM
    async with server:
        await asyncio.Event().wait()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="websearch_node")
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
