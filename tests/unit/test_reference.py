"""docs/scenario-reference.md is the schema's own rendering: it cannot drift from what the
loader accepts."""

from __future__ import annotations

from pathlib import Path

from testbed.scenario.reference import markdown
from testbed.workloads import kinds

DOC = Path(__file__).resolve().parents[2] / "docs" / "scenario-reference.md"


def test_the_committed_reference_is_the_schemas():
    assert DOC.read_text() == markdown(), (
        "docs/scenario-reference.md differs from the schema: regenerate it with "
        "`testbed schema --markdown > docs/scenario-reference.md`"
    )


def test_every_kind_and_field_is_in_it():
    text = markdown()
    for name in kinds.names():
        assert f"### kind: {name}" in text
        for field in kinds.get(name).config.model_fields:
            if field not in ("kind", "start", "stop", "hosts", "tc_class", "dscp", "derived"):
                assert f"| `{field}` |" in text, (name, field)
