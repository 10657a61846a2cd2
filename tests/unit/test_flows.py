"""The open-loop node programs on workloads/flows.py: web search's and incast's CSV columns as
they were before they shared it (their reports and controllers read them by name), and one
short open-loop run of each over loopback TCP, every event written once with its bytes."""

from __future__ import annotations

import argparse
import asyncio
import csv
import socket
import time
from pathlib import Path
from typing import Any

from testbed.window import Window
from testbed.workloads import flows
from testbed.workloads.incast.node import FIELDS as INCAST_FIELDS
from testbed.workloads.incast.node import Aggregator
from testbed.workloads.websearch.node import FIELDS as WEBSEARCH_FIELDS
from testbed.workloads.websearch.node import Generator


def test_the_csv_columns_are_unchanged():
    assert WEBSEARCH_FIELDS == ["id", "src", "dst", "size_bytes", "start", "lag_s", "end",
                                "fct_s", "dscp", "completed", "bytes_received", "measured",
                                "error"]  # fmt: skip
    assert INCAST_FIELDS == ["id", "aggregator", "responders", "fanout", "size_bytes", "start",
                             "lag_s", "end", "qct_s", "dscp", "completed", "bytes_received",
                             "measured", "error"]  # fmt: skip


def _free_port(addr: str) -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def _run(
    node: type[flows.OpenLoop], cfg: dict[str, Any], out: Path
) -> tuple[str, list[dict[str, str]]]:
    """One 0.6 s window for host a (127.0.0.2) against servers on the other peers' addresses:
    the node's banner and the rows of its CSV, each checked for what every event must hold."""
    args = argparse.Namespace(host="a", bind="127.0.0.2", out=out)
    client = node(args, cfg, None)

    async def go() -> None:
        servers = [
            await asyncio.start_server(lambda r, w: flows.serve(r, w, 0), addr, cfg["port"])
            for name, addr in cfg["peers"].items()
            if name != "a"
        ]
        await client.run(Window(time.time() + 0.05, 0.6, 0.0, 0.0, 5.0))
        for s in servers:
            s.close()

    asyncio.run(go())
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 3 and list(rows[0]) == node.fields
    assert len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        assert (r["completed"], r["error"], r["bytes_received"]) == ("True", "", r["size_bytes"])
        assert float(r["lag_s"]) >= 0 and float(r["end"]) >= float(r["start"])
    return client.banner(), rows


PEERS = {"a": "127.0.0.2", "b": "127.0.0.3", "c": "127.0.0.4"}


def test_a_web_search_generator_writes_every_flow(tmp_path):
    cfg = {"cdf": [[20_000, 0.0], [20_000, 1.0]], "peers": PEERS, "rate_per_host": 20.0,
           "dscp": 0, "port": _free_port("127.0.0.3"), "seed": 1}  # fmt: skip
    banner, rows = _run(Generator, cfg, tmp_path / "flows-a.csv")
    assert banner == f"websearch a: serving on 127.0.0.2:{cfg['port']}, 20.000 flows/s out"
    for r in rows:
        assert (r["src"], r["size_bytes"]) == ("a", "20000") and r["dst"] in ("b", "c")
        assert float(r["fct_s"]) > 0


def test_an_incast_aggregator_writes_every_query(tmp_path):
    cfg = {"peers": PEERS, "rate": 20.0, "fanout": 2, "size": 10_000, "name": "incast",
           "dscp": 0, "port": _free_port("127.0.0.3"), "seed": 1}  # fmt: skip
    banner, rows = _run(Aggregator, cfg, tmp_path / "queries-a.csv")
    assert banner == f"incast a: responding on 127.0.0.2:{cfg['port']}, 20.000 queries/s to 2 of 2"
    for r in rows:
        assert (r["aggregator"], r["fanout"], r["size_bytes"]) == ("a", "2", "20000")
        assert sorted(r["responders"].split()) == ["b", "c"] and float(r["qct_s"]) > 0
