"""One run's network built in parts on two emulated machines (issue 76: network.Cutting): a
single ToR with the switch and h3, h4 on machine a, h1 and h2 on machine b (each machine a
namespace with its end of an underlay veth, as tests/integration/test_tunnel.py's). Each
machine builds only its part; every cut link is the link's own end, its peer stitched to a
VXLAN device on its machine. The hosts see one switch: h1 reaches h3 across the cut and h2
hairpinned through the switch on the other machine, TCP bytes arrive whole, every frame of the
traffic a cut host sends its switch port receives and back (none lost or doubled), and the
tunnels are the plan's (VNI, port, remote, `ip -d link`). What the switch flooded while the
other machine's part was not built yet is lost (1–2 frames here): a run across machines must
build every part before any workload starts (the agents' barrier, not built yet)."""

from __future__ import annotations

import json
import secrets
import subprocess
from ipaddress import IPv4Address

import pytest

from testbed.core.state import RunState
from testbed.network.runtime.netns import teardown
from testbed.network.runtime.network import Cutting, Network
from testbed.scenario import partition
from testbed.scenario.resolve import load_scenario_data
from testbed.scenario.topology import build_plan

from .helpers import send, settled
from .test_runtime import in_ns

pytestmark = pytest.mark.integration

PORT = 14789
UNDERLAY = {"a": IPv4Address("10.250.1.1"), "b": IPv4Address("10.250.1.2")}


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def packets(ns: str, dev: str) -> dict[str, int]:
    (x,) = json.loads(in_ns(ns, "ip", "-j", "-s", "link", "show", dev).stdout)
    return {"tx": x["stats64"]["tx"]["packets"], "rx": x["stats64"]["rx"]["packets"]}


def test_a_run_built_in_parts_on_two_machines_is_one_network():
    s = load_scenario_data(
        {"name": "cut", "topology": {"hosts": 4, "link_rate": "1gbit"},
         "machines": {"nodes": ["a", "b"], "place": {"sw": "a", "h1": "b", "h2": "b"}},
         "workloads": {}},
        "cut.yaml",
    )  # fmt: skip
    run_id = secrets.token_hex(3)
    t = build_plan(s, run_id)
    placed = partition.place(s, t)
    parts = partition.parts(t, placed)
    assert [c.link for c in placed.cut] == ["h1", "h2"]
    machines = {x: f"tbtest-{run_id}-m{x}" for x in "ab"}
    state = RunState(run_id, "cut.yaml", "/nonexistent")
    nets: list[Network] = []
    try:
        for name in machines.values():
            ip("netns", "add", name)
            in_ns(name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
        ip("link", "add", "u-a", "netns", machines["a"], "type", "veth", "peer", "u-b",
           "netns", machines["b"])  # fmt: skip
        for x in "ab":
            ip("-n", machines[x], "addr", "add", f"{UNDERLAY[x]}/30", "dev", f"u-{x}")
            ip("-n", machines[x], "link", "set", f"u-{x}", "up")
        state.record(*({"kind": "netns", "name": ns} for ns in t.namespaces))
        for ns in t.namespaces:
            ip("netns", "add", ns)
        for x in "ab":
            cut = Cutting(parts[x], UNDERLAY, PORT, machine_ns=machines[x], management=False)
            net = Network(t, state, [cut])
            nets.append(net)
            net.build()
        # each machine made only its own nodes' interfaces
        sw = t.switch("sw")
        assert in_ns(sw.netns, "ip", "link", "show", t.host("h1").switch_port).returncode == 0
        (vx,) = json.loads(
            in_ns(
                machines["b"], "ip", "-d", "-j", "link", "show", parts["b"].halves[0].tunnel
            ).stdout
        )
        data = vx["linkinfo"]["info_data"]
        assert (data["id"], data["port"], data["remote"], data["learning"]) == (
            parts["b"].halves[0].vni, PORT, str(UNDERLAY["a"]), False)  # fmt: skip
        h1, h2, h3 = (t.host(f"h{i}") for i in (1, 2, 3))

        def both(h):  # the cut host's eth0 and its switch port, once no frame is crossing
            return settled(lambda: (packets(h.netns, h.data_if), packets(sw.netns, h.switch_port)))

        before = {h.name: both(h) for h in (h1, h2)}
        ping = in_ns(h1.netns, "ping", "-c", "3", "-W", "2", str(h3.data_ip))
        assert ping.returncode == 0, ping.stdout + ping.stderr
        size = 10_000_000
        assert send(h1.netns, h3.netns, str(h3.data_ip), size) == size  # across the cut
        assert send(h1.netns, h2.netns, str(h2.data_ip), size) == size  # there and back
        for h in (h1, h2):  # every frame of the test's traffic, counted at both ends (the
            # frames before: what a part sent while the other machine's was not built yet)
            (host0, port0), (host, port) = before[h.name], both(h)
            sent, got = host["tx"] - host0["tx"], port["rx"] - port0["rx"]
            back, home = port["tx"] - port0["tx"], host["rx"] - host0["rx"]
            assert (sent, back) == (got, home), (h.name, before[h.name], host, port)
        sent, got = packets(h1.netns, h1.data_if), packets(h2.netns, h2.data_if)
        assert sent["tx"] >= 2 * size / 1500 and got["rx"] >= size / 1500  # the data itself
    finally:
        for net in nets:
            net.close()
        try:
            problems = teardown(state)
        finally:
            for name in machines.values():
                subprocess.run(["ip", "netns", "del", name], capture_output=True)
            state.path.unlink(missing_ok=True)
    assert problems == []


def test_strict_priority_holds_on_a_port_whose_hosts_are_on_another_machine(tmp_path):
    """test_shaping's strict-priority run on emulated machines (machines.emulate): the switch
    on machine a, both hosts on b, so every frame crosses the cut twice and h2's downlink is a
    port on a whose host is on b. Its checks hold as on one machine: the high class keeps
    the link, the low one is starved to its 1 % floor, the classes together never beat the
    cap, and the run leaves nothing behind (no namespace of the run, machines' included)."""
    from tests.bounds import rate_at_least

    from .helpers import flows, link, run_until

    rate = 50_000_000
    s = run_until(
        tmp_path,
        {
            "duration": "6s",
            "topology": {"hosts": 2, "link_rate": rate},
            "tc_profile": "thesis-2band",
            "machines": {
                "nodes": ["a", "b"],
                "place": {"sw": "a", "h1": "b", "h2": "b"},
                "emulate": True,
            },
            "workloads": {
                "linkcheck": {"pattern": "single", "bulk_classes": ["high", "low"], "short": False}
            },
        },
        lambda s: flows(s, **{"class": "high"})[0]["goodput_bps"] >= 0.90 * rate,
    )
    assert s["status"] == "ok", s.get("error")
    (high,) = flows(s, **{"class": "high"})
    (low,) = flows(s, **{"class": "low"})
    assert low["goodput_bps"] <= 0.05 * rate, f"low got {low['goodput_bps'] / rate:.1%}"
    down = link(s, "h2", "down")["classes"]  # the port on a, its host on b
    assert down["low"]["rate_bps"] <= 0.05 * rate, down["low"]
    assert down["high"]["rate_bps"] + down["low"]["rate_bps"] <= 1.02 * rate, down
    rate_at_least(high["goodput_bps"], 0.90 * rate, s, "the high flow's goodput")
    left = subprocess.run(["ip", "netns"], capture_output=True, text=True).stdout
    assert s["run_id"] not in left, left
