import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(
    shutil.which("ruff") is None and not (ROOT / ".venv/bin/ruff").exists(),
    reason="ruff not installed",
)
def test_ruff_clean():
    ruff = shutil.which("ruff") or str(ROOT / ".venv/bin/ruff")
    r = subprocess.run([ruff, "check", str(ROOT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
