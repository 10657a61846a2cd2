"""The summary's shape does not change behind a refactoring: the keys of three examples'
summaries (shortened; a key is its dotted path, list items and run-specific names folded)
against the ones recorded before it (tests/integration/data/summary_keys.json, written by
`TESTBED_RECORD_KEYS=1 pytest tests/integration/test_summary_shape.py` on the code to compare
with). A new key is a deliberate change: record it again and say so in the commit."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.run.orchestrator import run
from testbed.scenario.resolve import load_scenario_data

from .helpers import ROOT

KEYS = Path(__file__).parent / "data" / "summary_keys.json"
# shortened: the shape, not the figures; their windows still hold iterations and flows
EXAMPLES = {
    "thesis-mini": {"duration": "8s", "measure": {"warmup": "2s", "cooldown": "1s"}},
    "multi-tenant": {"duration": "10s", "measure": {"warmup": "3s", "cooldown": "1s", "drain": "5s"}},
    "leaf-spine": {"duration": "6s"},
}  # fmt: skip
# values that name this run, not the shape: folded
RUN_SPECIFIC = re.compile(r"^(tb-[0-9a-f]{6}-.*|[0-9a-f]{6})$")


def paths(doc: Any, at: str = "") -> set[str]:
    """Every key's dotted path; list items share one path ([]), and a key naming this run
    (a namespace) is folded to *."""
    out: set[str] = set()
    if isinstance(doc, dict):
        for k, v in doc.items():
            name = "*" if RUN_SPECIFIC.match(str(k)) else str(k)
            here = f"{at}.{name}" if at else name
            out.add(here)
            out |= paths(v, here)
    elif isinstance(doc, list):
        for v in doc:
            out |= paths(v, f"{at}[]")
    return out


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_summary_keys_are_unchanged(tmp_path, name):
    data = yaml.safe_load((ROOT / "examples" / f"{name}.yaml").read_text())
    data.update(EXAMPLES[name])
    s = load_scenario_data(data, str(ROOT / "examples" / f"{name}.yaml"))
    summary = run(s, out=tmp_path / "run").summary
    got = sorted(paths(summary))
    recorded = json.loads(KEYS.read_text()) if KEYS.exists() else {}
    if os.environ.get("TESTBED_RECORD_KEYS"):
        recorded[name] = got
        KEYS.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
        return
    want = recorded.get(name)
    assert want is not None, f"no keys recorded for {name}: run with TESTBED_RECORD_KEYS=1"
    assert summary["status"] == "ok", summary.get("error")
    missing, new = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    assert not missing and not new, f"{name}: keys gone {missing}, keys new {new}"
