"""`testbed report` on real run folders: the thesis comparison and the plots."""

from __future__ import annotations

import json

import pytest

from .helpers import run_cli, run_scenario

pytest.importorskip("horovod.torch", reason="Horovod is installed by install.sh")

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


def test_report_json_compares_against_the_baseline(two_runs):
    base, other = two_runs
    r = run_cli("report", str(base), str(other), "--json", "--no-plots")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert [x["horovod"]["class"] for x in data["runs"]] == ["low", "high"]
    (entry,) = data["comparison"]["runs"]
    b, o = (json.loads((p / "summary.json").read_text()) for p in two_runs)
    expected = (
        o["horovod"]["iteration_time_s"]["mean"] / b["horovod"]["iteration_time_s"]["mean"] - 1
    ) * 100
    assert entry["iteration_time_mean_change_pct"] == pytest.approx(expected)
    expected = (
        o["websearch"]["fct_s"]["all"]["mean"] / b["websearch"]["fct_s"]["all"]["mean"] - 1
    ) * 100
    assert entry["fct_mean_change_pct"]["all"] == pytest.approx(expected)
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
