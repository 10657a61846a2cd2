"""A 2-leaf × 2-spine fabric with 2 hosts per leaf: routing, ECMP, fabric caps, priority.

Every check compares the kernel's own counters (and the receivers' byte counts) with rates
fixed by the scenario, never with figures the orchestrator computed from the same counters.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.bounds import rate_at_least

from .helpers import built_network, flows, present_objects, run_cli, run_scenario
from .test_runtime import RTN_UNICAST, assert_no_route_out, in_ns, ping

FABRIC = {"kind": "leaf-spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 2}


@pytest.fixture
def fabric():
    with built_network(FABRIC, "1eaf5b") as built:
        yield built


def test_hosts_reach_each_other_across_and_within_leaves(fabric):
    topo, _ = fabric
    h1, h2, h3, h4 = topo.hosts
    assert ping(h1.netns, str(h2.data_ip))  # same leaf: bridged
    assert ping(h1.netns, str(h3.data_ip)) and ping(h4.netns, str(h2.data_ip))  # routed
    # a reply from the other leaf crossed three routers (leaf, spine, leaf): TTL 64 - 3
    r = in_ns(h1.netns, "ping", "-c", "1", "-W", "1", str(h4.data_ip))
    assert "ttl=61" in r.stdout, r.stdout
    r = in_ns(h1.netns, "ping", "-c", "1", "-W", "1", str(h2.data_ip))
    assert "ttl=64" in r.stdout, r.stdout


def test_leaves_route_over_every_spine_and_nothing_routes_out(fabric):
    topo, rt = fabric
    for leaf in ("leaf1", "leaf2"):
        ns = topo.switch(leaf).netns
        routes = [
            r
            for r in rt.ipr(ns).get_routes(family=socket.AF_INET)
            if r["type"] == RTN_UNICAST and r.get_attr("RTA_MULTIPATH")
        ]
        assert len(routes) == 1, routes
        assert len(routes[0].get_attr("RTA_MULTIPATH")) == 2  # one next hop per spine
        r = in_ns(ns, "cat", "/proc/sys/net/ipv4/fib_multipath_hash_policy")
        assert r.stdout.strip() == "1"  # 5-tuple: flows between one pair spread too
    for ns in topo.namespaces:  # hosts, leaves and spines alike
        assert_no_route_out(topo, rt, ns)


@pytest.fixture(scope="module")
def congested(tmp_path_factory):
    """Every host sends 8 high and 8 low bulk flows to its partner on the other leaf. Host
    links are 50 Mbit/s, fabric links 20 Mbit/s: each leaf's hosts could send 100 Mbit/s, its
    two spine links carry 40, so the fabric is the bottleneck in both directions.

    TCP is Reno (loss-based, as ns-3's NewReno in the thesis), not this machine's default BBR:
    with load both ways, every ACK waits behind the other direction's full 1000-packet queue,
    and BBR, which caps what it has in flight at twice its lowest RTT's worth, then leaves a
    direction at 0.36-0.8 of the fabric (measured), so the fabric would not be congested.
    Queues of 100 packets (60 ms at 20 Mbit/s), not the profile's 1000: the queues fill both
    ways, and behind 600 ms ones an ACK's wait makes the round trip over a second, so the
    5.5 s window holds a few round trips of Reno settling (35.2 of 40 Mbit/s measured)."""
    return run_scenario(
        tmp_path_factory.mktemp("ls"),
        {
            "duration": "8s",
            "measure": {"warmup": "2s", "cooldown": "0.5s"},
            "topology": {
                **FABRIC,
                "link_rate": "50mbit",
                "fabric_rate": "20mbit",
                "tcp": "reno",
                "queue_limit": 100,
            },
            "tc_profile": "thesis-2band",
            "workloads": {
                "linkcheck": {
                    "pattern": "across",
                    "bulk_classes": ["high"] * 8 + ["low"] * 8,
                    "short": False,
                }
            },
        },
    )


def fabric_links(s: dict) -> dict[tuple[str, str], dict]:
    return {(x["node"], x["direction"]): x for x in s["links"] if x["tier"] == "fabric"}


def test_fabric_links_cap_the_traffic_between_leaves(congested):
    """Goodput from one leaf to the other is held to its two spine links (2 × 20 Mbit/s),
    far below what its host links allow (2 × 50). Broken looks like: unshaped fabric links
    (~90 Mbit/s), or traffic bypassing the spines."""
    s = congested
    assert s["status"] == "ok"
    fab = fabric_links(s)
    assert len(fab) == 8
    # the wire, not the configuration: every fabric link direction is loaded (two leaves send
    # to each other across both spines), so the class counters pin the shapers at 20 Mbit/s
    wires = {}
    for (name, direction), x in fab.items():
        wire = wires[(name, direction)] = sum(c["rate_bps"] for c in x["classes"].values())
        assert wire <= 1.02 * 20e6, (name, direction, wire)
    for leaf, other in (("leaf1", "leaf2"), ("leaf2", "leaf1")):
        srcs = {"leaf1": ("h1", "h2"), "leaf2": ("h3", "h4")}[leaf]
        # receivers' goodput over the window: 16 Python receivers per host on 2 cores read
        # their sockets late at times, so a window can take in bytes that crossed the wire
        # before it (1.016 × the fabric was seen); the whole run's bytes are checked below
        goodput = sum(f["goodput_bps"] for f in flows(s) if f["src"] in srcs)
        assert goodput <= 1.1 * 40e6, (leaf, goodput)
        # the bytes left the leaf on its spine links and arrived over the other leaf's
        sent = sum(
            c["bytes"] for j in (1, 2) for c in fab[(f"{leaf}-spine{j}", "up")]["classes"].values()
        )
        got = sum(
            c["bytes"]
            for j in (1, 2)
            for c in fab[(f"{other}-spine{j}", "down")]["classes"].values()
        )
        payload = sum(f["bytes"] for f in flows(s) if f["src"] in srcs)
        assert payload <= sent and payload <= got, (leaf, payload, sent, got)
        rate_at_least(goodput, 0.5 * 40e6, s, f"goodput out of {leaf}")
    # ECMP may hash fewer flows onto one spine (17.6 of 20 Mbit/s seen on one link, none
    # dropped by the shaper): a leaf's two spine links together carry its 40 Mbit/s
    for leaf in ("leaf1", "leaf2"):
        for direction in ("up", "down"):
            both = sum(wires[(f"{leaf}-spine{j}", direction)] for j in (1, 2))
            rate_at_least(both, 0.9 * 40e6, s, f"{leaf}'s two spine links, {direction}")


def test_ecmp_spreads_flows_over_both_spines(congested):
    """16 flows per leaf and class hash over two spines: each spine link carries a real share
    of each direction. Broken looks like: one spine link idle (a single route, or an L3 hash
    that sees only addresses on a pair that shares them)."""
    fab = fabric_links(congested)
    for leaf in ("leaf1", "leaf2"):
        for direction in ("up", "down"):
            per_spine = [
                sum(c["bytes"] for c in fab[(f"{leaf}-spine{j}", direction)]["classes"].values())
                for j in (1, 2)
            ]
            assert min(per_spine) >= 0.2 * sum(per_spine), (leaf, direction, per_spine)


def test_strict_priority_holds_on_congested_fabric_links(congested):
    """On every fabric link direction, the high class takes the link and the low class keeps
    little more than its 1 % guarantee. Broken looks like: DSCP not classified on fabric
    links (everything in the default high class: low ≈ 0 bytes) or no priority (low ≈ half).
    The low class is backlogged only while its senders run: with 5-6 % of the CPU stolen by
    the hypervisor one direction carried 0.44 % of the link, so "not dead" is 0.1 %."""
    fab = fabric_links(congested)
    for (name, direction), x in fab.items():
        assert x["classes"]["low"]["rate_bps"] <= 0.1 * 20e6, (name, direction, x["classes"])
    lows = [f for f in flows(congested) if f["class"] == "low"]
    highs = [f for f in flows(congested) if f["class"] == "high"]
    assert sum(f["goodput_bps"] for f in highs) >= 8 * sum(f["goodput_bps"] for f in lows)
    for (name, direction), x in fab.items():
        high, low = x["classes"]["high"], x["classes"]["low"]
        rate_at_least(
            high["rate_bps"], 0.6 * 20e6, congested, f"the high class on {name} {direction}"
        )
        rate_at_least(
            low["rate_bps"], 0.001 * 20e6, congested, f"the low class on {name} {direction}"
        )


def test_hosts_use_reno_unless_the_scenario_says(fabric):
    """Reno by default, whatever this machine's own default is (BBR here): the same scenario
    measures the same on every machine."""
    topo, _ = fabric
    for h in topo.hosts:
        r = in_ns(h.netns, "cat", "/proc/sys/net/ipv4/tcp_congestion_control")
        assert r.stdout.strip() == "reno", (h.name, r.stdout)


def test_tcp_machine_keeps_the_machines_congestion_control():
    machine = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    with built_network({"hosts": 2, "tcp": "machine"}, "cc0a11") as (topo, _):
        for h in topo.hosts:
            r = in_ns(h.netns, "cat", "/proc/sys/net/ipv4/tcp_congestion_control")
            assert r.stdout.strip() == machine, (h.name, r.stdout)


def test_an_unknown_congestion_control_is_refused_before_anything_exists(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: cc\nduration: 6s\ntopology: {hosts: 2, tcp: nosuchcc}\n"
        "workloads: {linkcheck: {pattern: single}}\n"
    )
    before = present_objects()
    r = run_cli("up", str(scenario), "--out", str(tmp_path / "run"))
    assert r.returncode == 1, r
    assert (
        len(r.stderr.strip().splitlines()) == 1
        and "topology.tcp" in r.stderr
        and "nosuchcc" in r.stderr
    )
    assert "modprobe tcp_nosuchcc" in r.stderr and "Traceback" not in r.stderr
    assert present_objects() == before and not (tmp_path / "run").exists()
