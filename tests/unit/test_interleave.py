"""Policy `interleave` (training/policies/interleave.py): the plan that places jobs' network phases
apart on one period, checked against placements worked out by hand; the worker's pacing
(horovod_worker.Pacer); and the loader's refusals."""

from __future__ import annotations

import csv
import threading
from typing import Any

import pytest
from rich.console import Console

from testbed.core.errors import ScenarioError
from testbed.scenario.resolve import load_scenario_data
from testbed.workloads.training.policies.interleave import (
    GRID,
    Profile,
    keeping,
    phase_overrun,
    plan,
    plan_for,
)
from testbed.workloads.training.report import print_section
from testbed.workloads.training.workers.horovod_worker import Pacer
from tests.clocks import StepClock
from tests.needs import need


def test_three_jobs_that_fit_the_period_take_turns_with_the_free_time_shared_out():
    """Period 1 s (the longest alone, no margin). Arcs from each iteration's start: a [0.5,
    0.8), b [0.6, 0.8), c [0.7, 0.8). By hand: a (the most network) first, at 0; the greedy
    puts b where a's arc ends and c where b's does (a, b, c around the period). The free
    time, 1 − 0.6 = 0.4 s, is shared out: a gap of 0.4 / 3 after each arc. b's arc starts at
    0.8 + 0.1333 = 0.9333 → offset 0.3333; c's at 0.9333 + 0.2 + 0.1333 = 1.2667 → offset
    0.5667."""
    jobs = [
        Profile("a", 1.0, ((0.5, 0.8),)),
        Profile("b", 1.0, ((0.6, 0.8),)),
        Profile("c", 0.9, ((0.7, 0.8),)),
    ]
    slots = plan(jobs, margin=0.0)
    assert {n: s.period_s for n, s in slots.items()} == {"a": 1.0, "b": 1.0, "c": 1.0}
    assert slots["a"].offset_s == 0.0
    assert slots["b"].offset_s == pytest.approx(1 / 3)
    assert slots["c"].offset_s == pytest.approx(17 / 30)
    assert all(s.overlap_s == 0 for s in slots.values())
    # each phase is followed by the free time's share, 0.4 / 3, before the next one begins
    assert [slots[n].gap_s for n in "abc"] == pytest.approx([0.4 / 3] * 3)


def test_a_short_job_runs_twice_a_period_and_a_given_offset_is_kept():
    """Period 1.1 s (1 s × 1.1). Job s takes 0.5 s alone: ⌊1.1 / 0.55⌋ = 2 iterations a
    period, its arc [0.3, 0.4) twice, 0.55 s apart. Job l is given offset 0.1: its arc sits at
    [0.7, 1.0). s's copies at offset o, [0.3 + o, 0.4 + o) and [0.85 + o, 0.95 + o), stay
    clear of it for o in [0.15, 0.3]: the earliest, 0.15."""
    jobs = [Profile("l", 1.0, ((0.6, 0.9),), offset_s=0.1), Profile("s", 0.5, ((0.3, 0.4),))]
    slots = plan(jobs, margin=0.1)
    assert slots["l"].offset_s == 0.1 and slots["l"].per_period == 1
    assert slots["s"].per_period == 2 and slots["s"].slot_s == pytest.approx(0.55)
    assert slots["s"].offset_s == pytest.approx(0.15, abs=2 * 1.1 / GRID)
    assert slots["s"].overlap_s == 0
    # l's phase ends where s's second copy begins (1.0): no gap; s's copies end at 0.55 and
    # 1.1 (≡ 0), followed by l's phase at 0.7 and s's first copy at 0.45: the least, 0.15
    assert slots["l"].gap_s == pytest.approx(0.0, abs=2 * 1.1 / GRID)
    assert slots["s"].gap_s == pytest.approx(0.15, abs=2 * 1.1 / GRID)


def test_jobs_whose_network_exceeds_the_period_overlap_as_little_as_the_plan_can():
    """Two jobs each busy 0.6 s of a 1 s period: 0.2 s of overlap at the least."""
    slots = plan([Profile("a", 1.0, ((0.4, 1.0),)), Profile("b", 1.0, ((0.4, 1.0),))], 0.0)
    assert slots["b"].overlap_s == pytest.approx(0.2, abs=2 / GRID)
    # overlapping already: a late phase has no room to lose, whichever was placed first
    assert slots["a"].gap_s == 0.0 and slots["b"].gap_s == 0.0


def test_the_gap_is_measured_from_each_arc_to_the_other_jobs_arcs():
    """Period 1 s. a has arcs [0, 0.1) and [0.5, 0.6), given offset 0; b's arc [0, 0.3) is
    given offset 0.2, so it sits in a's hole, [0.2, 0.5): a may start at most 0.1 late
    (its first arc's end to b's start), b not at all (its end touches a's second arc). A
    tiny arc (1 ms, job c, offset 0.7) is 0.299 s from a's start at 1.0, and a is 0.1 from
    it."""
    slots = plan(
        [
            Profile("a", 1.0, ((0.0, 0.1), (0.5, 0.6)), offset_s=0.0),
            Profile("b", 1.0, ((0.0, 0.3),), offset_s=0.2),
            Profile("c", 1.0, ((0.0, 0.001),), offset_s=0.7),
        ],
        0.0,
    )
    assert slots["a"].gap_s == pytest.approx(0.1)
    assert slots["b"].gap_s == pytest.approx(0.0, abs=1 / GRID)
    assert slots["c"].gap_s == pytest.approx(0.299)
    alone = plan([Profile("x", 1.0, ((0.5, 0.8),))], 0.0)
    assert alone["x"].gap_s == 1.0  # nobody to run into: its whole slot


def test_the_pacer_holds_each_iteration_to_its_slot_and_lets_a_late_one_go_at_once():
    clock = StepClock()
    t0 = clock.time()
    p = Pacer({"pace": {"offset_s": 0.05, "period_s": 0.1}}, t0, clock=clock)
    p.wait()
    assert clock.time() - t0 == pytest.approx(0.05)
    clock.sleep(0.15)  # iteration 0 runs late, past iteration 1's slot at 0.15
    before = clock.time()
    p.wait()
    assert clock.time() == before  # late: no wait (a wait would be 0.1 s)
    p.wait()  # iteration 2's slot: 0.25
    assert clock.time() - t0 == pytest.approx(0.25)
    never = Pacer({}, t0, clock=clock)
    before = clock.time()
    never.wait()
    assert clock.time() == before


def test_a_pacer_that_skips_gives_up_slots_on_the_vote_and_logs_each_slot(tmp_path):
    """One rank (its own votes read back, lag 1), slots every 0.2 s from 0.1; skip after
    0.08 s late. Iteration 0 on its slot (0.1). Iteration 1 comes at 0.42, 0.12 late for its
    slot at 0.3: nothing on this rank's own clock moves the grid, so it begins at once; its
    vote, read before iteration 2, gives up ⌈(0.12 − 0.08) / 0.2⌉ = 1 slot, so iteration 2,
    coming at 0.66, waits for 0.7 instead of beginning late at 0.66 for 0.5. Iteration 3
    comes at 0.93, 0.03 late for 0.9 (within 0.08): at once, and no slot given up after it.
    Iteration 4 comes at 1.33, 0.23 late for 1.1: at once; its vote gives up 1 slot
    (⌈0.15 / 0.2⌉), so iteration 5, coming at 1.45, waits for 1.5. On their slots: 0, 2 and 5
    (1 % of a slot is 2 ms): 3 of 6; 2 slots missed."""
    clock = StepClock()
    t0 = clock.time()
    log = tmp_path / "pace.csv"
    cfg = {"pace": {"offset_s": 0.1, "period_s": 0.2, "skip_after_s": 0.08}}
    p = Pacer(cfg, t0, log, clock=clock)

    def at(t: float) -> None:
        clock.sleep(t0 + t - clock.time())

    for i, comes in enumerate([0.0, 0.42, 0.66, 0.93, 1.33, 1.45]):
        if i > 0:
            p.agree(i - 1, *p.vote_of(i - 1))
        at(comes)
        p.wait()
    rows = list(csv.DictReader(log.open()))
    assert [int(r["slot"]) for r in rows] == [0, 1, 3, 4, 5, 7]
    assert [int(r["skipped"]) for r in rows] == [0, 0, 1, 0, 0, 1]
    assert [float(r["slot_time"]) - t0 for r in rows] == pytest.approx(
        [0.1, 0.3, 0.7, 0.9, 1.1, 1.5], abs=1e-5
    )
    assert [float(r["began"]) - t0 for r in rows] == pytest.approx(
        [0.1, 0.42, 0.7, 0.93, 1.33, 1.5], abs=1e-5
    )
    assert keeping(rows, 0.2) == {"on_slot_share": 3 / 6, "slots_missed": 2}


def test_ranks_that_judge_their_lateness_apart_give_up_the_same_slots():
    """Two ranks, slots every 0.05 s, skip after 0.01 s. Iteration 0 ends at different
    moments on the two (a ring's ranks do not leave an all-reduce together): a begins
    iteration 1 0.008 s late, b 0.012 s late, either side of the limit. Both begin at once,
    and iteration 1's vote (the most either was late, 0.012) gives up one slot on both before
    iteration 2: both begin it on slot 3. Iteration 0's vote (0 late) gives up nothing."""
    a, b = _two_ranks(ahead=False)
    for p in (a, b):
        p.wait()
    _vote(a, b, (0,))
    a.clock.sleep(0.05 + 0.008 - (a.clock.time() - a.base))
    b.clock.sleep(0.05 + 0.012 - (b.clock.time() - b.base))
    for p in (a, b):
        p.wait()
    assert a.vote_of(1) == (1, pytest.approx(0.008, abs=1e-6))
    assert b.vote_of(1) == (1, pytest.approx(0.012, abs=1e-6))
    _vote(a, b, (1,))
    assert a.slot == b.slot == 3 and a.skipping == b.skipping == 1


def test_slots_given_up_since_an_iteration_count_against_its_lateness():
    """Lag 2 (Horovod without a barrier): iteration 1 has begun when iteration 0's vote is
    read. Slots every 0.05 s, skip after 0.01 s: iterations 0 and 1 both began 0.03 s late.
    Iteration 0's vote gives up ⌈0.02 / 0.05⌉ = 1 slot; iteration 1's, 0.03 late but for a
    slot already given up (0.03 − 0.05 < 0.01), gives up none more."""
    a, b = _two_ranks(ahead=False)
    for p in (a, b):
        p.clock.sleep(0.03)
        p.wait()
        p.clock.sleep(0.05)
        p.wait()
    _vote(a, b, (0,))
    assert a.slot == b.slot == 3
    _vote(a, b, (1,))
    assert a.slot == b.slot == 3


def test_a_pacer_that_holds_runs_a_late_iterations_phase_on_the_slot_it_gives_up_for(tmp_path):
    """`late: hold`, one rank: slots every 0.2 s from 0.1, the gap 0.08 s, compute 0.1 s.
    Iteration 0 on its slot. Iteration 1 comes at 0.42, 0.12 late for its slot at 0.3; its
    lateness, agreed before its network phase (at 0.52, after the compute), gives up
    ⌈(0.12 − 0.08) / 0.2⌉ = 1 slot: the phase waits 0.2 − 0.12 = 0.08 s, to 0.6, where it
    would have been had the iteration begun on slot 2 (0.5 + 0.1). The phase takes 0.05 s:
    iteration 2 comes at 0.65 and waits for slot 3 (0.7), its log row saying 1 slot given up.
    Its own stop vote read back (0.12 late) gives up nothing more. Iteration 2, on its slot,
    holds nothing."""
    clock = StepClock()
    t0 = clock.time()
    log = tmp_path / "pace.csv"
    cfg = {"pace": {"offset_s": 0.1, "period_s": 0.2, "skip_after_s": 0.08, "hold": True}}
    p = Pacer(cfg, t0, log, clock=clock)
    assert p.holds
    p.wait()  # iteration 0 at 0.1
    clock.sleep(0.15)
    p.agree(0, *p.vote_of(0))
    clock.sleep(t0 + 0.42 - clock.time())
    p.wait()  # iteration 1, 0.12 late
    clock.sleep(0.1)  # its compute
    p.hold(1, p.vote_of(1)[1])
    assert clock.time() - t0 == pytest.approx(0.6)
    clock.sleep(0.05)  # its network phase
    p.agree(1, *p.vote_of(1))
    p.wait()
    assert clock.time() - t0 == pytest.approx(0.7)
    clock.sleep(0.1)
    before = clock.time()
    p.hold(2, p.vote_of(2)[1])
    assert clock.time() == before
    rows = list(csv.DictReader(log.open()))
    assert [int(r["slot"]) for r in rows] == [0, 1, 3]
    assert [int(r["skipped"]) for r in rows] == [0, 0, 1]
    assert keeping(rows, 0.2) == {"on_slot_share": 2 / 3, "slots_missed": 1}


def test_ranks_that_hold_on_their_agreed_lateness_begin_the_phase_together():
    """Two ranks, slots every 0.05 s, gap 0.01 s, holding. They begin iteration 1 0.008 and
    0.012 s late, either side of the gap; the agreed lateness (the most, 0.012) holds both:
    each waits a period less its own lateness, so after the same compute (0.03 s) both begin
    the phase at 0.05 + 0.05 + 0.03 = 0.13, where slot 2's would be. A rank that judged on its
    own lateness (0.008) would not have held, and the other would wait for it in the
    all-reduce. A pacer without `hold` holds nothing."""
    cfg = {"pace": {"offset_s": 0.0, "period_s": 0.05, "skip_after_s": 0.01, "hold": True}}
    t0 = StepClock().time()
    a, b = Pacer(cfg, t0, clock=StepClock(t0)), Pacer(cfg, t0, clock=StepClock(t0))
    for p in (a, b):
        p.wait()
    _vote(a, b, (0,))
    a.clock.sleep(t0 + 0.058 - a.clock.time())
    b.clock.sleep(t0 + 0.062 - b.clock.time())
    for p in (a, b):
        p.wait()
        p.clock.sleep(0.03)
    agreed = max(a.vote_of(1)[1], b.vote_of(1)[1])
    for p in (a, b):
        p.hold(1, agreed)
    assert a.clock.time() - t0 == pytest.approx(0.13) == b.clock.time() - t0
    assert a.slot == b.slot == 3
    a2, _ = _two_ranks(ahead=False)  # skip, no hold
    assert not a2.holds
    a2.wait()
    a2.clock.sleep(0.1)
    before = a2.clock.time()
    a2.hold(0, 0.5)
    assert a2.clock.time() == before and a2.slot == 1


def test_keeping_counts_iterations_on_their_slot_and_the_slots_missed_while_late():
    """A catching-up job: slot 3 begun 0.12 s late (its iteration ran past slot 4 too), then
    slot 4 begun 0.05 late, slot 5 on time: slots 0..5, none missed (each had its
    iteration, late); 2 of 6 off their slot. A job that skipped from 1 to 4: 2 missed."""

    def row(slot, late):
        return {"slot": str(slot), "slot_time": str(slot * 0.1), "began": str(slot * 0.1 + late)}

    late = [row(0, 0), row(1, 0), row(2, 0.0005), row(3, 0.12), row(4, 0.05), row(5, 0)]
    assert keeping(late, 0.1) == {"on_slot_share": 4 / 6, "slots_missed": 0}
    assert keeping([row(0, 0), row(1, 0), row(4, 0)], 0.1)["slots_missed"] == 2
    assert keeping([], 0.1) == {"on_slot_share": None, "slots_missed": 0}


def test_phase_overrun_is_the_median_lateness_of_a_phase_begun_on_its_slot():
    """Slots every 0.1 s, the plan's last arc ending 0.06 s into the iteration. Iterations
    0-3 began on their slot and ended 0.065, 0.068, 0.070 and 0.075 s after: 5, 8, 10 and
    15 ms past the arc, median 9 ms. Iteration 4 began 0.03 s late (off its slot) and ended
    0.1 s after it: not counted, its phase was late from the start. Iteration 5 has no end
    yet (the run stopped): not counted."""

    def row(slot, late, end=None):
        r = {"slot": str(slot), "slot_time": str(slot * 0.1), "began": str(slot * 0.1 + late)}
        return r if end is None else {**r, "end": str(end)}

    rows = [row(0, 0, 0.065), row(1, 0, 0.168), row(2, 0.0005, 0.2705), row(3, 0, 0.375),
            row(4, 0.03, 0.43), row(5, 0)]  # fmt: skip
    assert phase_overrun(rows, 0.1, 0.06) == pytest.approx(0.009)
    # iteration 4 is late, 5 has no end
    assert phase_overrun(rows[4:], 0.1, 0.06) is None
    # a phase that ends before the plan's (a model that overestimates) gives a negative one
    assert phase_overrun([row(0, 0, 0.05)], 0.1, 0.06) == pytest.approx(-0.01)


def _jobs(**over):
    job = {"kind": "torch-ddp", "model_size": "0.5MB", "compute_time": "100ms",
           "policy": "interleave"}  # fmt: skip
    workloads = {"a": {**job, "hosts": ["h1", "h3"]}, "b": {**job, "hosts": ["h2", "h4"]}}
    for name, fields in over.items():
        workloads[name] = {**workloads.get(name, job), **fields}
    data = {
        "name": "p",
        "topology": {"kind": "leaf-spine", "leaves": 2, "spines": 1, "hosts_per_leaf": 2,
                     "link_rate": "100mbit", "oversubscription": 2},
        "tc_profile": "thesis-3band",
        "workloads": workloads,
    }  # fmt: skip
    return load_scenario_data(data, "test")


def test_real_jobs_are_planned_from_their_real_models_layers():
    """Two torch-DDP jobs in mode real, each the small CNN (25,578 float32 parameters,
    102,312 bytes: one DDP bucket, reduced after backward ends) with 100 ms of compute stated,
    2 workers across a 100 Mbit/s fabric link: each reduces 102,312 B in 8.19 ms / 0.9356 =
    8.75 ms, so its iteration alone is 108.75 ms and the second job's arc lies half the free
    time of the period (108.75 × 1.05 − 2 × 8.75 = 96.7 ms) after the first's."""
    real = {"mode": "real", "model_size": None, "real_model": "small-cnn"}
    group, slots = plan_for(_jobs(a=real, b=real))
    net = 102_312 * 8 / 100e6 / 0.9356
    period = (0.1 + net) * 1.05
    assert group[0].iteration_s == pytest.approx(0.1 + net, rel=1e-3)
    assert group[0].network_s == pytest.approx(net, rel=1e-3)
    assert slots["b"].offset_s - slots["a"].offset_s == pytest.approx(
        net + (period - 2 * net) / 2, abs=period / GRID
    )


def test_a_given_period_replaces_the_models_and_the_free_time_is_shared_out_of_it():
    """The two jobs below (each 142.7 ms alone, 42.7 ms of network) with the period given as
    160 ms (e.g. their measured iterations, longer than the model's): the free time,
    160 − 2 × 42.7 = 74.6 ms, is shared out, the second job's arc 37.3 ms after the first's,
    offset 42.7 + 37.3 = 80.0 ms; one job giving it is enough."""
    _, slots = plan_for(_jobs(a={"policy": {"kind": "interleave", "period": "160ms"}}))
    assert slots["a"].period_s == slots["b"].period_s == pytest.approx(0.160)
    net = 0.5e6 * 8 / 100e6 / 0.9356
    assert slots["b"].offset_s - slots["a"].offset_s == pytest.approx(0.080, abs=0.160 / GRID)
    assert slots["a"].gap_s == pytest.approx((0.160 - 2 * net) / 2, abs=0.160 / GRID)


def test_a_given_period_and_offset_are_dilated_with_the_scenario():
    """time_scale 10: the machine runs the jobs ten times slower (a 1 Gbit/s fabric at
    100 Mbit/s, 10 ms of compute as 100 ms), so a period given as 16 ms in scenario time is a
    160 ms period on the machine, and b's offset of 8 ms an 80 ms one."""
    from testbed.scenario.resolve import wall_scenario

    job = {"kind": "torch-ddp", "model_size": "0.5MB", "compute_time": "10ms"}
    pol = {"kind": "interleave", "period": "16ms"}
    data = {
        "name": "p",
        "time_scale": 10,
        "topology": {"kind": "leaf-spine", "leaves": 2, "spines": 1, "hosts_per_leaf": 2,
                     "link_rate": "1gbit", "oversubscription": 2},
        "tc_profile": "thesis-3band",
        "workloads": {"a": {**job, "hosts": ["h1", "h3"], "policy": pol},
                      "b": {**job, "hosts": ["h2", "h4"], "policy": {**pol, "offset": "8ms"}}},
    }  # fmt: skip
    s = load_scenario_data(data, "test")
    _, slots = plan_for(s)
    _, wall = plan_for(wall_scenario(s))
    assert slots["a"].period_s == pytest.approx(0.016)
    assert wall["a"].period_s == wall["b"].period_s == pytest.approx(0.160)
    assert wall["b"].offset_s == pytest.approx(0.080)


def test_the_loader_plans_the_group_from_the_jobs_models():
    """Two identical jobs (0.5 MB, 2 workers across a 100 Mbit/s fabric link, 100 ms of
    compute, one DDP bucket after backward): each reduces 0.5 MB in 40 ms / 0.936 = 42.7 ms
    plus 2 × 4 × 0 latency, so its iteration alone is 142.7 ms and its arc [100, 142.7) ms.
    The period is 142.7 × 1.05 = 149.9 ms, and the free time, 149.9 − 2 × 42.7 = 64.4 ms, is
    shared out: the second job's arc starts 32.2 ms after the first's ends, offset 42.7 +
    32.2 = 74.9 ms."""
    group, slots = plan_for(_jobs())
    assert [p.name for p in group] == ["a", "b"]
    net = 0.5e6 * 8 / 100e6 / 0.9356
    period = (0.1 + net) * 1.05
    assert group[0].iteration_s == pytest.approx(0.1 + net, rel=1e-3)
    assert slots["a"].period_s == pytest.approx(period, rel=1e-3)
    assert slots["b"].offset_s == pytest.approx(net + (period - 2 * net) / 2, rel=1e-3)


@pytest.mark.parametrize(
    ("over", "message"),
    [
        (
            {"b": {"policy": {"kind": "interleave", "offset": "200ms"}}},
            "workloads.b.policy.offset: 200ms is beyond b's slot of",
        ),
        (
            {"a": {"policy": {"kind": "interleave", "offset": "1s"}}},
            "workloads.a.policy.offset: 1s is beyond a's slot",
        ),
        ({"a": {"policy": {"kind": "interleave", "offset": "-1ms"}}}, "workloads.a.policy"),
        ({"a": {"policy": {"kind": "interleave", "margin": "101%"}}}, "margin"),
        (
            {"a": {"mode": "real", "model_size": None, "compute_time": None}},
            "workloads.a.compute_time: policy interleave in mode real needs compute_time",
        ),
        (
            {
                "a": {
                    "mode": "real",
                    "model_size": None,
                    "policy": {"kind": "interleave", "late": "hold"},
                }
            },
            "workloads.a.policy.late: late: hold needs mode: synthetic",
        ),
        (
            {"a": {"policy": {"kind": "interleave", "late": "hold"}, "barrier": False}},
            "workloads.a.policy.late: late: hold waits inside the iteration before its first "
            "reduction, which only torch-ddp's own schedule",
        ),
        (
            {"a": {"kind": "horovod", "policy": {"kind": "interleave", "late": "hold"}}},
            "workloads.a.policy.late: late: hold",
        ),
        ({"a": {"policy": {"kind": "interleave", "late": "wait"}}}, "workloads.a.policy"),
        (
            {"a": {"policy": {"kind": "interleave", "period": "140ms"}}},
            "workloads.a.policy.period: 140ms is shorter than a's iteration alone (142.736ms by its model",
        ),
        (
            {
                "a": {"policy": {"kind": "interleave", "period": "160ms"}},
                "b": {"policy": {"kind": "interleave", "period": "170ms"}},
            },
            "workloads.b.policy.period: 170ms differs from a's 160ms",
        ),
        ({"a": {"policy": {"kind": "interleave", "period": "0ms"}}}, "workloads.a.policy"),
    ],
)
def test_an_interleave_the_loader_cannot_keep_is_one_line_naming_the_field(over, message):
    with pytest.raises(ScenarioError) as e:
        _jobs(**over)
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_by_ratio_gives_the_most_compute_intensive_job_the_highest_class():
    """a: 100 ms of compute against 0.5 MB over a 100 Mbit/s ring of two, R = 0.1 / 0.04
    = 2.5; b: 200 ms, R = 5; c: 300 ms, R = 7.5 → c high, b middle, a low."""
    pol = {"policy": {"kind": "by-ratio"}}
    s = _jobs(a=pol, b={**pol, "compute_time": "200ms"},
              c={**pol, "hosts": ["h1", "h2"], "compute_time": "300ms"})  # fmt: skip
    got = {n: (s.workloads[n].d.tc_class, round(s.workloads[n].d.compute_to_network_ratio, 3))
           for n in "abc"}  # fmt: skip
    assert got == {"a": ("low", 2.5), "b": ("middle", 5.0), "c": ("high", 7.5)}
    assert s.workloads["c"].d.dscp == s.tc_profile.cls("high").mark


@pytest.mark.parametrize(
    ("over", "message"),
    [
        (
            {"a": {"policy": {"kind": "by-ratio", "classes": ["gold"]}}},
            "workloads.a.policy.classes[0]: 'gold' is not a class",
        ),
        (
            {"a": {"policy": "by-ratio", "tc_class": "low"}},
            "workloads.a.tc_class: policy by-ratio gives the job its class",
        ),
        (
            {
                "a": {"policy": {"kind": "by-ratio", "classes": ["high", "low"]}},
                "b": {"policy": "by-ratio"},
            },
            "workloads.b.policy.classes: ['high', 'middle', 'low'] differs from a's",
        ),
    ],
)
def test_a_ranking_the_loader_cannot_make_is_one_line_naming_the_field(over, message):
    with pytest.raises(ScenarioError) as e:
        _jobs(**over)
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def _two_ranks(ahead: bool = True) -> tuple[Pacer, Pacer]:
    """Two ranks of one job, slots every 0.05 s, skip after 0.01 s; with `ahead`, b a slot
    ahead of a."""
    cfg = {"pace": {"offset_s": 0.0, "period_s": 0.05, "skip_after_s": 0.01}}
    t0 = StepClock().time()
    a, b = Pacer(cfg, t0, clock=StepClock(t0)), Pacer(cfg, t0, clock=StepClock(t0))
    b.slot = 1 if ahead else 0
    return a, b


def _vote(a: Pacer, b: Pacer, iterations: tuple[int, ...]) -> None:
    """Each iteration's stop vote read back on both ranks: the latest slot either began it at
    and the most either was late."""
    for i in iterations:
        (sa, la), (sb, lb) = a.vote_of(i), b.vote_of(i)
        a.agree(i, max(sa, sb), max(la, lb))
        b.agree(i, max(sa, sb), max(la, lb))


def test_a_rank_behind_the_latest_slot_of_an_iteration_moves_its_grid_on_once():
    """Two ranks of one job, slots every 0.05 s. Rank b began iteration 0 a slot later than
    rank a (it judged a lateness differently). When the vote of iteration 0 comes back (the
    latest slot, 1), a, which has begun iteration 1 meanwhile (a lag of two iterations), moves
    its next slot on by one and counts iteration 1 as begun a slot later too, so iteration 1's
    vote moves nothing: from iteration 2 on both ranks begin on the same slots. b, at the
    latest, never moves."""
    a, b = _two_ranks()
    for p in (a, b):
        p.wait()
        p.wait()
    assert (a.slot_of(0), b.slot_of(0), a.slot_of(1), b.slot_of(1)) == (0, 1, 1, 2)
    _vote(a, b, (0, 1))
    assert a.slot == b.slot == 3
    for p in (a, b):
        p.wait()
    assert a.slot_of(2) == b.slot_of(2) == 3
    assert a.slot_of(0) == 0  # an iteration agreed on is forgotten


def test_a_rank_that_caught_up_on_its_own_since_is_not_moved_again():
    """As above, but a had moved onto b's grid before iteration 1 (it began it at slot 2, as
    b did). Iteration 0's vote then moves nothing: its next slot stays 3, b's too."""
    a, b = _two_ranks()
    for p in (a, b):
        p.wait()
    a.slot = 2  # a's own skip in iteration 1
    for p in (a, b):
        p.wait()
    assert (a.slot_of(0), b.slot_of(0), a.slot_of(1), b.slot_of(1)) == (0, 1, 2, 2)
    _vote(a, b, (0, 1))
    assert a.slot == b.slot == 3


class _FakeHvd:
    """Two ranks' Horovod, as far as the stop vote uses it: allreduce_async by name, MAX."""

    Max = "max"

    def __init__(self, torch: Any) -> None:
        self.torch, self.cv, self.got = torch, threading.Condition(), {}

    def allreduce_async(self, t: Any, name: str, op: Any) -> str:
        with self.cv:
            self.got.setdefault(name, []).append(t.clone())
            self.cv.notify_all()
        return name

    def synchronize(self, name: str) -> Any:
        with self.cv:
            assert self.cv.wait_for(lambda: len(self.got[name]) == 2, timeout=10), name
            return self.torch.stack(self.got[name]).max(0).values


def test_horovods_stop_vote_carries_the_slot_and_brings_a_rank_behind_onto_it():
    """horovod_worker.StopVote with lag 2 (no barrier): rank 1 begins a slot ahead; iteration
    0's vote, read before iteration 2, moves rank 0 on by one, and from then on both ranks
    begin on the same slots."""
    torch = need("torch", "torch is installed by install.sh")
    from testbed.workloads.training.workers.horovod_worker import StopVote

    hvd = _FakeHvd(torch)
    cfg = {"pace": {"offset_s": 0.0, "period_s": 0.03, "skip_after_s": 0.01}}
    t0 = StepClock().time()
    pacers = [Pacer(cfg, t0, clock=StepClock(t0)), Pacer(cfg, t0, clock=StepClock(t0))]
    pacers[1].slot = 1
    began: list[list[int]] = [[], []]

    def rank(r: int) -> None:
        vote = StopVote(hvd, torch, lag=2, pacer=pacers[r])
        for i in range(5):
            assert not vote.stop()
            pacers[r].wait()
            began[r].append(pacers[r].slot - 1)
            vote.submit(i, pacers[r].clock.time())

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert began[0][:2] == [0, 1] and began[1][:2] == [1, 2], began
    assert began[0][2:] == began[1][2:], began


def test_interleave_with_classes_ranks_the_group_as_by_ratio_does():
    """The jobs of the by-ratio test above, interleaved with classes: c (R 7.5) high, b (5.0)
    middle, a (2.5) low; without classes each keeps the class it gives."""
    pol = {"policy": {"kind": "interleave", "classes": ["high", "middle", "low"]}}
    s = _jobs(a=pol, b={**pol, "compute_time": "200ms"},
              c={**pol, "hosts": ["h1", "h2"], "compute_time": "300ms"})  # fmt: skip
    assert {n: s.workloads[n].d.tc_class for n in "abc"} == {
        "a": "low", "b": "middle", "c": "high"}  # fmt: skip
    assert s.workloads["c"].d.dscp == s.tc_profile.cls("high").mark
    own = _jobs(a={"tc_class": "low"}, b={"tc_class": "high"})
    assert (own.workloads["a"].d.tc_class, own.workloads["b"].d.tc_class) == ("low", "high")


@pytest.mark.parametrize(
    ("over", "message"),
    [
        (
            {"a": {"policy": {"kind": "interleave", "classes": ["high", "gold"]}}},
            "workloads.a.policy.classes[1]: 'gold' is not a class",
        ),
        (
            {"a": {"policy": {"kind": "interleave", "classes": ["high"]}, "tc_class": "low"}},
            "workloads.a.tc_class: policy interleave with classes gives the job its class",
        ),
        (
            {"a": {"policy": {"kind": "interleave", "classes": []}}},
            "workloads.a.policy",
        ),
        (
            {"a": {"policy": {"kind": "interleave", "classes": ["high", "low"]}}},
            "workloads.b.policy.classes: none (its own class) differs from a's ['high', 'low']",
        ),
    ],
)
def test_interleave_classes_the_loader_cannot_give_are_one_line_naming_the_field(over, message):
    with pytest.raises(ScenarioError) as e:
        _jobs(**over)
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize(
    ("late", "share", "hint"),
    [("catch-up", 0.0, True), ("catch-up", 0.9, False), ("skip", 0.0, False)],
)
def test_the_report_says_what_to_do_when_a_catching_up_job_stays_behind_its_slots(
    late, share, hint
):
    """The example at 16:40 UTC on 2026-12-06: no iteration on its slot in two runs, the
    lateness past a second by the end; the report said only "0% ... on their slot". A job
    that catches up and kept fewer than half its slots now gets the line saying why and what
    to change; one that skips, or kept its slots, does not."""
    pol = {"kind": "interleave", "jobs": 3, "period_s": 0.263, "slot_s": 0.263,
           "offset_s": 0.0, "network_s": 0.0855, "planned_overlap_s": 0.0, "gap_s": 0.0193,
           "late": late, "skip_after_s": 0.0193 if late == "skip" else None,
           "on_slot_share": share, "slots_missed": 0, "phase_overrun_s": None}  # fmt: skip
    section = {"workers": 2, "iterations": 100, "class": "be", "policy": pol,
               "iteration_time_s": {"mean": 0.287, "p50": 0.28, "p99": 0.35}}  # fmt: skip
    out = Console(record=True, width=400)
    print_section(out, "a", section)
    text = out.export_text()
    assert f"{share:.0%} of its iterations began on their slot" in text
    assert ("`late: skip` gives late slots up" in text) is hint, text


def test_a_job_that_outruns_its_slots_is_warned_of_with_its_figures():
    """CASSINI's pair (docs/results/interleave/data/cassini-pair, seed 1, packed): job a began
    none of its 122 iterations on its slot, its median iteration 316 ms against the model's
    276 ms slot; the warning names both. A job that kept its slots (98 %), or whose median
    fits its slot, gets none."""
    import json
    import tarfile
    from pathlib import Path

    from testbed.workloads.training.horovod import interleave_outrun

    data = Path(__file__).resolve().parents[2] / "docs/results/interleave/data/cassini-pair"
    with tarfile.open(data / "001-s1_interleave.tar.xz") as t:
        member = t.extractfile("001-s1_interleave/summary.json")
        assert member is not None
        a = json.loads(member.read())["a"]
    why = interleave_outrun(a)
    assert why is not None and why.startswith(
        "policy interleave kept 0% of its slots: its iterations (316 ms, the median) run "
        "longer than its slot (276 ms, from the model"
    ), why
    kept = {**a, "policy": {**a["policy"], "on_slot_share": 0.98}}
    fits = {**a, "iteration_time_s": {**a["iteration_time_s"], "p50": 0.270}}
    assert interleave_outrun(kept) is None and interleave_outrun(fits) is None
    given = interleave_outrun(a, given=True)  # a period the scenario gave is what fell short
    assert given is not None and "(276 ms, the period given)" in given
    assert "a longer period:" in given and "from the model" not in given
    assert interleave_outrun({"iteration_time_s": {"p50": 1.0}}) is None  # no policy
