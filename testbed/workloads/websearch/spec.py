"""websearch: latency-critical background flows, Poisson arrivals at every host, sizes from the
web-search CDF (DCTCP/pFabric). Its configuration, derived values, summary shape and
registration.

Derived (thesis formula 5.3, per host): U_background = arrival rate · mean flow size · 8 /
host link rate; either side may be given. On a leaf-spine the flows that leave their leaf
also load the fabric: `fabric_utilization` is the busiest leaf–spine link's share.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from testbed.core.fields import STRICT, FieldProblem, Percent, Size
from testbed.core.tcpstats import SOCKET_UNITS
from testbed.workloads.base import Placed, Placement
from testbed.workloads.registry import Kind, register
from testbed.workloads.websearch import flowsizes

PORT = 5301  # the first web-search instance's servers; the n-th adds n
SIZE_CDFS = ("websearch", "datamining")


class Demotion(BaseModel):
    """PIAS's idea (NSDI'15) in two levels: a flow's first bytes in its own class, the rest in
    a lower one, so short flows keep the top band and long ones yield it as they grow."""

    model_config = STRICT

    after: Size = Field(
        gt=0,
        description="bytes a flow's sender puts on the wire in the flow's own class (IP "
        "packets, headers included, counted by conntrack) before the rest goes to `to`",
    )
    to: str = Field(description="the class of the rest of a longer flow: below the flow's own")


class WebsearchDerived(Placement):
    """Values derived from a web-search workload's inputs (thesis formula 5.3, per host)."""

    arrival_rate: float = Field(description="flows per second started by each host")
    utilization: float = Field(description="percent of one host link's rate")
    mean_flow_size: float
    fabric_utilization: float | None = Field(
        None, description="leaf-spine: percent of the busiest leaf–spine link's rate"
    )
    ack_dscp: int = Field(description="the DSCP of the fetching side's packets (its ACKs)")
    demote_dscp: int | None = Field(
        None, description="the DSCP of a flow's bytes after `demote.after` (demote.to's)"
    )


class WebsearchWorkload(Placed):
    """Latency-critical background flows: a new TCP connection per flow, Poisson arrivals at
    every host. As in the thesis, the arrival rate is each host's, and the utilization is the
    load this workload puts on one host link."""

    kind: Literal["websearch"] = "websearch"
    sizes: str = Field(
        "websearch",
        description="flow size CDF: websearch (DCTCP/pFabric), datamining, or a CSV file of "
        "'bytes,cdf' rows (path relative to the scenario)",
    )
    arrival_rate: float | None = Field(
        None,
        gt=0,
        description="flows per second started by EACH host (Poisson), to uniformly random other "
        "hosts; the thesis' 23-184 flows/s are per host",
    )
    utilization: Percent | None = Field(
        None,
        gt=0,
        le=100,
        description="the load on one host link: arrival_rate (per host) · mean flow size · 8 / "
        "link rate (thesis formula 5.3); sets arrival_rate",
    )
    port: int | None = Field(
        None, ge=1024, le=65535, description="its servers' port (default: 5301, +1 per instance)"
    )
    ack_class: str | None = Field(
        None,
        description="the class of the receiving side's packets (the request, the ACKs): unset, "
        "the flow's own; the thesis' ns-3 sinks carry no ToS, so their ACKs sit in the port's "
        "middle band, below the flows' (tc profile thesis-3band: ack_class: middle)",
    )
    demote: Demotion | None = Field(
        None,
        description="PIAS-style demotion: a flow's first `after` bytes in its class, the rest "
        "in the lower class `to` (`{after: 100KB, to: low}`); unset, every byte in its class",
    )

    derived: WebsearchDerived | None = Field(
        None,
        description="written when the scenario is resolved; ignored on input",
        json_schema_extra={"readOnly": True},
    )

    @property
    def d(self) -> WebsearchDerived:
        assert self.derived is not None, "scenario not resolved"
        return self.derived


def resolve(
    w: WebsearchWorkload,
    s: Any,
    base_dir: Path | None,
    ordinal: int = 0,
    place: Placement | None = None,
) -> None:
    """Per host, as in the thesis: each host starts `arrival_rate` flows/s, so each host link
    carries arrival_rate · mean size on average (its own flows' replies come in on its downlink,
    and the requests of the others go out on its uplink)."""
    from testbed.core.paths import fabric_load_per_host_load

    try:
        cdf, w.sizes = flowsizes.resolve(w.sizes, base_dir)
    except ValueError as e:
        raise FieldProblem(("sizes",), str(e)) from None
    mean = round(flowsizes.mean(cdf), 1)
    link = s.topology.link_rate
    if w.utilization is not None:
        if w.arrival_rate is not None:
            raise FieldProblem(("arrival_rate",), "give arrival_rate or utilization, not both")
        util = w.utilization
        rate = util / 100 * link / (mean * 8)
    elif w.arrival_rate is not None:
        rate = w.arrival_rate
        util = rate * mean * 8 / link * 100
    else:
        raise FieldProblem(
            ("arrival_rate",),
            "set arrival_rate (flows/s per host) or utilization (e.g. 12.5%)",
        )
    fabric = None
    if s.topology.kind == "leaf-spine":
        hosts = w.hosts or [f"h{i}" for i in range(1, s.topology.hosts + 1)]
        per_host = rate * mean * 8
        fabric = per_host * fabric_load_per_host_load(s.topology, hosts)
        fabric = fabric / s.topology.fabric_link_rate * 100
    if w.port is None:
        w.port = PORT + ordinal
    assert place is not None
    ack_dscp = place.dscp
    if w.ack_class is not None:
        if problem := s.tc_profile.unknown_class(w.ack_class):
            raise FieldProblem(("ack_class",), problem)
        ack_dscp = s.tc_profile.cls(w.ack_class).mark
    demote_dscp = None if w.demote is None else _demotion(w.demote, s, place)
    w.derived = WebsearchDerived(
        **place.model_dump(),
        arrival_rate=rate,
        utilization=util,
        mean_flow_size=mean,
        fabric_utilization=fabric,
        ack_dscp=ack_dscp,
        demote_dscp=demote_dscp,
    )


def _demotion(dm: Demotion, s: Any, place: Placement) -> int:
    """The lower class's DSCP, refused in one line unless it is a class below the flows'."""
    profile = s.tc_profile
    if problem := profile.unknown_class(dm.to):
        raise FieldProblem(("demote", "to"), problem)
    names = profile.class_names
    if names.index(dm.to) <= names.index(place.tc_class):
        raise FieldProblem(
            ("demote", "to"),
            f"{dm.to!r} is not below the flows' own class {place.tc_class!r} in tc profile "
            f"{profile.name!r} (highest first: {', '.join(names)}); a flow is demoted to a "
            "lower class",
        )
    return profile.cls(dm.to).mark


def work(w: WebsearchWorkload, s: Any) -> float:
    """Payload bits/s its hosts send in all: each host's flows at their mean size (budget.py)."""
    hosts = w.hosts or range(s.topology.hosts)
    return len(hosts) * w.d.arrival_rate * w.d.mean_flow_size * 8


def probe() -> dict[str, Any]:
    """Its CPU-cost probe (budget_probe.py): the web-search CDF at 15 % of every host link."""
    return {"kind": "websearch", "sizes": "websearch", "utilization": "15%"}


def dilate(w: WebsearchWorkload, k: float) -> dict[str, Any]:
    return {"arrival_rate": w.d.arrival_rate / k}


_FCT = {"count": "1", "censored": "1", "failed": "1", "mean": "s", "p50": "s", "p99": "s",
        "timed_out": "1"}  # fmt: skip

register(
    Kind(
        name="websearch",
        metrics="testbed.workloads.websearch.node:registry",
        files=("sizes",),
        config=WebsearchWorkload,
        controller="testbed.workloads.websearch.controller:Websearch",
        work=work,
        probe=probe,
        report="testbed.workloads.websearch.report",
        summary={
            "hosts": "1",
            "flows_started": "1",
            "flows_completed": "1",
            "flows_measured": "1",
            "censored": "1",
            "failed": "1",
            "arrival_rate_per_host": {"configured": "hz", "achieved": "hz"},
            "utilization_pct": {"configured": "pct", "offered": "pct"},
            "mean_flow_size": "B",
            "fct_s": {c: _FCT for c in ("small", "medium", "large", "all")},
            "start_lag_s": {"mean": "s", "p99": "s", "max": "s"},
            "max_flow_rate_over_link": "1",
            "flows_over_link_rate": "1",
            "dscp": "1",
            # the senders' own sockets (flows.Served), per class: tcpstats.SOCKET_UNITS
            "tcp_by_class": {"*": SOCKET_UNITS},
        },
        resolve=resolve,
        dilate=dilate,
        records=lambda name: flows_file(name),
        record_durations=("fct_s", "lag_s"),
        doc=WebsearchWorkload.__doc__ or "",
        models=(Demotion,),
    )
)


def flows_file(name: str) -> str:
    """An instance's merged records in the run folder: flows.csv for the instance named
    websearch (the scenarios before named instances), flows-<name>.csv for another."""
    return "flows.csv" if name == "websearch" else f"flows-{name}.csv"
