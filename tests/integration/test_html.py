"""The HTML report (testbed/results/htmlpage.py, issue 77) opened in a real browser: headless
Chromium loads the page of a run (`up` writes it beside the plots), of a pair compared
(`report A B --html`) and of a sweep (`report SWEEP --html`), and the test reads back the
page as Chromium drew it: every plot decoded (the page's own script counts the images with a
size), the terminal's tables there, no script error on the console, a screenshot taken.
Skipped, and counted, only where no Chromium is installed (install.sh installs Debian's)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from .helpers import ROOT, run_cli

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _browser() -> str:
    for name in BROWSERS:
        if path := shutil.which(name):
            return path
    pytest.skip("no Chromium here: install.sh installs Debian's chromium")


def opened(page: Path, tmp: Path) -> tuple[str, str]:
    """(the DOM after the page's load event, the browser's console log) and a screenshot."""
    base = [_browser(), "--headless", "--no-sandbox", "--disable-gpu",
            f"--user-data-dir={tmp / 'profile'}"]  # fmt: skip
    dom = subprocess.run(
        [*base, "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000",
         "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert dom.returncode == 0, dom.stderr[-2000:]
    shot = tmp / f"{page.stem}.png"
    subprocess.run(
        [*base, f"--screenshot={shot}", "--window-size=1280,2400", page.as_uri()],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "no screenshot"
    return dom.stdout, dom.stderr


def assert_drawn(page: Path, tmp: Path, *texts: str) -> str:
    dom, console = opened(page, tmp)
    want = re.search(r'data-images="(\d+)"', dom)
    drawn = re.search(r'data-images-drawn="(\w+)"', dom)
    assert want and drawn, dom[:2000]
    assert int(want.group(1)) >= 1 and drawn.group(1) == want.group(1), (want[0], drawn[0])
    assert "Uncaught" not in console, console[-2000:]
    for t in texts:
        assert t in dom, (t, dom[:3000])
    return dom


def test_a_runs_page_opens_with_its_tables_plots_and_scenario(tmp_path):
    out = tmp_path / "smoke"
    r = run_cli("up", "examples/smoke.yaml", "--out", str(out), "--duration", "6s", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    page = out / "report.html"
    assert page.is_file() and "report: " in r.stdout
    plots = sorted((out / "plots").glob("*.png"))
    dom = assert_drawn(page, tmp_path, "linkcheck", "scenario (smoke)", "name: smoke")
    assert dom.count("<img") == len(plots) >= 1


def test_a_compared_pair_and_a_sweep_open_with_their_tables(tmp_path):
    runs = []
    for f in ("thesis-mini.yaml", "thesis-mini-same.yaml"):
        out = tmp_path / f.removesuffix(".yaml")
        r = run_cli("up", f"examples/{f}", "--out", str(out), "--duration", "10s",
                    "--no-plots", timeout=300)  # fmt: skip
        assert r.returncode == 0, r.stderr[-2000:]
        runs.append(str(out))
    r = run_cli("report", *runs, "--html", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert_drawn(Path(runs[0]) / "report-compare.html", tmp_path, "thesis-mini-same")

    sweep = {  # thesis-mini on a 2 × 1 grid (its map), both schemes, one seed: 4 runs
        "name": "html-sweep",
        "base": str(ROOT / "examples" / "thesis-mini.yaml"),
        "set": {"duration": "4s", "measure": {"warmup": "1s", "cooldown": "0.5s"}},
        "axes": {"workloads.horovod.compute_to_network_ratio": [2, 4],
                 "workloads.websearch.utilization": ["12.5%"]},
        "paired": {"scheme": {"same": {"workloads.horovod.tc_class": "high"},
                              "low": {"workloads.horovod.tc_class": "low"}}},
        "seeds": [1],
        "compare": {"axis": "scheme", "baseline": "same"},
        "aims": ["horovod.iteration_time_s.mean change <= 50% (low)"],
    }  # fmt: skip
    f = tmp_path / "sweep.yaml"
    f.write_text(yaml.safe_dump(sweep))
    r = run_cli("sweep", str(f), "--out", str(tmp_path / "sw"), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    page = tmp_path / "sw" / "report.html"  # the sweep writes its page at its end
    assert "report:" in r.stdout and page.is_file()
    assert_drawn(page, tmp_path, "sweep html-sweep", "undecided")
    page.unlink()
    r = run_cli("report", str(tmp_path / "sw"), "--html", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert_drawn(tmp_path / "sw" / "report.html", tmp_path, "sweep html-sweep", "undecided")


def test_html_with_json_is_one_line(tmp_path):
    r = run_cli("report", str(tmp_path), "--html", "--json")
    assert r.returncode == 2 and "--html" in r.stderr and len(r.stderr.strip().splitlines()) == 1
