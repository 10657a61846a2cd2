"""Markers follow the folder: tests/unit → unit, tests/integration → integration.
Integration tests need root; without it they are skipped with the reason."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).relative_to(ROOT / "tests").parts
        if parts[0] == "unit":
            item.add_marker(pytest.mark.unit)
        elif parts[0] == "integration":
            item.add_marker(pytest.mark.integration)
            if os.geteuid() != 0:
                item.add_marker(pytest.mark.skip(reason="integration tests need root"))
