"""incast: partition-aggregate queries, the storage- and search-like traffic of a data center. An
aggregator asks `fanout` responders for `response_size` bytes each; they all answer at once, so
the responses meet in the aggregator's downlink (the incast). Every host of the instance is an
aggregator with its own Poisson query arrivals, and a responder to the others. Reported: each
query's completion time (QCT: query sent → last byte of the last response), with the same
measured window, drain, censoring and physics checks as web-search flows.

Derived: the load a host's downlink carries from its own queries' responses,
  utilization = query rate · fanout · response size · 8 / host link rate;
either side may be given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from testbed.core.fields import FieldProblem, Percent, Size
from testbed.core.tcpstats import SOCKET_UNITS
from testbed.workloads.base import Placed, Placement
from testbed.workloads.registry import Kind, register

PORT = 5401  # the first incast instance's responders; the n-th adds n


class IncastDerived(Placement):
    query_rate: float = Field(description="queries per second started by each aggregator")
    utilization: float = Field(description="percent of an aggregator's downlink its responses load")
    fanout: int = Field(description="responders per query")


class IncastWorkload(Placed):
    """Partition-aggregate queries: each host asks `fanout` others for `response_size` bytes at
    once (Poisson arrivals per host); reports the query completion time."""

    kind: Literal["incast"] = "incast"
    fanout: int | None = Field(
        None, ge=1, description="responders per query (default: every other host of the instance)"
    )
    response_size: Size = Field(
        20_000, ge=1, le=1_000_000_000, description="bytes each responder sends back"
    )
    query_rate: float | None = Field(
        None, gt=0, description="queries per second started by EACH host (Poisson)"
    )
    utilization: Percent | None = Field(
        None,
        gt=0,
        le=100,
        description="the load the responses put on a host's downlink: query_rate · fanout · "
        "response_size · 8 / link rate; sets query_rate",
    )
    port: int | None = Field(
        None, ge=1024, le=65535, description="its responders' port (default: 5401, +1 per instance)"
    )
    derived: IncastDerived | None = Field(
        None,
        description="written when the scenario is resolved; ignored on input",
        json_schema_extra={"readOnly": True},
    )

    @property
    def d(self) -> IncastDerived:
        assert self.derived is not None, "scenario not resolved"
        return self.derived


def resolve(
    w: IncastWorkload,
    s: Any,
    base_dir: Path | None,
    ordinal: int = 0,
    place: Placement | None = None,
) -> None:
    hosts = w.hosts or [f"h{i}" for i in range(1, s.topology.hosts + 1)]
    fanout = w.fanout if w.fanout is not None else len(hosts) - 1
    if fanout > len(hosts) - 1:
        raise FieldProblem(
            ("fanout",),
            f"{fanout} responders asked of {len(hosts) - 1} other hosts; at most {len(hosts) - 1}",
        )
    per_query = fanout * w.response_size * 8
    link = s.topology.link_rate
    if w.utilization is not None:
        if w.query_rate is not None:
            raise FieldProblem(("query_rate",), "give query_rate or utilization, not both")
        util, rate = w.utilization, w.utilization / 100 * link / per_query
    elif w.query_rate is not None:
        rate, util = w.query_rate, w.query_rate * per_query / link * 100
    else:
        raise FieldProblem(
            ("query_rate",), "set query_rate (queries/s per host) or utilization (e.g. 5%)"
        )
    if w.port is None:
        w.port = PORT + ordinal
    assert place is not None
    w.derived = IncastDerived(
        **place.model_dump(), query_rate=rate, utilization=util, fanout=fanout
    )


def work(w: IncastWorkload, s: Any) -> float:
    """Payload bits/s its responders send in all: every host's queries, `fanout` responses each
    (budget.py)."""
    hosts = w.hosts or range(s.topology.hosts)
    return len(hosts) * w.d.query_rate * w.d.fanout * w.response_size * 8


def probe() -> dict[str, Any]:
    """Its CPU-cost probe (budget_probe.py): 20 kB responses loading 15 % of each downlink."""
    return {"kind": "incast", "response_size": "20KB", "utilization": "15%"}


def dilate(w: IncastWorkload, k: float) -> dict[str, Any]:
    return {"query_rate": w.d.query_rate / k}


def queries_file(name: str) -> str:
    """The merged records in the run folder: queries.csv for the instance named incast,
    queries-<name>.csv for another."""
    return "queries.csv" if name == "incast" else f"queries-{name}.csv"


_QCT = {
    "count": "1",
    "censored": "1",
    "failed": "1",
    "mean": "s",
    "p50": "s",
    "p99": "s",
    "max": "s",
}

register(
    Kind(
        name="incast",
        metrics="testbed.workloads.incast.node:registry",
        config=IncastWorkload,
        controller="testbed.workloads.incast.controller:Incast",
        work=work,
        probe=probe,
        report="testbed.workloads.incast.report",
        summary={
            "hosts": "1",
            "fanout": "1",
            "response_size_bytes": "B",
            "queries_started": "1",
            "queries_completed": "1",
            "queries_measured": "1",
            "censored": "1",
            "failed": "1",
            "query_rate_per_host": {"configured": "hz", "achieved": "hz"},
            "utilization_pct": {"configured": "pct", "offered": "pct"},
            "qct_s": _QCT,
            "start_lag_s": {"mean": "s", "p99": "s", "max": "s"},
            "max_query_rate_over_link": "1",
            "queries_over_link_rate": "1",
            "dscp": "1",
            # the senders' own sockets (flows.Served), per class: tcpstats.SOCKET_UNITS
            "tcp_by_class": {"*": SOCKET_UNITS},
        },
        resolve=resolve,
        dilate=dilate,
        records=lambda name: queries_file(name),
        record_durations=("qct_s", "lag_s"),
        doc=IncastWorkload.__doc__ or "",
    )
)
