"""expect: checks parsed with the scenario, evaluated on hand-written summaries, written as
JUnit XML that a CI system can read."""

from __future__ import annotations

from xml.etree import ElementTree as ET

import pytest

from testbed.core.errors import ScenarioError
from testbed.scenario import expect
from testbed.scenario.resolve import load_scenario_data

BASE = {
    "name": "e",
    "topology": {"hosts": 2, "link_rate": "100mbit"},
    "tc_profile": "thesis-2band",
    "workloads": {"horovod": {"model_size": "1MB", "compute_time": "100ms"},
                  "websearch": {"arrival_rate": 1}},
}  # fmt: skip

SUMMARY = {
    "links": [
        {"node": "h1", "direction": "up", "rate_bps": 100_000_000,
         "classes": {"high": {"bytes": 10, "packets": 1, "drops": 0, "rate_bps": 5},
                     "low": {"bytes": 20, "packets": 2, "drops": 3, "rate_bps": 7}}},
        {"node": "h1", "direction": "down", "rate_bps": 100_000_000,
         "classes": {"high": {"bytes": 10, "packets": 1, "drops": 0, "rate_bps": 5},
                     "low": {"bytes": 20, "packets": 2, "drops": 0, "rate_bps": 7}}},
    ],
    "horovod": {"iterations": 40, "iteration_time_s": {"mean": 0.210, "p50": 0.2, "p99": 0.3}},
    "websearch": {"censored": 0, "fct_s": {"small": {"p99": 0.0185, "p50": 0.002},
                                           "all": {"p99": None}}},
}  # fmt: skip


def _scenario(checks):
    return load_scenario_data({**BASE, "expect": checks}, "s.yaml")


def _run(checks, predicted=None):
    s = _scenario(checks)
    return expect.evaluate(expect.parse(s.expect, s), SUMMARY, {"horovod": predicted})


def test_units_are_read_in_the_metrics_own_kind():
    s = _scenario(["websearch.fct_s.small.p99 < 20ms", "links.*.rate_bps >= 1gbit",
                   "horovod.iterations >= 30"])  # fmt: skip
    c = expect.parse(s.expect, s)
    assert [x.value for x in c] == [0.020, 1e9, 30.0]


def test_outcomes_against_hand_computed_limits():
    out = _run([
        "websearch.fct_s.small.p99 < 20ms",  # 18.5 ms < 20 ms
        "websearch.fct_s.small.p99 < 15ms",  # 18.5 ms is not
        "links.*.classes.high.drops == 0",  # both directions 0
        "links.*.classes.low.drops == 0",  # h1 up dropped 3
        "websearch.fct_s.small.p99 <= 10 * websearch.fct_s.small.p50",  # 18.5 ≤ 20 ms
        "horovod.iterations >= 40",
    ])  # fmt: skip
    assert [o.passed for o in out] == [True, False, True, False, True, True]
    assert out[1].limit == pytest.approx(0.015) and out[4].limit == pytest.approx(0.020)
    assert "h1/up" in out[3].line() and "=3" in out[3].line()  # the offending value first


def test_predicted_scales_the_models_iteration_time():
    # measured mean 0.210 s against a predicted 0.2 s: 5 % slower
    assert _run(["horovod.iteration_time_s.mean < 1.1 * predicted"], predicted=0.2)[0].passed
    o = _run(["horovod.iteration_time_s.mean < 1.02 * predicted"], predicted=0.2)[0]
    assert not o.passed and o.limit == pytest.approx(0.204)


def test_a_missing_value_fails_and_says_so():
    o = _run(["websearch.fct_s.all.p99 < 1s"])[0]
    assert not o.passed and "no value" in o.line()


@pytest.mark.parametrize(
    ("checks", "needle"),
    [
        (["websearch.fct_s.tiny.p99 < 20ms"], r"expect\[0\]: .*has no 'tiny'"),
        (["ok == 1", "x"], r"expect\[0\]"),  # the first bad one is named
        (["websearch.censored == 0", "nonsense"], r"expect\[1\]: 'nonsense' is not PATH OP VALUE"),
        (["links.*.classes.mid.drops == 0"], r"expect\[0\]: .*classes \['high', 'low'\]"),
        (["websearch.fct_s.small.p99 < 20mbit"], r"expect\[0\]: .*unknown time unit"),
        (["horovod.iterations > 5ms"], r"expect\[0\]: .*plain number"),
        (["linkcheck.link_rate_bps > 1mbit"], r"expect\[0\]: .*no 'linkcheck'"),
        (["websearch.censored < 2 * horovod.iteration_time_s.mean"], r"different kinds"),
        (
            ["websearch.fct_s.small.p99 < 2 * predicted"],
            r"websearch \(websearch\) has no model to predict it",
        ),
        ([5], r"expect\[0\]: must be a string, got 5"),
    ],
)
def test_malformed_checks_name_their_index(checks, needle):
    with pytest.raises(ScenarioError, match=needle):
        _scenario(checks)


def test_the_timeline_is_in_the_summary_only_with_timeline_true():
    """A check on Horovod's timeline is refused where the run records none (the summary of a
    run without `timeline: true` has no such section), and read where it records one."""
    check = ["horovod.timeline.operations_s < 1s"]
    with pytest.raises(ScenarioError, match=r"expect\[0\]: .*has no 'timeline'"):
        _scenario(check)
    hv = {**BASE["workloads"]["horovod"], "timeline": True}
    data = {**BASE, "workloads": {**BASE["workloads"], "horovod": hv}, "expect": check}
    assert expect.template_for(load_scenario_data(data, "s.yaml"))["horovod"]["timeline"]


def test_predicted_needs_a_synthetic_job_or_a_real_one_with_its_compute():
    data = {**BASE, "workloads": {"horovod": {"mode": "real"}},
            "expect": ["horovod.iteration_time_s.mean < 2 * predicted"]}  # fmt: skip
    with pytest.raises(
        ScenarioError,
        match=r"expect\[0\]: 'predicted': horovod: a real job is predicted from the compute it "
        r"states \(give it compute_time or compute_to_network_ratio\)",
    ):
        load_scenario_data(data, "s.yaml")
    stated = {"horovod": {"mode": "real", "compute_time": "300ms"}}
    assert load_scenario_data({**data, "workloads": stated}, "s.yaml").expect


def test_junit_holds_one_case_per_check_with_the_measured_value():
    out = _run(["websearch.fct_s.small.p99 < 20ms", "links.*.classes.low.drops == 0"])
    root = ET.fromstring(expect.junit(out, "e", "/runs/x"))
    suite = root.find("testsuite")
    assert suite is not None and suite.get("tests") == "2" and suite.get("failures") == "1"
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [
        "websearch.fct_s.small.p99 < 20ms", "links.*.classes.low.drops == 0"
    ]  # fmt: skip
    assert cases[0].find("failure") is None and "18.5ms" in (cases[0].findtext("system-out") or "")
    failure = cases[1].find("failure")
    assert failure is not None and "h1/up.classes.low.drops=3" in failure.get("message", "")


def test_the_ci_example_loads_with_its_checks():
    from pathlib import Path

    from testbed.scenario.resolve import load_scenario

    s = load_scenario(Path(__file__).resolve().parents[2] / "examples/ci/smoke-expect.yaml")
    assert len(expect.parse(s.expect, s)) == 4
