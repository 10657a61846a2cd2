"""What the open-loop node programs share (web search's generator, incast's aggregator): the
server, the client's fetch, the schedule, the drain and `main`. Stdlib only (asyncio), so a
node program starts fast; one copy, so the kinds cannot drift apart in how they are measured.

A fetch: the client connects (marked with the instance's DSCP) and sends the 8-byte size it
wants; the server (marking its socket the same way) sends that many bytes and closes.

Life of a node: bind the server, say ready (a `.ready` marker), wait for the orchestrator's go
file, then start events (a kind's flows or queries) at the times the kind draws, each its own
task, until the end of the run. After that no new event starts, but those that started inside
the measured window get up to the drain limit to finish; only then is everything still running
cancelled and written with completed = false (censored, if it started inside the window). A
SIGTERM before the drain ended writes the running ones the same way. Every event is appended
to the node's CSV when it ends, with how late it started after its drawn time (`lag_s`).

With `--metrics` the node exports the kind's counters on its management address; after the
run it writes a `.done` marker and keeps serving and exporting until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import signal
import socket
import struct
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar

from testbed.core import tcpstats
from testbed.core.exporters import start_node_exporter
from testbed.core.window import Window, wait_for_go

HEADER = struct.Struct("!Q")
CHUNK = 64 * 1024


def mark(sock: socket.socket, dscp: int) -> None:
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)


class Served:
    """The server's side of each connection, one CSV row as it closes (`<out>.served.csv`):
    when it was accepted, the client, the bytes asked for and the sending socket's own TCP
    counters (tcpstats.SOCKET_FIELDS). The server is the side that sends a flow's data, so
    its retransmissions and timeouts are the flow's; a host's /proc/net counters mix every
    class the host sends in. The controller counts the connections accepted inside the
    measured window (`window` is known once the run has started)."""

    FIELDS: ClassVar[list[str]] = [
        "accepted", "client", "client_port", "size_bytes", "sent_all",
        *tcpstats.SOCKET_NAMES,
    ]  # fmt: skip

    def __init__(self, path: Path) -> None:
        self.f = open(path, "w", newline="")  # noqa: SIM115 - lives as long as the process
        self.csv = csv.writer(self.f)
        self.csv.writerow(self.FIELDS)
        self.f.flush()

    def add(self, accepted: float, peer: Any, size: int, sent_all: bool, sock: Any) -> None:
        try:
            counters = tcpstats.read_socket(sock)
        except OSError:
            counters = dict.fromkeys(tcpstats.SOCKET_NAMES)
        client, port = (peer[0], peer[1]) if peer else ("", "")
        self.csv.writerow([f"{accepted:.6f}", client, port, size, sent_all,
                           *("" if v is None else v for v in counters.values())])  # fmt: skip
        self.f.flush()


async def serve(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    dscp: int,
    served: Served | None = None,
) -> None:
    """Answer one connection: read the size asked for, send that many bytes and the end of
    the stream, wait for the client to close (it does once it has every byte: none of this
    connection's retransmissions is left to come), record the socket's counters, close. The
    client's flow time ends when its last byte arrives, so waiting here does not lengthen
    it; the server still ends its stream first, as when it closed at once, so the closed
    connections' TIME_WAIT stays on the server's side (one listening port) and a client
    opening many connections a second does not run out of its own ports."""
    accepted = time.time()
    sock = writer.get_extra_info("socket")
    if sock is not None:
        mark(sock, dscp)
    size, sent_all = 0, False
    try:
        (size,) = HEADER.unpack(await reader.readexactly(HEADER.size))
        payload = b"\0" * CHUNK
        left = size
        while left > 0:
            n = min(left, CHUNK)
            writer.write(payload[:n])
            left -= n
            await writer.drain()
        writer.write_eof()  # once the bytes still buffered are written
        sent_all = True
        await reader.read()  # the client's end of the stream (or a reset)
    except (asyncio.IncompleteReadError, ConnectionError, OSError):
        pass
    finally:
        if served is not None and sock is not None:
            served.add(accepted, writer.get_extra_info("peername"), size, sent_all, sock)
        writer.close()


def served_file(out: Path) -> Path:
    """The server's records beside the client's (Served)."""
    return out.with_suffix(".served.csv")


def served_counters(outs: Iterable[Path], window: Window) -> list[dict[str, int | None]]:
    """The sending sockets' counters (Served) of the connections the nodes writing `outs`
    accepted inside the measured window; a node without the file (it died first) adds none."""
    out = []
    for path in outs:
        try:
            with open(served_file(path), newline="") as f:
                rows = list(csv.DictReader(f))
        except FileNotFoundError:
            continue
        for r in rows:
            if window.contains(float(r["accepted"])):
                out.append({k: int(r[k]) if r[k] else None for k in tcpstats.SOCKET_NAMES})
    return out


# the sending socket's counters a flow's row carries once joined (join_served)
JOINED = ("retransmitted_segments", "timeouts")
JOIN_SLACK_S = 0.001  # clock reads apart: the client stamps its start before connecting


def join_served(rows: list[dict[str, Any]], outs: dict[str, Path], ip_of: dict[str, str]) -> int:
    """Each client row (a kind whose rows name `src`, `dst`, `port`, `start`, `end`) with
    the counters of the server's socket that sent its bytes: in host `dst`'s records
    (Served; `outs`: a host's name to its node's records), the connection accepted from the
    row's source address and port between the row's start and end, each record taken once.
    `ip_of`: a host's name to its data address. Ports come back after a connection closes,
    so the times keep a reused port apart. A row gets empty counters where no record fits:
    a connection that never connected (no port), a server that died first. How many rows
    matched."""
    served: dict[tuple[str, str, str], list[tuple[float, dict[str, str]]]] = {}
    for host, path in outs.items():
        try:
            with open(served_file(path), newline="") as f:
                for r in csv.DictReader(f):
                    key = (host, r["client"], r["client_port"])
                    served.setdefault(key, []).append((float(r["accepted"]), r))
        except FileNotFoundError:
            continue
    for found in served.values():
        found.sort(key=lambda x: x[0])
    matched = 0
    for row in sorted(rows, key=lambda r: float(r["start"])):
        key = (row["dst"], ip_of.get(row["src"], ""), str(row.get("port", "")))
        start = float(row["start"]) - JOIN_SLACK_S
        end = float(row["end"]) + JOIN_SLACK_S if row.get("end") else float("inf")
        found = served.get(key, [])
        hit = next((k for k, (t, _) in enumerate(found) if start <= t <= end), None)
        record = found.pop(hit)[1] if hit is not None else None
        for k in JOINED:
            row[k] = record[k] if record is not None else ""
        matched += record is not None
    return matched


def csv_fields(host: str, own: list[str], duration: str) -> list[str]:
    """A kind's CSV columns: the event, its host (named `host`), the kind's `own`, then the
    timing and outcome every open-loop kind records (its duration named `duration`)."""
    return ["id", host, *own, "start", "lag_s", "end", duration, "dscp", "completed",
            "bytes_received", "measured", "error"]  # fmt: skip


class OpenLoop(ABC):
    """One host's open-loop client. A kind says what it draws (`schedule`), what one event
    does (`transfer`), what a completed one adds to the metrics (`observe`), its own CSV
    columns (`columns`, `fields`) and its start-up line (`greeting`); the timing, the drain
    and the records are here, the same for every kind.

    An event is a dict: id, start (wall clock), mono (monotonic start), scheduled (its drawn
    time), received (bytes so far), completed, measured (started inside the window), error
    (only when one happened), end (wall clock) and duration once it ended, and the kind's own
    keys (those `schedule` gives)."""

    fields: ClassVar[list[str]]  # the CSV's columns, csv_fields(...)
    greeting: ClassVar[str]  # printed when bound: a format of cfg's keys, host, bind, peers (#)

    def __init__(
        self, args: argparse.Namespace, cfg: dict[str, Any], metrics: dict[str, Any] | None
    ) -> None:
        self.args, self.cfg, self.metrics = args, cfg, metrics
        self.peers: dict[str, str] = {k: v for k, v in cfg["peers"].items() if k != args.host}
        self.dscp: int = cfg["dscp"]
        # the fetching side's own packets (request, ACKs): the flow's class unless told
        self.ack_dscp: int = cfg.get("ack_dscp", self.dscp)
        self.port: int = cfg["port"]
        self.time_scale: float = cfg.get("time_scale", 1.0)
        self.out = open(args.out, "w", newline="")  # noqa: SIM115 - lives as long as the process
        self.csv = csv.writer(self.out)
        self.csv.writerow(self.fields)
        self.running: dict[str, dict[str, Any]] = {}

    @abstractmethod
    def schedule(self) -> Iterator[tuple[float, dict[str, Any]]]:
        """(offset from t0, the event's own keys) of each event, forever, in time order."""

    @abstractmethod
    async def transfer(self, ev: dict[str, Any]) -> None:
        """Run one event; set its end, completed and duration (monotonic seconds). An OSError
        marks it failed."""

    @abstractmethod
    def observe(self, metrics: dict[str, Any], ev: dict[str, Any]) -> None:
        """A completed event's duration into the kind's histogram (seconds of scenario time)."""

    @abstractmethod
    def columns(self, ev: dict[str, Any]) -> list[Any]:
        """The kind's own CSV columns of the event: those between the host and `start`."""

    def row(self, ev: dict[str, Any]) -> list[Any]:
        """The event's CSV row, in `csv_fields` order."""
        end, duration = ev.get("end"), ev.get("duration")
        return [
            ev["id"], self.args.host, *self.columns(ev), f"{ev['start']:.6f}",
            f"{ev['start'] - ev['scheduled']:.6f}", f"{end:.6f}" if end else "",
            f"{duration:.6f}" if duration is not None else "", self.dscp, ev["completed"],
            ev["received"], ev["measured"], ev.get("error", ""),
        ]  # fmt: skip

    def banner(self) -> str:
        """`greeting` filled in: what this node serves and sends, for its log."""
        where = {"host": self.args.host, "bind": self.args.bind, "peers": len(self.peers)}
        return self.greeting.format_map({**self.cfg, **where})

    def record(self, ev: dict[str, Any]) -> None:
        self.csv.writerow(self.row(ev))
        self.out.flush()

    def abandon(self) -> None:
        """Write the events still running as not completed, so that a measured one is counted
        as censored rather than lost (the end of the drain, or SIGTERM before it)."""
        if self.out.closed:
            return
        for ev in list(self.running.values()):
            self.record(ev)
        self.running.clear()
        self.out.close()

    async def fetch(self, dst: str, size: int, ev: dict[str, Any]) -> tuple[int, float, float]:
        """Fetch `size` bytes from host `dst`, counting them into the event as they arrive:
        (bytes received, monotonic and wall-clock time when the reading ended)."""
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        writer = None
        got = 0
        try:
            mark(sock, self.ack_dscp)
            sock.bind((self.args.bind, 0))
            sock.setblocking(False)
            await loop.sock_connect(sock, (self.peers[dst], self.port))
            ev["port"] = sock.getsockname()[1]  # connected: the server's records name it
            reader, writer = await asyncio.open_connection(sock=sock)
            writer.write(HEADER.pack(size))
            await writer.drain()
            while got < size:
                data = await reader.read(CHUNK)
                if not data:
                    break
                got += len(data)
                ev["received"] += len(data)
            return got, time.monotonic(), time.time()
        finally:
            if writer is not None:
                writer.close()
            else:
                sock.close()

    async def track(self, ev: dict[str, Any]) -> None:
        """One event from start to its record; one cancelled in the drain stays in `running`."""
        self.running[ev["id"]] = ev
        if self.metrics is not None:
            self.metrics["started"].labels(self.args.host).inc()
        try:
            await self.transfer(ev)
            if ev["completed"] and self.metrics is not None:
                self.metrics["completed"].labels(self.args.host).inc()
                self.observe(self.metrics, ev)
        except OSError as e:
            ev["error"] = str(e)
        finally:
            if ev.get("end") or "error" in ev:
                self.running.pop(ev["id"], None)
                self.record(ev)

    async def run(self, window: Window) -> None:
        """Start every event drawn before the end of the run at its time, then drain."""
        tasks: dict[str, asyncio.Task[None]] = {}
        for seq, (offset, own) in enumerate(self.schedule()):
            t = window.t0 + offset
            if t >= window.end:
                break
            delay = t - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            now = time.time()
            ev = {"id": f"{self.args.host}-{seq:06d}", **own, "start": now,
                  "mono": time.monotonic(), "scheduled": t, "received": 0, "completed": False,
                  "measured": window.contains(now)}  # fmt: skip
            tasks[ev["id"]] = asyncio.create_task(self.track(ev))
            tasks[ev["id"]].add_done_callback(lambda _t, eid=ev["id"]: tasks.pop(eid, None))
        delay = window.end - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        await self.drain(window, tasks)

    async def drain(self, window: Window, tasks: dict[str, asyncio.Task[None]]) -> None:
        """The measured events still running get up to the drain limit; the rest are cut off."""
        deadline = time.monotonic() + window.drain
        while True:
            pending = [tasks[i] for i, ev in self.running.items() if ev["measured"] and i in tasks]
            left = deadline - time.monotonic()
            if not pending or left <= 0:
                break
            await asyncio.wait(pending, timeout=left)
        for task in list(tasks.values()):
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        self.abandon()  # cut off: completed = false


Registry = Callable[[], tuple[Any, dict[str, Any]]]  # a kind's (registry, metrics) factory


async def _amain(args: argparse.Namespace, node: type[OpenLoop], registry: Registry) -> int:
    cfg = json.loads(Path(args.config).read_text())
    served = Served(served_file(args.out))
    server = await asyncio.start_server(  # kept referenced: it serves until SIGTERM
        lambda r, w: serve(r, w, cfg["dscp"], served),
        host=args.bind,
        port=cfg["port"],
        backlog=1024,
    )
    client = node(args, cfg, start_node_exporter(registry, args.metrics))
    print(client.banner(), flush=True)

    def terminated() -> None:
        client.abandon()
        os._exit(0)

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, terminated)
    args.out.with_suffix(".ready").touch()
    window = await asyncio.to_thread(wait_for_go, args.go)
    await client.run(window)
    args.out.with_suffix(".done").touch()
    # keep serving (other hosts' events may still be draining to this one) and exporting (the
    # final scrape), until the controller stops every node with SIGTERM
    async with server:
        await asyncio.Event().wait()
    return 0


def main(argv: list[str] | None, prog: str, node: type[OpenLoop], registry: Registry) -> int:
    """A node program's `main`: its arguments, then its server and client until SIGTERM."""
    ap = argparse.ArgumentParser(prog=prog)
    ap.add_argument("--host", required=True)
    ap.add_argument("--bind", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--go", type=Path, required=True, help="the orchestrator's go file")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--metrics", help="ADDR:PORT for the Prometheus exporter (a management address)"
    )
    return asyncio.run(_amain(ap.parse_args(argv), node, registry))
