"""The emulated network itself: addressing, isolation, offloads, the management path."""

from __future__ import annotations

import errno
import ipaddress
import socket
import subprocess

import pytest
from pyroute2.ethtool import Ethtool

from testbed.network.runtime.namespaces import inside
from tests.bounds import time_at_most

from .helpers import built_network, run_scenario


@pytest.fixture
def network():
    with built_network({"hosts": 3}, "7e57ab") as built:
        yield built


def in_ns(ns: str | None, *argv: str) -> subprocess.CompletedProcess[str]:
    prefix = ["nsenter", f"--net=/run/netns/{ns}", "--"] if ns else []
    return subprocess.run([*prefix, *argv], capture_output=True, text=True, timeout=20)


def ping(ns: str | None, ip: str) -> bool:
    return in_ns(ns, "ping", "-c", "1", "-W", "1", ip).returncode == 0


def test_hosts_reach_each_other_over_the_data_network(network):
    topo, _ = network
    h1, h2, h3 = topo.hosts
    assert ping(h1.netns, str(h2.data_ip)) and ping(h3.netns, str(h1.data_ip))


def test_management_path_reaches_hosts_but_does_not_join_them(network):
    topo, _ = network
    h1, h2, _ = topo.hosts
    assert ping(None, str(h1.mgmt_ip))  # root → host
    assert not ping(h1.netns, str(h2.mgmt_ip))  # isolated bridge ports: host ↛ host


RTN_UNICAST = 1  # rtm_type of a route that forwards (local, broadcast, multicast do not)


def assert_no_route_out(topo, rt, ns: str) -> None:
    """Every forwarding route of the namespace, in every table, leads into the testbed's own
    data or management prefix; there is no default route; and a connect() to an outside
    address (TEST-NET-1, which no real host has) fails at once with 'Network is unreachable'."""
    ours = (topo.data_prefix, topo.mgmt_prefix)
    ipr = rt.ipr(ns)
    unicast = [r for r in ipr.get_routes(family=socket.AF_INET) if r["type"] == RTN_UNICAST]
    assert unicast, f"{ns}: no routes at all (the dump, not the isolation, is broken)"
    for r in unicast:
        # a default route has dst_len 0 and no RTA_DST at all: check the length, not the attr
        assert r["dst_len"] > 0, f"{ns}: a default route: {r}"
        dst = ipaddress.ip_network(f"{r.get_attr('RTA_DST')}/{r['dst_len']}")
        assert any(dst.subnet_of(p) for p in ours), f"{ns}: route to {dst} leaves {ours}"
    v6 = ipr.get_routes(family=socket.AF_INET6)
    assert not [r for r in v6 if r["type"] == RTN_UNICAST and r["dst_len"] == 0], ns  # v6 too
    with inside(ns):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        with pytest.raises(OSError) as e:
            s.connect(("192.0.2.1", 9))  # UDP connect: a route lookup only, nothing is sent
        assert e.value.errno == errno.ENETUNREACH, e.value
    finally:
        s.close()


def test_hosts_have_no_route_out(network):
    """Broken isolation (a default route, or a route to any outside prefix, in a host) fails
    the route check; a host that could reach 192.0.2.1 fails the connect() check."""
    topo, rt = network
    for h in topo.hosts:
        assert_no_route_out(topo, rt, h.netns)
    r = in_ns(topo.hosts[0].netns, "ping", "-c", "1", "-W", "1", "192.0.2.1")
    assert r.returncode == 2 and "unreachable" in r.stderr.lower(), r  # refused, not unanswered


def test_root_namespace_holds_only_the_management_bridge(network):
    topo, rt = network
    names = {link.get_attr("IFLA_IFNAME") for link in rt.ipr(None).get_links()}
    ours = {n for n in names if n.startswith(f"tb{topo.run_id}")}
    assert ours == {topo.mgmt_bridge} | {h.mgmt_peer for h in topo.hosts}
    assert topo.switch("sw").bridge not in names and not any(
        h.switch_port in names for h in topo.hosts
    )


def test_segmentation_offloads_are_off_on_shaped_interfaces(network):
    topo, _ = network
    checks = [(h.netns, h.data_if) for h in topo.hosts] + [
        (topo.switch("sw").netns, h.switch_port) for h in topo.hosts
    ]
    for ns, ifname in checks:
        with inside(ns):
            et = Ethtool()
            try:
                feats = et.get_features(ifname).features
            finally:
                et.close()
        for name in ("tx-tcp-segmentation", "tx-generic-segmentation", "rx-gro"):
            assert not feats[name].enable, f"{ns}/{ifname}: {name} is on"


def kernel_has_netem() -> bool:
    """Asked of the kernel with iproute2's own tc in a fresh network namespace: independent of
    testbed's probe, which the test checks against it."""
    r = subprocess.run(
        ["unshare", "--net", "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
        capture_output=True, text=True, timeout=20,
    )  # fmt: skip
    return r.returncode == 0


def test_delay_needs_netem_and_says_so(tmp_path):
    """With sch_netem the delay shows in the round trip; without it the run says so and goes on.
    Which case this machine is comes from the kernel itself (tc), not from testbed's probe: a
    probe that wrongly said "no netem" would drop the delay silently and still pass."""
    from testbed.network.runtime.kernel_probe import probe

    has_netem = kernel_has_netem()
    assert probe().has("netem") == has_netem

    s = run_scenario(
        tmp_path,
        {
            "duration": "3s",
            "topology": {"hosts": 2, "link_rate": "100mbit", "delay": "20ms"},
            "workloads": {
                "linkcheck": {"pattern": "single", "bulk_classes": [], "short_interval": "200ms"}
            },
        },
    )
    assert s["status"] == "ok"
    fct = s["linkcheck"]["short"]["fct_s"]["p50"]
    if has_netem:
        assert fct >= 0.08  # handshake + request/response: at least two round trips of 40 ms
    else:
        assert any("netem" in w for w in s["warnings"])
        time_at_most(fct, 0.02, s, "a short transfer without delay")


def test_class_counters_read_in_bulk_count_the_packets_sent(network):
    """ClassReader (a plain netlink dump, only the statistics parsed) against two independent
    readings: the packets ping sent, and pyroute2's decoding of the same classes."""
    from testbed.core.profile import TcProfile, load_profile_data
    from testbed.network.shaping.apply import apply_plans
    from testbed.network.shaping.plan import LinkSpec, plan_links
    from testbed.network.shaping.stats import class_counters

    topo, rt = network
    h1, h2, _ = topo.hosts
    prof = TcProfile.model_validate(load_profile_data("thesis-2band", None))
    plans = plan_links(topo.link_ends(), LinkSpec(100_000_000), prof, False)
    apply_plans(plans, rt.netlink)
    # 30 echo requests marked CS1 (TOS 0x20): the low class of h1's uplink, h2's downlink
    sent = in_ns(h1.netns, "ping", "-q", "-c", "30", "-i", "0.01", "-Q", "0x20", "-s", "1000",
                 str(h2.data_ip))  # fmt: skip
    assert sent.returncode == 0, sent.stdout + sent.stderr
    for p in plans:
        bulk, reference = rt.classes.read(p), class_counters(rt.ipr(p.end.netns), p)
        assert bulk == reference, (p.end, bulk, reference)
    up = next(p for p in plans if p.end.node == "h1" and p.end.direction == "up")
    low = rt.classes.read(up)["low"]
    assert low["packets"] == 30 and low["bytes"] == 30 * (1000 + 8 + 20 + 14), low
