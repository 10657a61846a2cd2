"""A training job's `policy:` (workloads/training/policies.py): what the schema accepts and
refuses in one line, and the adaptive runner's decisions (adaptive.py) on records written as a
worker writes them, at hand-picked times."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from testbed.core.errors import ScenarioError
from testbed.scenario.resolve import load_scenario_data
from testbed.workloads.training.policies import AdaptivePolicy, LayersPolicy, StaticPolicy
from testbed.workloads.training.policies.adaptive import Adaptive, Mark
from testbed.workloads.training.workers.ddp_schedule import Plan, choose, class_bytes, plan_for
from testbed.workloads.training.workers.horovod_worker import FIELDS


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
        ("sometimes", {}, "workloads.horovod.policy: must be one of static, adaptive, layers"),
        ({"kind": "x"}, {}, "policy: kind must be one of static, adaptive, layers"),
        ({"kind": "adaptive", "budget": "-1%"}, {}, "workloads.horovod.policy.adaptive.budget"),
        ({"kind": "adaptive", "to": "gold"}, {}, "policy.to: 'gold' is not a class"),
        ({"kind": "adaptive", "to": "low"}, {}, "'low' is not above the job's own class"),
        (
            {"kind": "interleave", "late": "hold"},
            {"mode": "real", "model_size": None},
            "workloads.horovod.policy.late: late: hold needs mode: synthetic",
        ),
        (
            {"kind": "interleave"},
            {"mode": "real", "model_size": None, "compute_time": None},
            "workloads.horovod.compute_time: policy interleave in mode real needs compute_time",
        ),
        (
            "adaptive",
            {"mode": "real", "model_size": None, "compute_time": None},
            "workloads.horovod.compute_time: policy adaptive in mode real needs compute_time",
        ),
        (
            "by-ratio",
            {"mode": "real", "model_size": None, "compute_time": None},
            "workloads.horovod.compute_time: policy by-ratio in mode real needs compute_time",
        ),
        ("static", {"mode": "real"}, "workloads.horovod.model_size: mode real trains a real"),
        ("static", {"real_model": "small-cnn"}, "real_model needs mode: real"),
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


LAYERS = {"kind": "torch-ddp", "model": "thesis-ns3", "fusion": "static", "queue": "priority",
          "barrier": False}  # fmt: skip


@pytest.mark.parametrize(
    ("policy", "job", "scenario", "message"),
    [
        (
            {"kind": "layers", "first": 3},
            {},
            {},
            "workloads.horovod.policy: policy layers needs kind: torch-ddp",
        ),
        ({"kind": "layers"}, LAYERS, {}, "give first (a number of layers) or share"),
        ({"kind": "layers", "first": 3, "share": "10%"}, LAYERS, {}, "give first"),
        ({"kind": "layers", "first": 0}, LAYERS, {}, "policy.layers.first"),
        ({"kind": "layers", "share": "0%"}, LAYERS, {}, "policy.layers.share"),
        (
            {"kind": "layers", "first": 51},
            LAYERS,
            {},
            "workloads.horovod.policy.first: 51 is beyond the model's 50 layers",
        ),
        (
            {"kind": "layers", "first": 3, "to": "low"},
            LAYERS,
            {},
            "'low' is not above the job's own class",
        ),
        (
            {"kind": "tail"},
            {
                **LAYERS,
                "mode": "real",
                "fusion": None,
                "queue": "fifo",
                "barrier": True,
                "model": "resnet50",
                "model_size": None,
                "compute_time": None,
            },
            {},
            "workloads.horovod.compute_time: policy tail in mode real needs compute_time",
        ),
        ({"kind": "layers", "first": 3}, {**LAYERS, "gpus": 1}, {}, "policy layers runs on Gloo"),
        (
            {"kind": "layers", "first": 3},
            LAYERS,
            {
                "topology": {
                    "kind": "leaf-spine",
                    "leaves": 2,
                    "spines": 1,
                    "hosts_per_leaf": 2,
                    "link_rate": "100mbit",
                }
            },
            "workloads.horovod.policy: policy layers needs topology kind single-tor",
        ),
        (
            {"kind": "layers", "first": 3},
            LAYERS,
            {"topology": {"hosts": 3, "link_rate": "100mbit", "prefix": "10.0.0.0/29"}},
            "topology.prefix: policy layers gives every host one more address per class: 11",
        ),
    ],
)
def test_a_class_per_transfer_the_job_cannot_carry_is_one_line(policy, job, scenario, message):
    data = {
        "name": "p",
        "topology": {"hosts": 3, "link_rate": "100mbit"},
        "tc_profile": "thesis-2band",
        "workloads": {"horovod": {"model_size": "10MB", "compute_time": "300ms",
                                  "tc_class": "low", **job, "policy": policy}},
        **scenario,
    }  # fmt: skip
    with pytest.raises(ScenarioError) as e:
        load_scenario_data(data, "test")
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_layers_is_accepted_on_torch_ddp_and_k_follows_first_or_share():
    data = {
        "name": "p",
        "topology": {"hosts": 3, "link_rate": "100mbit"},
        "tc_profile": "thesis-2band",
        "workloads": {"horovod": {"model_size": "10MB", "compute_time": "300ms",
                                  "tc_class": "low", **LAYERS,
                                  "policy": {"kind": "layers", "share": "25%"}}},
    }  # fmt: skip
    p = load_scenario_data(data, "test").workloads["horovod"].policy
    assert isinstance(p, LayersPolicy) and p.to == "high"
    # the thesis' model in units: 25 layers of 1, 13 of 4, 12 of 12 (221 units)
    sizes = [1] * 25 + [4] * 13 + [12] * 12
    assert LayersPolicy(first=7).first_layers(sizes) == 7
    # 25 % of 221 = 55.25 units: 25 + 4 × 8 = 57 ≥ 55.25 > 25 + 4 × 7 = 53
    assert p.first_layers(sizes) == 33
    assert LayersPolicy(share=100).first_layers(sizes) == 50
    assert LayersPolicy(share=0.1).first_layers(sizes) == 1


def _cfg(fusion: str, threshold: int, first: int, queue: str = "priority") -> dict:
    sizes = [1] * 25 + [4] * 13 + [12] * 12  # params; 4 B each
    return {"layers": [[f"l{j}", p, 0.0, 0.0] for j, p in enumerate(sizes)], "fusion": fusion,
            "fusion_threshold": threshold, "queue": queue, "bucket_cap": 1 << 20,
            "transfer_classes": {"layers": list(range(first))}}  # fmt: skip


def test_a_buffer_holding_any_of_the_first_layers_goes_to_the_class():
    """Each layer its own buffer: exactly the first k are the class's, 25 of 221 units."""
    plan = plan_for(_cfg("static", 1, 25))
    assert sum(plan.classes) == 25 and class_bytes(plan) == 25 * 4
    assert sum(plan.nbytes) == 221 * 4
    # fused to at most 24 B from the last layer down: layers 49..26 alone (48 and 16 B), layer
    # 25 (16 B) with 24 and 23 (4 B each), then six one-unit layers a buffer (22..17, 16..11,
    # 10..5) and 4..0; with k = 8 the buffers holding layers 0..7 are 0..4 and 5..10: 11 units
    plan = plan_for(_cfg("static", 24, 8))
    held = [u for u, c in zip(plan.units, plan.classes, strict=True) if c]
    assert sorted(held) == [(0, 1, 2, 3, 4), (5, 6, 7, 8, 9, 10)], held
    assert class_bytes(plan) == 11 * 4


def test_dynamic_fusion_does_not_fuse_across_classes():
    """Four ready units of one byte each, threshold 100: one class fuses them all, two
    classes stop the buffer where the class changes."""
    units = ((3,), (2,), (1,), (0,))  # readiness order: the last layer first
    one = Plan(units, (1, 1, 1, 1), "priority", "dynamic", 100, (0, 0, 0, 0))
    assert choose(one, 4, set()) == [3, 2, 1, 0]
    two = Plan(units, (1, 1, 1, 1), "priority", "dynamic", 100, (0, 0, 1, 1))
    assert choose(two, 4, set()) == [3, 2]  # layers 0 and 1 (class 1) first, then 2 and 3
    assert choose(two, 4, {3, 2}) == [1, 0]


def test_tail_chooses_the_layers_still_reducing_when_backward_ends(tmp_path: Path):
    """Four layers of 200 kB, 10 ms of backward each, two workers at 100 Mbit/s: a buffer's
    ring time is 200 kB · 8 / (100 Mbit/s · 0.936) = 17.1 ms. Backward makes layer 3 ready at
    10 ms, 2 at 20, 1 at 30, 0 at 40 (its end); one at a time, fifo: layer 3 reduces 10-27.1,
    2 27.1-44.2, 1 44.2-61.3, 0 61.3-78.4. All but layer 3 end after 40 ms."""
    from testbed.workloads.training.model.predict import exposed_layers

    trace = tmp_path / "four.txt"
    trace.write_text(
        "Id Name Forward Backward Comm Size\n"
        + "".join(f"{j} l{j} 5000 10000 0 200000\n" for j in range(4))
    )
    data = {
        "name": "p",
        "topology": {"hosts": 2, "link_rate": "100mbit"},
        "tc_profile": "thesis-2band",
        "workloads": {"horovod": {"kind": "torch-ddp", "profile": str(trace), "fusion": "static",
                                  "fusion_threshold": "1B", "queue": "fifo", "tc_class": "low",
                                  "policy": "tail"}},
    }  # fmt: skip
    s = load_scenario_data(data, "test")
    assert s.workloads["horovod"].policy.kind == "tail"
    assert exposed_layers("horovod", s) == {0, 1, 2}


def _web(demote, **extra):
    data = {
        "name": "p",
        "topology": {"hosts": 2, "link_rate": "100mbit"},
        "tc_profile": "thesis-3band",
        "workloads": {"websearch": {"utilization": "10%", "tc_class": "high",
                                    "demote": demote, **extra}},
    }  # fmt: skip
    return load_scenario_data(data, "test")


def test_web_search_demotion_resolves_to_the_lower_class_dscp():
    w = _web({"after": "100KB", "to": "low"}).workloads["websearch"]
    assert w.demote.after == 100_000 and w.d.demote_dscp == 8  # thesis-3band low: CS1
    assert _web(None).workloads["websearch"].d.demote_dscp is None


@pytest.mark.parametrize(
    ("demote", "message"),
    [
        ({"after": "100KB", "to": "gold"}, "workloads.websearch.demote.to: 'gold' is not a class"),
        ({"after": "100KB", "to": "high"}, "demote.to: 'high' is not below the flows' own class"),
        ({"after": "0B", "to": "low"}, "workloads.websearch.demote.after"),
        ({"to": "low"}, "workloads.websearch.demote.after"),
        ({"after": "1MB", "to": "low", "then": "x"}, "workloads.websearch.demote.then"),
    ],
)
def test_a_demotion_that_cannot_be_is_one_line_naming_the_field(demote, message):
    with pytest.raises(ScenarioError) as e:
        _web(demote)
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_policy_layers_runs_on_a_real_job_and_chooses_among_its_models_layers():
    """In mode real the hook splits DDP's buckets by layer (ddp_worker.layer_hook): the
    layers are the real CPU model's, checked against the model torch builds."""
    import torch

    from testbed.workloads.training.model.models import SMALL_CNN_LAYERS
    from testbed.workloads.training.workers.horovod_worker import small_cnn

    model = small_cnn(torch)
    owners = [m for m in model.modules() if list(m.parameters(recurse=False))]
    assert (
        [p for _, p in SMALL_CNN_LAYERS]
        == [sum(p.numel() for p in m.parameters(recurse=False)) for m in owners]
        == [448, 4640, 20490]
    )
    real = {**LAYERS, "mode": "real", "fusion": None, "queue": "fifo", "barrier": True,
            "model": "resnet50", "model_size": None}  # fmt: skip
    s = _scenario(policy={"kind": "layers", "share": "15%"}, **real)
    p = s.workloads["horovod"].policy
    # 448 B·4 alone is 1.75 % of the bytes, with conv2 19.9 %: the fewest holding 15 % are 2
    assert p.first_layers([n for _, n in SMALL_CNN_LAYERS]) == 2


def test_resnet18_narrow_is_the_layers_torch_builds_and_its_bytes_reach_the_job():
    """The real mode's bigger CPU model: ResNet-18 (CIFAR form) at 16 channels. Its 41 layers
    with parameters, counted by hand: the stem 3·16·9 + 2·16; stage 1, four 3×3 convolutions
    of 16·16·9 and four norms of 2·16; stages 2-4 (c = 32, 64, 128 from c/2): c/2·c·9 +
    3·c·c·9 + a 1×1 projection c/2·c, five norms of 2c; the classifier 128·10 + 10:
    701,466 parameters, 2,805,864 B of gradients."""
    import torch

    from testbed.workloads.training.model.models import REAL_MODELS
    from testbed.workloads.training.workers.horovod_worker import resnet18

    layers = REAL_MODELS["resnet18-narrow"].layers
    owners = [m for m in resnet18(torch).modules() if list(m.parameters(recurse=False))]
    assert [p for _, p in layers] == [
        sum(p.numel() for p in m.parameters(recurse=False)) for m in owners
    ]
    by_hand = 3 * 16 * 9 + 2 * 16 + 4 * 16 * 16 * 9 + 4 * 2 * 16
    for c in (32, 64, 128):
        by_hand += c // 2 * c * 9 + 3 * c * c * 9 + c // 2 * c + 5 * 2 * c
    by_hand += 128 * 10 + 10
    assert len(layers) == 41 and sum(p for _, p in layers) == by_hand == 701_466
    s = _scenario(mode="real", real_model="resnet18-narrow", model_size=None, kind="torch-ddp")
    d = s.workloads["horovod"].d
    assert d.model_bytes == 4 * by_hand
    assert d.bytes_per_iteration == round(2 * (1 - 1 / 3) * 4 * by_hand)


def test_a_real_job_with_its_compute_stated_carries_tail_adaptive_and_by_ratio():
    """With compute_time, the event model predicts a real job from its real model's layers:
    tail's exposed buffers come from it, adaptive's deadline and by-ratio's ratio too. Three
    workers at 100 Mbit/s, resnet18-narrow, compute 100 ms (backward 66.7 ms, each layer's
    share rising with its index). DDP's first bucket (capped at 1 MiB) holds fc and the last
    block's second half, 597,032 B, ready 12.2 ms into backward; its ring, 2 · 2/3 · 597 kB
    at 100 Mbit/s, takes at least 63.7 ms, so it ends past backward's end, and the second
    bucket (the other 37 layers) starts there: every layer is exposed."""
    from testbed.workloads.training.model.predict import exposed_layers, for_instance

    real = {"kind": "torch-ddp", "mode": "real", "real_model": "resnet18-narrow",
            "model_size": None, "compute_time": "100ms"}  # fmt: skip
    s = _scenario(policy="tail", **real)
    assert exposed_layers("horovod", s) == set(range(41))
    # the first bucket's ring overlaps backward; the second's (2,208,832 B) follows it
    ring = 2 * (1 - 1 / 3) * 8 / 100e6
    assert 0.1 + ring * 2_208_832 < for_instance("horovod", s)["iteration_s"]
    assert for_instance("horovod", s)["iteration_s"] < 0.1 + ring * 4 * 701_466
    s = _scenario(policy="adaptive", **real)
    assert s.workloads["horovod"].policy.kind == "adaptive"
    by_ratio = {"kind": "by-ratio", "classes": ["high", "low"]}
    s = _scenario(policy=by_ratio, **{**real, "tc_class": None})
    assert s.workloads["horovod"].d.compute_to_network_ratio == pytest.approx(
        0.1 * 100e6 / (2 * (1 - 1 / 3) * 4 * 701_466 * 8), rel=1e-3
    )
