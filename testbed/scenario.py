"""scenario.yaml: the pydantic models, unit parsing, and errors that name the YAML path.

Loading resolves everything a run needs (the tc profile by name becomes the profile itself),
so the `scenario.yaml` written into a run folder is complete on its own.
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
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from testbed.errors import ScenarioError
from testbed.shaping.profile import Dscp, TcProfile, load_profile_data
from testbed.units import (
    DURATION_PATTERN,
    PERCENT_PATTERN,
    RATE_PATTERN,
    SIZE_PATTERN,
    format_duration,
    format_rate,
    format_size,
    parse_duration,
    parse_percent,
    parse_rate,
    parse_size,
)
from testbed.window import Window

# Validation calls the unit parsers (testbed.units), the one source of truth; the JSON Schema
# patterns are built from the parsers' own unit tables, so editors accept the same spellings.
TCP_RENO = "reno"  # the default: the kin of the thesis' ns-3 NewReno, and it fills its queue
TCP_MACHINE = "machine"  # topology.tcp: keep this machine's default (new namespaces copy it)

Rate = Annotated[
    int,
    BeforeValidator(parse_rate),
    PlainSerializer(format_rate, return_type=str),
    WithJsonSchema(
        {
            "anyOf": [{"type": "number"}, {"type": "string", "pattern": RATE_PATTERN}],
            "description": "bits per second; e.g. 100mbit, 10Gbit, 1.5gbit/s (units in any case)",
        }
    ),
]
Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema(
        {
            "anyOf": [{"type": "number"}, {"type": "string", "pattern": DURATION_PATTERN}],
            "description": "seconds; e.g. 10us, 2ms, 60s, 2m (units in any case)",
        }
    ),
]
Size = Annotated[
    int,
    BeforeValidator(parse_size),
    PlainSerializer(format_size, return_type=str),
    WithJsonSchema(
        {
            "anyOf": [{"type": "number"}, {"type": "string", "pattern": SIZE_PATTERN}],
            "description": "bytes; e.g. 1500B, 64KB, 6.28MB, 1MiB (units in any case; KB = 1000 B)",
        }
    ),
]
Percent = Annotated[
    float,
    BeforeValidator(parse_percent),
    WithJsonSchema(
        {
            "anyOf": [{"type": "number"}, {"type": "string", "pattern": PERCENT_PATTERN}],
            "description": "percent; e.g. 0.1%",
        }
    ),
]

_Strict = ConfigDict(extra="forbid")


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


class _FieldError(ValueError):
    """A cross-field error that knows the YAML path it belongs to."""

    def __init__(self, loc: tuple[str | int, ...], msg: str) -> None:
        super().__init__(msg)
        self.loc = loc


class Topology(BaseModel):
    """The switches, hosts and links; every link is shaped in both directions.

    single-tor: one switch with `hosts` hosts. leaf-spine: `leaves` routed leaf switches with
    `hosts_per_leaf` hosts each, every leaf linked to each of `spines` spine switches."""

    model_config = _Strict

    kind: Literal["single-tor", "leaf-spine"] = "single-tor"
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
    tcp: str = Field(
        TCP_RENO,
        pattern=r"^[a-z0-9_]+$",
        description="TCP congestion control in every host, e.g. reno, cubic, bbr, dctcp; "
        "'machine' keeps this machine's own default (recorded in summary.json either way)",
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
        from testbed.topology import data_addresses

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


def _refuse_moved(data: Any, keys: tuple[str, ...]) -> Any:
    """Fields that moved to `measure:` get a message that says where, not "unknown field"."""
    if isinstance(data, dict):
        for k in keys:
            if k in data:
                raise _FieldError(
                    (k,),
                    f"moved: one measured window serves the whole run; set measure.{k} "
                    "at the top level of the scenario instead",
                )
    return data


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


class LinkcheckWorkload(BaseModel):
    """Bulk TCP per traffic class plus short request/response transfers: checks the links."""

    model_config = _Strict

    pattern: Literal["ring", "single", "incast", "outcast", "across"] = Field(
        "ring",
        description=(
            "who sends to whom: ring (h_i → h_i+1, every link busy), single (h1 → h2), "
            "incast (every host → h1: tests the shared downlink), outcast (h1 → every host: "
            "tests the uplink), across (every host → the host at its place on the next leaf; "
            "single-tor: the host half the ring away)"
        ),
    )
    bulk_classes: list[str] | None = Field(
        None, description="classes that get one bulk flow per pair (default: every class)"
    )
    bulk_dscp: list[Dscp] | None = Field(
        None,
        description="one bulk flow per pair for each of these DSCP values, instead of bulk_classes "
        "(e.g. to show that EF and CS1 share one queue under the fifo profile)",
    )
    short: bool = Field(True, description="run short request/response transfers")
    short_class: str | None = Field(
        None, description="class of the short transfers (default: highest)"
    )
    short_interval: Duration = Field(0.1, gt=0, le=60, description="time between short transfers")
    short_size: Size = Field(
        10_000, ge=1, le=100_000_000, description="response size of a short transfer"
    )
    port: int = Field(5201, ge=1024, le=65535)

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        return _refuse_moved(data, ("warmup", "cooldown"))


class Placement(BaseModel):
    """Resolved when the scenario is loaded: the class and DSCP a workload's packets carry."""

    model_config = _Strict

    tc_class: str
    dscp: int


class HorovodDerived(Placement):
    """Values derived from a Horovod workload's inputs (thesis formulas 5.1 and 5.2)."""

    compute_time: Duration
    compute_to_network_ratio: float
    model_bytes: int
    bytes_per_iteration: int


class WebsearchDerived(Placement):
    """Values derived from a web-search workload's inputs (thesis formula 5.3, per host)."""

    arrival_rate: float = Field(description="flows per second started by each host")
    utilization: float = Field(description="percent of one host link's rate")
    mean_flow_size: float


class _Placed(BaseModel):
    """Common to workloads that run on a set of hosts and mark their packets."""

    model_config = _Strict

    hosts: list[str] | None = Field(None, description="hosts that take part (default: all)")
    tc_class: str | None = Field(
        None, description="traffic class to mark the packets for (its first DSCP); or give dscp"
    )
    dscp: Dscp | None = Field(
        None, description="DSCP to mark the packets with, instead of tc_class"
    )

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        data = _refuse_moved(data, ("warmup", "cooldown"))
        if isinstance(data, dict) and "derived" in data:
            # A resolved scenario shows its derived values; they are recomputed from the
            # inputs on every load, so a changed link rate or host count re-derives them.
            data = {k: v for k, v in data.items() if k != "derived"}
        return data


def _gpus(value: Any) -> Any:
    """`gpus`: a count (≥ 1), `all`, `auto`, or a list of distinct device ids."""
    ok = (
        value is None
        or value in ("all", "auto")
        or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)
        or (
            isinstance(value, list)
            and value
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
            and len(set(value)) == len(value)
        )
    )
    if not ok:
        raise ValueError(
            f"must be a count (1, 2, ...), all, auto or a list of distinct device ids "
            f"([0, 1]), got {value!r}"
        )
    return value


Gpus = Annotated[
    Any,
    BeforeValidator(_gpus),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 1},
                {"enum": ["all", "auto"]},
                {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1},
                {"type": "null"},
            ]
        }
    ),
]


class HorovodWorkload(_Placed):
    """A data-parallel training job, one worker per host: Horovod (ring-allreduce over Gloo)
    or torch.distributed's DistributedDataParallel (gloo on CPU, nccl on GPU)."""

    backend: Literal["horovod", "torch-ddp"] = Field(
        "horovod",
        description="horovod: Horovod workers (Gloo); torch-ddp: torch.distributed workers "
        "reducing DDP's gradient buckets (gloo on CPU, nccl on GPU)",
    )
    bucket_cap: Size = Field(
        25 * 2**20,
        gt=0,
        description="torch-ddp: DDP's bucket_cap_mb, the analogue of Horovod's fusion buffer "
        "(default 25 MiB, as DDP's)",
    )
    nccl_socket_threads: int | None = Field(
        None, ge=1, le=16,
        description="GPU runs: NCCL_SOCKET_NTHREADS (NCCL's default if unset); more threads "
        "and sockets make NCCL's share of a congested link larger against the background flows",
    )  # fmt: skip
    nccl_sockets_per_thread: int | None = Field(
        None, ge=1, le=16, description="GPU runs: NCCL_NSOCKS_PERTHREAD (NCCL's default if unset)"
    )
    gpus: Gpus = Field(
        None,
        description="GPUs per worker's host: a count, all, a list of device ids, or auto "
        "(use them when present, else CPU with a warning); unset: CPU",
    )

    mode: Literal["synthetic", "real"] = Field(
        "synthetic",
        description="synthetic: real gradients of a real model's layer sizes, compute emulated per "
        "layer; real: trains a small torch model",
    )
    model: Literal["resnet50"] = Field("resnet50", description="layer sizes (synthetic mode)")
    profile: str | None = Field(
        None,
        description="a layer trace in the seed-002 shape (id name forward backward comm size) "
        "instead of model; path relative to the scenario",
    )
    profile_time_unit: Literal["ns", "us", "ms", "s"] = "us"
    model_size: Size | None = Field(None, gt=0, description="scale the layer sizes to this total")
    compute_time: Duration | None = Field(
        None, gt=0, description="compute per iteration (forward + backward); default 900ms"
    )
    compute_to_network_ratio: float | None = Field(
        None,
        gt=0,
        description="R_cp_to_nw = iteration compute time · link rate / (2(1-1/N) · model size · 8); "
        "sets compute_time",
    )
    barrier: bool = Field(
        True, description="forward waits for all reduced gradients (else for each layer's own)"
    )
    fusion_threshold: Size = Field(5_333_329, ge=0, description="Horovod tensor fusion buffer")
    cycle_time: Duration = Field(0.001, gt=0, description="Horovod background cycle time")
    iterations: int | None = Field(
        None, ge=1, description="stop after this many (default: run for the duration)"
    )
    device: Literal["cpu", "cuda"] = Field(
        "cpu",
        description="kept so that older scenarios load; the device follows gpus (device: cuda "
        "is refused: set gpus instead)",
    )
    batch_size: int = Field(16, ge=1, description="real mode: samples per step")

    derived: HorovodDerived | None = Field(
        None,
        description="written when the scenario is resolved; ignored on input",
        json_schema_extra={"readOnly": True},
    )

    @property
    def d(self) -> HorovodDerived:
        """The derived values (always there once the scenario has been loaded)."""
        assert self.derived is not None, "scenario not resolved"
        return self.derived


SIZE_CDFS = ("websearch", "datamining")


class WebsearchWorkload(_Placed):
    """Latency-critical background flows: a new TCP connection per flow, Poisson arrivals at
    every host. As in the thesis, the arrival rate is each host's, and the utilization is the
    load this workload puts on one host link."""

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
    port: int = Field(5301, ge=1024, le=65535)

    derived: WebsearchDerived | None = Field(
        None,
        description="written when the scenario is resolved; ignored on input",
        json_schema_extra={"readOnly": True},
    )

    @property
    def d(self) -> WebsearchDerived:
        assert self.derived is not None, "scenario not resolved"
        return self.derived


class Workloads(BaseModel):
    model_config = _Strict

    linkcheck: LinkcheckWorkload | None = None
    horovod: HorovodWorkload | None = None
    websearch: WebsearchWorkload | None = None


class DockerOptions(BaseModel):
    """How hosts are made with `runtime: docker`. Limits apply to each host's container."""

    model_config = _Strict

    image: str | None = Field(
        None, description="node image (default: testbed's own, built by `testbed images build`)"
    )
    build: bool = Field(True, description="build the default node image when it is missing")
    cpus: float | None = Field(None, gt=0, le=1024, description="CPU limit per host (cores)")
    memory: Size | None = Field(
        None, ge=16 * 2**20, description="memory limit per host, e.g. 2GiB (no swap beyond it)"
    )


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
    scrape_interval: Duration = Field(1.0, ge=0.1, le=60)
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


class Scenario(BaseModel):
    model_config = _Strict

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)
    description: str = ""
    seed: int = Field(1, ge=0, le=2**32 - 1)
    duration: Duration = Field(30.0, gt=0, le=7 * 24 * 3600)
    time_scale: float = Field(
        1.0,
        gt=0,
        le=1_000_000,
        description="time dilation K: the scenario is written in the real network's units "
        "and runs K times slower (link rates / K; compute, arrivals, duration, window and delay "
        "in K-times-slower time; sizes kept); every reported figure is in scenario time",
    )
    measure: Measure = Field(default_factory=Measure)
    runtime: Literal["netns", "docker"] = "netns"
    docker: DockerOptions | None = Field(None, description="container options (runtime: docker)")
    topology: Topology
    tc_profile: TcProfile = Field(
        "fifo",  # type: ignore[assignment]  # resolved by the validator below
        validate_default=True,
        description="a profile name from tc_profiles/, a path to a YAML file, or an inline profile",
    )
    workloads: Workloads = Field(default_factory=Workloads)
    metrics: Metrics = Field(default_factory=Metrics)
    expect: list[str] = Field(
        default_factory=list,
        description="checks over the run's summary, e.g. 'websearch.fct_s.small.p99 < 20ms' or "
        "'horovod.iteration_time_s.mean < 1.05 * predicted'; any failure makes `up` exit 3",
    )

    @field_validator("tc_profile", mode="before")
    @classmethod
    def _resolve_profile(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str):
            base = (info.context or {}).get("base_dir")
            return load_profile_data(value, base)
        return value

    @model_validator(mode="after")
    def _docker(self) -> Scenario:
        if self.docker is not None and self.runtime != "docker":
            raise _FieldError(
                ("docker",), "applies only with runtime: docker; remove it or set runtime"
            )
        if self.runtime == "docker" and self.docker is None:
            self.docker = DockerOptions()
        return self

    @model_validator(mode="after")
    def _window(self) -> Scenario:
        m = self.measure
        if m.warmup + m.cooldown >= self.duration:
            raise _FieldError(
                ("measure",),
                f"warmup + cooldown ({format_duration(m.warmup + m.cooldown)}) leave nothing of "
                f"duration ({format_duration(self.duration)}) to measure; shorten them or run longer",
            )
        return self

    @model_validator(mode="after")
    def _cross_refs(self) -> Scenario:
        lc = self.workloads.linkcheck
        if lc is not None:
            names = self.tc_profile.class_names
            for i, c in enumerate(lc.bulk_classes or []):
                if c not in names:
                    raise _FieldError(
                        ("workloads", "linkcheck", "bulk_classes", i),
                        f"{c!r} is not a class of tc profile {self.tc_profile.name!r}; classes: {names}",
                    )
            if lc.bulk_dscp is not None and lc.bulk_classes is not None:
                raise _FieldError(
                    ("workloads", "linkcheck", "bulk_dscp"),
                    "give bulk_classes or bulk_dscp, not both",
                )
            if lc.short_class is not None and lc.short_class not in names:
                raise _FieldError(
                    ("workloads", "linkcheck", "short_class"),
                    f"{lc.short_class!r} is not a class of tc profile {self.tc_profile.name!r}; "
                    f"classes: {names}",
                )
        return self

    @model_validator(mode="after")
    def _workloads(self, info: ValidationInfo) -> Scenario:
        from testbed.workloads import derive

        base = (info.context or {}).get("base_dir") if info is not None else None
        host_names = [f"h{i}" for i in range(1, self.topology.hosts + 1)]
        classes = self.tc_profile.class_names
        for key in ("horovod", "websearch"):
            w = getattr(self.workloads, key)
            if w is None:
                continue
            for i, h in enumerate(w.hosts or []):
                if h not in host_names:
                    raise _FieldError(
                        ("workloads", key, "hosts", i),
                        f"{h!r} is not a host; hosts are h1 … h{len(host_names)}",
                    )
            if w.hosts is not None and len(set(w.hosts)) < 2:
                raise _FieldError(("workloads", key, "hosts"), "needs at least two distinct hosts")
            if w.tc_class is not None and w.dscp is not None:
                raise _FieldError(("workloads", key, "dscp"), "give tc_class or dscp, not both")
            if w.tc_class is not None and w.tc_class not in classes:
                raise _FieldError(
                    ("workloads", key, "tc_class"),
                    f"{w.tc_class!r} is not a class of tc profile {self.tc_profile.name!r}; classes: {classes}",
                )
            if isinstance(w, HorovodWorkload) and w.backend == "torch-ddp" and not w.barrier:
                raise _FieldError(
                    ("workloads", key, "barrier"),
                    "torch-ddp always waits for every gradient bucket before the next step, as "
                    "DDP does; remove barrier: false, or use backend: horovod",
                )
            if isinstance(w, HorovodWorkload) and w.nccl_sockets_per_thread is not None:
                # NCCL's default is 0 helper threads on a NIC it cannot identify (a veth has
                # no PCI vendor), and it clamps threads × sockets to 64 (net_socket.cc)
                threads = w.nccl_socket_threads
                if threads is None:
                    raise _FieldError(
                        ("workloads", key, "nccl_sockets_per_thread"),
                        "needs nccl_socket_threads too: on the emulated links NCCL starts no "
                        "socket threads of its own, so sockets per thread alone change nothing",
                    )
                if threads * w.nccl_sockets_per_thread > 64:
                    raise _FieldError(
                        ("workloads", key, "nccl_sockets_per_thread"),
                        f"nccl_socket_threads × nccl_sockets_per_thread is "
                        f"{threads * w.nccl_sockets_per_thread}; NCCL uses at most 64 sockets",
                    )
            if isinstance(w, HorovodWorkload) and w.device == "cuda":
                # gpus decides the devices, their CUDA_VISIBLE_DEVICES and NCCL's host ids; a
                # bare device: cuda would put every worker on GPU 0 with none of that
                raise _FieldError(
                    ("workloads", key, "device"),
                    "device: cuda is replaced by gpus; remove device and set gpus: 1 (or all, "
                    "auto, or a list of device ids)",
                )
            try:
                derive.resolve(self, key, w, base)
            except ValueError as e:
                loc, _, msg = str(e).partition(": ")
                raise _FieldError(("workloads", key, loc), msg) from None
        return self

    @model_validator(mode="after")
    def _expect(self) -> Scenario:
        from testbed import expect

        try:
            self.checks()
        except expect.ExpectError as e:
            raise _FieldError(("expect", e.index), e.msg) from None
        return self

    @model_validator(mode="after")
    def _wall(self) -> Scenario:
        """What K makes of the scenario must be something this machine can run: a shaper rate
        no lower than the schema's floor, a run of at most a day of real time, and a valid
        scenario in wall-clock units (testbed.dilation: a dilated delay, drain or interval
        beyond its field's limit is refused here, naming time_scale, not at run time)."""
        k = self.time_scale
        if k == 1:
            return self
        t = self.topology
        floor = 8_000  # bit/s: the lowest rate Topology accepts, and what HTB is tested at
        rates = {"host links": t.link_rate}
        if t.kind == "leaf-spine":
            rates["fabric links"] = t.fabric_link_rate
        for what, rate in rates.items():
            if rate / k < floor:
                raise _FieldError(
                    ("time_scale",),
                    f"{k:g} makes the {what} {format_rate(rate / k)} on this machine, below "
                    f"{format_rate(floor)}; use time_scale ≤ {rate / floor:g}",
                )
        if self.duration * k > 24 * 3600:
            raise _FieldError(
                ("time_scale",),
                f"{k:g} makes the run last {format_duration(self.duration * k)} on this "
                f"machine, more than a day; lower time_scale or duration",
            )
        from testbed import dilation

        try:
            dilation.wall_scenario(self)
        except ScenarioError as e:
            why = str(e).split(": ", 1)[-1]
            raise _FieldError(
                ("time_scale",), f"{self.time_scale:g} makes, on this machine's clock, {why}"
            ) from None
        return self

    def checks(self) -> list[Any]:
        """The `expect:` list as expect.Check objects (checked against what this scenario's
        summary will hold)."""
        from testbed import expect

        h = self.workloads.horovod
        return expect.parse(
            self.expect,
            [k for k in ("horovod", "websearch", "linkcheck") if getattr(self.workloads, k)],
            self.tc_profile.class_names,
            has_prediction=h is not None and h.mode == "synthetic",
        )

    def timeline(self, t0: float = 0.0) -> Window:
        """The run's timeline with the workloads' common start at t0 (offsets when t0 = 0)."""
        m = self.measure
        return Window(t0, self.duration, m.warmup, m.cooldown, m.drain)

    def with_overrides(
        self, overrides: dict[str, Any], source: str = "command line", base_dir: Path | None = None
    ) -> Scenario:
        """This scenario with dotted-path values replaced, re-resolved from its inputs
        (e.g. {"topology.link_rate": "1gbit"} re-derives compute times and arrival rates).
        Relative file names among the new values are taken from `base_dir`."""
        data = self.model_dump(mode="json")
        for field in ("prefix", "management_prefix"):  # defaults stay defaults: see preflight
            if field not in self.topology.model_fields_set:
                data["topology"].pop(field, None)
        data = apply_overrides(data, overrides)
        return load_scenario_data(data, source=source, base_dir=base_dir)


# Inputs that set one another: giving one in an override drops the other from the same object.
EXCLUSIVE = (
    ("compute_time", "compute_to_network_ratio"),
    ("arrival_rate", "utilization"),
    ("tc_class", "dscp"),
)


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Set dotted paths in a scenario mapping (a copy). A value that replaces its partner in
    EXCLUSIVE removes that partner, so `utilization` overrides a base that gave `arrival_rate`."""
    import copy

    out = copy.deepcopy(data)
    for path, value in overrides.items():
        parts = path.split(".")
        node = out
        for i, key in enumerate(parts[:-1]):
            child = node.get(key)
            if child is None:
                child = node[key] = {}
            if not isinstance(child, dict):
                raise ScenarioError(
                    f"{path}: {'.'.join(parts[: i + 1])} is not a mapping, cannot set {parts[-1]}"
                )
            node = child
        leaf = parts[-1]
        node[leaf] = value
        for a, b in EXCLUSIVE:
            partner = b if leaf == a else a if leaf == b else None
            if partner is not None and value is not None:
                node.pop(partner, None)
    return out


def _loc(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out or "(top level)"


def _describe(err: dict[str, Any]) -> str:
    """One error as `path: what is wrong, got X`."""
    kind, ctx, given = err["type"], err.get("ctx", {}), err.get("input")
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    # Unions (e.g. tc_profile: name | inline) add a branch name to the path; drop it.
    loc = tuple(p for p in loc if p not in ("str", "TcProfile"))
    path = _loc(loc)
    bounds = {
        "greater_than_equal": ("≥", "ge"),
        "greater_than": (">", "gt"),
        "less_than_equal": ("≤", "le"),
        "less_than": ("<", "lt"),
    }
    if kind in bounds:
        sym, key = bounds[kind]
        return f"{path}: must be {sym} {ctx.get(key)}, got {given!r}"
    if kind == "missing":
        return f"{path}: required field is missing"
    if kind == "extra_forbidden":
        return f"{path}: unknown field (check the spelling; `testbed schema` lists every field)"
    if kind in ("literal_error", "string_type") and isinstance(given, bool):
        # YAML 1.1 (PyYAML) reads unquoted on/off/yes/no/true/false as booleans.
        a, b, c = ("on", "yes", "true") if given else ("off", "no", "false")
        got = f"got {c} (YAML reads an unquoted {a}, {b} or {c} as a boolean)"
        if kind == "literal_error":
            return f"{path}: must be one of {ctx.get('expected')}, {got}"
        return f"{path}: must be a string, {got}; write the word in quotes: '{a}', '{b}' or '{c}'"
    if kind == "literal_error":
        return f"{path}: must be one of {ctx.get('expected')}, got {given!r}"
    if kind == "string_type":
        return f"{path}: must be a string, got {'nothing' if given is None else repr(given)}"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"{path}: must be a whole number, got {given!r}"
    if kind == "string_pattern_mismatch":
        return f"{path}: {given!r} is not allowed; use letters, digits, '.', '_' or '-'"
    if kind in ("too_short", "too_long"):
        return f"{path}: {err['msg'].lower()}"
    msg = err["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    return f"{path}: {msg}"


def format_validation_error(e: ValidationError, source: str) -> str:
    """The first problem, on one line; the count of any others follows it."""
    errs = e.errors(include_url=False)
    first = errs[0]
    exc = first.get("ctx", {}).get("error")
    if isinstance(exc, _FieldError):
        line = f"{_loc(tuple(first['loc']) + exc.loc)}: {exc}"
    else:
        line = _describe(first)
    more = len(errs) - 1
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return f"{source}: {line}{suffix}"


def load_scenario_data(data: Any, source: str, base_dir: Path | None = None) -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario must be a YAML mapping with name, topology, ...")
    try:
        return Scenario.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as e:
        raise ScenarioError(format_validation_error(e, source)) from None


def load_scenario(path: str | Path) -> Scenario:
    p = Path(path)
    if not p.is_file():
        raise ScenarioError(f"{p}: no such scenario file")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        raise ScenarioError(f"{p}: not valid YAML{at}: {getattr(e, 'problem', e)}") from None
    return load_scenario_data(data, source=str(p), base_dir=p.resolve().parent)


def dump_scenario(s: Scenario) -> str:
    return yaml.safe_dump(s.model_dump(mode="json"), sort_keys=False, allow_unicode=True)


def json_schema() -> dict[str, Any]:
    schema = Scenario.model_json_schema(mode="validation")
    schema["properties"]["tc_profile"] = {
        "anyOf": [{"type": "string"}, {"$ref": "#/$defs/TcProfile"}],
        "default": "fifo",
        "description": "a profile name from tc_profiles/, a path to a YAML file, or an inline profile",
    }
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "testbed scenario"
    return schema
