"""Modules the suite needs: in CI (CI=true) a missing one fails the tests that need it, since
install.sh installs them and a skip would hide a broken install; elsewhere they are skipped
with the reason, for a developer without the training stack."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def need(module: str, why: str) -> ModuleType:
    if os.environ.get("CI", "").lower() in ("true", "1"):
        try:
            return importlib.import_module(module)
        except ImportError as e:
            pytest.fail(f"CI=true and {module} does not import ({e}): {why}", pytrace=False)
    return pytest.importorskip(module, reason=why)


def need_binary(name: str, why: str) -> str:
    """A program on PATH, with the same rule as `need`."""
    import shutil

    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(f"CI=true and {name} is not on PATH: {why}", pytrace=False)
        pytest.skip(f"{name} is not on PATH: {why}", allow_module_level=True)
    return path
