"""`testbed report` on real run folders: the thesis comparison and the plots."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

import pytest

from tests.needs import need

from .helpers import run_cli, run_scenario

need("horovod.torch", "Horovod is installed by install.sh")

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """The thesis pair in small: Horovod deprioritised, then in the same class as the load."""
    out = []
    for name, cls in (("low", "low"), ("same", "high")):
        tmp = tmp_path_factory.mktemp(name)
        run_scenario(tmp, {
            "seed": 7,
            "duration": "10s",
            "measure": {"warmup": "1s", "cooldown": "1s"},
            "topology": {"hosts": 3, "link_rate": "100mbit"},
            "tc_profile": "thesis-2band",
            "workloads": {
                "horovod": {"model_size": "1MB", "compute_time": "300ms", "tc_class": cls},
                "websearch": {"arrival_rate": 1, "tc_class": "high"},
            },
        })  # fmt: skip
        out.append(tmp / "run")
    return out


FLOW_FIELDS = ["id", "size_bytes", "completed", "fct_s", "measured"]


def hand_made_run(path: Path, iteration_s: float, fct: dict, flows: list[tuple]) -> Path:
    """A run folder written by hand: only what `testbed report` reads."""
    path.mkdir()
    fct_s = {c: {"count": 1, "censored": 0, "mean": m, "p50": m, "p99": m} for c, m in fct.items()}
    summary = {
        "status": "ok", "seed": 3, "scenario": "hand", "run_id": path.name, "duration_s": 10,
        "horovod": {"workers": 2, "iterations": 10, "class": "low",
                    "iteration_time_s": {"mean": iteration_s, "p50": iteration_s, "p99": iteration_s}},
        "websearch": {"flows_started": len(flows), "flows_completed": len(flows),
                      "flows_measured": len(flows), "censored": 0, "class": "high", "fct_s": fct_s},
        "links": [
            {"node": "h1", "direction": "up", "rate_bps": 100_000_000,
             "classes": {"high": {"rate_bps": 20_000_000}, "low": {"rate_bps": 5_000_000}}},
            {"node": "h2", "direction": "up", "rate_bps": 100_000_000,
             "classes": {"high": {"rate_bps": 40_000_000}, "low": {"rate_bps": 15_000_000}}},
        ],
    }  # fmt: skip
    (path / "summary.json").write_text(json.dumps(summary))
    with open(path / "flows.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(FLOW_FIELDS)
        w.writerows(flows)
    return path


def test_report_percent_changes_of_hand_made_runs(tmp_path):
    """Hand-made baseline and run, every expected number worked out by hand. Broken looks like:
    the ratio inverted (1.00/1.10 − 1 = −9.1 % instead of +10.0 %), baseline and run swapped,
    a censored or unmeasured flow compared, or a missing baseline mean divided by."""
    small, medium = 50_000, 500_000  # < 100 KB: small; 100 KB–10 MB: medium
    base = hand_made_run(
        tmp_path / "base",
        1.00,
        {"small": 0.010, "medium": 0.200, "large": None, "all": 0.500},
        [
            (1, small, True, 0.010, True),
            (2, small, True, 0.020, True),
            (3, medium, True, 0.200, True),
            (4, small, True, 0.040, True),
            (5, small, False, "", True),  # censored in the baseline
            (6, small, True, 0.500, False),  # started before the window: not measured
            (7, small, True, 0.010, True),
        ],
    )
    other = hand_made_run(
        tmp_path / "other",
        1.10,
        {"small": 0.012, "medium": 0.150, "large": 2.0, "all": 0.750},
        [
            (1, small, True, 0.011, True),  # +10 %
            (2, small, True, 0.030, True),  # +50 %
            (3, medium, True, 0.150, True),  # −25 %
            (4, small, True, 0.020, True),  # −50 %
            (5, small, True, 0.050, True),
            (6, small, True, 0.100, False),
            (7, small, False, "", True),  # censored in the run
        ],
    )
    r = run_cli("report", str(base), str(other), "--json", "--no-plots")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    (entry,) = data["comparison"]["runs"]
    assert entry["iteration_time_mean_change_pct"] == pytest.approx(10.0)  # 1.10 s vs 1.00 s
    assert entry["fct_mean_change_pct"] == pytest.approx(
        # 12 vs 10 ms; 150 vs 200 ms; no baseline mean; 750 vs 500 ms
        {"small": 20.0, "medium": -25.0, "large": None, "all": 50.0}
    )
    pf = entry["per_flow"]
    # small: flows 1, 2, 4 (5 and 7 censored, 6 unmeasured): +10, +50, −50 → mean 10/3,
    # median +10, one faster
    assert pf["small"]["matched"] == 3 and pf["small"]["faster"] == 1
    assert pf["small"]["mean_change_pct"] == pytest.approx(10 / 3)
    assert pf["small"]["median_change_pct"] == pytest.approx(10.0)
    assert pf["small"]["censored"] == {"baseline": 1, "run": 1}
    # all: +10, +50, −25, −50 → mean −15/4 = −3.75, median (−25 + 10)/2 = −7.5, two faster
    assert (pf["all"]["matched"], pf["all"]["faster"]) == (4, 2)
    assert pf["all"]["mean_change_pct"] == pytest.approx(-3.75)
    assert pf["all"]["median_change_pct"] == pytest.approx(-7.5)
    assert pf["medium"]["mean_change_pct"] == pytest.approx(-25.0)
    assert pf["large"]["matched"] == 0
    # uplinks at 100 Mbit/s: high (20 + 40)/2 = 30 % of a link, low (5 + 15)/2 = 10 %
    assert data["runs"][0]["utilization"]["up"] == pytest.approx({"high": 0.30, "low": 0.10})
    r = run_cli("report", str(base), str(other), env={**os.environ, "COLUMNS": "250"})
    assert r.returncode == 0, r.stderr
    assert "+10.0%" in r.stdout and "+20.0%" in r.stdout and "-25.0%" in r.stdout, r.stdout


def test_report_json_compares_against_the_baseline(two_runs):
    base, other = two_runs
    r = run_cli("report", str(base), str(other), "--json", "--no-plots")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert [x["horovod"]["class"] for x in data["runs"]] == ["low", "high"]
    (entry,) = data["comparison"]["runs"]
    # the arithmetic is checked on hand-made runs above; here: real runs give real numbers
    assert math.isfinite(entry["iteration_time_mean_change_pct"])
    assert math.isfinite(entry["fct_mean_change_pct"]["all"])
    b = json.loads((base / "summary.json").read_text())
    # same seed: the same flows, matched by id
    pf = entry["per_flow"]["all"]
    assert pf["matched"] >= 0.8 * b["websearch"]["flows_measured"] > 0
    util = data["runs"][0]["utilization"]
    assert util["up"]["low"] > 0 and util["down"]["high"] > 0


def test_report_table_prints_percent_changes_and_writes_plots(two_runs):
    base, other = two_runs
    r = run_cli("report", str(base), str(other))
    assert r.returncode == 0, r.stderr
    assert "against the baseline" in r.stdout and "censored" in r.stdout and "%" in r.stdout
    assert "same seed, flow by flow" in r.stdout
    import matplotlib.image as mpimg

    for run in two_runs:
        for name in ("fct_cdf", "iterations", "link_utilization", "horovod_timeline"):
            png = run / "plots" / f"{name}.png"
            assert png.read_bytes()[:8] == PNG, png
            img = mpimg.imread(png)
            assert img.shape[0] > 100 and img.shape[1] > 300
            assert img.std() > 0.01, f"{png} is blank"
    assert (base / "plots" / "compare" / "fct_cdf_compare.png").read_bytes()[:8] == PNG


def test_report_refuses_a_folder_that_is_not_a_run(tmp_path):
    r = run_cli("report", str(tmp_path))
    assert r.returncode == 2 and "not a run folder" in r.stderr
