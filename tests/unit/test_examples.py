"""Every scenario and sweep in examples/ and docs/results/ loads as shipped: a change to the
schema or a kind that breaks one fails here, not in a user's first command."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from testbed.results import sweep as sw
from testbed.scenario.resolve import load_scenario

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted([*ROOT.glob("examples/**/*.yaml"), *ROOT.glob("docs/results/**/*.yaml")])


def test_there_are_examples():
    assert len(FILES) >= 15, FILES


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_example_loads(path: Path):
    if "base" in (yaml.safe_load(path.read_text()) or {}):
        points = sw.expand(sw.load_spec(path), path)
        assert points, path
        assert len({p.folder for p in points}) == len(points)  # one folder per point
    else:
        s = load_scenario(path)
        assert s.duration > 0 and s.workloads is not None
