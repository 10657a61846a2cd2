"""The emulated network itself: addressing, isolation, offloads, the management path."""

from __future__ import annotations

import socket
import subprocess

import pytest
from pyroute2.ethtool import Ethtool

from testbed.runtime.netns import NetnsRuntime, inside, teardown
from testbed.scenario import load_scenario_data
from testbed.state import RunState
from testbed.topology import single_tor

from .helpers import run_scenario


@pytest.fixture
def network():
    s = load_scenario_data({"name": "rt", "topology": {"hosts": 3}}, "test")
    topo = single_tor(s, "7e57ab")
    state = RunState(run_id=topo.run_id, scenario="rt", out_dir="/tmp")
    rt = NetnsRuntime(topo, state)
    try:
        rt.build()
        yield topo, rt
    finally:
        rt.close()
        assert teardown(state) == []
        state.remove()


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


def test_hosts_have_no_route_out(network):
    topo, rt = network
    for h in topo.hosts:
        routes = rt.ipr(h.netns).get_routes(family=socket.AF_INET, table=254)  # main table
        dsts = {(r.get_attr("RTA_DST"), r["dst_len"]) for r in routes if r.get_attr("RTA_DST")}
        assert all(dl > 0 for _, dl in dsts), "a default route"
        assert {
            (str(topo.data_prefix.network_address), topo.data_prefix.prefixlen),
            (str(topo.mgmt_prefix.network_address), topo.mgmt_prefix.prefixlen),
        } >= {d for d in dsts if d[1] < 32}
        assert all(r["dst_len"] != 0 for r in routes)
    assert not ping(topo.hosts[0].netns, "192.0.2.1")  # e.g. the machine's gateway


def test_root_namespace_holds_only_the_management_bridge(network):
    topo, rt = network
    names = {link.get_attr("IFLA_IFNAME") for link in rt.ipr(None).get_links()}
    ours = {n for n in names if n.startswith(f"tb{topo.run_id}")}
    assert ours == {topo.mgmt_bridge} | {h.mgmt_peer for h in topo.hosts}
    assert topo.bridge not in names and not any(h.switch_port in names for h in topo.hosts)


def test_segmentation_offloads_are_off_on_shaped_interfaces(network):
    topo, _ = network
    checks = [(h.netns, h.data_if) for h in topo.hosts] + [
        (topo.switch_ns, h.switch_port) for h in topo.hosts
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


def test_delay_needs_netem_and_says_so(tmp_path):
    """With sch_netem the delay shows in the round trip; without it the run says so and goes on."""
    from testbed.shaping.probe import probe

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
    if probe().has("netem"):
        assert fct >= 0.08  # handshake + request/response: at least two round trips of 40 ms
    else:
        assert any("netem" in w for w in s["warnings"])
        assert fct < 0.02
