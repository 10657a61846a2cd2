"""Turn a link spec and a tc profile into an explicit list of tc objects per interface.

Pure data, no root, no kernel: unit tests check the plan; `apply.py` executes it. For every
shaped direction the plan is

    htb 1: (default → the profile's default class)
    └─ class 1:1   rate = ceil = link rate                 the cap
       ├─ class 1:10  prio 0, rate = guaranteed share, ceil = link     highest priority
       │  └─ pfifo 10: limit N   (netem 10: when delay/jitter/loss is asked and the kernel has it)
       ├─ class 1:11  prio 1, ...
       └─ ...
    u32 filters on parent 1:: TOS byte & 0xfc == DSCP << 2  →  class

`topology.link_mode: fast` keeps TCP's segments whole from sender to receiver (no offload is
turned off, and a host's eth0 takes up to segments_per_packet segments in one packet): the same
classes, with each leaf a bfifo whose limit is the profile's packets × the frame size, so a
queue still holds as many bytes before it drops. What it changes: a packet is up to 64 KB on
the wire at once, so a high-class packet may wait 52 µs behind a low one at 10 Gbit/s, not
1.2 µs; and the machine handles up to 43 times fewer packets per byte (docs/network.md has
the rates).

A tc profile's `shared_limit` adds a BPF filter first on the root that drops an arrival when
the classes hold that many packets together, and its counterpart on the far end of the link
(shared_limit.py); the leaves then hold SHARED_HEADROOM more, so they never drop first.
A profile's `host_limit` replaces both at a host's own port (host_port): each class holds
that many there, and only switch ports share.

A host's uplink queue sits on an ifb (topology.Link says why): its eth0 gets a clsact qdisc
whose egress filter redirects every packet to the ifb, where the plan above is built. In
`link_mode: exact-gso` the ifb is in the switch instead, fed from the ingress of the host's
port there by a BPF clone (shaping/uplink.py), so that the host's TCP keeps its batches.

HTB `prio` between sibling classes is strict priority for the excess bandwidth (checked on real
links by tests/integration/test_shaping.py and test_leafspine.py), and the guaranteed `rate`
of each class is small, so a backlogged low class keeps only its guaranteed share (none with
`guaranteed: 0`: then 8 kbit/s, the plan's smallest rate, and the class waits while a higher
one has packets, as pfifo_fast's bands do, but for 0.008 % of a 100 Mbit/s link).

Burst (and cburst, on every class) is the one knob that trades rate accuracy against
serialization fidelity, so it is set explicitly, as a time at the link rate:
- Too large, and an idle link lets a small flow through at veth speed: with 1 ms of tokens
  (but at least two frames) on the uplink and again on the downlink, 11 of 1264 small
  web-search flows at 100 Mbit/s moved their bytes faster than the link (up to 1.04×), and
  41 of 119 at 10 Mbit/s (1.59×).
  Small-flow FCT is the thesis' headline metric, so no flow may beat the wire.
- Too small, and every late dequeue (timer and softirq latency, ~3 µs on average here) loses
  tokens the bucket could not hold: with a 1-byte burst, single-flow goodput fell to 0.93 of
  the cap at 100 Mbit/s and 0.78 at 1 Gbit/s.
- 100 µs keeps both: goodput at the 1448/1514 ceiling (0.956) at 10 Mbit/s, 100 Mbit/s and
  1 Gbit/s, and the fastest small flow at 0.96 / 0.89 / 0.71 of the link at those rates. The
  bound first broke at 500 µs (10 Mbit/s: 1.06×), so there is a 5× margin. What covers the
  one packet a token bucket always lets through at once is the handshake itself, which takes
  longer than that packet's serialization time. `benchmarks/shaping.py` measures both sides.
The quantum only splits bandwidth among classes of equal priority; the kernel's r2q-derived
default is enormous at high rates, so it is 1 ms of the link rate, capped where the kernel
stops accepting it without a warning.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from testbed.core.profile import TcProfile
from testbed.scenario.topology import LinkEnd

ETHERNET_HEADER = 14  # HTB counts the frame without FCS and preamble
BURST_SECONDS = 100e-6  # token bucket depth at the link rate (see the module docstring)
QUANTUM_SECONDS = 0.001
# A token bucket lets a packet through whenever it holds any tokens, so each hop may pass one
# frame at once. Small web-search flows (4-100 KB, idle links) never beat the wire with
# frames of up to 1.21 ms (1500 B at 10 Mbit/s: fastest 0.966 of the link; 9000 B at
# 100 Mbit/s: 0.939), but did with 7.2 ms ones (9000 B at 10 Mbit/s: 29 of 52, up to 1.21x).
SLOW_FRAME_SECONDS = 1.25e-3
GSO_MAX_BYTES = 65536  # the largest packet TCP hands a device (the kernel's GSO_MAX_SIZE)
ROOT = "1:"
CAP = "1:1"


@dataclass(frozen=True)
class Htb:
    handle: str
    default_minor: int


# a class with `guaranteed: 0`: the smallest rate the plan gives any class, 1000 bytes/s (HTB
# refuses 0, and at 1 byte/s the burst's time overflows the kernel's 32-bit tick count): 0.008 %
# of a 100 Mbit/s link, where the default floor is 1 %
NO_FLOOR_BPS = 8_000


@dataclass(frozen=True)
class HtbClass:
    handle: str
    parent: str
    rate_bps: int
    ceil_bps: int
    prio: int
    burst: int  # bytes
    cburst: int  # bytes
    quantum: int  # bytes


@dataclass(frozen=True)
class Fifo:
    handle: str
    parent: str
    limit: int  # packets


@dataclass(frozen=True)
class ByteFifo:
    """bfifo: a FIFO whose limit counts bytes (fast links: packets of up to 64 KB)."""

    handle: str
    parent: str
    limit: int  # bytes


@dataclass(frozen=True)
class Netem:
    handle: str
    parent: str
    limit: int  # packets (netem's own queue doubles as the class FIFO)
    delay_us: int
    jitter_us: int
    loss_pct: float


@dataclass(frozen=True)
class DscpFilter:
    parent: str
    prio: int
    target: str
    dscp: int

    @property
    def u32_key(self) -> str:
        """Match the TOS byte (offset 1 of the IPv4 header), ignoring the two ECN bits."""
        return f"0x{self.dscp << 2:02x}/0xfc+1"


@dataclass(frozen=True)
class Clsact:
    """The hook for filters on an interface's egress, before its (absent) root qdisc."""


@dataclass(frozen=True)
class Redirect:
    """A u32 filter on a clsact hook (`hook`: egress, a host's uplink queue; ingress, a cut
    link's stitch, network/tunnel.py) that matches every packet and hands it to the egress of
    interface `target` (mirred): the clone it hands on belongs to no socket (at egress mirred
    always clones; at ingress it passes the packet itself on, socket and all)."""

    target: int  # interface index, in the same namespace
    hook: Literal["egress", "ingress"] = "egress"


@dataclass(frozen=True)
class CloneRedirect:
    """link_mode exact-gso (shaping/uplink.py): a cls_bpf filter on the clsact ingress of the
    host's switch port that hands a clone of every frame to the ifb `target` (its uplink
    queue) and drops the frame itself, which frees the sender's socket of it."""

    target: int  # interface index, in the same namespace


@dataclass(frozen=True)
class SharedLimitIn:
    """tc profile `shared_limit` (shaping/shared_limit.py): a BPF filter first on the queue's
    root, dropping an arrival when the counter `key` says the classes hold `limit` packets."""

    parent: str
    prio: int
    limit: int
    key: str


@dataclass(frozen=True)
class SharedLimitOut:
    """Its other half, on the clsact ingress of the link's far end: counts a packet out."""

    key: str


TcObject = (
    Htb
    | HtbClass
    | Fifo
    | ByteFifo
    | Netem
    | DscpFilter
    | Clsact
    | Redirect
    | CloneRedirect
    | SharedLimitIn
    | SharedLimitOut
)
# with a shared limit, a class's own FIFO holds this many packets more, so that it never
# drops first (two CPUs may count the same last packet in)
SHARED_HEADROOM = 64


@dataclass(frozen=True)
class InterfacePlan:
    end: LinkEnd
    rate_bps: int
    objects: tuple[TcObject, ...]
    classes: dict[str, str]  # class name → classid ("1:10")
    leaves: dict[str, str]  # class name → leaf qdisc handle ("10:")
    notes: tuple[str, ...] = field(default=())
    feed: tuple[TcObject, ...] = ()  # on end.port_index: what hands its egress to the queue
    far: tuple[TcObject, ...] = ()  # on end.far_index in end.far_netns (a shared limit)
    frame_bytes: int = 1500 + ETHERNET_HEADER
    fast: bool = False  # link_mode: fast: a queued packet holds up to 64 KB of frames

    @property
    def shared_limit(self) -> int | None:
        """The packets the classes hold together before an arrival is dropped, if shared."""
        return next((o.limit for o in self.objects if isinstance(o, SharedLimitIn)), None)

    @property
    def largest_packet(self) -> int:
        """The most bytes this queue hands on at once (counted as HTB counts)."""
        return packet_bytes(self.rate_bps, self.frame_bytes - ETHERNET_HEADER, self.fast)


@dataclass(frozen=True)
class LinkSpec:
    rate_bps: int
    delay_s: float = 0.0
    jitter_s: float = 0.0
    loss_pct: float = 0.0
    queue_limit: int | None = None
    mtu: int = 1500
    fast: bool = False  # topology.link_mode: fast (segments stay whole, limits in bytes)

    @property
    def frame_bytes(self) -> int:
        return self.mtu + ETHERNET_HEADER

    @property
    def wants_netem(self) -> bool:
        return self.delay_s > 0 or self.jitter_s > 0 or self.loss_pct > 0


def segments_per_packet(rate_bps: int, mtu: int = 1500) -> int:
    """Fast links: the most TCP segments a host puts in one packet (its eth0's gso_max_segs).
    Packets stay within 64 KB (the kernel's GSO limit) and within SLOW_FRAME_SECONDS of the
    link, as frames are, so no small flow beats the wire on a slow link: 43 segments of
    1448 B at 1 Gbit/s and up, 10 at 100 Mbit/s, 1 at 10 Mbit/s."""
    frame = mtu + ETHERNET_HEADER
    by_time = int(rate_bps * SLOW_FRAME_SECONDS / 8) // frame
    return max(1, min(GSO_MAX_BYTES // frame, by_time))


def packet_bytes(rate_bps: int, mtu: int = 1500, fast: bool = False) -> int:
    """The largest packet a queue holds, as HTB counts it (every segment's headers)."""
    frame = mtu + ETHERNET_HEADER
    return frame * segments_per_packet(rate_bps, mtu) if fast else frame


def burst_bytes(rate_bps: int) -> int:
    """Tokens the bucket holds: may be less than a frame (HTB then sends one packet and goes
    into debt, which is exactly the link's pacing)."""
    return max(1, round(rate_bps / 8 * BURST_SECONDS))


def quantum_bytes(rate_bps: int, frame_bytes: int = 1500 + ETHERNET_HEADER) -> int:
    # DRR quantum among equal-priority classes: at least a frame, at most what the kernel
    # accepts without warning (200000).
    return max(frame_bytes, min(200_000, round(rate_bps / 8 * QUANTUM_SECONDS)))


def capped(rate_bps: int) -> list[Htb | HtbClass]:
    """An interface's egress held to `rate_bps` and nothing else: one HTB class, every packet
    in it (the emulated machines' own network: netns.py)."""
    return [
        Htb(ROOT, default_minor=1),
        HtbClass(CAP, ROOT, rate_bps, rate_bps, prio=0, burst=burst_bytes(rate_bps),
                 cburst=burst_bytes(rate_bps), quantum=quantum_bytes(rate_bps)),
    ]  # fmt: skip


def host_port(end: LinkEnd) -> bool:
    """The queue of what a host sends: its own port (a NIC's), not a switch's."""
    return end.tier == "host" and end.direction == "up"


def plan_interface(
    end: LinkEnd, link: LinkSpec, profile: TcProfile, netem_available: bool
) -> InterfacePlan:
    notes: list[str] = []
    use_netem = link.wants_netem and netem_available
    if link.wants_netem and not netem_available:
        notes.append(
            "kernel has no sch_netem: delay/jitter/loss not applied "
            "(load it with `modprobe sch_netem`, or use a kernel built with CONFIG_NET_SCH_NETEM)"
        )
    if use_netem and link.fast:
        notes.append(
            "topology.link_mode: fast: netem's queue counts packets, and a packet holds up to "
            f"{segments_per_packet(link.rate_bps, link.mtu)} frames, so the loss rate and the "
            "queue limit apply per packet; use link_mode: exact where they must count frames"
        )
    rate = link.rate_bps
    frame_s = link.frame_bytes * 8 / rate
    if frame_s > SLOW_FRAME_SECONDS:
        notes.append(
            f"topology.mtu: a {link.frame_bytes}-byte frame takes {frame_s * 1e3:.1f} ms at "
            f"{rate / 1e6:g} Mbit/s and a shaper lets one through at once, so flows of a few "
            f"frames can finish faster than the link allows; keep mtu 1500 on links this slow "
            f"(jumbo frames are for about {link.frame_bytes * 8 / SLOW_FRAME_SECONDS / 1e6:.0f} "
            f"Mbit/s and up)"
        )
    burst = burst_bytes(rate)
    objects: list[TcObject] = []
    classes: dict[str, str] = {}
    leaves: dict[str, str] = {}
    default_minor = 0x10 + profile.class_names.index(profile.default or profile.class_names[0])
    objects.append(Htb(ROOT, default_minor))
    quantum = quantum_bytes(rate, link.frame_bytes)
    objects.append(HtbClass(CAP, ROOT, rate, rate, 0, burst, burst, quantum))
    own = profile.host_limit if host_port(end) else None
    shared = profile.shared_limit if own is None else None
    for i, cls in enumerate(profile.classes):
        minor = 0x10 + i
        classid = f"1:{minor:x}"
        leaf = f"{minor:x}:"
        share = round(rate * cls.guaranteed)  # guaranteed: 0 gets NO_FLOOR_BPS, the least
        guaranteed = max(NO_FLOOR_BPS, share)
        objects.append(HtbClass(classid, CAP, guaranteed, rate, i, burst, burst, quantum))
        limit = own or link.queue_limit or cls.limit
        if shared is not None:
            limit = shared + SHARED_HEADROOM
        if use_netem:
            objects.append(
                Netem(
                    leaf,
                    classid,
                    limit,
                    round(link.delay_s * 1e6),
                    round(link.jitter_s * 1e6),
                    link.loss_pct,
                )
            )
        elif link.fast:
            objects.append(ByteFifo(leaf, classid, limit * link.frame_bytes))
        else:
            objects.append(Fifo(leaf, classid, limit))
        classes[cls.name] = classid
        leaves[cls.name] = leaf
    if len(profile.classes) > 1:
        for cls in profile.classes:
            for d in cls.dscp:
                objects.append(DscpFilter(ROOT, 10, classes[cls.name], d))
    feed: tuple[TcObject, ...] = ()
    if end.port_index:
        feed = (Clsact(), CloneRedirect(end.index) if end.port_ingress else Redirect(end.index))
    far: tuple[TcObject, ...] = ()
    if shared is not None:
        key = f"{end.netns}/{end.ifname}"
        objects.insert(1, SharedLimitIn(ROOT, 1, shared, key))
        far = (*(() if end.far_clsact else (Clsact(),)), SharedLimitOut(key))
    return InterfacePlan(
        end, rate, tuple(objects), classes, leaves, tuple(notes), feed, far, link.frame_bytes,
        link.fast,
    )  # fmt: skip


def plan_links(
    ends: list[LinkEnd], link: LinkSpec, profile: TcProfile, netem_available: bool
) -> list[InterfacePlan]:
    """Every direction of every link from one spec; a link's own rate (fabric links) wins.
    A DSCP class is a class everywhere: the same profile on host and fabric links."""
    return [
        plan_interface(
            e,
            link if e.rate_bps is None else replace(link, rate_bps=e.rate_bps),
            profile,
            netem_available,
        )
        for e in ends
    ]
