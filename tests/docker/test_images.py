"""The node image on a real engine: it runs testbed, torch and Horovod with no network, an
unchanged image is not rebuilt, and a source change rebuilds only the last layers. The first
run builds the image (about 4 minutes on 2 cores); later runs find it."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import docker
import pytest

from testbed.core.errors import EnvironmentProblem
from testbed.network import images
from testbed.network.images import NODE_PYTHON, build_images, ensure_node_image

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as e:  # no socket, no daemon, refused: all mean "no engine here"
        pytest.skip(f"no Docker engine answers ({e}); install.sh starts dockerd")
    yield client
    client.close()


@pytest.fixture(scope="module")
def node_image(engine: docker.DockerClient) -> str:
    return ensure_node_image(engine, progress=print)


def _run(engine: docker.DockerClient, image: str, cmd: list[str]) -> str:
    out = engine.containers.run(image, cmd, network_mode="none", remove=True)
    return out.decode().strip()


def test_node_image_runs_testbed_torch_and_horovod(engine, node_image):
    code = (
        "import testbed, torch, horovod, horovod.torch, sys; "
        "print(sys.executable, testbed.__version__, torch.__version__, horovod.__version__, "
        "int(torch.ones(3).sum()))"
    )
    out = _run(engine, node_image, [NODE_PYTHON, "-c", code])
    assert out.split() == [
        NODE_PYTHON,
        version("testbed"),
        version("torch"),
        version("horovod"),
        "3",
    ]


def test_node_image_has_the_tools_and_labels(engine, node_image):
    out = _run(engine, node_image, ["sh", "-c", "ip -V; ping -V; iperf3 --version; ps --version"])
    for tool in ("iproute2", "iputils", "iperf 3", "procps"):
        assert tool in out
    # the node programs start as modules of the venv's interpreter, which PATH finds first
    out = _run(engine, node_image, ["python", "-c", "import testbed.workloads.websearch.node"])
    assert out == ""
    labels = engine.images.get(node_image).labels
    assert labels["testbed.image"] == "node"
    assert labels["testbed.hash"] == node_image.split(":")[1]


def test_an_unchanged_image_is_not_rebuilt(engine, node_image):
    r = build_images(engine, progress=print)
    assert (r.tag, r.built) == (node_image, False)
    assert r.seconds < 5 and r.size_mb > 100
    assert ensure_node_image(engine, build=False) == node_image


def test_a_source_change_rebuilds_only_the_last_layers(
    engine, node_image, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    src = tmp_path / "src"
    root = images.SOURCE_ROOT
    shutil.copytree(root / "testbed", src / "testbed", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(root / name, src / name)
    token = uuid.uuid4().hex
    (src / "testbed" / "_image_probe.py").write_text(f"TOKEN = {token!r}\n")
    monkeypatch.setattr(images, "SOURCE_ROOT", src)

    # the image for this source is missing: refused plainly when building is off (a scenario's
    # `docker: {build: false}`), built when it is on, as `testbed up` does
    with pytest.raises(EnvironmentProblem, match="testbed images build"):
        ensure_node_image(engine, build=False)
    r = build_images(engine, progress=print)
    try:
        assert r.built and r.tag != node_image
        out = _run(
            engine, r.tag, [NODE_PYTHON, "-c", "import testbed._image_probe as p; print(p.TOKEN)"]
        )
        assert out == token
        old = engine.images.get(node_image).attrs["RootFS"]["Layers"]
        new = engine.images.get(r.tag).attrs["RootFS"]["Layers"]
        assert len(new) == len(old) and new[:-2] == old[:-2]  # base and venv layers shared
    finally:
        engine.images.remove(r.tag)
