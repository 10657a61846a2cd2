"""scenario.yaml's schema: the pydantic models and the one-line errors that name the YAML path.

This module validates: every field, its bounds, and what can be checked within the scenario
(a tc profile by name becomes the profile itself; a workload instance is checked by its
kind's own model). What needs more of testbed (derived values, prefixes that depend on the
machine, expectations, time dilation) is the next step, testbed.scenario.resolve, which is also where
scenarios are loaded from files.
"""

from __future__ import annotations

import ipaddress
import math
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    create_model,
    field_validator,
    model_validator,
)

from testbed.core import summary
from testbed.core.addressing import data_addresses
from testbed.core.errors import ScenarioError
from testbed.core.fields import STRICT as _Strict
from testbed.core.fields import Duration, FieldProblem, Percent, Rate, Size
from testbed.core.fields import path as field_path
from testbed.core.profile import TcProfile, load_profile_data
from testbed.core.units import format_duration
from testbed.core.window import Window
from testbed.scenario.machines import VXLAN_OVERHEAD, Machines
from testbed.scenario.runtimes import DECLARED, emulating_machines, with_options
from testbed.scenario.runtimes import DEFAULT as DEFAULT_RUNTIME
from testbed.scenario.runtimes import names as runtime_names
from testbed.workloads.kinds import KINDS, get

# Validation calls the unit parsers (testbed.core.units, through testbed.core.fields), the one source of
# truth; the JSON Schema patterns are built from the parsers' own unit tables.
TCP_RENO = "reno"  # the default: the kin of the thesis' ns-3 NewReno, and it fills its queue
TCP_MACHINE = "machine"  # topology.tcp: keep this machine's default (new namespaces copy it)
# IP (20) + TCP (20) + the timestamp option (12, on in every Linux host by default): what a
# segment carries besides its payload; Linux's MSS (a route's advmss) excludes the option
TCP_IP_HEADERS = 52
TCP_TIMESTAMP_OPTION = 12


def _private_net(value: Any) -> ipaddress.IPv4Network:
    try:
        net = ipaddress.IPv4Network(str(value), strict=True)
    except ValueError as e:
        raise ValueError(f"{value!r} is not an IPv4 prefix such as 10.10.0.0/24 ({e})") from None
    if not net.is_private or net.is_loopback or net.is_link_local:
        raise ValueError(f"{net} must be a private prefix (10/8, 172.16/12 or 192.168/16)")
    return net


Prefix = Annotated[
    ipaddress.IPv4Network,
    BeforeValidator(_private_net),
    PlainSerializer(str, return_type=str),
    WithJsonSchema({"type": "string", "description": "private IPv4 prefix, e.g. 10.10.0.0/24"}),
]


_FieldError = FieldProblem


def _time_scale(v: Any) -> float | str:
    """A number K > 0 (at most a million), or "auto" (budget.py resolves it before a run)."""
    if v == "auto":
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ValueError(f"must be a number (e.g. 100) or auto, got {v!r}")
    try:
        k = float(v)
    except ValueError:
        raise ValueError(f"must be a number (e.g. 100) or auto, got {v!r}") from None
    if not k > 0:
        raise ValueError(f"must be > 0 (or auto), got {v!r}")
    if k > 1_000_000:
        raise ValueError(f"must be ≤ 1000000 (or auto), got {v!r}")
    return k


TimeScale = Annotated[
    float | Literal["auto"],
    BeforeValidator(_time_scale),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "exclusiveMinimum": 0, "maximum": 1_000_000},
                {"const": "auto"},
            ]
        }
    ),
]


class Topology(BaseModel):
    """The switches, hosts and links; every link is shaped in both directions.

    single-tor: one switch with `hosts` hosts. leaf-spine: `leaves` routed leaf switches with
    `hosts_per_leaf` hosts each, every leaf linked to each of `spines` spine switches."""

    model_config = _Strict

    kind: Literal["single-tor", "leaf-spine"] = Field(
        "single-tor", description="one switch, or routed leaves and spines"
    )
    hosts: int = Field(
        ge=2, le=1000, description="number of hosts (leaf-spine: leaves × hosts_per_leaf)"
    )
    leaves: int | None = Field(None, ge=1, le=64, description="leaf-spine: leaf switches")
    spines: int | None = Field(None, ge=1, le=16, description="leaf-spine: spine switches")
    hosts_per_leaf: int | None = Field(None, ge=1, le=250, description="leaf-spine: hosts per leaf")
    link_rate: Rate = Field(
        100_000_000,
        ge=8_000,
        le=400_000_000_000,
        description="rate cap per direction of every host link, e.g. 100mbit or 10gbit",
    )
    fabric_rate: Rate | None = Field(
        None,
        ge=8_000,
        le=400_000_000_000,
        description="leaf-spine: rate cap per direction of every leaf–spine link "
        "(default: from oversubscription)",
    )
    oversubscription: float | None = Field(
        None,
        gt=0,
        le=1000,
        description="leaf-spine: hosts' capacity per leaf over its fabric capacity "
        "(default 1: non-blocking); sets fabric_rate",
    )
    delay: Duration = Field(
        0.0, ge=0, le=10, description="one-way delay per link direction (netem)"
    )
    jitter: Duration = Field(0.0, ge=0, le=10, description="delay variation (netem)")
    loss: Percent = Field(0.0, ge=0, le=100, description="random loss per link direction (netem)")
    queue_limit: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="FIFO length per class in packets (overrides the profile)",
    )
    mtu: int = Field(
        1500,
        ge=576,
        le=9216,
        description="MTU of every data link, in bytes (9000: jumbo frames, a sixth of the "
        "packets per second); the management network keeps 1500",
    )
    link_mode: Literal["exact", "fast", "exact-gso"] = Field(
        "exact",
        description="exact: every queue sees wire-size frames (segmentation offloads off), "
        "limits count frames, a frame waits behind at most one lower-class frame (1.2 µs at "
        "10 Gbit/s); this machine's CPU bounds the rate (docs/network.md). fast: TCP's "
        "segments stay whole from sender to receiver (offloads on): queues hold packets of up "
        "to 64 KB, limits count bytes (limit × frame), a packet may wait behind a 64 KB one "
        "(52 µs at 10 Gbit/s); for links of several Gbit/s. exact-gso: exact's queues of "
        "frames, but a host's TCP keeps its batches and its eth0 cuts them into frames, and "
        "its uplink queue sits in its switch, fed by a BPF clone (cls_bpf); "
        "faster than exact. The summary records which ran",
    )
    tcp: str = Field(
        TCP_RENO,
        pattern=r"^[a-z0-9_]+$",
        description="TCP congestion control in every host, e.g. reno, cubic, bbr, dctcp; "
        "'machine' keeps this machine's own default (recorded in summary.json either way)",
    )
    tcp_rto_min: Duration | None = Field(
        None,
        gt=0,
        le=120,
        description="TCP's minimum retransmission timeout in every host, in scenario time "
        "(net.ipv4.tcp_rto_min_us, Linux ≥ 6.11); unset: the kernel's 200 ms of real time, "
        "which time_scale K makes 200/K ms of scenario time; ns-3's default is 1s",
    )
    tcp_rto_initial: Duration | None = Field(
        None,
        gt=0,
        le=120,
        description="TCP's initial retransmission timeout (a SYN's and a SYN-ACK's) in every "
        "host, in scenario time, set by a sock_ops BPF program for the hosts' network "
        "namespaces (cgroup v2); unset: the kernel's 1 s of real time, which time_scale K "
        "makes 1/K s of scenario time (the thesis' simulator set 2 × its worst-case RTT)",
    )
    tcp_rcvbuf: Size | None = Field(
        None,
        ge=4096,
        le=1 << 30,
        description="every host's TCP receive buffer, fixed (net.ipv4.tcp_rmem, autotuning "
        "off): it bounds what a flow has in flight, as ns-3's RcvBufSize (131072 B) does; "
        "Linux advertises about 0.6 of it as window, the rest pays for its per-packet "
        "overhead; unset: the machine's autotuning, up to its tcp_rmem maximum",
    )
    tcp_sndbuf: Size | None = Field(
        None,
        ge=4096,
        le=1 << 30,
        description="every host's TCP send buffer, fixed (net.ipv4.tcp_wmem): what a sender "
        "may hold unacknowledged plus unsent, as ns-3's SndBufSize; Linux counts its "
        "per-packet overhead in it too, so a flow has somewhat less than it in flight; "
        "unset: the machine's autotuning, up to its tcp_wmem maximum",
    )
    tcp_segment: Size | None = Field(
        None,
        ge=536,
        le=9000 - 52,
        description="TCP payload per segment in every host (ns-3's SegmentSize, e.g. 1380B): "
        "each host advertises it, plus the 12 B of the timestamp option, as the MSS of its "
        "data routes (the route's advmss), so every flow between two hosts sends segments of "
        "at most this payload; it must fit the MTU with 52 B of IP and TCP headers; unset: "
        "the MTU's (1448 B at 1500)",
    )
    tcp_recovery: Literal["linux", "classic"] = Field(
        "linux",
        description="how every host's TCP finds and repairs a loss. linux: the kernel's own "
        "(RACK's time-based loss detection, tail-loss probes, F-RTO, undo on duplicate SACKs). "
        "classic: fast retransmit after three duplicate ACKs (SACK-based), else the "
        "retransmission timeout, as ns-3.30's default TcpClassicRecovery, which has none of "
        "those (net.ipv4.tcp_recovery, tcp_early_retrans, tcp_frto, tcp_dsack all 0). Linux "
        "still sizes its window in recovery by PRR and undoes a reduction its timestamps "
        "prove needless: no knob turns those off",
    )
    tcp_idle_restart: bool = Field(
        True,
        description="whether a connection idle for longer than its retransmission timeout "
        "starts again from its initial window (net.ipv4.tcp_slow_start_after_idle, RFC 2861; "
        "Linux's default); ns-3.30 keeps its window (false)",
    )
    prefix: Prefix = Field(
        ipaddress.IPv4Network("10.10.0.0/24"),
        description="data addresses (the shaped network); the default grows to fit the hosts",
    )
    management_prefix: Prefix = Field(
        ipaddress.IPv4Network("10.11.0.0/24"),
        description="unshaped management path from the host machine to every node; the "
        "default grows to fit the hosts",
    )

    @model_validator(mode="before")
    @classmethod
    def _shape(cls, data: Any) -> Any:
        """leaf-spine derives `hosts`; the leaf-spine fields mean nothing on one switch."""
        if not isinstance(data, dict):
            return data
        fabric = ("leaves", "spines", "hosts_per_leaf", "fabric_rate", "oversubscription")
        if data.get("kind", "single-tor") != "leaf-spine":
            for k in fabric:
                if data.get(k) is not None:
                    raise _FieldError((k,), "only for kind: leaf-spine; remove it, or set kind")
            return data
        for k in ("leaves", "spines", "hosts_per_leaf"):
            if data.get(k) is None:
                raise _FieldError((k,), "leaf-spine needs leaves, spines and hosts_per_leaf")
        if data.get("fabric_rate") is not None and data.get("oversubscription") is not None:
            raise _FieldError(
                ("oversubscription",), "give fabric_rate or oversubscription, not both"
            )
        try:
            derived = int(data["leaves"]) * int(data["hosts_per_leaf"])
        except (TypeError, ValueError):
            return data  # the field validators say what is wrong
        if data.get("hosts") is not None and data["hosts"] != derived:
            raise _FieldError(
                ("hosts",),
                f"leaf-spine has leaves × hosts_per_leaf = {derived} hosts, not {data['hosts']}; "
                "remove hosts",
            )
        return {**data, "hosts": derived}

    @property
    def fabric_link_rate(self) -> int:
        """leaf-spine: a leaf's hosts can send hosts_per_leaf × link_rate; its spine links
        carry that over the oversubscription ratio, split over the spines."""
        if self.fabric_rate is not None:
            return self.fabric_rate
        per, spines = self.hosts_per_leaf or self.hosts, self.spines or 1
        return max(8_000, round(per * self.link_rate / spines / (self.oversubscription or 1.0)))

    @model_validator(mode="after")
    def _fits(self) -> Topology:
        if self.tcp_segment is not None and self.tcp_segment + TCP_IP_HEADERS > self.mtu:
            raise _FieldError(
                ("tcp_segment",),
                f"{self.tcp_segment} B of payload and {TCP_IP_HEADERS} B of IP and TCP headers "
                f"exceed the MTU ({self.mtu} B); at most {self.mtu - TCP_IP_HEADERS}B, or raise mtu",
            )
        if self.jitter > 0 and self.delay == 0:
            raise _FieldError(
                ("jitter",), "needs a delay: set topology.delay too (e.g. delay: 1ms)"
            )
        if self.jitter > self.delay:
            raise _FieldError(
                ("jitter",),
                f"{format_duration(self.jitter)} must not exceed delay ({format_duration(self.delay)})",
            )
        needed = {
            "prefix": data_addresses(self.kind, self.hosts, self.leaves or 1, self.spines or 1),
            "management_prefix": self.hosts + 3,  # network, broadcast, the root side's own
        }
        for field, count in needed.items():
            net: ipaddress.IPv4Network = getattr(self, field)
            if net.num_addresses >= count:
                continue
            if field not in self.model_fields_set:
                # a default grows in place (10.10.0.0/24 → /22); not through __setattr__,
                # which would count it as set by the user (preflight moves defaults only)
                bits = math.ceil(math.log2(count))
                object.__setattr__(
                    self, field, ipaddress.IPv4Network((int(net.network_address), 32 - bits))
                )
                continue
            least = f"at least /{32 - math.ceil(math.log2(count))}"
            if self.kind == "leaf-spine" and field == "prefix":
                msg = (
                    f"{net} has {net.num_addresses} addresses; {self.leaves} leaves of "
                    f"{self.hosts_per_leaf} hosts and {self.spines} spines need {count} (a subnet "
                    f"per leaf, a /31 per fabric link); use a larger prefix ({least})"
                )
            else:
                room = net.num_addresses - (count - self.hosts)
                msg = f"{net} has room for {room} hosts, not {self.hosts}; use a larger prefix ({least})"
            raise _FieldError((field,), msg)
        if self.prefix.overlaps(self.management_prefix):
            raise _FieldError(
                ("management_prefix",),
                f"prefix {self.prefix} and management_prefix {self.management_prefix} overlap; "
                "they must be disjoint",
            )
        return self


class Measure(BaseModel):
    """The measured window, one for the whole run: links, flows and iterations alike.

    The workloads start together at t0; statistics cover [t0 + warmup, t0 + duration - cooldown].
    Load keeps arriving through the cool-down, so flows near the end of the window see the same
    network as the rest. After the run, web-search flows that started inside the window are
    given up to `drain` to finish (no new flows or iterations start after the end); flows
    still running then are counted as censored, never silently dropped."""

    model_config = _Strict

    warmup: Duration = Field(2.0, ge=0, description="left out at the start (raw records keep it)")
    cooldown: Duration = Field(2.0, ge=0, description="left out at the end (raw records keep it)")
    drain: Duration = Field(
        30.0,
        ge=0,
        le=24 * 3600,
        description="after the run: the longest wait for web-search flows that started inside "
        "the window; those still running then are counted as censored",
    )


# Instance names become summary sections, expect paths and sweep axes (workloads.<name>.…):
# they may not be a top-level summary key, nor a name the mapping itself answers to.
RESERVED_NAMES = summary.KEYS | frozenset({
    "predicted", *dir(dict),
    "orchestrator", "prometheus", "plots",  # the run's own scrape target and folders
})  # fmt: skip
INSTANCE_NAME = r"^[a-z][a-z0-9_-]{0,31}$"


class Workloads(dict[str, Any]):
    """The scenario's workload instances by name, in the order written. An instance is also an
    attribute (`s.workloads.web`), and a name that is absent reads as None there, as the
    single-instance scenarios of before kinds read `s.workloads.horovod`."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.get(name)

    def of_kind(self, *kinds: str) -> list[tuple[str, Any]]:
        return [(n, w) for n, w in self.items() if w.kind in kinds]


def _instances(value: Any, info: ValidationInfo) -> Workloads:
    """`workloads:` → its instances, each validated by its kind's model. A key that names a
    kind and gives none is an instance of that kind (the scenarios written before kinds)."""
    import re

    from pydantic import ValidationError

    if isinstance(value, Workloads):
        return value
    if value is None:
        return Workloads()
    if not isinstance(value, dict):
        raise ValueError("must be a mapping of instance names to workloads")
    out = Workloads()
    for name, body in value.items():
        if not isinstance(name, str) or not re.match(INSTANCE_NAME, name):
            raise FieldProblem(
                (str(name),),
                "an instance name is a lowercase letter, then up to 31 letters, digits, '-' or '_'",
            )
        if name in RESERVED_NAMES:
            raise FieldProblem((name,), f"{name!r} is a reserved name; choose another")
        if body is None:  # `websearch: null` (a sweep's `workloads.NAME: null`): no instance
            continue
        if not isinstance(body, dict):
            body = body.model_dump() if hasattr(body, "model_dump") else body
        if not isinstance(body, dict):
            raise FieldProblem((name,), "must be a mapping of the instance's fields")
        kind = body.get("kind", name if name in KINDS else None)
        if kind is not None and not isinstance(kind, str):
            raise FieldProblem((name, "kind"), f"must be a kind's name, not {kind!r}")
        if kind is None:
            raise FieldProblem(
                (name, "kind"),
                f"required: name the instance's kind (one of {', '.join(sorted(KINDS))}), or "
                "call the instance by its kind",
            )
        if kind not in KINDS:
            raise FieldProblem(
                (name, "kind"),
                f"{kind!r} is not a workload kind; kinds: {', '.join(sorted(KINDS))}",
            )
        try:
            out[name] = get(kind).config.model_validate(
                {**body, "kind": kind}, context=info.context
            )
        except ValidationError as e:
            err = e.errors(include_url=False)[0]
            exc = err.get("ctx", {}).get("error")
            if isinstance(exc, FieldProblem):
                raise FieldProblem((name, *err["loc"], *exc.loc), exc.msg) from None
            raise FieldProblem((name, *_clean_loc(err["loc"])), _message(err)) from None
    return out


def _dump_instances(value: Workloads) -> dict[str, Any]:
    return {n: w.model_dump(mode="json") for n, w in value.items()}


WorkloadsField = Annotated[
    Workloads,
    PlainValidator(_instances),
    PlainSerializer(_dump_instances, return_type=dict),
    WithJsonSchema({"type": "object", "description": "named workload instances"}),
]


def _prometheus_off(value: Any) -> Any:
    """YAML 1.1 (PyYAML) reads an unquoted `off` or `no` as false: that means "off". An
    unquoted `on`/`yes` (true) names neither of the two ways to run it, so it is refused."""
    if value is False:
        return "off"
    if value is True:
        raise ValueError(
            "got true (YAML reads an unquoted on, yes or true as a boolean); "
            "write embedded, external or off"
        )
    return value


class Metrics(BaseModel):
    """Where the run's metrics go. Exporters always listen on management addresses only."""

    model_config = _Strict

    prometheus: Annotated[
        Literal["embedded", "external", "off"], BeforeValidator(_prometheus_off)
    ] = Field(
        "embedded",
        description="embedded: a Prometheus server per run, data in RUN/prometheus; external: register "
        "targets with a running Prometheus through file_sd_dir; off (or false): no exporters",
    )
    scrape_interval: Duration = Field(
        1.0, ge=0.1, le=60, description="how often every exporter is scraped (0.1 s to 60 s)"
    )
    file_sd_dir: str | None = Field(
        None,
        description="external: a folder the Prometheus server reads with file_sd_configs "
        "(relative to the scenario's folder)",
    )
    url: str | None = Field(
        None, description="external: the server's URL, for the post-run cross-check"
    )

    @field_validator("file_sd_dir")
    @classmethod
    def _absolute(cls, value: str | None, info: ValidationInfo) -> str | None:
        """Relative to the scenario's folder, like every other path in a scenario, and kept
        absolute: the guardian and `testbed down` delete the run's entry from other folders."""
        if value is None:
            return None
        base = (info.context or {}).get("base_dir") or Path.cwd()
        return str((Path(base) / value).resolve())

    @model_validator(mode="after")
    def _external(self) -> Metrics:
        if self.prometheus == "external" and not self.file_sd_dir:
            raise _FieldError(
                ("file_sd_dir",), "external Prometheus needs file_sd_dir (a file_sd_configs folder)"
            )
        return self


# a runtime's name, as scenario/runtimes.py declares them
RuntimeName = Literal[runtime_names()]  # type: ignore[valid-type]


class _ScenarioFields(BaseModel):
    """Every field but the runtimes' own sections, which `Scenario` below adds from
    scenario/runtimes.py (a key named after each runtime that has options)."""

    model_config = _Strict

    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
        max_length=64,
        description="the scenario's name, in run folders, summaries and Prometheus labels",
    )
    description: str = Field("", description="free text, kept in the run folder")
    seed: int = Field(
        1, ge=0, le=2**32 - 1, description="seeds every random draw: the same seed, the same load"
    )
    duration: Duration = Field(
        30.0,
        gt=0,
        le=7 * 24 * 3600,
        description="how long the workloads run, from their common start t0 (scenario time)",
    )
    time_scale: TimeScale = Field(
        1.0,
        description="time dilation K: the scenario is written in the real network's units "
        "and runs K times slower (link rates / K; compute, arrivals, duration, window and delay "
        "in K-times-slower time; sizes kept); every reported figure is in scenario time. "
        "auto: the smallest whole K at which the scenario's peak demand fits what this "
        "machine's links carry (its link budget; 1 when it fits in real time)",
    )
    measure: Measure = Field(
        default_factory=Measure, description="the measured window inside the run, and the drain"
    )
    runtime: RuntimeName = Field(
        DEFAULT_RUNTIME,
        description="what a host is: " + ", or ".join(d.host for d in DECLARED),
    )
    topology: Topology = Field(description="the network: hosts, switches, links and their rates")
    tc_profile: TcProfile = Field(
        "fifo",  # type: ignore[assignment]  # resolved by the validator below
        validate_default=True,
        description="a profile name from testbed/tc_profiles/, a path to a YAML file, or an inline profile",
    )
    workloads: WorkloadsField = Field(
        default_factory=Workloads,
        description="named workload instances: `NAME: {kind: KIND, ...}`; a name that is a kind "
        "may leave kind out (`websearch: {...}`)",
    )
    metrics: Metrics = Field(
        default_factory=Metrics, description="Prometheus: embedded per run, external, or off"
    )
    expect: list[str] = Field(
        default_factory=list,
        description="checks over the run's summary, e.g. 'websearch.fct_s.small.p99 < 20ms' or "
        "'horovod.iteration_time_s.mean < 1.05 * predicted'; any failure makes `up` exit 3",
    )
    machines: Machines | None = Field(
        None,
        description="one run over several machines (Swarm nodes): where its switches and "
        "hosts go; `testbed validate` prints the placement and the links it cuts (running "
        "it across real machines is not built yet, on emulated ones here it is: "
        "machines.emulate; docs/swarm.md)",
    )

    @field_validator("tc_profile", mode="before")
    @classmethod
    def _resolve_profile(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str):
            base = (info.context or {}).get("base_dir")
            return load_profile_data(value, base)
        return value

    @model_validator(mode="after")
    def _runtime_options(self) -> _ScenarioFields:
        """A runtime's section only with that runtime; the chosen one's at its defaults."""
        for d in with_options():
            given = getattr(self, d.name, None)
            if given is not None and self.runtime != d.name:
                raise _FieldError(
                    (d.name,), f"applies only with runtime: {d.name}; remove it or set runtime"
                )
            if self.runtime == d.name and given is None and d.options is not None:
                setattr(self, d.name, d.options())
        return self

    @property
    def runtime_options(self) -> Any:
        """The chosen runtime's options section (None: that runtime has none)."""
        return getattr(self, self.runtime, None)

    @model_validator(mode="after")
    def _window(self) -> _ScenarioFields:
        m = self.measure
        if m.warmup + m.cooldown >= self.duration:
            raise _FieldError(
                ("measure",),
                f"warmup + cooldown ({format_duration(m.warmup + m.cooldown)}) leave nothing of "
                f"duration ({format_duration(self.duration)}) to measure; shorten them or run longer",
            )
        return self

    @model_validator(mode="after")
    def _shared_limit(self) -> _ScenarioFields:
        """A shared limit counts packets, which only exact links make frames."""
        if self.tc_profile.shared_limit is not None and self.topology.link_mode == "fast":
            raise _FieldError(
                ("tc_profile", "shared_limit"),
                "counts packets, and with topology.link_mode: fast a packet holds up to 43 "
                "frames; use link_mode: exact (the thesis' port counts frames)",
            )
        if (
            self.tc_profile.shared_limit is not None
            and self.tc_profile.host_limit is None
            and self.topology.link_mode == "exact-gso"
        ):
            raise _FieldError(
                ("tc_profile", "shared_limit"),
                "with topology.link_mode: exact-gso a host's own port cannot share its limit "
                "(its queue sits in the switch, where nothing counts its frames out); give the "
                "profile a host_limit, or use link_mode: exact",
            )
        if self.tc_profile.shared_limit is not None and self.topology.queue_limit is not None:
            raise _FieldError(
                ("topology", "queue_limit"),
                "sets every class's own limit, and the tc profile's classes share one "
                "(shared_limit); remove one of them",
            )
        if self.tc_profile.host_limit is not None and self.topology.queue_limit is not None:
            raise _FieldError(
                ("topology", "queue_limit"),
                "sets every class's own limit, and the tc profile sets the hosts' ports' "
                "(host_limit); remove one of them",
            )
        return self

    @model_validator(mode="after")
    def _underlay(self) -> _ScenarioFields:
        """A cut link's frames travel inside VXLAN over the machines' own network: an MTU
        left at its default is fitted under it, one given that does not fit is refused."""
        m = self.machines
        fits = m is not None and self.topology.mtu + VXLAN_OVERHEAD <= m.underlay_mtu
        if m is not None and not fits and "mtu" not in self.topology.model_fields_set:
            self.topology.mtu = m.underlay_mtu - VXLAN_OVERHEAD
        elif m is not None and not fits:
            raise _FieldError(
                ("topology", "mtu"),
                f"{self.topology.mtu} B does not fit a VXLAN tunnel over the machines' network "
                f"(machines.underlay_mtu {m.underlay_mtu} B less {VXLAN_OVERHEAD}): set "
                f"topology.mtu: {m.underlay_mtu - VXLAN_OVERHEAD}, or raise "
                "machines.underlay_mtu if the machines' network carries more",
            )
        can = emulating_machines()
        if m is not None and m.emulate and self.runtime not in can:
            raise _FieldError(
                ("machines", "emulate"),
                "the emulated machines are network namespaces, which runtime "
                f"{self.runtime} does not build; use runtime: {' or '.join(can)}",
            )
        return self

    def timeline(self, t0: float = 0.0) -> Window:
        """The run's timeline with the workloads' common start at t0 (offsets when t0 = 0)."""
        m = self.measure
        return Window(t0, self.duration, m.warmup, m.cooldown, m.drain)


# The scenario: its fields, and a section for each runtime with options (`docker:`)
Scenario = create_model(
    "Scenario",
    __base__=_ScenarioFields,
    __module__=__name__,
    **{
        d.name: (
            d.options | None,
            Field(None, description=f"{d.about} (runtime: {d.name})"),
        )
        for d in with_options()
    },  # type: ignore[call-overload]
)


# Inputs that set one another: giving one in an override drops the other from the same object.
EXCLUSIVE = (
    ("compute_time", "compute_to_network_ratio"),
    ("arrival_rate", "utilization"),
    ("tc_class", "dscp"),
)


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Set dotted paths in a scenario mapping (a copy). A value that replaces its partner in
    EXCLUSIVE removes that partner, so `utilization` overrides a base that gave `arrival_rate`.
    A list's item is named by its `name` or its index: `tc_profile.classes.low.guaranteed`
    (a class's floor, swept like any other knob)."""
    import copy

    out = copy.deepcopy(data)
    for path, value in overrides.items():
        *steps, leaf = path.split(".")
        node: Any = out
        done: list[str] = []
        for key in steps:
            if isinstance(node, list):
                node = _item(node, key, path, ".".join(done))
            else:
                if node.get(key) is None:
                    node[key] = {}
                node = node[key]
            done.append(key)
            if not isinstance(node, (dict, list)):
                raise ScenarioError(f"{path}: {'.'.join(done)} is not a mapping, cannot set {leaf}")
        if isinstance(node, list):
            where = ".".join(done)
            raise ScenarioError(
                f"{path}: {where} is a list: name an item's field ({where}.NAME.FIELD)"
            )
        node[leaf] = value
        for a, b in EXCLUSIVE:
            partner = b if leaf == a else a if leaf == b else None
            if partner is not None and value is not None:
                node.pop(partner, None)
    return out


def _item(items: list[Any], key: str, path: str, where: str) -> Any:
    """The item of list `where` whose `name` is `key`, else the one at index `key`."""
    for x in items:
        if isinstance(x, dict) and x.get("name") == key:
            return x
    if key.isdigit() and int(key) < len(items):
        return items[int(key)]
    names = [str(x["name"]) for x in items if isinstance(x, dict) and "name" in x]
    have = ", ".join(names) if names else f"indices 0 to {len(items) - 1}"
    raise ScenarioError(f"{path}: {where} has no item {key!r} (it has {have})")


def _clean_loc(loc: tuple[Any, ...]) -> tuple[str | int, ...]:
    """A pydantic error's path without its internal steps: validator function names and the
    branch names of unions (tc_profile: name | inline)."""
    return tuple(
        p
        for p in loc
        if not (isinstance(p, str) and p.startswith("function-")) and p not in ("str", "TcProfile")
    )


def _message(err: dict[str, Any]) -> str:
    """One error's text, without its path: what is wrong, and what was given."""
    kind, ctx, given = err["type"], err.get("ctx", {}), err.get("input")
    bounds = {
        "greater_than_equal": ("≥", "ge"),
        "greater_than": (">", "gt"),
        "less_than_equal": ("≤", "le"),
        "less_than": ("<", "lt"),
    }
    if kind in bounds:
        sym, key = bounds[kind]
        return f"must be {sym} {ctx.get(key)}, got {given!r}"
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        return "unknown field (check the spelling; `testbed schema` lists every field)"
    if kind in ("literal_error", "string_type") and isinstance(given, bool):
        # YAML 1.1 (PyYAML) reads unquoted on/off/yes/no/true/false as booleans.
        a, b, c = ("on", "yes", "true") if given else ("off", "no", "false")
        got = f"got {c} (YAML reads an unquoted {a}, {b} or {c} as a boolean)"
        if kind == "literal_error":
            return f"must be one of {ctx.get('expected')}, {got}"
        return f"must be a string, {got}; write the word in quotes: '{a}', '{b}' or '{c}'"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}, got {given!r}"
    if kind == "string_type":
        return f"must be a string, got {'nothing' if given is None else repr(given)}"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"must be a whole number, got {given!r}"
    if kind == "string_pattern_mismatch":
        return f"{given!r} is not allowed; use letters, digits, '.', '_' or '-'"
    if kind in ("too_short", "too_long"):
        return err["msg"].lower()
    msg = err["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    return msg


def _describe(err: dict[str, Any]) -> str:
    """One error as `path: what is wrong, got X`."""
    return f"{field_path(_clean_loc(tuple(err['loc'])))}: {_message(err)}"


def format_validation_error(e: ValidationError, source: str) -> str:
    """The first problem, on one line; the count of any others follows it."""
    errs = e.errors(include_url=False)
    first = errs[0]
    exc = first.get("ctx", {}).get("error")
    if isinstance(exc, FieldProblem):
        line = f"{field_path(_clean_loc(tuple(first['loc'])) + exc.loc)}: {exc.msg}"
    else:
        line = _describe(first)
    more = len(errs) - 1
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return f"{source}: {line}{suffix}"


def validate(data: Any, source: str, base_dir: Path | None = None) -> Scenario:
    """The schema's check of a scenario mapping: every field and its bounds; what needs other
    parts of testbed (derived values, expectations) is testbed.scenario.resolve's. ScenarioError: one
    line naming the field."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario must be a YAML mapping with name, topology, ...")
    try:
        return Scenario.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as e:
        raise ScenarioError(format_validation_error(e, source)) from None


class _UniqueKeys(yaml.SafeLoader):
    """PyYAML's safe loader, but a key given twice in one mapping is an error: PyYAML keeps the
    last one silently, and two workload instances of one name would quietly become one."""


def _unique_mapping(loader: _UniqueKeys, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
        line = key_node.start_mark.line + 1
        if key in seen:
            raise ScenarioError(
                f"{key!r} is given twice in one mapping (lines {seen[key]} and {line}); "
                "each key, and each workload instance's name, must be unique"
            )
        seen[key] = line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def read_yaml(p: Path) -> Any:
    """A scenario file's mapping; a YAML error is one line with its place."""
    if not p.is_file():
        raise ScenarioError(f"{p}: no such scenario file")
    try:
        return yaml.load(p.read_text(), Loader=_UniqueKeys)
    except ScenarioError as e:
        raise ScenarioError(f"{p}: {e}") from None
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        raise ScenarioError(f"{p}: not valid YAML{at}: {getattr(e, 'problem', e)}") from None


def dump_scenario(s: Scenario) -> str:
    return yaml.safe_dump(s.model_dump(mode="json"), sort_keys=False, allow_unicode=True)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of scenario files: the models', with `tc_profile` as name or inline
    profile, and `workloads` as named instances of the registered kinds."""
    schema = Scenario.model_json_schema(mode="validation")
    schema["properties"]["tc_profile"] = {
        "anyOf": [{"type": "string"}, {"$ref": "#/$defs/TcProfile"}],
        "default": "fifo",
        "description": Scenario.model_fields["tc_profile"].description,
    }
    defs = schema.setdefault("$defs", {})
    refs = []
    for name in sorted(KINDS):
        kind = get(name)
        sub = kind.config.model_json_schema(mode="validation", ref_template="#/$defs/{model}")
        defs.update(sub.pop("$defs", {}))
        title = f"{kind.config.__name__}"
        if title in defs and defs[title] != sub:
            title = f"{title}_{name}"
        defs[title] = sub
        refs.append({"$ref": f"#/$defs/{title}"})
    schema["properties"]["workloads"] = {
        "type": "object",
        "description": Scenario.model_fields["workloads"].description,
        "propertyNames": {"pattern": INSTANCE_NAME},
        "additionalProperties": {"anyOf": refs},
    }
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "testbed scenario"
    return schema
