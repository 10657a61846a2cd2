"""Bulk rtnetlink: build and shape hundreds of nodes with a few system calls.

pyroute2 stays the reference for every message sent here, does every read (dumps, class
counters) and encodes every tc object. What it cannot do is volume: each request costs about
a millisecond of Python (encoding, its event loop, parsing the reply), an HTB class several,
so a 256-host run spent most of its set-up there (`benchmarks/shaping.py` prints the figures).
Here, many requests go out in one `sendmsg` on a plain netlink socket opened inside the node's
namespace, and each one's acknowledgement is checked:

- link, address and route requests are packed with `struct` (microseconds each); the unit
  tests decode them with pyroute2's own parsers and compare them with what pyroute2 sends;
- tc objects are encoded by pyroute2 (`IPBatch`) once per distinct object; the copy for each
  interface differs only in the interface index, at the same offset in every tcmsg.

Interfaces get their index when they are created (`ifinfomsg.ifi_index`, honoured for both
ends of a veth), in namespaces the run owns, so nothing is looked up by name afterwards.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Iterable, Iterator, Sequence
from ipaddress import IPv4Address, IPv4Interface, IPv4Network

from testbed.core.errors import RunFailure

NETLINK_ROUTE = 0
NETLINK_EXT_ACK = 11
NETLINK_CAP_ACK = 10
SOL_NETLINK = 270

NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLMSGERR_ATTR_MSG = 1

RTM_NEWLINK = 16
RTM_DELLINK = 17
RTM_NEWADDR = 20
RTM_NEWROUTE = 24

IFF_UP = 0x1
IFLA_IFNAME = 3
IFLA_MTU = 4
IFLA_MASTER = 10
IFLA_LINKINFO = 18
IFLA_GROUP = 27
IFLA_NET_NS_FD = 28
IFLA_GSO_MAX_SEGS = 40
IFLA_INFO_KIND = 1
IFLA_INFO_DATA = 2
IFLA_INFO_SLAVE_DATA = 5
VETH_INFO_PEER = 1
IFLA_BRPORT_ISOLATED = 33

IFA_ADDRESS = 1
IFA_LOCAL = 2

RTA_DST = 1
RTA_OIF = 4
RTA_GATEWAY = 5
RTA_PREFSRC = 7
RTA_METRICS = 8
RTAX_ADVMSS = 8
RTA_MULTIPATH = 9
RT_TABLE_MAIN = 254
RTPROT_STATIC = 4
RT_SCOPE_UNIVERSE = 0
RT_SCOPE_LINK = 253
RTPROT_KERNEL = 2
NLM_F_REPLACE = 0x100
RTN_UNICAST = 1

HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port
IFINFO = struct.Struct("=BxHiII")  # family, type, index, flags, change
IFADDR = struct.Struct("=BBBBI")  # family, prefix length, flags, scope, index
RTMSG = struct.Struct("=BBBBBBBBI")  # family, dst/src length, tos, table, proto, scope, type, flags
RTNH = struct.Struct("=HBBi")  # rtnexthop: length, flags, hops, index
ERR = struct.Struct("=i")
INDEX_OFFSET = 20  # the interface index in ifinfomsg, ifaddrmsg and tcmsg alike
CREATE = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL

CHUNK = 256  # requests per sendmsg: their acks must fit the receive buffer at once
BUFFER = 8 << 20


def _attr(kind: int, payload: bytes) -> bytes:
    head = struct.pack("=HH", 4 + len(payload), kind)
    return head + payload + b"\0" * (-len(payload) % 4)


def _nest(kind: int, *attrs: bytes) -> bytes:
    return _attr(kind, b"".join(attrs))


def _name(name: str) -> bytes:
    return name.encode() + b"\0"


def _message(kind: int, flags: int, body: bytes) -> bytes:
    return HEADER.pack(HEADER.size + len(body), kind, flags, 0, 0) + body


def veth(
    name: str,
    index: int,
    peer: str,
    peer_index: int,
    peer_netns_fd: int,
    master: int | None = None,
    mtu: int | None = None,
    peer_gso_max_segs: int | None = None,
    gso_max_segs: int | None = None,
) -> bytes:
    """Both ends of a veth with the indexes given: this end in the socket's namespace, up, in
    bridge `master` if any; the peer straight in its namespace (`peer_netns_fd`, open until
    sent), down: the kernel configures the peer before the pair is joined, and opening a veth
    without its peer fails (ENOTCONN), so the peer's namespace brings it up (link_up). `mtu`
    applies to both ends (a bridge follows its ports' smallest). `peer_gso_max_segs`: the
    most segments the peer takes in one packet from the stack (TCP sizes its packets by it);
    `gso_max_segs` the same for this end."""
    mtu_attr = b"" if mtu is None else _attr(IFLA_MTU, struct.pack("=I", mtu))
    peer_info = IFINFO.pack(0, 0, peer_index, 0, 0)
    peer_info += _attr(IFLA_IFNAME, _name(peer)) + mtu_attr
    if peer_gso_max_segs is not None:
        peer_info += _attr(IFLA_GSO_MAX_SEGS, struct.pack("=I", peer_gso_max_segs))
    peer_info += _attr(IFLA_NET_NS_FD, struct.pack("=I", peer_netns_fd))
    attrs = _attr(IFLA_IFNAME, _name(name)) + mtu_attr
    if gso_max_segs is not None:
        attrs += _attr(IFLA_GSO_MAX_SEGS, struct.pack("=I", gso_max_segs))
    if master is not None:
        attrs += _attr(IFLA_MASTER, struct.pack("=I", master))
    attrs += _nest(
        IFLA_LINKINFO,
        _attr(IFLA_INFO_KIND, _name("veth")),
        _nest(IFLA_INFO_DATA, _attr(VETH_INFO_PEER, peer_info)),
    )
    return _message(RTM_NEWLINK, CREATE, IFINFO.pack(0, 0, index, IFF_UP, IFF_UP) + attrs)


def bridge(name: str, index: int, group: int | None = None) -> bytes:
    """A bridge, up (index 0: the kernel picks one), in link group `group` if any."""
    attrs = _attr(IFLA_IFNAME, _name(name)) + _nest(
        IFLA_LINKINFO, _attr(IFLA_INFO_KIND, _name("bridge"))
    )
    if group is not None:
        attrs += _attr(IFLA_GROUP, struct.pack("=I", group))
    return _message(RTM_NEWLINK, CREATE, IFINFO.pack(0, 0, index, IFF_UP, IFF_UP) + attrs)


def ifb(name: str, index: int, mtu: int | None = None) -> bytes:
    """An ifb (intermediate functional block) device, up: a queue that a tc redirect feeds."""
    attrs = _attr(IFLA_IFNAME, _name(name))
    if mtu is not None:
        attrs += _attr(IFLA_MTU, struct.pack("=I", mtu))
    attrs += _nest(IFLA_LINKINFO, _attr(IFLA_INFO_KIND, _name("ifb")))
    return _message(RTM_NEWLINK, CREATE, IFINFO.pack(0, 0, index, IFF_UP, IFF_UP) + attrs)


def link_up(index: int) -> bytes:
    return _message(
        RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, IFINFO.pack(0, 0, index, IFF_UP, IFF_UP)
    )


def enslave(name: str, master: int, group: int | None = None) -> bytes:
    """Interface `name` (found by name: its index was the kernel's choice) into bridge
    `master`, and up; in link group `group` if any (see delete_group)."""
    attrs = _attr(IFLA_IFNAME, _name(name)) + _attr(IFLA_MASTER, struct.pack("=I", master))
    if group is not None:
        attrs += _attr(IFLA_GROUP, struct.pack("=I", group))
    return _message(
        RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, IFINFO.pack(0, 0, 0, IFF_UP, IFF_UP) + attrs
    )


def delete_group(group: int) -> bytes:
    """Every interface of link group `group` in the socket's namespace, deleted by one request
    (`ip link delete group`): the kernel unregisters them together, with one RCU wait where a
    delete per interface waits once each."""
    return _message(
        RTM_DELLINK,
        NLM_F_REQUEST | NLM_F_ACK,
        IFINFO.pack(0, 0, 0, 0, 0) + _attr(IFLA_GROUP, struct.pack("=I", group)),
    )


def isolate_port(name: str) -> bytes:
    """Bridge port `name` may talk only to non-isolated ports (the bridge itself); what
    pyroute2's `brport("set", isolated=1)` sends, the port found by name."""
    info = _attr(IFLA_INFO_KIND, _name("bridge_slave"))
    info += _nest(IFLA_INFO_SLAVE_DATA, _attr(IFLA_BRPORT_ISOLATED, b"\1"))
    attrs = _attr(IFLA_IFNAME, _name(name)) + _nest(IFLA_LINKINFO, info)
    return _message(RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK, IFINFO.pack(0, 0, 0, 0, 0) + attrs)


def address(index: int, iface: IPv4Interface) -> bytes:
    ip = iface.ip.packed
    body = IFADDR.pack(socket.AF_INET, iface.network.prefixlen, 0, 0, index)
    body += _attr(IFA_LOCAL, ip) + _attr(IFA_ADDRESS, ip)
    return _message(RTM_NEWADDR, CREATE, body)


def _metrics(advmss: int | None) -> bytes:
    return _attr(RTA_METRICS, _attr(RTAX_ADVMSS, struct.pack("=I", advmss))) if advmss else b""


def route(dst: IPv4Network, via: Sequence[IPv4Address], advmss: int | None = None) -> bytes:
    """`dst` through one gateway, or over several with equal weight (ECMP); the kernel finds
    each gateway's interface from its connected subnets. `advmss`: the MSS this host
    advertises to the peers it reaches by it."""
    body = RTMSG.pack(
        socket.AF_INET, dst.prefixlen, 0, 0, RT_TABLE_MAIN, RTPROT_STATIC, RT_SCOPE_UNIVERSE,
        RTN_UNICAST, 0,
    )  # fmt: skip
    body += _attr(RTA_DST, dst.network_address.packed) + _metrics(advmss)
    if len(via) == 1:
        body += _attr(RTA_GATEWAY, via[0].packed)
    else:
        hops = b""
        for g in via:
            gw = _attr(RTA_GATEWAY, g.packed)
            hops += RTNH.pack(RTNH.size + len(gw), 0, 0, 0) + gw
        body += _attr(RTA_MULTIPATH, hops)
    return _message(RTM_NEWROUTE, CREATE, body)


def connected_route(iface: IPv4Interface, index: int, advmss: int) -> bytes:
    """The route the kernel made for `iface`'s subnet when its address was added, replaced by
    the same route with an advertised MSS (routes carry it; a subnet's own route is the
    kernel's, so it is replaced, not added)."""
    net = iface.network
    body = RTMSG.pack(
        socket.AF_INET, net.prefixlen, 0, 0, RT_TABLE_MAIN, RTPROT_KERNEL, RT_SCOPE_LINK,
        RTN_UNICAST, 0,
    )  # fmt: skip
    body += _attr(RTA_DST, net.network_address.packed) + _attr(RTA_OIF, struct.pack("=i", index))
    body += _attr(RTA_PREFSRC, iface.ip.packed) + _metrics(advmss)
    return _message(RTM_NEWROUTE, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE, body)


class Batch:
    """Requests for one namespace, sent together; every one must be acknowledged without
    error. `what` names each request in the error a user sees."""

    def __init__(self, netns: str | None, sock: socket.socket | None = None) -> None:
        """`sock`: a netlink socket of `netns` to send on (kept open; the runtime's); for
        the root namespace (None) without one, a socket per commit."""
        if netns is not None and sock is None:
            raise ValueError(f"a batch for namespace {netns} needs a socket made inside it")
        self.netns = netns
        self.sock = sock
        self._requests: list[tuple[bytes, str]] = []

    def add(self, msg: bytes, what: str) -> None:
        self._requests.append((msg, what))

    def __len__(self) -> int:
        return len(self._requests)

    def commit(self) -> None:
        if not self._requests:
            return
        sock = self.sock or open_socket()
        try:
            for start in range(0, len(self._requests), CHUNK):
                _exchange(sock, self._requests[start : start + CHUNK], self.netns)
        finally:
            if sock is not self.sock:
                sock.close()
        self._requests.clear()


def open_socket() -> socket.socket:
    """A netlink socket in the calling thread's namespace, set up for batches (a socket keeps
    the namespace it was made in: runtime/namespaces.py opens one inside a node)."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
    try:
        # root may exceed the machine's rmem_max/wmem_max; the acks of a chunk must all fit
        sock.setsockopt(socket.SOL_SOCKET, 33, BUFFER)  # SO_RCVBUFFORCE
        sock.setsockopt(socket.SOL_SOCKET, 32, BUFFER)  # SO_SNDBUFFORCE
        sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)  # acks without the request echoed
        sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)  # the kernel's reason with an error
        sock.bind((0, 0))
    except OSError:
        sock.close()
        raise
    return sock


def _exchange(sock: socket.socket, requests: list[tuple[bytes, str]], netns: str | None) -> None:
    seq0 = 1
    buf = bytearray()
    for i, (msg, _) in enumerate(requests):
        m = bytearray(msg)
        struct.pack_into("=I", m, 8, seq0 + i)
        buf += m + b"\0" * (-len(m) % 4)
    sent = sock.send(buf)
    if sent != len(buf):
        raise RunFailure(f"netlink in {netns or 'the root namespace'}: short send")
    pending = set(range(seq0, seq0 + len(requests)))
    failures: list[tuple[int, int, str]] = []
    while pending:
        data = sock.recv(BUFFER)
        for kind, seq, payload in messages(data):
            if kind != NLMSG_ERROR or seq not in pending:
                continue
            pending.discard(seq)
            (code,) = ERR.unpack_from(payload)
            if code:
                failures.append((seq, -code, _ext_ack(payload)))
    if failures:
        seq, code, why = min(failures)
        what = requests[seq - seq0][1]
        where = netns or "the root namespace"
        reason = errno.errorcode.get(code, str(code))
        text = os.strerror(code) + (f": {why}" if why else "")
        raise RunFailure(f"{where}: the kernel refused {what} ({reason}, {text})")


def messages(data: bytes) -> Iterable[tuple[int, int, bytes]]:
    """(type, sequence, payload) of each netlink message in one datagram."""
    off = 0
    while off + HEADER.size <= len(data):
        length, kind, _flags, seq, _port = HEADER.unpack_from(data, off)
        if length < HEADER.size:
            break
        yield kind, seq, data[off + HEADER.size : off + length]
        off += (length + 3) & ~3


def attributes(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(type, payload) of each netlink attribute in `data`, nested-flag bits dropped."""
    off = 0
    while off + 4 <= len(data):
        length, kind = struct.unpack_from("=HH", data, off)
        if length < 4:
            return
        yield kind & 0x3FFF, data[off + 4 : off + length]
        off += (length + 3) & ~3


def _ext_ack(payload: bytes) -> str:
    """NLMSGERR_ATTR_MSG after the error code and the (capped) request header."""
    for kind, value in attributes(payload[ERR.size + HEADER.size :]):
        if kind == NLMSGERR_ATTR_MSG:
            return value.rstrip(b"\0").decode(errors="replace")
    return ""
