"""The link budget's arithmetic (budget.py), against hand-computed values; the measurement
itself is tests/integration/test_budget.py."""

import pytest

from testbed.scenario import budget
from testbed.scenario.budget import Budget
from testbed.scenario.resolve import load_scenario_data
from testbed.workloads import kinds


def scenario(**over):
    data = {
        "name": "b",
        "topology": {"hosts": 9, "link_rate": "2gbit"},
        "workloads": {"incast": {"kind": "incast", "query_rate": 10}},
        **over,
    }
    return load_scenario_data(data, "b.yaml")


MACHINE = Budget("exact", one_flow_bps=3.7e9, all_flows_bps=5.0e9)


def test_demand_is_every_host_a_workload_uses_at_line_rate_on_this_machines_clock():
    d = budget.demand(scenario())
    assert (d.one_flow_bps, d.all_flows_bps, d.hosts) == (2e9, 18e9, 9)
    d = budget.demand(scenario(time_scale=10))
    assert (d.one_flow_bps, d.all_flows_bps) == (2e8, 1.8e9)
    placed = scenario(
        workloads={"a": {"kind": "incast", "query_rate": 10, "hosts": ["h1", "h2", "h3"]}}
    )
    assert budget.demand(placed).hosts == 3
    assert budget.demand(scenario(workloads={})).hosts == 0  # nothing runs: nothing sent
    assert budget.demand(scenario(workloads={}), held=True).hosts == 9  # the user may use any


def test_a_scenario_over_the_budget_names_the_time_scale_that_fits():
    """18 Gbit/s of 5 → load 3.6 → K = 4; in scenario units the machine carries 4 × its
    budget at K = 4, and the load is the same ratio whatever K is."""
    fit = budget.assess(scenario(), MACHINE)
    assert fit["load"] == 3.6 and fit["fitting_time_scale"] == 4
    assert fit["one_flow_bps"] == 3_700_000_000 and fit["demand_all_flows_bps"] == 18_000_000_000
    msg = budget.warning(scenario(), fit)
    assert msg is not None and "time_scale: 4 fits" in msg and "9 hosts at line rate" in msg
    assert "link_mode: exact-gso (frames, faster) or fast" in msg  # from exact: both faster
    dilated = budget.assess(scenario(time_scale=4), MACHINE)
    assert dilated["load"] == 0.9 and dilated["fitting_time_scale"] == 4  # ceil(3.6)
    roomy = budget.assess(scenario(time_scale=10), MACHINE)  # load 0.36: fits at 4 as well
    assert roomy["load"] == 0.36 and roomy["fitting_time_scale"] == 4
    assert dilated["one_flow_bps"] == 4 * 3_700_000_000  # scenario units
    assert budget.warning(scenario(time_scale=4), dilated) is None


def test_one_fast_link_alone_can_be_what_does_not_fit():
    s = scenario(topology={"hosts": 2, "link_rate": "10gbit"}, workloads={})
    fit = budget.assess(s, MACHINE, held=True)  # one flow 10/3.7 = 2.70 > all 20/5 = 4.0? no: 4.0
    assert fit["load"] == 4.0 and fit["fitting_time_scale"] == 4
    s1 = scenario(
        topology={"hosts": 2, "link_rate": "10gbit"},
        workloads={"l": {"kind": "linkcheck"}},
    )
    roomy = Budget("exact", one_flow_bps=3.7e9, all_flows_bps=50e9)
    fit = budget.assess(s1, roomy)
    assert fit["load"] == pytest.approx(2.703, abs=1e-3) and fit["fitting_time_scale"] == 3
    assert "one host link at line rate" in budget.warning(s1, fit)


@pytest.mark.parametrize(
    ("k", "load", "fits"),
    [(1, 0.5, 1), (1, 1.0, 1), (1, 1.01, 2), (100, 0.3, 30), (100, 1.5, 150), (10, 3.6, 36)],
)
def test_the_fitting_time_scale_is_k_times_the_load_rounded_up(k, load, fits):
    assert budget.fitting_time_scale(k, load) == fits


def test_time_scale_auto_is_the_fitting_one():
    s = scenario(time_scale="auto")
    assert budget.with_fitting_scale(s, MACHINE).time_scale == 4
    roomy = Budget("exact", 100e9, 100e9)
    assert budget.with_fitting_scale(s, roomy).time_scale == 1


def test_the_budget_is_kept_per_mode_until_the_next_boot(tmp_path, monkeypatch):
    monkeypatch.setattr(budget, "BUDGET_CACHE", tmp_path / ".link-budget")
    assert budget.cached("exact") is None
    budget.keep(MACHINE)
    budget.keep(Budget("fast", 12e9, 20e9))
    assert budget.cached("exact") == MACHINE and budget.cached("fast").one_flow_bps == 12e9
    monkeypatch.setattr(budget, "_identity", lambda: "another boot")
    assert budget.cached("exact") is None


def test_only_a_scenario_that_may_not_fit_or_asks_pays_for_the_measurement():
    small = scenario(topology={"hosts": 4, "link_rate": "100mbit"}, workloads={})
    assert not budget.needs_measuring(small)  # 0.4 Gbit/s in all: under SURE_BPS
    assert budget.needs_measuring(scenario())  # 18 Gbit/s
    assert budget.needs_measuring(
        scenario(topology={"hosts": 4, "link_rate": "100mbit"}, workloads={}, time_scale="auto")
    )
    assert budget.needs_measuring(
        scenario(
            topology={"hosts": 4, "link_rate": "100mbit"},
            workloads={},
            expect=["link_budget.load <= 1"],
        )
    )


# The 2-core development VM's probes (2026-12-07, three runs each): web search 33.1–34.4 ns of
# CPU a wire byte, torch-ddp 23.3–23.9
MEASURED = Budget("exact", 5.13e9, 4.53e9, 8, 100_000_000_000, 2,
                  {"websearch": 33.5e-9, "torch-ddp": 23.7e-9})  # fmt: skip


def thesis_r4(k):
    from pathlib import Path

    from testbed.scenario.resolve import load_scenario, with_overrides

    s = load_scenario(Path(__file__).parents[2] / "examples" / "thesis-exact.yaml")
    cell = {"workloads.horovod.compute_time": "560ms", "workloads.websearch.utilization": "12.5%"}
    return with_overrides(s, {**cell, "time_scale": k})


def test_the_workloads_cpu_is_their_wire_bytes_times_their_kinds_cost():
    """Thesis R = 4 / 12.5 %, by hand. TCP's framing with 1380-byte segments: 2958 wire bytes
    per 2760 of payload (66 of headers a frame, a 66-byte ACK per two). Web search: 12.5 % of
    8 links of 10 Gbit/s = 10 Gbit/s of payload → 1.3397 GB/s on the wire × 33.5 ns = 44.88
    CPU s per scenario s. The job: 8 workers × 171,888,717 B per iteration, at most one per
    560 ms of compute → 19.644 Gbit/s → 2.6317 GB/s × 23.7 ns = 62.37. At ×50: (107.25 / 50 +
    0.08 of the run's own) / 2 cores = 111 % busy; 0.7 fits at ⌈107.25 / (1.4 − 0.08)⌉ = 82,
    where ×50 broke (its iterations 47 % long, flows started 70 ms late) and ×100 held."""
    fit = budget.assess(thesis_r4(50), MEASURED)
    assert fit["cpu_by_workload"] == {"horovod": 62.37, "websearch": 44.88}
    assert fit["cpu_s_per_s"] == 107.25 and fit["cores"] == 2
    assert fit["cpu_busy"] == pytest.approx(1.1125, abs=1e-3)
    assert (
        fit["cpu_load"] == pytest.approx(1.1125 / 0.7, abs=1e-3) and fit["load"] == fit["cpu_load"]
    )
    assert fit["link_load"] == pytest.approx(0.353, abs=1e-3)  # the links alone said 18 fits
    assert fit["fitting_time_scale"] == 82
    msg = budget.warning(thesis_r4(50), fit)
    assert msg is not None and "time_scale: 82 fits" in msg and "111% busy" in msg, msg
    assert "horovod 62.37, websearch 44.88" in msg
    held = budget.assess(thesis_r4(100), MEASURED)
    assert held["cpu_busy"] == pytest.approx((1.0725 + 0.08) / 2, abs=1e-3)
    assert held["fitting_time_scale"] == 82 and budget.warning(thesis_r4(100), held) is None
    assert budget.with_fitting_scale(thesis_r4("auto"), MEASURED).time_scale == 82


def test_a_kind_not_measured_or_without_a_probe_costs_the_cpu_nothing_here():
    """linkcheck's bulk flows are the link probe's own: the link side counts them."""
    fit = budget.assess(thesis_r4(50), MACHINE)  # no kind measured
    assert fit["cpu_by_workload"] == {} and fit["cpu_busy"] == pytest.approx(0.08 / 2, abs=1e-3)
    s = scenario(workloads={"l": {"kind": "linkcheck"}})
    assert budget.probed_kinds(s) == [] and budget.cpu_demand(s, MEASURED) == {}
    assert budget.probed_kinds(thesis_r4(100)) == ["torch-ddp", "websearch"]


def test_a_small_scenario_with_a_probed_kind_is_measured():
    web = {"w": {"kind": "websearch", "utilization": "10%"}}
    assert budget.needs_measuring(  # 4 × 100 Mbit/s: under SURE_BPS, over SURE_CPU_BPS
        scenario(topology={"hosts": 4, "link_rate": "100mbit"}, workloads=web)
    )
    assert not budget.needs_measuring(
        scenario(topology={"hosts": 4, "link_rate": "10mbit"}, workloads=web)
    )


def real_job(hosts, compute="177ms", **over):
    return scenario(
        topology={"hosts": 4, "link_rate": "100mbit"},
        workloads={
            "job": {
                "kind": "torch-ddp",
                "mode": "real",
                "real_model": "resnet18-narrow",
                "hosts": hosts,
                "compute_time": compute,
            },
            "web": {"kind": "websearch", "utilization": "20%"},
        },
        **over,
    )


def test_a_real_jobs_compute_is_cores_on_this_machines_clock_not_divided_by_the_time_scale():
    """examples/real-policies.yaml by hand: resnet18-narrow's 2,805,864 B on 3 workers, a ring
    of 2 × 2/3 × that = 3,741,152 B a worker an iteration, 299.3 ms at 100 Mbit/s. At its
    fastest (backward overlapping the ring) an iteration is max(177, K × 299.3) ms on this
    machine's clock, the compute 177 ms of it: 3 × 177 / 299.3 = 1.774 cores at K = 1, 1.774 / K
    beyond. The bytes cost as before, over K (TCP's framing at MTU 1500: 0.936 payload a wire
    byte): the job's 300 Mbit/s of payload 40.06 MB/s on the wire × 23.7 ns = 0.950 CPU s a
    second; web search 20 % of 4 links, 80 Mbit/s → 10.68 MB/s × 33.5 ns = 0.358. Busy at K = 1:
    (1.308 + 1.774 + 0.08) / 2 = 158.1 %. It fits where (1.308 + 1.774) / K ≤ 1.4 − 0.08: K ≥
    2.33, so 3 (busy (1.027 + 0.08) / 2 = 55.4 %; at 2, 81.0 %)."""
    s = real_job(["h1", "h2", "h3"])
    fit = budget.assess(s, MEASURED)
    assert fit["cpu_fixed_cores"] == pytest.approx(1.774, abs=0.005)
    assert fit["cpu_by_workload"] == {"job": pytest.approx(0.95, abs=0.005),
                                      "web": pytest.approx(0.358, abs=0.005)}  # fmt: skip
    assert fit["cpu_busy"] == pytest.approx(1.581, abs=0.002)
    assert fit["fitting_time_scale"] == 3
    three = budget.assess(real_job(["h1", "h2", "h3"], time_scale=3), MEASURED)
    assert three["cpu_fixed_cores"] == pytest.approx(1.774 / 3, abs=0.005)
    assert three["cpu_busy"] == pytest.approx(0.554, abs=0.002) and three["load"] <= 1
    two = budget.assess(real_job(["h1", "h2", "h3"], time_scale=2), MEASURED)
    assert two["cpu_busy"] == pytest.approx(0.810, abs=0.002) and two["load"] > 1
    msg = budget.warning(s, fit)
    assert msg is not None and "not dilated: job 1.77" in msg and "time_scale: 3 fits" in msg
    assert "does not dilate" in msg, msg
    synthetic = real_job(["h1", "h2", "h3"])
    synthetic.workloads["job"].mode = "synthetic"
    assert budget.fixed_cores(synthetic, 1) == {}  # a synthetic job sleeps its compute
    assert budget.fixed_cores(s, 3) == {"job": pytest.approx(1.774 / 3, abs=0.005)}


def test_a_real_job_computing_most_of_its_iteration_fits_only_where_its_ring_outlasts_it():
    """4 workers computing 2 s against a ring of 2 × 3/4 × 2,805,864 B (336.7 ms at 100
    Mbit/s): at K ≤ 5 the compute is the whole iteration (4 cores), from K = 6 on 4 × 2 /
    (K × 0.3367) = 23.76 / K. Its bytes: 4 × 33.67 Mbit / 2 s = 67.34 Mbit/s → 8.99 MB/s on the
    wire × 23.7 ns = 0.213, web search 0.358: (0.571 + 23.76) / K ≤ 1.32 from K = 18.4: 19
    (busy 68.0 %; at 18, 71.6 %)."""
    s = real_job(["h1", "h2", "h3", "h4"], compute="2s")
    fit = budget.assess(s, MEASURED)
    assert fit["cpu_fixed_cores"] == 4.0 and fit["fitting_time_scale"] == 19
    at = {k: budget.assess(real_job(["h1", "h2", "h3", "h4"], "2s", time_scale=k), MEASURED)
          for k in (18, 19)}  # fmt: skip
    assert at[19]["cpu_busy"] == pytest.approx(0.680, abs=0.002) and at[19]["load"] <= 1
    assert at[18]["cpu_busy"] == pytest.approx(0.716, abs=0.002) and at[18]["load"] > 1
    auto = budget.with_fitting_scale(real_job(["h1", "h2", "h3", "h4"], "2s", time_scale="auto"),
                                     MEASURED)  # fmt: skip
    assert auto.time_scale == 19


def test_nothing_fits_when_the_runs_own_polling_fills_the_machine():
    assert budget.cpu_time_scale(1.0, 1, lambda k: 0.0) is not None  # 0.7 − 0.08 of room
    assert budget.cpu_time_scale(1.0, 1, lambda k: 0.7) is None  # none at any K
    assert budget.cpu_time_scale(2.0, 2) == 2  # ⌈2 / 1.32⌉ without undilated work


def test_a_job_is_priced_by_its_backends_probe():
    """A `horovod` instance on backend torch-ddp runs torch-ddp's processes: its bytes cost
    torch-ddp's 23.7 ns, not Horovod's (the real-policies example's runs were priced at
    Horovod's 64 ns here, about 2.6 CPU s a second for the job where 0.95 is torch-ddp's)."""
    s = scenario(
        topology={"hosts": 4, "link_rate": "100mbit"},
        workloads={"horovod": {"backend": "torch-ddp", "mode": "real", "hosts": ["h1", "h2", "h3"],
                               "real_model": "resnet18-narrow", "compute_time": "177ms"}},
    )  # fmt: skip
    assert budget.probed_kinds(s) == ["torch-ddp"]
    assert budget.cpu_demand(s, MEASURED) == {"horovod": pytest.approx(0.95, abs=0.005)}


PROBE_WINDOW_S = 6 - 1  # budget_probe.probe_data: 6 s, 1 s of warm-up


@pytest.mark.parametrize("kind", sorted(k for k in kinds.names() if kinds.get(k).probe))
def test_each_kinds_probe_asks_a_load_its_links_carry_and_its_window_sees(kind):
    """A probe that asks nothing of its links, or more than they carry, prices the wrong thing:
    its load, by hand from its own fields, is between 1 % and 100 % of the 8 × 100 Mbit/s."""
    from testbed.run import budget_probe

    s = load_scenario_data(budget_probe.probe_data(kind, "exact"), "probe")
    asked = budget_probe.asked_bps(s)
    assert 0.01 * 8 * 100e6 < asked < 8 * 100e6, asked


def test_the_ensemble_probe_finishes_many_blocks_in_its_window():
    """The ensemble's probe once kept the default 32-image block at 2 images/s: 16 s a block,
    nothing carried in a 5 s window but the connections' setup, ~180 µs a byte. Its blocks
    now take 1 / 2 images/s = 0.5 s: ten in the window, 2 × 150,528 B × 7 peers a second
    from each host (16.9 Mbit/s)."""
    from testbed.run import budget_probe

    s = load_scenario_data(budget_probe.probe_data("ensemble", "exact"), "probe")
    w = s.workloads["ensemble"]
    assert w.batch / w.preprocess_rate * 10 <= PROBE_WINDOW_S
    assert budget_probe.asked_bps(s) == pytest.approx(8 * 2 * 150_528 * 7 * 8, rel=1e-6)
