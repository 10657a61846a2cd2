"""The Docker engine this machine talks to (DOCKER_HOST, default the local socket): for the
docker runtime's containers and for the node image (`testbed images build`). The SDK is
imported on first use, so a run that makes no container never loads it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from testbed.core.errors import EnvironmentProblem

if TYPE_CHECKING:
    import docker


def client(timeout: float = 60) -> docker.DockerClient:
    """The engine at DOCKER_HOST (default: the local socket), or one clear line why not."""
    try:
        import docker
    except ImportError:
        raise EnvironmentProblem(
            "the Docker SDK for Python is missing; run install.sh (pip install docker)"
        ) from None
    try:
        c = docker.from_env(timeout=int(timeout))
        c.ping()
    except docker.errors.DockerException as e:
        raise EnvironmentProblem(
            f"no Docker engine answers ({short_error(e)}); start one: install.sh installs docker.io "
            "and starts dockerd (log: /var/log/testbed/dockerd.log)"
        ) from None
    return c


def short_error(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text if len(text) < 160 else text[:157] + "..."
