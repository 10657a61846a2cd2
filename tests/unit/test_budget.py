"""The link budget's arithmetic (budget.py), against hand-computed values; the measurement
itself is tests/integration/test_budget.py."""

import pytest

from testbed import budget
from testbed.budget import Budget
from testbed.resolve import load_scenario_data


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
