"""The link budget (budget.py): measured on this machine, then an incast that asks more of it
than it carries warns in real time, fails `expect: link_budget.load <= 1`, and does neither
dilated to the time scale the warning names; `time_scale: auto` picks that scale."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from testbed import budget
from testbed.budget_probe import machine_budget

from .helpers import run_cli

HOSTS = 5


@pytest.fixture(scope="module")
def machine():
    """This machine's exact-mode budget (measured now unless kept since this boot): whatever
    it is, the scenarios below are sized from it."""
    b = machine_budget("exact")
    assert 0 < b.one_flow_bps <= b.probe_rate_bps * 1.02
    assert 0 < b.all_flows_bps <= 8 * b.probe_rate_bps * 1.02
    return b


def incast(tmp_path, machine, **over) -> tuple[dict, object]:
    """5 hosts at a link rate that makes the larger of the two loads 1.9: all of them at line
    rate against the eight-flow budget, or one link against one flow's."""
    rate = 1.9 * min(machine.all_flows_bps / HOSTS, machine.one_flow_bps)
    rate_mbit = math.floor(rate / 1e6)
    data = {
        "name": "budget-incast",
        "duration": "2s",
        "measure": {"warmup": "0.5s", "cooldown": "0s"},
        "metrics": {"prometheus": "off"},
        "topology": {"hosts": HOSTS, "link_rate": f"{rate_mbit}mbit"},
        "tc_profile": "fifo",
        "workloads": {"incast": {"kind": "incast", "query_rate": 20, "response_size": "20KB"}},
        "expect": ["link_budget.load <= 1"],
        **over,
    }
    f = tmp_path / f"incast-{len(list(tmp_path.iterdir()))}.yaml"
    f.write_text(yaml.safe_dump(data))
    out = tmp_path / f.stem
    r = run_cli("up", str(f), "--out", str(out), "--no-plots", timeout=300)
    return json.loads((out / "summary.json").read_text()), r


def test_an_incast_over_the_budget_warns_in_real_time_and_not_dilated(tmp_path, machine):
    s, r = incast(tmp_path, machine)
    fit = s["link_budget"]
    load = max(fit["demand_all_flows_bps"] / fit["all_flows_bps"],
               fit["demand_one_flow_bps"] / fit["one_flow_bps"])  # fmt: skip
    assert 1.85 < load <= 1.9 and fit["load"] == pytest.approx(load, abs=1e-3), fit
    assert fit["hosts"] == HOSTS and fit["fitting_time_scale"] == 2, fit
    assert r.returncode == 3, r.stderr[-2000:]  # the expect: check failed, the run itself ok
    assert s["status"] == "ok"
    assert any(w.startswith("link budget:") and "time_scale: 2 fits" in w for w in s["warnings"])
    assert "link budget:" in r.stderr

    s2, r2 = incast(tmp_path, machine, time_scale=fit["fitting_time_scale"])
    assert r2.returncode == 0, r2.stderr[-2000:]
    assert s2["link_budget"]["load"] <= 1 and not any(
        w.startswith("link budget:") for w in s2["warnings"]
    ), s2["warnings"]
    # the same budget, in the dilated run's scenario units: K times what the machine carries
    assert s2["link_budget"]["all_flows_bps"] == pytest.approx(2 * fit["all_flows_bps"], rel=1e-6)

    s3, r3 = incast(tmp_path, machine, time_scale="auto")
    assert r3.returncode == 0, r3.stderr[-2000:]
    assert s3["time_scale"] == 2 and s3["link_budget"]["load"] <= 1


def test_the_budget_is_kept_until_the_next_boot(machine):
    assert budget.cached("exact") == machine
