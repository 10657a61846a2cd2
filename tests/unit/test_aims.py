"""A sweep's aims: paired intervals and verdicts against hand-computed values, the pairs a
report flags, seeds added until decided, and the refusals before anything runs."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.core.errors import ScenarioError
from testbed.results import aggregate as ag
from testbed.results import sweep as sw
from testbed.results.decide import run_until_decided
from testbed.scenario import aims
from tests.unit.test_sweep import BASE, QuietUI

ROOT = Path(__file__).resolve().parents[2]

SCHEMES = {
    "same": {"workloads.horovod.tc_class": "high"},
    "low": {"workloads.horovod.tc_class": "low"},
    "nobar": {"workloads.horovod.tc_class": "low", "workloads.horovod.barrier": False},
}


def write(tmp_path: Path, **spec) -> Path:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE, sort_keys=False))
    p = tmp_path / "sweep.yaml"
    doc = {
        "name": "s",
        "base": "base.yaml",
        "paired": {"scheme": SCHEMES},
        "compare": {"axis": "scheme", "baseline": "same"},
        **spec,
    }
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


def scheme_of(scenario) -> str:
    h = scenario.workloads["horovod"]
    if not h.barrier:
        return "nobar"
    return "low" if h.tc_class == "low" else "same"


def fake(iteration: dict, small: dict | None = None, started: dict | None = None, calls=None):
    """A run_one that writes a made-up summary: (scheme, seed) → iteration mean (s), small
    flows' mean FCT (s), start time (epoch)."""

    def run(scenario, folder, _ui):
        key = (scheme_of(scenario), scenario.seed)
        if calls is not None:
            calls.append(key)
        folder.mkdir(parents=True)
        summary = {
            "status": "ok", "seed": scenario.seed,
            "workloads": {"horovod": "horovod", "websearch": "websearch"},
            "started_at": (started or {}).get(key, 1_800_000_000.0 + 60 * scenario.seed),
            "host_cpu": {"cores": 2, "busy": 0.5, "steal": 0.0, "backlog_drops": 0},
            "horovod": {"iteration_time_s": {"mean": iteration[key], "p50": 1, "p99": 1}},
            "websearch": {"fct_s": {"small": {"mean": (small or {}).get(key, 0.01)}}},
        }  # fmt: skip
        (folder / "summary.json").write_text(json.dumps(summary))
        return summary

    return run


def run(path: Path, out: Path, run_one) -> None:
    spec = sw.load_spec(path)
    sw.run_sweep(spec, sw.expand(spec, path), out, run_one, QuietUI())


ITER = {("same", s): 1.0 for s in (1, 2, 3)} | {
    ("low", 1): 1.1, ("low", 2): 1.2, ("low", 3): 1.3,
    ("nobar", 1): 1.0, ("nobar", 2): 1.0, ("nobar", 3): 1.0,
}  # fmt: skip


@pytest.mark.parametrize(
    ("aim", "verdict", "needed"),
    [
        # low's changes +10, +20, +30: mean 20, sd 10, t(2) = 4.303: 20 ± 24.84
        ("horovod.iteration_time_s.mean change <= 50% (low)", "holds", None),
        ("horovod.iteration_time_s.mean change <= -10% (low)", "misses", None),
        # 18 points from 2 %: t(3)·10/√4 = 15.9 < 18
        ("horovod.iteration_time_s.mean change <= 2% (low)", "undecided", 4),
        # 5 points from 15 %: t(17)·10/√18 = 4.97 < 5, t(16)·10/√17 = 5.14
        ("horovod.iteration_time_s.mean change in [15%, 30%] (low vs same)", "undecided", 18),
        ("horovod.iteration_time_s.mean change in [-50%, 50%] (low)", "holds", None),
        ("horovod.iteration_time_s.mean change in [60%, 70%] (low)", "misses", None),
    ],
)
def test_interval_and_verdict_by_hand(tmp_path, aim, verdict, needed):
    p = write(tmp_path, seeds=[1, 2, 3], aims=[aim])
    run(p, tmp_path / "out", fake(ITER))
    v = ag.verdicts(tmp_path / "out")
    (j,) = v["judged"]
    assert j["value"] == "low" and j["baseline"] == "same"
    assert [round(x, 6) for x in j["per_seed"].values()] == [10.0, 20.0, 30.0]
    half = 4.303 * 10 / math.sqrt(3)
    assert j["mean"] == pytest.approx(20.0)
    assert j["interval"] == pytest.approx([20 - half, 20 + half])
    assert (j["verdict"], j["seeds_needed"]) == (verdict, needed)
    assert v["decided"] is (verdict != "undecided")


def test_an_aim_without_a_value_judges_every_compared_value(tmp_path):
    p = write(tmp_path, seeds=[1, 2, 3], aims=["horovod.iteration_time_s.mean change <= 2%"])
    run(p, tmp_path / "out", fake(ITER))
    judged = ag.verdicts(tmp_path / "out")["judged"]
    assert {j["value"]: j["verdict"] for j in judged} == {"low": "undecided", "nobar": "holds"}
    nobar = next(j for j in judged if j["value"] == "nobar")
    assert nobar["interval"] == [0.0, 0.0] and nobar["sd"] == 0.0


def test_a_relative_aim_is_judged_on_the_paired_difference(tmp_path):
    """nobar keeps ≥ 80 % of low's small-flow gain: per seed nobar − 0.8 × low, by hand."""
    small = {("same", s): 0.010 for s in (1, 2, 3)} | {
        ("low", 1): 0.005, ("low", 2): 0.006, ("low", 3): 0.004,    # −50, −40, −60 %
        ("nobar", 1): 0.0055, ("nobar", 2): 0.007, ("nobar", 3): 0.005,  # −45, −30, −50 %
    }  # fmt: skip
    p = write(tmp_path, seeds=[1, 2, 3],
              aims=["websearch.fct_s.small.mean change <= 0.8 * low (nobar)"])  # fmt: skip
    run(p, tmp_path / "out", fake(ITER, small))
    (j,) = ag.verdicts(tmp_path / "out")["judged"]
    xs = [-45 + 0.8 * 50, -30 + 0.8 * 40, -50 + 0.8 * 60]  # −5, +2, −2
    assert list(j["per_seed"].values()) == pytest.approx(xs)
    mean = sum(xs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / 2)
    assert j["interval"] == pytest.approx([mean - 4.303 * sd / 3**0.5, mean + 4.303 * sd / 3**0.5])
    assert j["verdict"] == "undecided"


def test_a_pair_started_hours_apart_is_flagged_in_sweep_csv_and_the_verdict(tmp_path):
    """Seed 2's low run forced two hours after its baseline: the csv's `pair` column names it,
    the verdict resting on it says so, and `report` prints both."""
    started = {("low", 2): 1_800_000_000.0 + 120 + 7200}
    p = write(tmp_path, seeds=[1, 2, 3], aims=["horovod.iteration_time_s.mean change <= 50% (low)"])
    out = tmp_path / "out"
    run(p, out, fake(ITER, started=started))
    rows = list(csv.DictReader((out / "sweep.csv").read_text().splitlines()))
    flagged = {(r["scheme"], r["seed"]): r["pair"] for r in rows if r["pair"]}
    assert flagged == {("low", "2"): "started 2.0 h apart"}
    assert all(r["started"].endswith("Z") for r in rows)
    (j,) = ag.verdicts(out)["judged"]
    assert j["flagged_pairs"] == [{"seed": 2, "why": "low: started 2.0 h apart"}]
    assert j["text"] == "holds (1 flagged pair)"
    r = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "report", str(out), "--no-plots"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, "COLUMNS": "250"},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "holds (1 flagged pair)" in r.stdout and "started 2.0 h apart" in r.stdout
    assert "+20.0 [-4.8, +44.8]" in r.stdout
    md = subprocess.run([sys.executable, "-m", "testbed.cli", "report", str(out), "--markdown"],
                        capture_output=True, text=True, timeout=120, cwd=ROOT)  # fmt: skip
    assert md.returncode == 0, md.stderr
    lines = md.stdout.splitlines()
    assert lines[2:4] == [
        "| value | aim | per seed | mean [95 % interval] | verdict |",
        "|---|---|---|---|---|",
    ]
    (row,) = lines[4:]
    assert row.startswith("| low vs same | horovod.iteration_time_s.mean change <= 50% (low) | 1:")
    assert row.endswith("| +20.0 [-4.8, +44.8] | holds (1 flagged pair); seed 2: low: started 2.0 h "
                        "apart |")  # fmt: skip
    bad = subprocess.run([sys.executable, "-m", "testbed.cli", "report", str(tmp_path),
                          "--markdown"], capture_output=True, text=True, timeout=120, cwd=ROOT)  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--markdown:" in bad.stderr


def test_pair_flags_by_hand():
    a = {
        "started_at": 0.0,
        "host_cpu": {"busy": 0.50, "steal": 0.001},
        "link_budget": {"load": 0.3},
    }
    b = {
        "started_at": 3599.0,
        "host_cpu": {"busy": 0.74, "steal": 0.019},  # the schemes' own gap, 24 points
        "link_budget": {"load": 0.39},
    }
    assert aims.pair_flags(a, b) == []
    c = {
        "started_at": 3700.0,
        "host_cpu": {"busy": 0.80, "steal": 0.05},
        "link_budget": {"load": 0.5},
    }
    assert aims.pair_flags(a, c) == [
        "started 1.0 h apart", "steal 0% against 5%", "host CPU busy 50% against 80%",
        "link-budget load 30% against 50%",
    ]  # fmt: skip
    # a job alone against the job beside another (Crux's anchors: link-budget load 10 % and
    # 26 %): the run that leaves a workload out asks less by construction; steal still counts
    both, alone = (
        {**c, "workloads": {"gpt": "horovod", "bert": "horovod"}},
        {**a, "workloads": {"gpt": "horovod"}},
    )
    assert aims.pair_flags(alone, both) == ["started 1.0 h apart", "steal 0% against 5%"]
    # a run over its budget (the CPU line at 70 %: R = 2 at x100 asks 1.27): alike is not enough
    d = {**a, "link_budget": {"load": 1.27}}
    assert aims.pair_flags(d, {**a, "link_budget": {"load": 1.27}}) == [
        "over this machine's budget (load 1.27)"
    ]


PLAN = {"from": 1, "min": 3, "max": 7, "until": "decided"}


def test_until_decided_stops_at_min_on_a_decided_aim_and_resumes(tmp_path):
    it = {(s, k): 1.0 if s == "same" else 1.1 for s in SCHEMES for k in range(1, 8)}
    p = write(tmp_path, seeds=PLAN, paired={"scheme": {k: SCHEMES[k] for k in ("same", "low")}},
              aims=["horovod.iteration_time_s.mean change >= 5% (low)"])  # fmt: skip
    spec, out, calls = sw.load_spec(p), tmp_path / "out", []

    def run_round(points):
        return sw.run_sweep(spec, points, out, fake(it, calls=calls), QuietUI())

    d = run_until_decided(spec, p, out, run_round)
    assert (d.stopped, d.seeds) == ("decided", 3)
    assert calls == [("same", 1), ("low", 1), ("low", 2), ("same", 2), ("same", 3), ("low", 3)]
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["verdicts"]["until"] == {"stopped": "decided", "seeds": 3}
    calls.clear()
    again = run_until_decided(spec, p, out, run_round)  # resumed: nothing runs again
    assert (again.stopped, calls) == ("decided", [])


def test_until_decided_adds_seeds_in_pairs_while_undecided_up_to_max(tmp_path):
    """Changes of +10 / −10 % in turn never leave 0 %: seeds 4–5, then 6–7, then max."""
    it = {("same", k): 1.0 for k in range(1, 8)} | {
        ("low", k): 1.1 if k % 2 else 0.9 for k in range(1, 8)
    }
    p = write(tmp_path, seeds=PLAN, paired={"scheme": {k: SCHEMES[k] for k in ("same", "low")}},
              aims=["horovod.iteration_time_s.mean change <= 2%"])  # fmt: skip
    spec, out, calls, said = sw.load_spec(p), tmp_path / "out", [], []

    def run_round(points):
        return sw.run_sweep(spec, points, out, fake(it, calls=calls), QuietUI())

    d = run_until_decided(spec, p, out, run_round, say=said.append)
    assert (d.stopped, d.seeds) == ("max", 7)
    assert [k for _, k in calls] == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7]
    assert len(said) == 2 and "adding seeds up to 5" in said[0]
    (j,) = json.loads((out / "sweep.json").read_text())["verdicts"]["judged"]
    assert j["n"] == 7 and j["verdict"] == "undecided"


def test_a_part_run_with_only_counts_its_own_cost_and_its_own_aims(tmp_path):
    """`sweep --only cell=a --budget`: the round's cost is cell a's runs (cell b's unrun
    points are another part's), and the rounds stop once cell a's aim is decided, though
    cell b's stays open (no seed measured it)."""
    cells = {"a": {"workloads.horovod.compute_time": "300ms"},
             "b": {"workloads.horovod.compute_time": "400ms"}}  # fmt: skip
    p = write(tmp_path, seeds=PLAN,
              paired={"cell": cells, "scheme": {k: SCHEMES[k] for k in ("same", "low")}},
              aims=["horovod.iteration_time_s.mean change <= 2% where cell=a",
                    "horovod.iteration_time_s.mean change <= 2% where cell=b"])  # fmt: skip
    spec, out, calls = sw.load_spec(p), tmp_path / "out", []
    it = {(s, k): 1.0 if s == "same" else 1.5 for s in ("same", "low") for k in range(1, 8)}
    inner = fake(it, calls=calls)

    def run_one(scenario, folder, ui):
        calls.append(scenario.workloads["horovod"].compute_time)
        return inner(scenario, folder, ui)

    def run_round(points, only):
        kept = sw.only_points(spec, points, only)
        outcomes = sw.run_sweep(spec, points, out, run_one, QuietUI(), kept)
        for o in outcomes:  # as if each run took 10 minutes
            f = out / "runs" / o.point.folder / "point.json"
            if o.status == "ok":
                f.write_text(json.dumps({**json.loads(f.read_text()), "wall_s": 600}))
        return outcomes

    run_round(sw.expand(spec, p, [1]), ("cell=b",))  # cell b's first seed, run earlier
    calls.clear()
    d = run_until_decided(
        spec, p, out, lambda pts: run_round(pts, ("cell=a",)), budget_s=3700,
        keep=lambda pts: sw.only_points(spec, pts, ("cell=a",)),
    )  # fmt: skip
    # 6 runs of cell a (60 min) fit in 61.7; counting cell b's 4 unrun points would not
    assert d.stopped == "decided" and d.seeds == 3
    assert [c for c in calls if not isinstance(c, tuple)] == [0.3] * 6
    by_cell = {j["cell"]["cell"]: j["verdict"] for j in d.verdicts["judged"]}
    assert by_cell == {"a": "misses", "b": "undecided"}


def test_a_budget_stops_before_a_round_that_would_not_fit(tmp_path):
    it = {("same", k): 1.0 for k in range(1, 8)} | {
        ("low", k): 1.1 if k % 2 else 0.9 for k in range(1, 8)
    }
    p = write(tmp_path, seeds=PLAN, paired={"scheme": {k: SCHEMES[k] for k in ("same", "low")}},
              aims=["horovod.iteration_time_s.mean change <= 2%"])  # fmt: skip
    spec, out = sw.load_spec(p), tmp_path / "out"

    def run_round(points):
        outcomes = sw.run_sweep(spec, points, out, fake(it), QuietUI())
        for o in outcomes:  # as if each run took 10 minutes
            f = out / "runs" / o.point.folder / "point.json"
            f.write_text(json.dumps({**json.loads(f.read_text()), "wall_s": 600}))
        return outcomes

    d = run_until_decided(spec, p, out, run_round, budget_s=1800)
    assert (d.stopped, d.seeds) == ("budget", 3)  # two more seeds: 4 runs, 40 min > 30


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"aims": ["incast.qct_s.mean change <= 2%"]},
         "aims[0]: incast.qct_s.mean: the runs of point 0"),
        ({"aims": ["horovod.iteration_time_s.mean change <= 2% (vs gold)"]},
         "'gold' is not a baseline of the compared axis"),
        ({"aims": ["horovod.iteration_time_s.mean change <= 2% (gold)"]},
         "'gold' is not a value of the compared axis"),
        ({"aims": ["horovod.iteration_time_s.mean <= 2%"]}, "is not 'PATH change OP BOUND"),
        ({"aims": ["horovod.iteration_time_s.mean change <= 2"]}, "a bound is a percentage"),
        ({"aims": ["links.*.rate_bps change <= 2%"]}, "an aim judges one number"),
        ({"aims": ["horovod.iteration_time_s.mean change in [5%, 1%]"]}, "low end must be below"),
        ({"aims": ["horovod.iteration_time_s.mean change <= 0.8 * same (low)"]},
         "a relative bound names another compared value"),
        ({"seeds": {"until": "decided"}}, "seeds.until: decided needs aims"),
        ({"seeds": {"min": 5, "max": 3, "until": "decided"},
          "aims": ["horovod.iteration_time_s.mean change <= 2%"]}, "min (5) is above max (3)"),
        ({"compare": None, "aims": ["horovod.iteration_time_s.mean change <= 2%"]},
         "aims: judge a comparison"),
    ],
)  # fmt: skip
def test_bad_aims_are_refused_in_one_line_before_anything_runs(tmp_path, spec, message):
    p = write(tmp_path, **spec)
    with pytest.raises(ScenarioError, match=None) as e:
        sw.expand(sw.load_spec(p), p)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_the_cli_refuses_a_bad_aim_with_exit_2_and_creates_nothing(tmp_path):
    p = write(tmp_path, aims=["incast.qct_s.mean change <= 2%"])
    out = tmp_path / "out"
    r = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "sweep", str(p), "--out", str(out)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr
    assert "aims[0]" in r.stderr and not out.exists()
    r = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "sweep", str(write(tmp_path, seeds=[1, 2])),
         "--budget", "6h"], capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 2 and "--budget: goes with seeds: {until: decided}" in r.stderr


def test_dry_run_prints_the_cost_from_the_runs_already_finished(tmp_path):
    p = write(tmp_path, seeds=PLAN, paired={"scheme": {k: SCHEMES[k] for k in ("same", "low")}},
              aims=["horovod.iteration_time_s.mean change <= 2%"])  # fmt: skip
    out = tmp_path / "out"
    spec = sw.load_spec(p)
    points = sw.expand(spec, p)
    sw.run_sweep(spec, points[:2], out, fake(ITER), QuietUI())
    for f in (out / "runs").glob("*/point.json"):
        f.write_text(json.dumps({**json.loads(f.read_text()), "wall_s": 300}))
    r = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "sweep", str(p), "--out", str(out), "--dry-run"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    # 6 points at min (3 seeds), 2 finished at 5 min each: 4 left, 20 min; max 7 seeds: 14
    # runs, 12 more, 60 min
    assert "at 5m00s a run (the mean of 2 finished" in r.stdout
    assert "4 of 6 runs left, about 20m00s" in r.stdout
    assert "up to max 7 seeds 12 runs more, about 1h00m" in r.stdout


def test_dry_run_shows_each_points_budget_load_and_the_time_scale_that_fits(tmp_path):
    """With a budget kept since this boot, each point's load and a line naming how many are
    over and the time_scale that fits them; without one, a line saying it is not measured
    (2026-12-08: a committed sweep whose every pair ran at load 1.46 was seen only in its
    report). By hand: one flow carried 50 Mbit/s where a 100 Mbit/s host link asks 100: load
    2.00, time_scale ceil(1 × 2.00) = 2; no kind's CPU probed, so none is counted."""
    from testbed.scenario import budget

    p = write(tmp_path, seeds=[1, 2])
    state = tmp_path / "state"
    state.mkdir()
    kept = {"mode": "exact", "one_flow_bps": 50e6, "all_flows_bps": 1e12, "flows": 8,
            "probe_rate_bps": 0, "cores": 2, "kind_costs": {}}  # fmt: skip
    env = {**os.environ, "COLUMNS": "200", "TESTBED_STATE_DIR": str(state)}

    def dry() -> str:
        r = subprocess.run(
            [sys.executable, "-m", "testbed.cli", "sweep", str(p), "--out",
             str(tmp_path / "out"), "--dry-run"],
            capture_output=True, text=True, timeout=120, cwd=ROOT, env=env,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        return r.stdout

    out = dry()
    assert "not measured since boot" in out and "over" not in out.split("budget load:")[0]
    (state / ".link-budget").write_text(
        json.dumps({"identity": budget._identity(), "modes": {"exact": kept}})
    )
    out = dry()
    points = len(sw.expand(sw.load_spec(p), p))
    assert out.count("2.00 over") == points, out
    assert f"{points} of {points} runs ask more than this machine carries" in out
    assert "time_scale 2 fits them all" in out
    assert "the CPU of horovod, websearch is left out" in out


def test_where_judges_an_aim_in_the_cells_it_names_only(tmp_path):
    """Each cell its own band (the thesis' R = 2 and R = 4): `where AXIS=VALUE`, the axis by
    its column or its path."""
    p = write(
        tmp_path, seeds=[1, 2, 3],
        axes={"workloads.websearch.utilization": ["5%", "10%"]},
        paired={"scheme": {k: SCHEMES[k] for k in ("same", "low")}},
        aims=["horovod.iteration_time_s.mean change in [15%, 25%] (low) where utilization=5%",
              "horovod.iteration_time_s.mean change <= 50% (low) "
              "where workloads.websearch.utilization=10%"],
    )  # fmt: skip
    run(p, tmp_path / "out", fake(ITER))
    judged = ag.verdicts(tmp_path / "out")["judged"]
    got = {(j["cell"]["workloads.websearch.utilization"], j["aim"].split("=")[-1]) for j in judged}
    assert got == {("5%", "5%"), ("10%", "10%")}
    assert len(judged) == 2


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("where cell=r2", "where cell: not an axis of the sweep's cells; they are: utilization"),
        ("where utilization=7%", "'7%' is not one of its values: 5%, 10%"),
        ("where utilization", "write where AXIS=VALUE"),
    ],
)
def test_a_where_naming_no_cell_is_refused(tmp_path, where, message):
    p = write(tmp_path, axes={"workloads.websearch.utilization": ["5%", "10%"]},
              aims=[f"horovod.iteration_time_s.mean change <= 2% (low) {where}"])  # fmt: skip
    with pytest.raises(ScenarioError) as e:
        sw.load_spec(p)
    assert message in str(e.value)


def test_a_cell_without_runs_leaves_its_aims_undecided(tmp_path):
    """--only ran one cell: the other's aim is undecided (no seed), so the sweep is not."""
    p = write(
        tmp_path, seeds=[1, 2, 3],
        axes={"workloads.websearch.utilization": ["5%", "10%"]},
        paired={"scheme": {k: SCHEMES[k] for k in ("same", "low")}},
        aims=["horovod.iteration_time_s.mean change <= 50% (low)"],
    )  # fmt: skip
    spec = sw.load_spec(p)
    ps = sw.expand(spec, p)
    kept = sw.only_points(spec, ps, ("utilization=5%",))
    sw.run_sweep(spec, ps, tmp_path / "out", fake(ITER), QuietUI(), kept)
    v = ag.verdicts(tmp_path / "out")
    got = {
        j["cell"]["workloads.websearch.utilization"]: (j["verdict"], j["n"]) for j in v["judged"]
    }
    assert got == {"5%": ("holds", 3), "10%": ("undecided", 0)}
    assert v["decided"] is False


PIAS = {
    "same": SCHEMES["same"],
    "low": SCHEMES["low"],
    # the tenants' own treatment changed (web search in the low band, as PIAS demotes it)
    "pias": {"workloads.horovod.tc_class": "low", "workloads.websearch.tc_class": "low"},
    # its control: the same tenant treatment, the job static
    "pias-control": {"workloads.horovod.tc_class": "high", "workloads.websearch.tc_class": "low"},
}


@pytest.mark.parametrize(
    "aim",
    [
        "websearch.fct_s.small.mean change <= -25% (pias)",
        "websearch.fct_s.small.mean change <= -25%",  # every value: pias among them
        "websearch.fct_s.small.mean change <= 0.8 * pias (low)",  # pias' gain against same
    ],
)
def test_an_aim_across_a_change_of_the_tenants_treatment_is_refused(tmp_path, aim):
    """pias credited with what moving web search did: one line naming the field and the fix."""
    p = write(tmp_path, paired={"scheme": PIAS}, aims=[aim])
    with pytest.raises(ScenarioError) as e:
        sw.expand(sw.load_spec(p), p)
    msg = str(e.value)
    assert "aims[0]: 'pias' treats the tenants otherwise than 'same'" in msg, msg
    assert "workloads.websearch.tc_class: 'low' against None" in msg  # None: the default
    assert "add a control value" in msg and "\n" not in msg


def test_an_aim_against_its_control_is_like_with_like(tmp_path):
    p = write(tmp_path, paired={"scheme": PIAS},
              aims=["websearch.fct_s.small.mean change <= -25% (pias vs pias-control)",
                    "horovod.iteration_time_s.mean change <= 2% (low)"])  # fmt: skip
    assert len(sw.expand(sw.load_spec(p), p)) == 4


def test_an_aim_reads_only_its_own_runs_so_a_scheme_may_leave_a_job_out(tmp_path):
    """An anchor scheme with the job left out (`workloads.horovod: null`, the web flows
    alone) writes no training figures: an aim on the flows against that anchor is accepted,
    one on the job against it is refused, naming the anchor's point."""
    schemes = {**SCHEMES, "alone": {"workloads.horovod": None}}
    flows = "websearch.fct_s.small.mean change <= 3% (low vs alone)"
    p = write(tmp_path, paired={"scheme": schemes}, aims=[flows])
    points = sw.expand(sw.load_spec(p), p)
    alone = next(pt for pt in points if pt.labels["scheme"] == "alone")
    assert alone.scenario.workloads.get("horovod") is None
    job = "horovod.iteration_time_s.mean change <= 3% (low vs alone)"
    p = write(tmp_path, paired={"scheme": schemes}, aims=[flows, job])
    with pytest.raises(ScenarioError) as e:
        sw.expand(sw.load_spec(p), p)
    assert "aims[1]: horovod.iteration_time_s.mean: the runs of point" in str(e.value)
    assert "scheme=alone" in str(e.value)
