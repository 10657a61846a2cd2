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
import math
import secrets
import subprocess
from ipaddress import IPv4Address
from pathlib import Path

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


def on_two_machines(name: str, duration: str, rate: str, workloads: dict, **machines) -> dict:
    """Two hosts on one ToR over two emulated machines, the switch on a and h2 on b (h2's
    link cut); `machines` adds to the section (underlay_rate, underlay_mtu)."""
    return {
        "name": name,
        "duration": duration,
        "measure": {"warmup": "0.2s", "cooldown": "0s"},
        "metrics": {"prometheus": "off"},
        "topology": {"hosts": 2, "link_rate": rate},
        "machines": {"nodes": ["a", "b"], "place": {"sw": "a", "h2": "b"}, "emulate": True,
                     **machines},
        "workloads": workloads,
    }  # fmt: skip


def test_admission_refuses_a_cut_its_machines_network_cannot_carry(tmp_path):
    """Two emulated machines whose network is held to 40 Mbit/s each way (machines.
    underlay_rate), h2's 100 Mbit/s link cut between them: the probe (iperf3 each way through a
    VXLAN tunnel as the links') carries at most 40 Mbit/s each way, under 80 % of which 100
    Mbit/s fits only from time_scale ceil(100 / 32) = 4 on. `up` refuses in one line naming
    the pair and the time_scale that fits, exit 2, leaving no namespace; placement.json keeps
    the probe. At the time_scale it names, the same scenario is admitted and runs."""
    import yaml

    from tests.needs import need_binary

    from .helpers import run_cli

    need_binary("iperf3", "admission probes the machines' network with it")
    data = on_two_machines("admission", "1s", "100mbit", {}, underlay_rate="40mbit")
    f = tmp_path / "admission.yaml"
    f.write_text(yaml.safe_dump(data))
    before = subprocess.run(["ip", "netns"], capture_output=True, text=True).stdout
    r = run_cli("up", str(f), "--out", str(tmp_path / "refused"), "--no-plots", timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    lines = [x for x in r.stderr.splitlines() if x.strip() and "WARNING" not in x]
    assert (
        "machines: the links cut between machines a and b carry 100 Mbit/s each way at "
        "time_scale 1, more than 80% of the" in " ".join(lines)
    ), r.stderr[-2000:]
    k = int(r.stderr.split("time_scale: ")[-1].split()[0])
    probed = json.loads((tmp_path / "refused" / "placement.json").read_text())["probed_bps"]
    assert {(p["from"], p["to"]) for p in probed} == {("a", "b"), ("b", "a")}
    # no more than the emulated network's rate each way (an upper bound on a rate: always)
    assert all(0 < p["bps"] <= 1.02 * 40e6 for p in probed), probed
    assert k == math.ceil(100e6 / (0.8 * min(p["bps"] for p in probed))) and k >= 4, (k, probed)
    after = subprocess.run(["ip", "netns"], capture_output=True, text=True).stdout
    assert sorted(after.split()) == sorted(before.split()), after

    data["time_scale"] = k
    f.write_text(yaml.safe_dump(data))
    r = run_cli("up", str(f), "--out", str(tmp_path / "admitted"), "--no-plots", timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    s = json.loads((tmp_path / "admitted" / "summary.json").read_text())
    assert s["status"] == "ok" and s["time_scale"] == k, s.get("error")


def test_kill9_of_a_run_on_emulated_machines_leaves_no_machine_behind(tmp_path):
    """kill -9 of `up` while a run on two emulated machines is live: its guardian removes the
    nodes, both machines' namespaces and their network (the underlay) with their tunnels, as
    the state file recorded them; `down` then finds nothing. Their network has the MTU that
    machines.underlay_mtu gives (9000 here), under which the links' default 1500 B fit."""
    import yaml

    from testbed.core.state import STATE_DIR

    from .helpers import run_cli, up_to_kill

    ring = {"linkcheck": {"pattern": "ring", "short": False}}
    data = on_two_machines("emulated-kill", "120s", "20mbit", ring, underlay_mtu=9000)
    f = tmp_path / "kill.yaml"
    f.write_text(yaml.safe_dump(data))
    run_id = "c0ffe2"
    with up_to_kill(run_id, str(f), "--out", str(tmp_path / "run")) as up:
        st = up.running(timeout=60)
        names = st.namespaces()
        machines = [n for n in names if n.startswith(f"tb-{run_id}-m")]
        assert len(machines) == 2 and f"tb-{run_id}-underlay" in names, names
        assert all((Path("/run/netns") / n).exists() for n in names)
        # the machines' network is as large as underlay_mtu says; the links' 1500 fit under it
        (eth0,) = json.loads(in_ns(machines[0], "ip", "-j", "link", "show", "eth0").stdout)
        assert eth0["mtu"] == 9000, eth0
        fitted = yaml.safe_load((tmp_path / "run" / "scenario.yaml").read_text())["topology"]
        assert fitted["mtu"] == 1500, fitted
        up.kill9()
        up.guardian_finished()
    assert not any((Path("/run/netns") / n).exists() for n in names), names
    assert not (STATE_DIR / f"{run_id}.json").exists()
    r = run_cli("down")
    assert r.returncode == 0 and "nothing to remove" in r.stdout, r.stdout
