import ipaddress

from testbed.scenario import load_scenario_data
from testbed.topology import new_run_id, single_tor, valid_run_id


def plan(hosts=4, **topo):
    s = load_scenario_data({"name": "t", "topology": {"hosts": hosts, **topo}}, "s.yaml")
    return single_tor(s, "a1b2c3")


def test_address_plan():
    p = plan(4)
    assert [str(h.data_ip) for h in p.hosts] == ["10.10.0.1", "10.10.0.2", "10.10.0.3", "10.10.0.4"]
    assert str(p.mgmt_bridge_ip) == "10.11.0.1"
    assert [str(h.mgmt_ip) for h in p.hosts] == ["10.11.0.2", "10.11.0.3", "10.11.0.4", "10.11.0.5"]
    assert len({h.data_ip for h in p.hosts} | {h.mgmt_ip for h in p.hosts}) == 8


def test_custom_prefixes():
    p = plan(3, prefix="192.168.7.0/24", management_prefix="172.20.0.0/16")
    assert all(h.data_ip in ipaddress.IPv4Network("192.168.7.0/24") for h in p.hosts)
    assert all(h.mgmt_ip in ipaddress.IPv4Network("172.20.0.0/16") for h in p.hosts)


def test_names_carry_run_id_and_fit_ifnamsiz():
    p = plan(250, prefix="10.10.0.0/23", management_prefix="10.12.0.0/23")
    assert p.switch_ns == "tb-a1b2c3-sw" and p.mgmt_bridge == "tba1b2c3"
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
    assert {(e.netns, e.ifname) for e in up} == {(h.netns, "eth0") for h in p.hosts}
    assert {(e.netns, e.ifname) for e in down} == {(p.switch_ns, h.switch_port) for h in p.hosts}


def test_run_ids():
    ids = {new_run_id() for _ in range(50)}
    assert all(valid_run_id(i) for i in ids) and len(ids) > 45
    assert not valid_run_id("XYZ123") and not valid_run_id("abc")
