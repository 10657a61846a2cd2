"""A training job's policy acting on the wire: the adaptive policy moves a late iteration's
traffic to the higher class and back, which the links' class counters show; with a budget no
iteration exceeds, every byte stays in the job's own class."""

from __future__ import annotations

import csv

import pytest

from tests.needs import need

from .helpers import run_scenario

need("horovod.torch", "Horovod is installed by install.sh")

N, MODEL = 3, 20_000_000


def _run(tmp_path, budget: str):
    return run_scenario(
        tmp_path,
        {
            "duration": "20s",
            "measure": {"warmup": "2s", "cooldown": "1s"},
            "topology": {"hosts": N, "link_rate": "100mbit"},
            "tc_profile": "thesis-2band",
            "workloads": {
                "horovod": {
                    "model_size": MODEL,
                    "compute_time": "300ms",
                    "tc_class": "low",
                    "policy": {"kind": "adaptive", "budget": budget, "to": "high"},
                }
            },
        },
    )


def _uplinks(summary, cls: str) -> int:
    return sum(x["classes"][cls]["bytes"] for x in summary["links"] if x["direction"] == "up")


def test_adaptive_policy_puts_late_iterations_in_the_higher_class(tmp_path):
    """Budget 0 %: each iteration (300 ms of compute, then 2 · 2/3 · 20 MB · 8 / 100 Mbit/s =
    2.1 s of ring at line rate) escalates once its compute is over, within one 0.5 s poll:
    most of its bytes cross in the high class, the rest in the low one, and nothing else
    sends."""
    s = _run(tmp_path, "0%")
    h = s["horovod"]
    assert s["status"] == "ok" and h["iterations"] >= 4, h
    assert h["min_iteration_over_compute"] >= 1.0
    p = h["policy"]
    assert p["kind"] == "adaptive" and p["to"] == "high"
    assert p["escalate_after_s"] == pytest.approx(0.3)
    # every measured iteration escalated once (the window may cut one at either edge)
    assert h["iterations_measured"] - 1 <= p["escalations"] <= h["iterations_measured"] + 2, (h, p)
    log = list(csv.DictReader(open(tmp_path / "run" / "horovod" / "policy.csv")))  # noqa: SIM115
    assert [r["class"] for r in log[:4]] == ["high", "low", "high", "low"], log[:4]
    # the wire: each worker sends 2 (N - 1)/N of the model per iteration, in one class or the
    # other; the high class carries the part after each escalation (at least 2.1 - 0.5 of 2.4
    # s of a line-rate iteration, so more than half), the low one the start of each
    sent = h["iterations"] * 2 * (1 - 1 / N) * MODEL * N
    high, low = _uplinks(s, "high"), _uplinks(s, "low")
    assert sent <= high + low < 1.3 * sent + 2 * MODEL, (high, low, sent)
    assert high > 0.5 * (high + low) and low > 0.02 * (high + low), (high, low)


def test_adaptive_policy_with_a_budget_no_iteration_exceeds_stays_in_its_class(tmp_path):
    s = _run(tmp_path, "1000%")
    h = s["horovod"]
    assert s["status"] == "ok" and h["policy"]["escalations"] == 0
    high, low = _uplinks(s, "high"), _uplinks(s, "low")
    assert low > h["iterations"] * 2 * (1 - 1 / N) * MODEL * N
    assert high < 0.001 * low, (high, low)  # ARP and the like at most
