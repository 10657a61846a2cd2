"""Markers follow the folder: tests/unit → unit, tests/integration → integration, tests/docker →
docker. Integration and docker tests need root, docker tests a Docker engine that answers;
without them they are skipped with the reason (CI starts dockerd, so they run there)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _engine_problem() -> str | None:
    try:
        import docker

        c = docker.from_env(timeout=10)
        c.ping()
        c.close()
    except Exception as e:
        return f"docker tests need a Docker engine (install.sh starts dockerd): {e}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    engine: list[str | None] = []
    for item in items:
        parts = Path(str(item.fspath)).relative_to(ROOT / "tests").parts
        if parts[0] == "unit":
            item.add_marker(pytest.mark.unit)
        elif parts[0] == "integration":
            item.add_marker(pytest.mark.integration)
            if os.geteuid() != 0:
                item.add_marker(pytest.mark.skip(reason="integration tests need root"))
        elif parts[0] == "gpu":
            from testbed.preflight import visible_gpus

            item.add_marker(pytest.mark.gpu)
            if os.geteuid() != 0:
                item.add_marker(pytest.mark.skip(reason="gpu tests need root"))
            elif not visible_gpus():
                item.add_marker(pytest.mark.skip(
                    reason="gpu tests need an NVIDIA GPU; this machine shows none (the GPU "
                    "path is unverified here)"
                ))  # fmt: skip
        elif parts[0] == "docker":
            item.add_marker(pytest.mark.docker)
            if os.geteuid() != 0:
                item.add_marker(pytest.mark.skip(reason="docker tests need root"))
                continue
            if not engine:
                engine.append(_engine_problem())
            if engine[0]:
                item.add_marker(pytest.mark.skip(reason=engine[0]))
