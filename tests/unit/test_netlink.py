"""The bulk netlink requests, checked against pyroute2: each message this module packs is
decoded by pyroute2's own parsers and compared with what pyroute2 sends for the same request;
each tc copy is pyroute2's encoding for that very interface. No root, no kernel."""

from ipaddress import IPv4Address, IPv4Interface, IPv4Network

import pytest
from pyroute2 import IPBatch
from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.rtmsg import rtmsg

from testbed.core.profile import TcProfile, load_profile_data
from testbed.network import netlink as nl
from testbed.network.shaping.apply import tc_call, tc_message
from testbed.network.shaping.plan import LinkSpec, plan_interface
from testbed.scenario.topology import LinkEnd


@pytest.fixture(scope="module")
def ref():
    batch = IPBatch()

    def encode(call):
        batch.reset()
        call(batch)
        return bytes(batch.batch)

    yield encode
    batch.close()


def decoded(cls, data: bytes) -> dict:
    """The message as pyroute2 reads it, without what differs by design: the sequence
    number and port, and the order of attributes."""
    m = cls(data)
    m.decode()
    assert m["header"]["length"] == len(data)  # exactly one message, nothing trailing

    def norm(x):
        if isinstance(x, dict):
            out = {k: norm(v) for k, v in x.items() if k not in ("header", "state", "attrs")}
            out = {k: v for k, v in out.items() if not k.startswith("__")}
            if "attrs" in x:
                out["attrs"] = sorted(((a[0], norm(a[1])) for a in x["attrs"]), key=repr)
            return out
        if isinstance(x, list):
            return [norm(v) for v in x]
        return x

    out = norm(dict(m))
    out["type"], out["flags"] = m["header"]["type"], m["header"]["flags"]
    return out


def test_address_is_what_pyroute2_sends(ref):
    mine = nl.address(7, IPv4Interface("10.1.2.3/21"))
    theirs = ref(lambda b: b.addr("add", index=7, address="10.1.2.3", prefixlen=21))
    assert decoded(ifaddrmsg, mine) == decoded(ifaddrmsg, theirs)


@pytest.mark.parametrize("via", [["10.0.0.1"], ["10.9.0.1", "10.9.0.3", "10.9.0.5"]])
def test_route_is_what_pyroute2_sends(ref, via):
    dst = IPv4Network("10.0.0.0/16")
    mine = nl.route(dst, [IPv4Address(v) for v in via])
    if len(via) == 1:
        theirs = ref(lambda b: b.route("add", dst=str(dst), gateway=via[0]))
    else:
        hops = [{"gateway": v} for v in via]
        theirs = ref(lambda b: b.route("add", dst=str(dst), multipath=hops))
    assert decoded(rtmsg, mine) == decoded(rtmsg, theirs)


def test_veth_is_what_pyroute2_sends_plus_the_peers_index(ref):
    """pyroute2 cannot put an index in the peer's header; the kernel reads it there
    (veth_newlink), and that is what lets the peer be used without a lookup."""
    mine = decoded(ifinfmsg, nl.veth("h7", 1007, "eth0", 100, 9, master=100))
    theirs = decoded(
        ifinfmsg,
        ref(
            lambda b: b.link(
                "add", ifname="h7", index=1007, kind="veth", master=100, state="up",
                peer={"ifname": "eth0", "net_ns_fd": 9},
            )
        ),
    )  # fmt: skip
    ((_, info),) = [a for a in mine["attrs"] if a[0] == "IFLA_LINKINFO"]
    ((_, data),) = [a for a in info["attrs"] if a[0] == "IFLA_INFO_DATA"]
    ((_, peer),) = data["attrs"]
    assert (peer["index"], peer["flags"], peer["change"]) == (100, 0, 0)  # down: see veth()
    peer.update(index=0)
    assert mine == theirs


def test_a_veth_with_an_mtu_sets_it_on_both_ends(ref):
    mine = decoded(ifinfmsg, nl.veth("h7", 1007, "eth0", 100, 9, master=100, mtu=9000))
    theirs = decoded(
        ifinfmsg,
        ref(
            lambda b: b.link(
                "add", ifname="h7", index=1007, kind="veth", master=100, state="up", mtu=9000,
                peer={"ifname": "eth0", "net_ns_fd": 9, "mtu": 9000},
            )
        ),
    )  # fmt: skip

    def peer(msg):
        ((_, info),) = [a for a in msg["attrs"] if a[0] == "IFLA_LINKINFO"]
        ((_, data),) = [a for a in info["attrs"] if a[0] == "IFLA_INFO_DATA"]
        return data["attrs"][0][1]

    assert ("IFLA_MTU", 9000) in mine["attrs"] and ("IFLA_MTU", 9000) in peer(mine)["attrs"]
    peer(mine).update(index=0)
    for msg in (mine, theirs):  # the kernel reads attributes by type, in any order
        msg["attrs"] = sorted(msg["attrs"], key=repr)
        peer(msg)["attrs"] = sorted(peer(msg)["attrs"], key=repr)
    assert mine == theirs


def test_an_ifb_is_what_pyroute2_sends(ref):
    theirs = ref(lambda b: b.link("add", ifname="eth0-up", index=102, kind="ifb", state="up"))
    assert decoded(ifinfmsg, nl.ifb("eth0-up", 102)) == decoded(ifinfmsg, theirs)


def test_a_hosts_eth0_takes_one_segment_per_packet():
    """The peer (a host's eth0) carries IFLA_GSO_MAX_SEGS 1: TCP sizes its packets by it, so
    the uplink queue after eth0's redirect holds packets, not segmentation batches."""
    msg = decoded(ifinfmsg, nl.veth("h7", 1007, "eth0", 100, 9, master=100, peer_gso_max_segs=1))
    ((_, info),) = [a for a in msg["attrs"] if a[0] == "IFLA_LINKINFO"]
    ((_, data),) = [a for a in info["attrs"] if a[0] == "IFLA_INFO_DATA"]
    peer = data["attrs"][0][1]
    assert ("IFLA_GSO_MAX_SEGS", 1) in peer["attrs"]
    assert not any(a[0] == "IFLA_GSO_MAX_SEGS" for a in msg["attrs"])  # the switch's end


def test_enslave_and_isolate_by_name_are_what_pyroute2_sends(ref):
    enslave = ref(lambda b: b.link("set", ifname="tbxm3", master=41, state="up"))
    assert decoded(ifinfmsg, nl.enslave("tbxm3", 41)) == decoded(ifinfmsg, enslave)
    isolate = decoded(ifinfmsg, ref(lambda b: b.brport("set", index=0, isolated=1)))
    isolate["attrs"] = sorted([*isolate["attrs"], ("IFLA_IFNAME", "tbxm3")], key=repr)
    isolate["index"] = 0
    assert decoded(ifinfmsg, nl.isolate_port("tbxm3")) == isolate


def test_bridge_and_link_up_are_what_pyroute2_sends(ref):
    theirs = ref(lambda b: b.link("add", ifname="br0", index=100, kind="bridge", state="up"))
    assert decoded(ifinfmsg, nl.bridge("br0", 100)) == decoded(ifinfmsg, theirs)
    theirs = ref(lambda b: b.link("set", index=1, state="up"))
    assert decoded(ifinfmsg, nl.link_up(1)) == decoded(ifinfmsg, theirs)


@pytest.mark.parametrize("profile", ["fifo", "thesis-2band"])
def test_each_tc_copy_is_pyroute2s_encoding_for_that_interface(ref, profile):
    """Byte for byte, past the header's sequence number and port: the HTB rate tables and
    u32 keys do not depend on the interface, only the index at offset 20 does."""
    prof = TcProfile.model_validate(load_profile_data(profile, None))
    end = LinkEnd("h1", "up", "ns", "eth0-up", 102, port="eth0", port_index=100)
    plan = plan_interface(end, LinkSpec(10**9), prof, False)
    assert plan.feed  # the redirect into the ifb is copied the same way
    for index in (100, 1003, 2**20):
        for obj in (*plan.objects, *plan.feed):
            mine = tc_message(index, obj)
            theirs = ref(lambda b, o=obj, i=index: tc_call(b, i, o))
            assert len(mine) == len(theirs)
            assert mine[:8] == theirs[:8] and mine[16:] == theirs[16:], obj


def test_a_refusal_names_the_request_and_the_kernels_reason():
    """The acks are parsed here: an error code and the extended-ack text."""
    import struct

    ext = nl._attr(nl.NLMSGERR_ATTR_MSG, b"Specified qdisc kind is unknown\0")
    payload = struct.pack("=i", -2) + nl.HEADER.pack(16, 36, 5, 3, 0) + ext
    assert nl._ext_ack(payload) == "Specified qdisc kind is unknown"
    msgs = list(
        nl.messages(nl.HEADER.pack(16 + len(payload), nl.NLMSG_ERROR, 0x100, 3, 0) + payload)
    )
    assert msgs == [(nl.NLMSG_ERROR, 3, payload)]
