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

import pytest

from testbed.core.window import Window
from testbed.workloads import flows
from testbed.workloads.incast.node import FIELDS as INCAST_FIELDS
from testbed.workloads.incast.node import Aggregator
from testbed.workloads.websearch.controller import fct_stats
from testbed.workloads.websearch.node import FIELDS as WEBSEARCH_FIELDS
from testbed.workloads.websearch.node import Generator


def test_the_csv_columns_are_unchanged():
    # web search's rows name the client's port since 2026-11-28 (flows.join_served)
    assert WEBSEARCH_FIELDS == ["id", "src", "dst", "size_bytes", "port", "start", "lag_s",
                                "end", "fct_s", "dscp", "completed", "bytes_received",
                                "measured", "error"]  # fmt: skip
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
    the node's banner and the rows of its CSV, each checked for what every event must hold.
    Each server records its connections (flows.Served) beside `out`'s folder's
    flows-<peer>.csv, as the peer's own node would."""
    args = argparse.Namespace(host="a", bind="127.0.0.2", out=out)
    client = node(args, cfg, None)

    def server(name: str) -> Any:
        served = flows.Served(flows.served_file(out.parent / f"flows-{name}.csv"))
        return lambda r, w: flows.serve(r, w, 0, served)

    async def go() -> None:
        servers = [
            await asyncio.start_server(server(name), addr, cfg["port"])
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


def test_each_flow_finds_the_servers_record_of_its_connection(tmp_path):
    """Over loopback TCP: every flow's row, joined by its source address and port, carries
    the counters of the server socket that sent its bytes (nothing lost on loopback: no
    timeout)."""
    cfg = {"cdf": [[20_000, 0.0], [20_000, 1.0]], "peers": PEERS, "rate_per_host": 20.0,
           "dscp": 0, "port": _free_port("127.0.0.3"), "seed": 1}  # fmt: skip
    _, rows = _run(Generator, cfg, tmp_path / "flows-a.csv")
    outs = {"b": tmp_path / "flows-b.csv", "c": tmp_path / "flows-c.csv"}
    assert flows.join_served(rows, outs, PEERS) == len(rows)
    for r in rows:
        assert int(r["port"]) > 0 and r["timeouts"] == "0", r
        assert int(r["retransmitted_segments"]) >= 0, r


def test_a_reused_port_joins_the_connection_of_the_flows_own_time_and_server(tmp_path):
    """Hand-made records: host a's port 40000 accepted by b at 10.0 and 20.0 s, and by c at
    20.0 s. A flow to b over 19.9-20.5 s is b's second connection, one over 9.99-10.2 s its
    first; one to c over the same port, c's; a second flow to b over 19.95-20.1 finds
    the 20.0 s record taken; one without a port (it never connected), none."""
    for host, first, second in (("b", (10, 0, 0), (12, 3, 1)), ("c", None, (9, 0, 0))):
        path = flows.served_file(tmp_path / f"flows-{host}.csv")
        flows.Served(path).f.close()
        with open(path, "a", newline="") as f:
            w = csv.writer(f)
            if first:
                w.writerow(["10.000000", "10.0.0.1", 40000, 5, True, *first, 0])
            w.writerow(["20.000000", "10.0.0.1", 40000, 5, True, *second, 0])

    def flow(dst, start, end, port="40000"):
        return {"src": "a", "dst": dst, "port": port, "start": str(start), "end": str(end)}

    rows = [flow("b", 19.9, 20.5), flow("b", 9.99, 10.2), flow("c", 19.9, 20.5),
            flow("b", 19.95, 20.1), flow("b", 12.0, "", port="")]  # fmt: skip
    outs = {h: tmp_path / f"flows-{h}.csv" for h in "bc"}
    assert flows.join_served(rows, outs, {"a": "10.0.0.1"}) == 3
    assert [(r["retransmitted_segments"], r["timeouts"]) for r in rows] == [
        ("3", "1"), ("0", "0"), ("0", "0"), ("", ""), ("", "")
    ]  # fmt: skip


def test_an_incast_aggregator_writes_every_query(tmp_path):
    cfg = {"peers": PEERS, "rate": 20.0, "fanout": 2, "size": 10_000, "name": "incast",
           "dscp": 0, "port": _free_port("127.0.0.3"), "seed": 1}  # fmt: skip
    banner, rows = _run(Aggregator, cfg, tmp_path / "queries-a.csv")
    assert banner == f"incast a: responding on 127.0.0.2:{cfg['port']}, 20.000 queries/s to 2 of 2"
    for r in rows:
        assert (r["aggregator"], r["fanout"], r["size_bytes"]) == ("a", "2", "20000")
        assert sorted(r["responders"].split()) == ["b", "c"] and float(r["qct_s"]) > 0


def test_a_size_classs_flows_with_a_timeout_are_counted_beside_its_mean():
    """Three completed small flows, one of whose senders timed out (it alone sets the mean:
    (30 + 40 + 32,680) / 3 µs), a censored one, and a large flow without the join: the
    small class counts 1, the large one and all flows together cannot say (None), the
    medium one has none to count."""

    def row(size, fct, timeouts, completed="True"):
        return {"size_bytes": str(size), "fct_s": str(fct), "completed": completed,
                "error": "", "timeouts": timeouts}  # fmt: skip

    rows = [row(5_000, 30e-6, "0"), row(5_000, 40e-6, "0"), row(5_000, 32.68e-3, "1"),
            row(5_000, "", "", completed="False"), row(20_000_000, 0.05, "")]  # fmt: skip
    st = fct_stats(rows)
    assert (st["small"]["count"], st["small"]["censored"], st["small"]["timed_out"]) == (3, 1, 1)
    # one completed flow of the class without the count: the class cannot say
    assert st["small"]["mean"] == pytest.approx((30e-6 + 40e-6 + 32.68e-3) / 3)
    assert st["large"]["timed_out"] is None and st["medium"]["timed_out"] == 0
    assert st["all"]["timed_out"] is None
