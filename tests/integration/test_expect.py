"""expect: as CI uses it: `up` exits 0 when every check holds and 3 when one does not, writes
JUnit XML, and `report --expect` gives the same verdict on the run folder. The limits come from
physics, not from testbed: a flow can carry at most its link's rate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from testbed.scenario import expect
from testbed.scenario.resolve import load_scenario
from tests.integration.helpers import run_cli

SCENARIO = """name: expect-{name}
duration: 8s
measure: {{warmup: 2s, cooldown: 1s}}
topology: {{hosts: 3, link_rate: 50mbit}}
tc_profile: thesis-2band
workloads:
  linkcheck: {{pattern: ring}}
  horovod: {{model_size: 1MB, compute_time: 200ms, tc_class: low}}
  websearch: {{arrival_rate: 2}}
expect:
{checks}
"""
# Physics, whatever else shares the links: no flow faster than its 50 Mbit/s link, and the
# high band's bulk flow moving data at all.
GOOD = ["linkcheck.bulk.*.goodput_bps <= 50mbit", "websearch.flows_over_link_rate == 0",
        "horovod.iterations >= 1", "linkcheck.bulk.0.goodput_bps > 5mbit"]  # fmt: skip
IMPOSSIBLE = "linkcheck.bulk.0.goodput_bps > 50mbit"


def _write(tmp_path: Path, name: str, checks: list[str]) -> Path:
    p = tmp_path / f"{name}.yaml"
    body = "\n".join(f"  - {json.dumps(c)}" for c in checks)
    p.write_text(SCENARIO.format(name=name, checks=body))
    return p


def _leaves(template: Any, prefix: str = "") -> list[str]:
    if isinstance(template, str):
        return [prefix]
    if isinstance(template, list):
        return _leaves(template[0], f"{prefix}.*")
    out = []
    for k, v in template.items():
        key = "*" if k in ("*", expect.CLASS) else k
        out += _leaves(v, f"{prefix}.{key}" if prefix else key)
    return out


def _numbers(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _numbers(v, f"{prefix}.{k}" if prefix else k)]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _numbers(v, f"{prefix}.{i}")]
    return [prefix] if isinstance(node, (int, float)) and not isinstance(node, bool) else []


def test_passing_and_failing_expectations_give_exit_0_and_3(tmp_path):
    out = tmp_path / "pass"
    junit = tmp_path / "pass.xml"
    r = run_cli("up", str(_write(tmp_path, "pass", GOOD)), "--out", str(out), "--junit",
                str(junit), timeout=180)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "all 4 expectations passed" in r.stdout
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "0"
    assert [c.get("name") for c in suite.findall("testcase")] == GOOD
    kept = json.loads((out / "expectations.json").read_text())
    goodput = json.loads((out / "summary.json").read_text())["linkcheck"]["bulk"][0]["goodput_bps"]
    assert kept[3]["measured"][0]["value"] == goodput and 5e6 < goodput <= 50e6

    # the same run folder against a limit no flow can meet
    bad = tmp_path / "bad.yaml"
    bad.write_text(json.dumps({"expect": [GOOD[3], IMPOSSIBLE]}))
    junit2 = tmp_path / "bad.xml"
    r = run_cli("report", str(out), "--expect", str(bad), "--junit", str(junit2))
    assert r.returncode == 3, r.stdout + r.stderr
    assert "FAIL  linkcheck.bulk.0.goodput_bps > 50mbit" in r.stdout
    cases = ET.parse(junit2).getroot().findall("testsuite/testcase")
    assert len(cases) == 2 and cases[0].find("failure") is None
    failure = cases[1].find("failure")
    assert failure is not None and f"={goodput / 1e6:.4g}mbit" in failure.get("message", "")

    # and in `up` itself
    r = run_cli("up", str(_write(tmp_path, "fail", [IMPOSSIBLE])), "--out", str(tmp_path / "f"),
                timeout=180)  # fmt: skip
    assert r.returncode == 3, r.stdout[-3000:] + r.stderr[-3000:]
    assert "1 of 1 expectations failed" in r.stderr
    assert json.loads((tmp_path / "f" / "summary.json").read_text())["status"] == "ok"

    # expect.TEMPLATE and a real summary name the same numbers
    summary = json.loads((out / "summary.json").read_text())
    classes = ["high", "low"]
    template = expect.template_for(load_scenario(out / "scenario.yaml"))
    for path in _leaves(template):
        assert list(expect.matches(summary, path)), f"TEMPLATE has {path}, the summary not"
    for path in _numbers({k: summary[k] for k in template}):
        if path.startswith(("window.t0", "window.start", "window.stop", "window.drain")):
            continue  # clock times and limits, not measurements
        expect.kind_of(path, template, classes)  # raises if TEMPLATE lacks the number


def test_a_malformed_check_is_refused_before_anything_exists(tmp_path):
    r = run_cli("up", str(_write(tmp_path, "bad", ["websearch.censored == 0", "oops"])))
    assert r.returncode == 2 and "expect[1]" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
