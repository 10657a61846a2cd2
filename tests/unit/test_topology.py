import ipaddress

import pytest

from testbed.core.errors import ScenarioError
from testbed.core.profile import TcProfile, load_profile_data
from testbed.network.shaping.plan import HtbClass, LinkSpec, plan_links
from testbed.scenario.resolve import load_scenario_data
from testbed.scenario.topology import (
    RUN_PREFIX,
    TopologyPlan,
    build_plan,
    name_of,
    new_run_id,
    parse_name,
    single_tor,
    valid_run_id,
)


def plan(hosts=4, **topo):
    s = load_scenario_data({"name": "t", "topology": {"hosts": hosts, **topo}}, "s.yaml")
    return single_tor(s, "a1b2c3")


def test_address_plan():
    p = plan(4)
    assert [str(h.data_ip) for h in p.hosts] == ["10.10.0.1", "10.10.0.2", "10.10.0.3", "10.10.0.4"]
    assert str(p.mgmt_bridge_ip) == "10.11.0.1"
    assert [str(h.mgmt_ip) for h in p.hosts] == ["10.11.0.2", "10.11.0.3", "10.11.0.4", "10.11.0.5"]
    assert len({h.data_ip for h in p.hosts} | {h.mgmt_ip for h in p.hosts}) == 8


def test_hosts_get_reno_unless_the_scenario_names_another_or_the_machines():
    def tcp(**topo):
        s = load_scenario_data({"name": "t", "topology": {"hosts": 2, **topo}}, "s.yaml")
        return build_plan(s, "a1b2c3").tcp_congestion

    assert tcp() == "reno"
    assert tcp(tcp="cubic") == "cubic"
    assert tcp(tcp="machine") is None  # nothing written: new namespaces copy the machine's


def test_custom_prefixes():
    p = plan(3, prefix="192.168.7.0/24", management_prefix="172.20.0.0/16")
    assert all(h.data_ip in ipaddress.IPv4Network("192.168.7.0/24") for h in p.hosts)
    assert all(h.mgmt_ip in ipaddress.IPv4Network("172.20.0.0/16") for h in p.hosts)


def test_names_carry_run_id_and_fit_ifnamsiz():
    p = plan(250, prefix="10.10.0.0/23", management_prefix="10.12.0.0/23")
    assert p.switch("sw").netns == "tb-a1b2c3-sw" and p.mgmt_bridge == "tba1b2c3"
    for h in p.hosts:
        assert "a1b2c3" in h.netns and "a1b2c3" in h.mgmt_peer
        for ifname in (h.data_if, h.mgmt_if, h.mgmt_peer, h.switch_port):
            assert len(ifname) <= 15  # IFNAMSIZ - 1
    assert len({h.mgmt_peer for h in p.hosts}) == 250


def test_link_ends_both_directions():
    p = plan(3)
    ends = p.link_ends()
    assert len(ends) == 6
    up = [e for e in ends if e.direction == "up"]
    down = [e for e in ends if e.direction == "down"]
    # the uplink is queued on the host's ifb, which eth0's egress feeds (topology.Link)
    assert {(e.netns, e.ifname, e.index, e.port, e.port_index) for e in up} == {
        (h.netns, "eth0-up", 102, "eth0", 100) for h in p.hosts
    }
    assert {(e.netns, e.ifname, e.port) for e in down} == {
        ("tb-a1b2c3-sw", h.switch_port, "") for h in p.hosts
    }


def test_exact_gso_queues_each_uplink_in_the_switch_fed_from_the_hosts_port():
    """link_mode exact-gso (shaping/uplink.py): the uplink's queue is an ifb in the switch
    (h<i>-up, index 2000 + place), fed from the ingress of the host's port there; the host has
    no ifb of its own, so its eth0 has no clsact either (the downlink's far end); the
    downlink is as in exact mode."""

    def built(mode: str) -> TopologyPlan:
        data = {"name": "t", "topology": {"hosts": 3, "link_mode": mode}}
        return build_plan(load_scenario_data(data, "s.yaml"), "a1b2c3")

    p = built("exact-gso")
    ends = p.link_ends()
    up = [e for e in ends if e.direction == "up"]
    down = [e for e in ends if e.direction == "down"]
    assert {(e.netns, e.ifname, e.index, e.port, e.port_index, e.port_ingress) for e in up} == {
        ("tb-a1b2c3-sw", f"h{h.index}-up", 2000 + h.index, f"h{h.index}", 1000 + h.index, True)
        for h in p.hosts
    }
    assert {(e.src, e.dst) for e in up} == {(h.name, "sw") for h in p.hosts}
    assert {(e.netns, e.ifname, e.port, e.far_netns, e.far_ifname, e.far_clsact) for e in down} == {
        ("tb-a1b2c3-sw", h.switch_port, "", h.netns, "eth0", False) for h in p.hosts
    }
    assert not any(lk.a.queue for lk in p.links)
    assert built("exact").link_ends() == plan(3).link_ends()  # exact: as before


def test_run_ids():
    ids = {new_run_id() for _ in range(50)}
    assert all(valid_run_id(i) for i in ids) and len(ids) > 45
    assert not valid_run_id("XYZ123") and not valid_run_id("abc")


def fabric(**topo):
    t = {"kind": "leaf-spine", "leaves": 2, "spines": 2, "hosts_per_leaf": 2, **topo}
    s = load_scenario_data({"name": "t", "topology": t}, "s.yaml")
    return s, build_plan(s, "a1b2c3")


def test_every_name_a_run_gives_is_known_by_its_run_id():
    """`testbed down` finds what a run left without its state file by these names: every
    namespace of either layout (a leaf-spine run's leaves and spines too), the probe's, and
    the root namespace's management bridge and veths; nothing else."""
    for p in (plan(3), fabric()[1]):
        for ns in [*p.namespaces, name_of("probe", p.run_id)]:
            assert ns.startswith(RUN_PREFIX.format(id=p.run_id))
            assert parse_name("netns", ns) is not None, ns
            assert parse_name("netns", ns)[1]["id"] == p.run_id
        for ifname in [p.mgmt_bridge, *(h.mgmt_peer for h in p.hosts)]:
            assert parse_name("link", ifname)[1]["id"] == p.run_id, ifname
    roles = {parse_name("netns", ns)[0] for ns in fabric()[1].namespaces}
    assert roles == {"leaf", "spine", "host"}
    assert parse_name("netns", "tb-a1b2c3-leaf12") == ("leaf", {"id": "a1b2c3", "n": "12"})
    assert parse_name("netns", "tb-probe-4711") == ("lone probe", {"pid": "4711"})
    assert parse_name("link", "tba1b2c3m7") == ("management veth", {"id": "a1b2c3", "n": "7"})
    for other in ("tb-a1b2c3-leaf", "tb-a1b2c3-sw1", "tb-A1B2C3-h1", "tb-a1b2c-h1", "xtb-a1b2c3-h1",
                  "tb-a1b2c3-h1x", "tb-probe-", "docker0", "tba1b2c3x", "tba1b2c3m"):  # fmt: skip
        assert parse_name("netns", other) is None and parse_name("link", other) is None, other


def test_leaf_spine_graph_and_addresses():
    """2 leaves × 2 spines × 2 hosts, by hand: a /29 per leaf (2 hosts + gateway + network +
    broadcast = 5 → 8), the leaf's gateway first, then /31s after the last leaf's subnet."""
    s, p = fabric(link_rate="50mbit", fabric_rate="20mbit")
    assert s.topology.hosts == 4
    assert [sw.name for sw in p.switches] == ["leaf1", "leaf2", "spine1", "spine2"]
    assert [(h.name, h.switch, str(h.data_ip), h.prefixlen, str(h.gateway)) for h in p.hosts] == [
        ("h1", "leaf1", "10.10.0.2", 29, "10.10.0.1"),
        ("h2", "leaf1", "10.10.0.3", 29, "10.10.0.1"),
        ("h3", "leaf2", "10.10.0.10", 29, "10.10.0.9"),
        ("h4", "leaf2", "10.10.0.11", 29, "10.10.0.9"),
    ]
    assert str(p.switch("leaf2").gateway) == "10.10.0.9/29"
    fab = {lk.name: lk for lk in p.links if lk.tier == "fabric"}
    assert sorted(fab) == ["leaf1-spine1", "leaf1-spine2", "leaf2-spine1", "leaf2-spine2"]
    lk = fab["leaf2-spine1"]
    assert (lk.a.netns, lk.a.ifname, str(lk.a.address)) == (
        "tb-a1b2c3-leaf2",
        "s1",
        "10.10.0.20/31",
    )
    assert (lk.b.netns, lk.b.ifname, str(lk.b.address)) == (
        "tb-a1b2c3-spine1",
        "l2",
        "10.10.0.21/31",
    )
    assert {lk.rate_bps for lk in fab.values()} == {20_000_000}
    assert {lk.rate_bps for lk in p.links if lk.tier == "host"} == {50_000_000}
    routes = {(r.netns, str(r.dst)): [str(g) for g in r.via] for r in p.routes}
    assert routes == {
        # leaves: the data prefix over both spines (ECMP); spines: one route per leaf subnet
        ("tb-a1b2c3-leaf1", "10.10.0.0/24"): ["10.10.0.17", "10.10.0.19"],
        ("tb-a1b2c3-leaf2", "10.10.0.0/24"): ["10.10.0.21", "10.10.0.23"],
        ("tb-a1b2c3-spine1", "10.10.0.0/29"): ["10.10.0.16"],
        ("tb-a1b2c3-spine1", "10.10.0.8/29"): ["10.10.0.20"],
        ("tb-a1b2c3-spine2", "10.10.0.0/29"): ["10.10.0.18"],
        ("tb-a1b2c3-spine2", "10.10.0.8/29"): ["10.10.0.22"],
    }
    every = [h.data_ip for h in p.hosts] + [lk.a.address.ip for lk in fab.values()]
    every += [lk.b.address.ip for lk in fab.values()] + [
        p.switch(f"leaf{i}").gateway.ip for i in (1, 2)
    ]
    assert len(set(every)) == len(every) and all(a in s.topology.prefix for a in every)


def test_leaf_spine_plan_per_link():
    """Both directions of every link get the profile's classes at that link's own rate."""
    s, p = fabric(link_rate="50mbit", oversubscription=2)
    # 2 hosts × 50 Mbit/s over 2 spines at 2:1 → 25 Mbit/s per fabric link
    assert s.topology.fabric_link_rate == 25_000_000
    ends = p.link_ends()
    assert len(ends) == 2 * (4 + 4)
    up = {(e.node, e.direction): e for e in ends}
    e = up[("leaf1-spine2", "up")]
    assert (e.netns, e.ifname, e.src, e.dst, e.tier) == (
        "tb-a1b2c3-leaf1",
        "s2",
        "leaf1",
        "spine2",
        "fabric",
    )
    e = up[("leaf1-spine2", "down")]
    assert (e.netns, e.ifname, e.src, e.dst) == ("tb-a1b2c3-spine2", "l1", "spine2", "leaf1")
    e = up[("h3", "down")]
    assert (e.netns, e.ifname, e.src, e.dst, e.tier) == (
        "tb-a1b2c3-leaf2",
        "h3",
        "leaf2",
        "h3",
        "host",
    )
    prof = TcProfile.model_validate(load_profile_data("thesis-2band", None))
    plans = plan_links(ends, LinkSpec(50_000_000), prof, netem_available=False)
    for pl in plans:
        cap = next(o for o in pl.objects if isinstance(o, HtbClass) and o.handle == "1:1")
        want = 25_000_000 if pl.end.tier == "fabric" else 50_000_000
        assert pl.rate_bps == cap.rate_bps == cap.ceil_bps == want
        assert set(pl.classes) == {"high", "low"}


def test_leaf_spine_1000_hosts_fit():
    s, p = fabric(leaves=20, spines=4, hosts_per_leaf=50)
    assert len(p.hosts) == 1000 and len(p.links) == 1000 + 80
    # 20 × /26 (50 + 3 → 64) + 160 fabric addresses = 1440 → the default grows to a /21
    assert str(s.topology.prefix) == "10.10.0.0/21"
    assert str(s.topology.management_prefix) == "10.11.0.0/22"
    assert "prefix" not in s.topology.model_fields_set  # still a default: preflight may move it
    names = [lk.a.ifname for lk in p.links] + [lk.b.ifname for lk in p.links]
    assert all(len(n) <= 15 for n in names)
    assert len({h.data_ip for h in p.hosts}) == 1000


@pytest.mark.parametrize(
    ("topo", "msg"),
    [
        ({"hosts": 4, "leaves": 2}, "topology.leaves: only for kind: leaf-spine"),
        (
            {"kind": "leaf-spine", "leaves": 2, "spines": 2},
            "topology.hosts_per_leaf: leaf-spine needs",
        ),
        (
            {"kind": "leaf-spine", "leaves": 2, "spines": 1, "hosts_per_leaf": 2, "hosts": 5},
            "topology.hosts: leaf-spine has leaves × hosts_per_leaf = 4 hosts, not 5",
        ),
        (
            {
                "kind": "leaf-spine",
                "leaves": 2,
                "spines": 1,
                "hosts_per_leaf": 2,
                "fabric_rate": "1gbit",
                "oversubscription": 2,
            },
            "topology.oversubscription: give fabric_rate or oversubscription, not both",
        ),
        (
            {
                "kind": "leaf-spine",
                "leaves": 4,
                "spines": 2,
                "hosts_per_leaf": 10,
                "prefix": "10.1.0.0/26",
            },
            "topology.prefix: 10.1.0.0/26 has 64 addresses; 4 leaves of 10 hosts and 2 spines "
            "need 80",
        ),
    ],
)
def test_leaf_spine_refusals(topo, msg):
    with pytest.raises(ScenarioError) as e:
        load_scenario_data({"name": "t", "topology": topo}, "s.yaml")
    assert msg in str(e.value)


def test_single_tor_default_prefixes_grow_for_256_hosts():
    p = plan(256)
    assert str(p.data_prefix) == "10.10.0.0/23" and str(p.mgmt_prefix) == "10.11.0.0/23"
    assert len({h.data_ip for h in p.hosts}) == 256
    assert all(h.data_ip in p.data_prefix and h.mgmt_ip in p.mgmt_prefix for h in p.hosts)
