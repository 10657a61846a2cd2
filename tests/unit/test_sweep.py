"""Sweep files: expansion, paired axes, identities for resuming, and refusals before any run."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest
import yaml

from testbed.core import errors
from testbed.core.errors import ScenarioError
from testbed.results import sweep as sw
from testbed.scenario.resolve import load_scenario, with_overrides
from testbed.workloads.websearch.controller import planned_flows

ROOT = Path(__file__).resolve().parents[2]

BASE = {
    "name": "b",
    "duration": "10s",
    "topology": {"hosts": 3, "link_rate": "100mbit"},
    "tc_profile": "thesis-2band",
    "workloads": {
        "horovod": {"model_size": "1MB", "compute_time": "300ms"},
        "websearch": {"arrival_rate": 1},
    },
}


class QuietUI:
    """A sweep's display that shows nothing (run_sweep's ui)."""

    def start_point(self, *a):
        return None

    def end_point(self, *a):
        pass


def write(tmp_path: Path, spec: dict, base: dict | None = None) -> Path:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base or BASE, sort_keys=False))
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump({"name": "s", "base": "base.yaml", **spec}, sort_keys=False))
    return p


def points(tmp_path: Path, spec: dict, base: dict | None = None) -> list[sw.Point]:
    p = write(tmp_path, spec, base)
    return sw.expand(sw.load_spec(p), p)


GRID = {
    "axes": {
        "workloads.horovod.compute_to_network_ratio": [16, 2],
        "workloads.websearch.utilization": ["3.125%", "25%"],
    },
    "paired": {
        "scheme": {
            "same": {"workloads.horovod.tc_class": "high"},
            "low": {"workloads.horovod.tc_class": "low"},
        }
    },
    "seeds": [1, 2],
}


def test_fixed_order_is_the_files_product(tmp_path):
    ps = points(tmp_path, {**GRID, "order": "fixed"})
    assert [p.labels["scheme"] for p in ps[:4]] == ["same", "low", "same", "low"]
    assert ps[3].folder == "003-16_3.125pct_s2_low"


def test_alternating_order_puts_the_compared_axis_innermost_and_turns_it_each_seed(tmp_path):
    """ABBA with the compared axis a plain axis: its runs of one cell and seed back to back."""
    spec = {
        "axes": {
            "workloads.horovod.tc_class": ["high", "low"],
            "workloads.websearch.utilization": ["3.125%", "25%"],
        },
        "seeds": [1, 2, 3],
        "compare": {"axis": "workloads.horovod.tc_class", "baseline": "high"},
    }
    ps = points(tmp_path, spec)
    order = [(p.labels["workloads.websearch.utilization"],
              p.labels["seed"], p.labels["workloads.horovod.tc_class"]) for p in ps]  # fmt: skip
    assert order[:6] == [
        ("3.125%", "1", "high"), ("3.125%", "1", "low"),
        ("3.125%", "2", "low"), ("3.125%", "2", "high"),
        ("3.125%", "3", "high"), ("3.125%", "3", "low"),
    ]  # fmt: skip
    assert [p.index for p in ps] == list(range(12))


def test_the_compared_axis_runs_innermost_whatever_its_place_in_the_file(tmp_path):
    spec = {
        "paired": {
            "scheme": {"same": {"workloads.horovod.tc_class": "high"},
                       "low": {"workloads.horovod.tc_class": "low"}},
            "cell": {"a": {"duration": "10s"}, "b": {"duration": "11s"}},
        },
        "seeds": [1, 2],
        "compare": {"axis": "scheme", "baseline": "same"},
    }  # fmt: skip
    ps = points(tmp_path, spec)
    assert [(p.labels["seed"], p.labels["cell"], p.labels["scheme"]) for p in ps] == [
        ("1", "a", "same"), ("1", "a", "low"), ("1", "b", "same"), ("1", "b", "low"),
        ("2", "b", "low"), ("2", "b", "same"), ("2", "a", "low"), ("2", "a", "same"),
    ]  # fmt: skip


def test_cartesian_product_with_seeds_inside_and_paired_innermost(tmp_path):
    ps = points(tmp_path, GRID)
    assert len(ps) == 2 * 2 * 2 * 2
    first = ps[:4]
    assert [p.labels["seed"] for p in first] == ["1", "1", "2", "2"]
    # alternating (the default): the second seed's pair in the other order
    assert [p.labels["scheme"] for p in first] == ["same", "low", "low", "same"]
    h, w = ps[1].scenario.workloads.horovod, ps[1].scenario.workloads.websearch
    assert h.compute_to_network_ratio == 16 and h.compute_time is None  # the axis replaced it
    assert h.d.tc_class == "low" and w.utilization == 3.125 and w.arrival_rate is None
    assert ps[-1].scenario.seed == 2 and ps[-1].scenario.workloads.websearch.utilization == 25
    assert len({p.identity for p in ps}) == 16
    assert len({p.folder for p in ps}) == 16
    assert ps[3].folder == "003-16_3.125pct_s2_same"


def test_identity_is_the_resolved_scenario(tmp_path):
    """Two spellings of one point are one point; a different input is another; the name
    and description do not matter, and neither does where a flow-size file lives."""
    a = points(tmp_path, {"set": {"workloads.horovod.compute_time": "0.3s"}})
    b = points(tmp_path, {"set": {"workloads.horovod.compute_time": "300ms"}})
    assert a[0].identity == b[0].identity
    c = points(tmp_path, {"set": {"duration": "11s"}})
    assert c[0].identity != b[0].identity
    d = points(tmp_path, {"set": {"description": "same runs, new words", "name": "renamed"}})
    assert d[0].identity == b[0].identity
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "sizes.csv").write_text("bytes,cdf\n1000,0\n5000,1\n")
    e = points(tmp_path, {"set": {"workloads.websearch.sizes": "one/sizes.csv"}})
    f = points(tmp_path, {"set": {"workloads.websearch.sizes": "two/sizes.csv"}})
    assert e[0].identity == f[0].identity != b[0].identity


def test_set_applies_to_every_point(tmp_path):
    ps = points(tmp_path, {"set": {"duration": "20s"}, "seeds": [1, 2, 3]})
    assert [p.scenario.duration for p in ps] == [20, 20, 20]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"axes": {"topology.hosts": [1]}}, "topology.hosts: must be ≥ 2"),
        ({"axes": {"workloads.horovod.tc_class": ["gold"]}}, "'gold' is not a class"),
        ({"axes": {"topology.link_rate": []}}, "give at least one value"),
        ({"compare": {"axis": "scheme", "baseline": "x"}}, "compare.axis: 'scheme' is not an axis"),
        (
            {"paired": {"p": {"a": {}}}, "compare": {"axis": "p", "baseline": "b"}},
            "compare.baseline: 'b' is not a value of p",
        ),
        ({"axes": {"workloads.horovod.barrier": [True, True]}}, "resolve to the same scenario"),
        ({"frobnicate": 1}, "frobnicate: unknown field"),
        ({"map": {"x": "a", "y": "b"}}, "map.x: not one of the axes"),
        ({"set": {"seed": 5}}, "the seeds of a sweep are given by `seeds:`"),
        ({"axes": {"seed": [1, 2]}}, "the seeds of a sweep are given by `seeds:`"),
        (
            {
                "axes": {"workloads.horovod.tc_class": ["high"]},
                "paired": {"tc_class": {"a": {"workloads.websearch.tc_class": "low"}}},
            },
            "would share the column 'tc_class'",
        ),
        ({"axes": {"topology.status": [1]}}, "would share the column 'status'"),
        ({"paired": {"censored": {"a": {}}}}, "would share the column 'censored'"),
    ],
)
def test_bad_sweeps_are_refused_with_the_field(tmp_path, spec, message):
    with pytest.raises(ScenarioError) as e:
        points(tmp_path, spec)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_resume_skips_finished_points_and_reruns_failed_ones(tmp_path):
    p = write(tmp_path, {"seeds": [1, 2, 3]})
    spec = sw.load_spec(p)
    out = tmp_path / "out"
    calls: list[int] = []

    def fake_run(scenario, folder, _ui):  # a stand-in for the orchestrator: writes a summary
        calls.append(scenario.seed)
        folder.mkdir(parents=True)
        time.sleep(0.02)  # a run that takes measurable time
        status = "failed" if scenario.seed == 2 and len(calls) < 4 else "ok"
        (folder / "summary.json").write_text(json.dumps({"status": status, "duration_s": 10}))
        if status == "failed":
            raise errors.TestbedError("boom")
        return {"status": "ok"}

    first = sw.run_sweep(spec, sw.expand(spec, p), out, fake_run, QuietUI())
    assert [o.status for o in first] == ["ok", "failed", "ok"] and calls == [1, 2, 3]
    rows = json.loads((out / "sweep.json").read_text())["results"]
    assert [r["status"] for r in rows] == ["ok", "failed", "ok"] and rows[1]["error"] == "boom"
    assert (out / "sweep.csv").read_text().count("\n") == 4
    second = sw.run_sweep(spec, sw.expand(spec, p), out, fake_run, QuietUI())
    assert [o.status for o in second] == ["skipped", "ok", "skipped"] and calls[3:] == [2]
    # a resumed sweep still says how long its earlier runs took
    walls = [r["wall_s"] for r in json.loads((out / "sweep.json").read_text())["results"]]
    assert walls[0] == rows[0]["wall_s"] > 0 and walls[2] == rows[2]["wall_s"] > 0
    failed = [d.name for d in (out / "runs").iterdir() if ".failed-" in d.name]
    assert len(failed) == 1  # the first attempt's records are kept aside


def test_planned_flows_match_the_thesis_grid_sizing():
    """The grid example promises ≥ 150 measured small flows per cell over three seeds at the
    lightest load; count them the way the generators will draw them."""
    from testbed.core.stats import size_class

    base = load_scenario(ROOT / "examples" / "thesis-grid-base.yaml")
    small = 0
    for seed in (1, 2, 3):
        flows = planned_flows(with_overrides(base, {"seed": seed}))
        small += sum(1 for _, _, size in flows if size_class(size) == "small")
    assert small >= 150
    # and the per-host rate is the thesis': 3.125 % of 100 Mbit/s with 1.71 MB flows
    rate = base.workloads.websearch.d.arrival_rate
    assert rate == pytest.approx(0.03125 * 100e6 / (1_711_550 * 8), rel=1e-3)


def test_each_point_is_checked_against_its_expect(tmp_path):
    """A sweep's `expect:` is evaluated per point, as `up` does: kept in the run folder, shown
    in sweep.csv's `expect` column, counted in sweep.json; a failing point does not stop it."""
    base = {**BASE, "expect": ["horovod.iteration_time_s.mean < 400ms"]}
    p = write(tmp_path, {"seeds": [1, 2]}, base)
    spec = sw.load_spec(p)
    out = tmp_path / "out"
    means = {1: 0.35, 2: 0.45}  # hand-set: seed 2 breaks the 400 ms limit

    def fake_run(scenario, folder, _ui):
        folder.mkdir(parents=True)
        summary = {"status": "ok", "horovod": {"iteration_time_s": {"mean": means[scenario.seed]}}}
        (folder / "summary.json").write_text(json.dumps(summary))
        return summary

    outcomes = sw.run_sweep(spec, sw.expand(spec, p), out, fake_run, QuietUI())
    assert [o.expect_column for o in outcomes] == ["passed", "1 of 1 failed"]
    assert "FAIL" in outcomes[1].failed_checks[0] and "450ms" in outcomes[1].failed_checks[0]
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["expect_failed"] == 1 and doc["failed"] == 0
    assert [r["expect"] for r in doc["results"]] == ["passed", "1 of 1 failed"]
    kept = json.loads((out / "runs" / outcomes[1].point.folder / "expectations.json").read_text())
    assert kept[0]["passed"] is False and kept[0]["measured"][0]["value"] == 0.45
    # resumed: nothing runs again, the checks are evaluated again on the kept summaries
    again = sw.run_sweep(spec, sw.expand(spec, p), out, fake_run, QuietUI())
    assert [o.status for o in again] == ["skipped", "skipped"]
    assert [o.expect_column for o in again] == ["passed", "1 of 1 failed"]


def test_axes_that_end_alike_keep_their_instance_in_the_column(tmp_path):
    p = write(tmp_path, {"axes": {"workloads.horovod.tc_class": ["high"],
                                  "workloads.websearch.tc_class": ["low"]}})  # fmt: skip
    spec = sw.load_spec(p)
    assert [spec.column(a) for a in spec.axes] == ["horovod.tc_class", "websearch.tc_class"]


def test_an_axis_on_an_instance_the_base_lacks_is_refused(tmp_path):
    """A typo in the instance name would otherwise add an instance of the kind it names."""
    with pytest.raises(ScenarioError) as e:
        points(tmp_path, {"axes": {"workloads.web.utilization": ["5%"]}})
    assert "workloads.web.utilization: the base scenario has no workload instance 'web'" in str(
        e.value
    )
    # setting the instance whole adds it, as meant
    ps = points(tmp_path, {"set": {"workloads.web": {"kind": "websearch"}},
                           "axes": {"workloads.web.utilization": ["5%"]}})  # fmt: skip
    assert "web" in ps[0].scenario.workloads


def test_sweep_csv_has_every_points_columns(tmp_path):
    """A first point that failed (no figures) or points whose instances differ: the header is
    every row's columns, not the first row's."""
    p = write(tmp_path, {"seeds": [1, 2]})
    spec = sw.load_spec(p)

    def fake_run(scenario, folder, _ui):
        folder.mkdir(parents=True)
        if scenario.seed == 1:
            raise errors.TestbedError("boom")
        return {"status": "ok", "workloads": {"horovod": "horovod"},
                "horovod": {"iteration_time_s": {"mean": 0.5, "p99": 0.6}}}  # fmt: skip

    sw.run_sweep(spec, sw.expand(spec, p), tmp_path / "out", fake_run, QuietUI())
    with open(tmp_path / "out" / "sweep.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["status"] for r in rows] == ["failed", "ok"]
    assert rows[0]["iteration_mean_s"] == "" and rows[1]["iteration_mean_s"] == "0.5"


def test_report_of_a_sweep_that_compares_nothing_lists_its_points(tmp_path):
    import subprocess
    import sys

    p = write(tmp_path, {"seeds": [1, 2]})
    spec = sw.load_spec(p)

    def fake_run(scenario, folder, _ui):
        folder.mkdir(parents=True)
        return {"status": "ok", "workloads": {"horovod": "horovod"},
                "horovod": {"iteration_time_s": {"mean": 0.25 * scenario.seed, "p99": 1}}}  # fmt: skip

    sw.run_sweep(spec, sw.expand(spec, p), tmp_path / "out", fake_run, QuietUI())
    r = subprocess.run([sys.executable, "-m", "testbed.cli", "report", str(tmp_path / "out"),
                        "--json"], capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    points = json.loads(r.stdout)["points"]
    assert [x["iteration_mean_s"] for x in points] == [0.25, 0.5]


def test_a_field_added_later_keeps_finished_points_finished_at_its_default():
    """topology.link_mode, tcp_recovery, tcp_idle_restart, tcp_rto_initial, the tc profile's shared_limit
    and host_limit, and machines came after sweeps had run: at their defaults (what every run did before), a
    point's identity is the hash of the scenario without them, as it was then."""
    import hashlib

    s = load_scenario(Path(__file__).resolve().parents[2] / "examples" / "smoke.yaml")
    data = s.model_dump(mode="json")
    for k in ("name", "description"):
        data.pop(k, None)
    del data["topology"]["link_mode"]
    assert data["topology"].pop("tcp_recovery") == "linux"
    assert data["topology"].pop("tcp_idle_restart") is True
    assert data["topology"].pop("tcp_rto_initial") is None
    assert data["tc_profile"].pop("shared_limit") is None
    assert data["tc_profile"].pop("host_limit") is None
    assert data.pop("machines") is None
    before = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
    assert sw.identity_of(s) == before
    assert sw.identity_of(with_overrides(s, {"topology.link_mode": "fast"})) != before
    assert sw.identity_of(with_overrides(s, {"tc_profile": "thesis-3band-shared"})) != before
    assert sw.identity_of(with_overrides(s, {"tc_profile": "thesis-ns3"})) != before
    assert sw.identity_of(with_overrides(s, {"topology.tcp_recovery": "classic"})) != before
    assert sw.identity_of(with_overrides(s, {"topology.tcp_idle_restart": False})) != before
    assert sw.identity_of(with_overrides(s, {"topology.tcp_rto_initial": "1s"})) != before


def test_a_published_sweeps_finished_points_stay_finished_under_todays_schema():
    """The R = 4 cell's first seed of docs/results/thesis-exact/thesis-exact-verdict.yaml,
    packed with the identities its runs recorded (2026-12-07, before `real_model` existed):
    the sweep file expanded today gives its points the same identities, so resuming it does not
    run them again. A field added without its entry in LATER_INSTANCE_FIELDS made every
    finished point stale once (real_model, 2026-12-07: the sweep began seed 1 again)."""
    import tarfile

    root = Path(__file__).resolve().parents[2] / "docs" / "results" / "thesis-exact"
    path = root / "thesis-exact-verdict.yaml"
    spec = sw.load_spec(path)
    points = {p.folder: p for p in sw.expand(spec, path, [1])}
    for folder in ("002-s1_r4-12.5pct_same", "003-s1_r4-12.5pct_low"):
        with tarfile.open(root / "data" / "thesis-exact-verdict" / f"{folder}.tar.xz") as t:
            member = t.extractfile(f"{folder}/point.json")
            assert member is not None
            recorded = json.loads(member.read())["identity"]
        assert points[folder].identity == recorded, folder


def test_a_training_policy_at_its_default_keeps_finished_points_finished():
    """A training job's `policy` and `real_model` and web search's `demote` came after sweeps
    had run: static, none and no demotion (what every run did) are left out of a point's identity, and any other
    value makes the point another one."""
    import hashlib

    s = load_scenario(Path(__file__).resolve().parents[2] / "examples" / "thesis-mini.yaml")
    data = s.model_dump(mode="json")
    for k in ("name", "description"):
        data.pop(k, None)
    for k in ("link_mode", "tcp_recovery", "tcp_idle_restart", "tcp_rto_initial"):
        del data["topology"][k]
    del data["tc_profile"]["shared_limit"], data["tc_profile"]["host_limit"]
    assert data.pop("machines") is None
    assert data["workloads"]["horovod"].pop("policy") == {"kind": "static"}
    assert data["workloads"]["horovod"].pop("real_model") is None
    web = data["workloads"]["websearch"]
    assert web.pop("demote") is None and web["derived"].pop("demote_dscp") is None
    before = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
    assert sw.identity_of(s) == before
    adaptive = with_overrides(s, {"workloads.horovod.policy": "adaptive"})
    assert sw.identity_of(adaptive) != before
    demoted = with_overrides(s, {"workloads.websearch.demote": {"after": "100KB", "to": "low"}})
    assert sw.identity_of(demoted) != before


def test_sweeps_that_share_a_folder_keep_their_own_record(tmp_path):
    """A second sweep into a folder reuses the points the first ran (the same resolved
    scenario), and `report` can still find each sweep: sweep.json is the last one's,
    sweeps/NAME.json every one's."""
    calls: list[int] = []

    def fake_run(scenario, folder, _ui):
        calls.append(scenario.seed)
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text(json.dumps({"status": "ok"}))
        return {"status": "ok"}

    out = tmp_path / "out"
    grid = write(tmp_path, {"seeds": [1, 2]})
    sw.run_sweep(sw.load_spec(grid), sw.expand(sw.load_spec(grid), grid), out, fake_run, QuietUI())
    more = tmp_path / "more.yaml"
    more.write_text(yaml.safe_dump({"name": "more", "base": "base.yaml", "seeds": [2, 3]}))
    time.sleep(0.01)  # the order is by the files' times
    spec = sw.load_spec(more)
    outcomes = sw.run_sweep(spec, sw.expand(spec, more), out, fake_run, QuietUI())
    assert [o.status for o in outcomes] == ["skipped", "ok"] and calls == [1, 2, 3]
    assert json.loads((out / "sweep.json").read_text())["name"] == "more"
    assert sw.sweeps_in(out) == ["s", "more"]
    first = sw.sweep_doc(out, "s")
    assert first["name"] == "s" and [r["status"] for r in first["results"]] == ["ok", "ok"]
    assert sw.sweep_doc(out)["name"] == "more"
    with pytest.raises(ScenarioError, match=r"no sweep 'typo' ran in .*; it holds: s, more"):
        sw.sweep_doc(out, "typo")


PAIRED = {
    "seeds": [1, 2, 3],
    "paired": {"scheme": {"same": {"workloads.horovod.tc_class": "high"},
                          "low": {"workloads.horovod.tc_class": "low"}}},
    "compare": {"axis": "scheme", "baseline": "same"},
}  # fmt: skip


def test_only_runs_part_of_a_sweep_and_its_record_keeps_every_point(tmp_path):
    """A long sweep run in parts (`--only seed=1`, then `--only seed=2`): each invocation runs
    its own points only, and the sweep's record holds every point of the file (finished ones
    ok, the rest `not run`), so `report` compares every finished point, not the last part's."""
    import subprocess
    import sys

    p = write(tmp_path, PAIRED)
    spec = sw.load_spec(p)
    out = tmp_path / "out"
    calls: list[tuple[int, str]] = []
    mean = {(1, "high"): 0.5, (1, "low"): 0.6, (2, "high"): 0.5, (2, "low"): 0.55}  # by hand

    def fake_run(scenario, folder, _ui):
        key = (scenario.seed, scenario.workloads["horovod"].tc_class)
        calls.append(key)
        folder.mkdir(parents=True)
        summary = {"status": "ok", "workloads": {"horovod": "horovod"},
                   "horovod": {"iteration_time_s": {"mean": mean[key], "p99": 1}}}  # fmt: skip
        (folder / "summary.json").write_text(json.dumps(summary))
        return summary

    ps = sw.expand(spec, p)
    first = sw.run_sweep(spec, ps, out, fake_run, QuietUI(), sw.only_points(spec, ps, ("seed=1",)))
    assert [o.status for o in first] == ["ok", "ok"] + [sw.NOT_RUN] * 4
    doc = json.loads((out / "sweep.json").read_text())
    assert (doc["points"], doc["ok"], doc["failed"], doc["not_run"]) == (6, 2, 0, 4)
    assert not (out / "runs" / ps[2].folder).exists()  # a point left out leaves no folder
    ps = sw.expand(spec, p)
    second = sw.run_sweep(spec, ps, out, fake_run, QuietUI(), sw.only_points(spec, ps, ("seed=2",)))
    assert [o.status for o in second] == ["skipped"] * 2 + ["ok"] * 2 + [sw.NOT_RUN] * 2
    assert calls == [(1, "high"), (1, "low"), (2, "low"), (2, "high")]  # ABBA
    r = subprocess.run([sys.executable, "-m", "testbed.cli", "report", str(out), "--json"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    agg = json.loads(r.stdout)
    (low,) = agg["cells"]
    assert low["seeds"] == [1, 2]  # both parts' points: +20 % and +10 %, by hand
    assert low["change_pct"]["iteration"]["per_seed"] == pytest.approx([20.0, 10.0])
    assert agg["runs"] == {"points": 6, "ok": 4, "failed": 0, "not_run": 2}


def test_only_keeps_the_points_every_filter_holds_for(tmp_path):
    p = write(tmp_path, {**PAIRED, "axes": {"workloads.websearch.arrival_rate": [1, 2]}})
    spec = sw.load_spec(p)
    ps = sw.expand(spec, p)
    kept = sw.only_points(spec, ps, ("seed=1,3", "scheme=low", "arrival_rate=2"))
    assert sorted((ps[i].labels["seed"], ps[i].labels["scheme"]) for i in kept) == [
        ("1", "low"), ("3", "low")]  # fmt: skip
    full = sw.only_points(spec, ps, ("workloads.websearch.arrival_rate=1",))
    assert len(full) == 6 and all(ps[i].labels["workloads.websearch.arrival_rate"] == "1"
                                  for i in full)  # fmt: skip


@pytest.mark.parametrize(
    ("only", "line"),
    [
        ("seed", "--only seed: write AXIS=VALUE[,VALUE...], e.g. --only seed=3"),
        ("sched=low", "--only sched=low: the sweep has no axis 'sched'; its axes: seed, scheme"),
        ("scheme=lo", "--only scheme=lo: 'lo' is not a value of scheme; its values: same, low"),
        ("seed=1,4", "--only seed=1,4: '4' is not a value of seed; its values: 1, 2, 3"),
    ],
)
def test_a_bad_only_is_one_line_and_nothing_is_created(tmp_path, only, line):
    import subprocess
    import sys

    p = write(tmp_path, PAIRED)
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "testbed.cli", "sweep", str(p), "--out", str(out),
                        "--only", only], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert line in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not out.exists()
