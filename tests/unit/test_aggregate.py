"""Sweep aggregation on a hand-made sweep folder: every expected figure is computed by hand
from the flows and means written here, not by the code under test."""

from __future__ import annotations

import copy
import csv
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.results.aggregate import aggregate, plot_maps, plot_tradeoff

R = "workloads.horovod.compute_to_network_ratio"
U = "workloads.websearch.utilization"
CLS = "workloads.horovod.tc_class"  # a plain dotted axis is compared, not a paired one

# (utilization, seed, class) → iteration mean, and flows: id → (size, fct or None = censored)
RUNS = {
    ("5%", "1", "high"): (1.0, {"a": (5000, 0.010), "b": (5000, 0.030), "c": (5000, None)}),
    ("5%", "1", "low"): (1.1, {"a": (5000, 0.005), "b": (5000, None), "c": (5000, 0.020)}),
    ("5%", "1", "mid"): (1.0, {"a": (5000, 0.010), "b": (5000, 0.030), "c": (5000, 0.1)}),
    ("5%", "2", "high"): (1.0, {"a": (5000, 0.020), "d": (200_000, 0.5)}),
    ("5%", "2", "low"): (1.3, {"a": (5000, 0.015), "d": (200_000, 0.25)}),
    ("5%", "2", "mid"): (1.0, {"a": (5000, 0.020), "d": (200_000, 0.5)}),
}


def write_run(folder: Path, seed: str, iteration: float, flows: dict) -> None:
    folder.mkdir(parents=True)
    with open(folder / "flows.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "size_bytes", "fct_s", "completed", "measured"])
        for fid, (size, fct) in flows.items():
            w.writerow([fid, size, "" if fct is None else fct, fct is not None, True])
    fct_s = {}
    for cls, pick in (("small", lambda s: s < 100_000), ("medium", lambda s: s >= 100_000)):
        xs = [fct for size, fct in flows.values() if pick(size) and fct is not None]
        fct_s[cls] = {"count": len(xs), "mean": sum(xs) / len(xs) if xs else None}
    xs = [fct for _, fct in flows.values() if fct is not None]
    fct_s["all"] = {"count": len(xs), "mean": sum(xs) / len(xs)}
    fct_s["large"] = {"count": 0, "mean": None}
    summary = {
        "status": "ok",
        "seed": int(seed),
        "horovod": {"iteration_time_s": {"mean": iteration}},
        "websearch": {"fct_s": fct_s},
    }
    (folder / "summary.json").write_text(json.dumps(summary))


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    results, labels = [], []
    for i, ((u, seed, cls), (iteration, flows)) in enumerate(RUNS.items()):
        folder = f"runs/{i:03d}"
        write_run(tmp_path / folder, seed, iteration, flows)
        results.append({"folder": folder, "status": "ok"})
        labels.append({R: "16", U: u, "seed": seed, CLS: cls})
    results.append({"folder": "runs/999", "status": "failed"})  # ignored
    labels.append({R: "16", U: "5%", "seed": "3", CLS: "low"})
    spec = {
        "axes": {R: [16], U: ["5%"], CLS: ["high", "low", "mid"]},
        "paired": {},
        "compare": {"axis": CLS, "baseline": "high"},
        "map": None,
    }
    doc = {"name": "hand", "spec": spec, "points": 7, "ok": 6, "failed": 1,
           "results": results, "labels": labels}  # fmt: skip
    (tmp_path / "sweep.json").write_text(json.dumps(doc))
    return tmp_path


def test_changes_per_seed_and_over_seeds_by_hand(sweep):
    agg = aggregate(sweep)
    low = next(c for c in agg["cells"] if c[CLS] == "low")
    assert low["cell"] == {R: "16", U: "5%"} and low["seeds"] == [1, 2]
    ch = low["change_pct"]
    # small means: seed 1: (10+30)/2 = 20 ms → (5+20)/2 = 12.5 ms: -37.5 %; seed 2: 20 → 15: -25 %
    assert ch["small"]["per_seed"] == pytest.approx([-37.5, -25.0])
    assert (ch["small"]["mean"], ch["small"]["min"], ch["small"]["max"]) == pytest.approx(
        (-31.25, -37.5, -25.0)
    )
    assert ch["medium"]["per_seed"] == [None, pytest.approx(-50.0)]  # seed 1 has no medium flow
    assert ch["iteration"]["per_seed"] == pytest.approx([10.0, 30.0])
    assert ch["iteration"]["mean"] == pytest.approx(20.0)
    # the mean's 95 % interval over 2 seeds: sd of (10, 30) = 14.142, t(1) = 12.706:
    # 20 ± 12.706 · 14.142 / √2 = 20 ± 127.06
    assert ch["iteration"]["interval"] == pytest.approx([20 - 127.06, 20 + 127.06], abs=0.01)
    assert ch["medium"]["interval"] is None  # one seed
    # matched: seed 1 only flow a completed in both (10 → 5 ms: -50 %); b censored in "low",
    # c censored in "high"; seed 2: a 20 → 15 (-25 %)
    m = low["matched_change_pct"]["small"]
    assert m["per_seed"] == pytest.approx([-50.0, -25.0])
    assert low["censored"]["small"] == {"baseline": 1, "run": 1}
    assert low["baseline_flows"]["small"] == 2 + 1


def test_one_map_per_compared_value(sweep, tmp_path):
    agg = aggregate(sweep)
    plots, why = plot_maps(agg, tmp_path / "plots")
    assert why is None
    assert sorted(p.name for p in plots) == ["map-low.png", "map-mid.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in plots)
    agg["axes"].append("workloads.topology.hosts")  # a third axis: squares would overlap
    assert plot_maps(agg, tmp_path / "plots2")[1].startswith("no map")


def test_the_tradeoff_plot_has_a_point_per_value_and_seed(sweep, tmp_path):
    agg = aggregate(sweep)
    out = plot_tradeoff(agg, tmp_path / "plots" / "tradeoff.png")
    assert out is not None and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for c in agg["cells"]:  # without an iteration figure there is nothing to plot
        c["change_pct"].pop("iteration")
    assert plot_tradeoff(agg, tmp_path / "none.png") is None


def test_the_tradeoff_legend_names_every_value_plotted(sweep, tmp_path, monkeypatch):
    """A value finished in one cell only (a sweep run in parts) still gets its legend entry,
    though the legend sits in the last cell's panel."""
    import matplotlib.pyplot as plt

    agg = aggregate(sweep)
    values = sorted({c[CLS] for c in agg["cells"]})
    assert len(values) >= 2
    other = [copy.deepcopy(c) for c in agg["cells"] if c[CLS] == values[0]]
    for c in other:  # a second cell, plotted last, where only the first value ran
        c["cell"] = {**c["cell"], "x": "2"}
    agg["cells"] += other
    figures = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))
    assert plot_tradeoff(agg, tmp_path / "tradeoff.png") is not None
    legend = figures[-1].axes[-1].get_legend()
    assert sorted(t.get_text() for t in legend.get_texts()) == values


def test_report_prints_the_hand_computed_changes(sweep):
    """`testbed report SWEEP_DIR` needs no root: the table a user reads carries the figures
    computed by hand above, and --json the same aggregation."""
    env = {**os.environ, "COLUMNS": "200"}
    r = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "report", str(sweep), "--no-plots"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "6 of 7 runs ok, 1 failed" in r.stdout
    # small flows, low vs high, over the two seeds (-31.25 %), then flow-matched (-37.5 %)
    assert re.search(r"-31\.[23]% \[-38, -25\]", r.stdout), r.stdout
    assert "-37.5% [-50, -25] (1/1)" in r.stdout
    assert "+20.0% [+10, +30]" in r.stdout  # iteration time
    r = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "report", str(sweep), "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    low = next(c for c in json.loads(r.stdout)["cells"] if c[CLS] == "low")
    assert low["change_pct"]["small"]["mean"] == pytest.approx(-31.25)


def test_report_picks_one_of_the_sweeps_sharing_a_folder(sweep):
    """Two sweeps wrote into the folder (the second reusing the first's runs): by default the
    last is reported, with a line naming the other; --sweep NAME reports that one; an unknown
    name is one line and exit 2."""
    doc = json.loads((sweep / "sweep.json").read_text())
    (sweep / "sweeps").mkdir()
    (sweep / "sweeps" / "hand.json").write_text(json.dumps(doc))
    other = {
        **doc,
        "name": "other",
        "spec": {**doc["spec"], "compare": {"axis": CLS, "baseline": "low"}},
    }
    time.sleep(0.01)
    for path in (sweep / "sweep.json", sweep / "sweeps" / "other.json"):
        path.write_text(json.dumps(other))
    env = {**os.environ, "COLUMNS": "200"}

    def report(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "testbed.cli", "report", str(sweep), "--no-plots", *args],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip

    r = report()
    assert r.returncode == 0, r.stderr
    assert "sweep other:" in r.stdout and "compared against 'low'" in r.stdout
    assert "shared with the sweeps hand" in r.stdout and "--sweep NAME" in r.stdout
    r = report("--sweep", "hand")
    assert r.returncode == 0, r.stderr
    assert "sweep hand:" in r.stdout and "+20.0% [+10, +30]" in r.stdout  # as hand-computed
    assert "shared with the sweeps other" in r.stdout
    r = report("--sweep", "typo")
    assert r.returncode == 2 and "--sweep: no sweep 'typo'" in r.stderr
    assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr
