"""The benchmarks that need a Docker engine run (tests/integration/test_benchmarks.py has the
others): runtime.py (netns against docker) and swarm.py (a sweep over machines emulated here),
each in its quick mode as a whole process. The figures are not judged."""

from __future__ import annotations

import pytest

from testbed.network.images import ensure_node_image
from testbed.network.runtime.engine import client
from tests.integration.test_benchmarks import last_json, quick
from tests.needs import need


@pytest.fixture(scope="module")
def image() -> str:
    """The node image, built once if this machine has none (minutes, cold): not part of what
    runtime.py's quick mode should take."""
    engine = client()
    try:
        return ensure_node_image(engine, progress=print)
    finally:
        engine.close()


def test_runtime(tmp_path, image):
    need("horovod.torch", "Horovod is installed by install.sh")
    doc = last_json(
        quick("runtime", tmp_path),
        "image_build_s", "image_mb", "setup_s", "teardown_s", "iteration_s_alone",
        "iteration_ratio_docker_over_netns", "iteration_ratio_with_load",
        "goodput_ratio_docker_100mbit",
    )  # fmt: skip
    assert set(doc["setup_s"]["docker"]) == {"2"}


def test_swarm(tmp_path, image):
    """About a minute and a half: two emulated machines, three sweeps and a machine lost."""
    doc = last_json(
        quick("swarm", tmp_path, timeout=600),
        "points", "points_per_hour_1", "points_per_hour_3", "ratio", "start_s", "back_s",
        "recovery_s", "recovery_rerun_s", "lost_node",
    )  # fmt: skip
    assert doc["machines"] == 2
