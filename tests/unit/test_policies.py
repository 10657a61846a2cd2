"""A training job's `policy:` (workloads/training/policies.py): what the schema accepts and
refuses in one line, and the adaptive runner's decisions (adaptive.py) on records written as a
worker writes them, at hand-picked times."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from testbed.errors import ScenarioError
from testbed.resolve import load_scenario_data
from testbed.workloads.training.adaptive import Adaptive, Mark
from testbed.workloads.training.horovod_worker import FIELDS
from testbed.workloads.training.policies import AdaptivePolicy, StaticPolicy


def _scenario(**job):
    data = {
        "name": "p",
        "topology": {"hosts": 3, "link_rate": "100mbit"},
        "tc_profile": "thesis-2band",
        "workloads": {"horovod": {"model_size": "10MB", "compute_time": "300ms",
                                  "tc_class": "low", **job}},
    }  # fmt: skip
    return load_scenario_data(data, "test")


def test_static_is_the_default_and_adaptive_takes_its_defaults_by_name():
    assert isinstance(_scenario().workloads["horovod"].policy, StaticPolicy)
    p = _scenario(policy="adaptive").workloads["horovod"].policy
    assert isinstance(p, AdaptivePolicy) and (p.budget, p.to) == (2.0, "high")
    p = _scenario(policy={"kind": "adaptive", "budget": "5%"}).workloads["horovod"].policy
    assert p.budget == 5.0


@pytest.mark.parametrize(
    ("policy", "job", "message"),
    [
        ("sometimes", {}, "workloads.horovod.policy: must be one of static, adaptive"),
        ({"kind": "x"}, {}, "workloads.horovod.policy: kind must be one of static, adaptive"),
        ({"kind": "adaptive", "budget": "-1%"}, {}, "workloads.horovod.policy.adaptive.budget"),
        ({"kind": "adaptive", "to": "gold"}, {}, "policy.to: 'gold' is not a class"),
        ({"kind": "adaptive", "to": "low"}, {}, "'low' is not above the job's own class"),
        ("adaptive", {"mode": "real"}, "policy adaptive needs mode: synthetic"),
        ({"kind": "static", "budget": "1%"}, {}, "budget"),
    ],
)
def test_a_policy_the_job_cannot_carry_is_one_line_naming_the_field(policy, job, message):
    with pytest.raises(ScenarioError) as e:
        _scenario(policy=policy, **job)
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def _row(w: csv.writer, i: int, start: float, end: float) -> None:
    w.writerow(["h1", 0, i, f"{start:.6f}", f"{end:.6f}", f"{end - start:.6f}", "1.0", "0"])


def test_adaptive_escalates_a_late_iteration_and_returns_when_it_ends(tmp_path: Path):
    """compute 1 s, predicted 2 s, budget 10 %: an iteration escalates once it has run
    1.2 s; the next one starts in the job's own class."""
    records = tmp_path / "iterations-h1.csv"
    f = open(records, "w", newline="")  # noqa: SIM115
    w = csv.writer(f)
    w.writerow(FIELDS)
    f.flush()
    marks: list[int] = []
    a = Adaptive(AdaptivePolicy(budget=10), records=records, compute_s=1.0, predicted_s=2.0,
                 own=Mark("low", 8), to=Mark("high", 46), switch=marks.append,
                 out=tmp_path / "policy.csv")  # fmt: skip
    assert a.after_s == pytest.approx(1.2)
    a.tick(9.0)  # no iteration has ended: its start is not known yet
    _row(w, 0, 8.0, 10.0)
    f.write("h1,0,1,10.0")  # a row being written: not read until complete
    f.flush()
    a.tick(10.1)
    assert marks == [] and a.iteration == 1 and a.started == 10.0
    a.tick(11.1)
    assert marks == []
    a.tick(11.3)  # 1.3 s into iteration 1
    assert marks == [46] and a.escalated
    a.tick(11.8)
    assert marks == [46]
    f.write(",12.0,2.0,1.0,1.0\n")
    f.flush()
    a.tick(12.2)  # iteration 1 ended at 12.0: iteration 2 starts low
    assert marks == [46, 8] and not a.escalated and a.started == 12.0
    a.tick(13.0)
    assert marks == [46, 8]
    f.close()
    a.close()
    s = a.section(10.0, 14.0)
    assert s["escalations"] == 1 and s["escalated_s"] == pytest.approx(0.9)
    assert s["escalated_share"] == pytest.approx(0.9 / 4)
    assert a.section(11.5, 12.0)["escalated_s"] == pytest.approx(0.5)  # escalated at its start
    log = list(csv.DictReader(open(tmp_path / "policy.csv")))  # noqa: SIM115
    assert [(r["class"], r["dscp"], r["iteration"]) for r in log] == [
        ("high", "46", "1"),
        ("low", "8", "2"),
    ]


def test_adaptive_warns_where_iterations_are_shorter_than_a_few_polls(tmp_path: Path):
    def make(predicted: float) -> Adaptive:
        return Adaptive(AdaptivePolicy(), records=tmp_path / "x.csv", compute_s=0.1,
                        predicted_s=predicted, own=Mark("low", 8), to=Mark("high", 46),
                        switch=lambda d: None, out=tmp_path / "p.csv")  # fmt: skip

    assert "time_scale" in (make(0.3).warning() or "")
    assert make(30.0).warning() is None
