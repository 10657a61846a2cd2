"""One run over several machines, its placement (issue 76): where `machines:` puts each switch
and host, which links that cuts, and the one-line refusals; against placements worked out by
hand from the topology, not from the partition's own output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.core.errors import ScenarioError
from testbed.scenario import partition
from testbed.scenario.resolve import load_scenario_data, machine_plan

ROOT = Path(__file__).resolve().parents[2]

LEAF_SPINE = {"kind": "leaf-spine", "leaves": 3, "spines": 2, "hosts_per_leaf": 4,
              "link_rate": "100mbit", "oversubscription": 2}  # fmt: skip


def scenario(machines, topology=None, workloads=None, **top):
    data = {
        "name": "m",
        "topology": topology or LEAF_SPINE,
        "machines": machines,
        "workloads": workloads if workloads is not None else {"websearch": {"utilization": "10%"}},
        **top,
    }
    return load_scenario_data(data, "m.yaml")


def test_a_leaf_spine_over_three_machines_keeps_each_leaf_with_its_hosts():
    """3 leaves of 4 hosts (each host running web search: weight 2, a leaf 9) and 2 spines
    (weight 1) over 3 machines: balance puts one leaf on each machine, and the least cut
    then joins each spine to one leaf: 6 fabric links − 2 = 4 cut, 100 Mbit/s each
    (4 × 100 Mbit/s over 2 spines at 2:1), and no host link is cut."""
    plan = machine_plan(scenario({"nodes": ["a", "b", "c"]}))
    leaves = {plan.machine_of[f"leaf{i}"] for i in (1, 2, 3)}
    assert leaves == {"a", "b", "c"}
    for i in range(1, 13):
        assert plan.machine_of[f"h{i}"] == plan.machine_of[f"leaf{(i - 1) // 4 + 1}"]
    assert len(plan.cut) == 4 and {c.rate_bps for c in plan.cut} == {100_000_000}
    assert all(c.upper.startswith("spine") for c in plan.cut)
    assert plan.machine_of["spine1"] != plan.machine_of["spine2"]  # two machines share none


def test_one_machine_or_one_switch_cuts_nothing():
    one = machine_plan(scenario({"nodes": ["a"]}))
    assert set(one.machine_of.values()) == {"a"} and one.cut == ()
    tor = machine_plan(scenario({"nodes": ["a", "b"]}, topology={"hosts": 4}))
    assert set(tor.machine_of.values()) == {"a"} and tor.cut == ()
    assert "pin hosts to spread them" in tor.how


def test_pins_put_a_single_tor_switch_on_one_machine_and_its_hosts_on_others():
    """The issue's first split: the switch on a, hosts on b and c: every host link is cut,
    each at the link's 1 Gbit/s."""
    plan = machine_plan(scenario(
        {"nodes": ["a", "b", "c"], "place": {"sw": "a", "h1": "b", "h2": "b", "h3": "c"}},
        topology={"hosts": 4, "link_rate": "1gbit"},
    ))  # fmt: skip
    assert plan.machine_of == {"sw": "a", "h4": "a", "h1": "b", "h2": "b", "h3": "c"}
    assert [(c.link, c.lower_machine, c.upper_machine) for c in plan.cut] == [
        ("h1", "b", "a"), ("h2", "b", "a"), ("h3", "c", "a")]  # fmt: skip
    assert plan.cut_rate_bps == 3_000_000_000


def test_a_gpu_jobs_hosts_go_where_the_gpus_are():
    """A 2-leaf fabric whose second leaf's hosts train on GPUs: only machine g has any, so
    the matching puts leaf2 and its hosts there, whichever part METIS numbered first."""
    job = {"kind": "torch-ddp", "hosts": ["h3", "h4"], "gpus": 1, "model_size": "1MB",
           "compute_time": "10ms"}  # fmt: skip
    topo = {"kind": "leaf-spine", "leaves": 2, "spines": 1, "hosts_per_leaf": 2,
            "link_rate": "100mbit", "oversubscription": 1}  # fmt: skip
    plan = machine_plan(scenario({"nodes": ["c", {"name": "g", "gpus": 8}]}, topology=topo,
                                 workloads={"train": job}))  # fmt: skip
    assert [plan.machine_of[n] for n in ("leaf2", "h3", "h4")] == ["g", "g", "g"]
    assert [plan.machine_of[n] for n in ("leaf1", "h1", "h2")] == ["c", "c", "c"]


def test_many_machines_are_matched_part_by_part_keeping_the_pins():
    """8 leaves over 12 machines: 19,958,400 matchings of 8 parts, too many to try, so the
    parts are matched one at a time: still at once, every leaf with its hosts, the pin kept."""
    import time

    topo = {"kind": "leaf-spine", "leaves": 8, "spines": 1, "hosts_per_leaf": 2,
            "link_rate": "100mbit", "oversubscription": 2}  # fmt: skip
    names = [f"m{i}" for i in range(1, 13)]
    t0 = time.perf_counter()
    plan = machine_plan(scenario({"nodes": names, "place": {"leaf3": "m12"}}, topology=topo))
    assert time.perf_counter() - t0 < 20  # load and placement: ~1 s; a search of 2e7, minutes
    assert plan.machine_of["leaf3"] == plan.machine_of["h5"] == plan.machine_of["h6"] == "m12"
    for i in range(1, 9):
        assert plan.machine_of[f"h{2 * i}"] == plan.machine_of[f"leaf{i}"]


def test_an_mtu_left_at_its_default_is_fitted_under_the_underlay():
    s = scenario({"nodes": ["a", "b"], "underlay_mtu": 9000})
    assert s.topology.mtu == 1500  # fits under 9000 − 50: kept
    assert scenario({"nodes": ["a", "b"]}).topology.mtu == 1450


GPU_JOB = {"train": {"kind": "torch-ddp", "hosts": ["h1", "h2"], "gpus": 1,
                     "model_size": "1MB", "compute_time": "10ms"}}  # fmt: skip


@pytest.mark.parametrize(
    ("machines", "top", "message"),
    [
        (
            {"nodes": ["a", "b"], "place": {"h99": "a"}},
            {},
            "machines.place.h99: the topology has no node 'h99' (hosts h1 … h12; switches leaf1, "
            "leaf2, leaf3, spine1, spine2)",
        ),
        (
            {"nodes": ["a", "b"], "place": {"h1": "x"}},
            {},
            "machines.place.h1: 'x' is not one of machines.nodes (a, b)",
        ),
        ({"nodes": ["a", "a"]}, {}, "machines.nodes[1].name: 'a' is given twice"),
        (
            {"nodes": ["a", "b"], "vxlan_port": 4789},
            {},
            "machines.vxlan_port: 4789 is Docker's overlay VXLAN port",
        ),
        ({"nodes": []}, {}, "machines.nodes"),
        (
            {"nodes": ["a", "b"]},
            {"topology": {**LEAF_SPINE, "mtu": 1500}},
            "topology.mtu: 1500 B does not fit a VXLAN tunnel over the machines' network "
            "(machines.underlay_mtu 1500 B less 50): set topology.mtu: 1450",
        ),
        (
            {"nodes": ["a", {"name": "g", "gpus": 2}], "place": {"h1": "a"}},
            {"workloads": GPU_JOB},
            "machines.place.h1: host h1 runs a training job with gpus and is placed on a, which "
            "has none; pin it where the GPUs are, e.g. machines.place: {h1: g}",
        ),
        (
            {"nodes": ["a", "b"]},
            {"workloads": GPU_JOB},
            "machines.nodes: host h1 runs a training job with gpus and no machine has any",
        ),
        (
            {"nodes": ["a", "b"], "underlay_rate": "40mbit"},
            {},
            "machines.underlay_rate: shapes the emulated machines' network: it needs emulate: true",
        ),
    ],
)
def test_bad_machines_are_one_line_naming_the_field(machines, top, message):
    with pytest.raises(ScenarioError) as e:
        scenario(machines, **top)
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "testbed.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=60)  # fmt: skip


def test_validate_prints_the_placement_and_up_refuses_in_one_line_creating_nothing(tmp_path):
    data = {"name": "m", "topology": LEAF_SPINE, "machines": {"nodes": ["a", "b", "c"]},
            "workloads": {"websearch": {"utilization": "10%"}}}  # fmt: skip
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(data))
    r = _cli("validate", str(p), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert yaml.safe_load(r.stdout)["machines"]["nodes"][2] == {"name": "c", "gpus": 0}
    comments = [x for x in r.stdout.splitlines() if x.startswith("# ")]
    assert comments[0].startswith("# placement on 3 machines, METIS over 5 groups")
    assert "# cut: 4 links across machines, 400mbit each way in all" in r.stdout
    up = _cli("up", str(p), "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert up.returncode == 2 and "Traceback" not in up.stderr
    assert [x for x in up.stderr.splitlines() if x.strip()] == [
        f"error: {p}: machines: a run over several machines is not built yet (only its "
        "placement: `testbed validate` prints it, and machines.emulate: true runs it on "
        "emulated machines here; docs/swarm.md); remove machines: to run it on this one"
    ]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["m.yaml"]
    # emulated machines are namespaces: the docker runtime cannot build them
    docker = {**data, "runtime": "docker", "machines": {"nodes": ["a", "b"], "emulate": True}}
    p.write_text(yaml.safe_dump(docker))
    up = _cli("up", str(p), "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert up.returncode == 2 and "Traceback" not in up.stderr
    assert "machines.emulate" in up.stderr and "use runtime: netns" in up.stderr, up.stderr
    assert len([x for x in up.stderr.splitlines() if x.strip()]) == 1
    assert sorted(x.name for x in tmp_path.iterdir()) == ["m.yaml"]


def test_admission_asks_the_cut_to_fit_what_the_machines_network_carried():
    """The 3-machine leaf-spine above cuts 4 links of 100 Mbit/s: each pair of machines that
    shares cut links carries their rates each way. With a 1 Gbit/s network (probed at 940
    Mbit/s one way, 900 the other) every pair fits at time_scale 1; probed at 150 Mbit/s, a
    pair with two cut links (200 Mbit/s) needs 200 / (0.8 × 150) = 1.67, so time_scale 2."""
    plan = machine_plan(scenario({"nodes": ["a", "b", "c"]}))
    demand = partition.cut_demand(plan)
    assert sorted(demand.values()) in ([100_000_000, 100_000_000, 200_000_000],
                                       [200_000_000, 200_000_000])  # fmt: skip
    pairs = {(x, y) for x in "abc" for y in "abc" if x != y}
    fast = {p: 940e6 if p[0] < p[1] else 900e6 for p in pairs}
    assert partition.admit(plan, 1.0, fast) is None
    slow = dict.fromkeys(pairs, 150e6)
    why = partition.admit(plan, 1.0, slow)
    assert why is not None and "more than 80% of the 150 Mbit/s their network carried" in why
    # a machine cut to both others carries 300 or 400 Mbit/s through its one link: at most
    # 400 / 4 = 100 Mbit/s at time_scale 4, within 80 % of 150
    assert partition.admit(plan, 4.0, slow) is None
    assert partition.admit(plan, 1.0, {}) == (
        f"machines {min(demand)[0]} and {min(demand)[1]}: no probe of the network between them"
    )


def test_a_machine_cut_to_two_others_carries_both_through_its_own_link():
    """Machine a's links to b and c (100 Mbit/s each) each fit the 150 Mbit/s its pairs were
    probed at alone (100 ≤ 0.8 × 150), but a's own link carries both at once: 200 Mbit/s,
    which fits from time_scale ceil(200 / 120) = 2 on."""
    cut = (
        partition.Cut("h1", "h1", "b", "sw", "a", 100_000_000),
        partition.Cut("h2", "h2", "c", "sw", "a", 100_000_000),
    )
    plan = partition.MachinePlan(("a", "b", "c"), {"sw": "a", "h1": "b", "h2": "c"}, cut, "pins")
    probed = {(x, y): 150e6 for x in "abc" for y in "abc" if x != y}
    assert partition.admit(plan, 1.0, probed) == (
        "the links cut at machine a (to 2 others) carry 200 Mbit/s each way at time_scale 1, "
        "more than 80% of the 150 Mbit/s their network carried in the probe; time_scale: 2 "
        "fits (or place fewer links across machines: machines.place)"
    )
    assert partition.admit(plan, 2.0, probed) is None


def test_a_dilated_placement_is_judged_in_scenario_time_and_recorded():
    """A run places its dilated twin (links at 100 Mbit/s / 4 = 25 Mbit/s on this machine's
    clock); admission judges the cut in scenario time, so at time_scale 4 the same cut links
    are 100 Mbit/s again and a network that carried 150 Mbit/s takes 200 Mbit/s of them at
    200 / 4 = 50 Mbit/s. placement.json keeps the placement, the cut and the probe's figures."""
    wall = machine_plan(scenario({"nodes": ["a", "b", "c"]},
                                 topology={**LEAF_SPINE, "link_rate": "25mbit"}))  # fmt: skip
    back = partition.in_scenario_time(wall, 4)
    assert {c.rate_bps for c in wall.cut} == {25_000_000}
    assert {c.rate_bps for c in back.cut} == {100_000_000}
    assert [c.link for c in back.cut] == [c.link for c in wall.cut]
    pairs = {(x, y) for x in "abc" for y in "abc" if x != y}
    assert partition.admit(back, 4.0, dict.fromkeys(pairs, 150e6)) is None
    record = partition.placement_record(back, {("a", "b"): 1.5e8, ("b", "a"): 1.4e8})
    assert record["machines"] == ["a", "b", "c"]
    assert record["cut"][0]["rate_bps"] == 100_000_000
    assert record["probed_bps"] == [{"from": "a", "to": "b", "bps": 1.5e8},
                                    {"from": "b", "to": "a", "bps": 1.4e8}]  # fmt: skip


def test_the_probe_tunnel_takes_a_vni_no_cut_link_can():
    """A run's block of VNIs: the probe's is its number 0, the links' 1 … 1023."""
    run = "3fa9c1"
    links = {partition.vni(run, n) for n in range(1, partition.VNI_LINKS)}
    assert partition.probe_vni(run) not in links
    assert partition.probe_vni(run) == min(links) - 1 and partition.probe_vni(run) % 1024 == 0


def test_each_machine_builds_its_nodes_its_links_and_its_halves_of_the_cut():
    """The single ToR split of above (sw and h4 on a, h1 and h2 on b, h3 on c): a keeps h4's
    link whole and holds the switch ends of the three cut ones, b and c their host ends. Cut
    link n (its place among the links, 1-based) has the same VNI and device names on both
    sides: run 000000's block starts at 1024, so h1's link is VNI 1025, tb000000v1 /
    tb000000c1."""
    from testbed.scenario.topology import build_plan, parse_name

    s = scenario({"nodes": ["a", "b", "c"], "place": {"sw": "a", "h1": "b", "h2": "b", "h3": "c"}},
                 topology={"hosts": 4, "link_rate": "1gbit"})  # fmt: skip
    t = build_plan(s, "000000")
    got = partition.parts(t, machine_plan(s))
    assert (got["a"].nodes, got["a"].links) == (("sw", "h4"), ("h4",))
    assert [(h.link, h.end, h.node, h.peer, h.vni) for h in got["a"].halves] == [
        ("h1", "b", "sw", "b", 1025), ("h2", "b", "sw", "b", 1026), ("h3", "b", "sw", "c", 1027)]  # fmt: skip
    assert [(h.link, h.end, h.node, h.peer) for h in got["b"].halves] == [
        ("h1", "a", "h1", "a"), ("h2", "a", "h2", "a")]  # fmt: skip
    assert (got["c"].nodes, got["c"].links) == (("h3",), ())
    (h3,) = got["c"].halves
    assert (h3.vni, h3.tunnel, h3.stitch) == (1027, "tb000000v3", "tb000000c3")
    # `testbed down` knows them by name after a kill -9, as every root interface of a run
    assert parse_name("link", h3.tunnel) == ("tunnel", {"id": "000000", "n": "3"})
    assert parse_name("link", h3.stitch) == ("tunnel stitch", {"id": "000000", "n": "3"})
    assert partition.vni("003ffe", 1023) == 2**24 - 1  # the last block's last: 24 bits
    assert partition.vni("003fff", 1) == 1025  # the blocks wrap round, past block 0
    with pytest.raises(ValueError):
        partition.vni("000000", 1024)


def test_a_machines_network_is_its_part_only():
    """network.Cutting narrows Network to one machine's part before anything is built: b of
    the split above builds h1's and h2's namespaces and their halves, no link whole, no
    switch; a builds the switch, h4's whole link and the switch ends of all three halves."""
    from ipaddress import IPv4Address

    from testbed.core.state import RunState
    from testbed.network.runtime.network import Cutting, Network
    from testbed.scenario.topology import build_plan

    s = scenario({"nodes": ["a", "b", "c"], "place": {"sw": "a", "h1": "b", "h2": "b", "h3": "c"}},
                 topology={"hosts": 4, "link_rate": "1gbit"})  # fmt: skip
    t = build_plan(s, "000000")
    got = partition.parts(t, machine_plan(s))
    addresses = {m: IPv4Address(f"10.0.0.{i}") for i, m in enumerate("abc", start=1)}
    state = RunState("000000", "m.yaml", "/nonexistent")
    b = Network(t, state, [Cutting(got["b"], addresses, 14789)])
    assert b.namespaces == [t.host("h1").netns, t.host("h2").netns]
    assert (b.switches, b.links, [h.link for h, _ in b.halves]) == ([], [], ["h1", "h2"])
    a = Network(t, state, [Cutting(got["a"], addresses, 14789)])
    assert a.namespaces == [t.switch("sw").netns, t.host("h4").netns]
    assert [lk.name for lk in a.links] == ["h4"]
    assert [h.link for h, _ in a.halves] == ["h1", "h2", "h3"]
    whole = Network(t, state)
    assert whole.namespaces == t.namespaces and whole.halves == []
    # emulated machines: every part here at once, each cut link's two halves
    every = Network(t, state, [Cutting(got[m], addresses, 14789, f"m{m}") for m in "abc"])
    assert sorted(every.namespaces) == sorted(t.namespaces)
    assert [lk.name for lk in every.links] == ["h4"] and len(every.halves) == 6
