"""The image a point runs in, and how it reaches the nodes.

The runner image is the node image (testbed, torch, Horovod; images/README.md) plus this
machine's Prometheus binary (Debian's, linked against libc only), so a point's run folder holds
what a local run's does, its TSDB included. It is built here, without a registry, like the
node image.

The nodes get it from a registry the sweep runs on the manager for its own duration: Debian's
`docker-registry` (the reference distribution registry), its storage kept under
/var/lib/testbed/registry so a second sweep pushes only what changed. Docker treats
127.0.0.1 as a registry it may use without TLS, so the manager pushes there; the nodes pull
from the manager's swarm address, which each must list in its engine's `insecure-registries`
(docs/swarm.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.core.errors import EnvironmentProblem
from testbed.core.stopping import checkpoint
from testbed.network.images import cache_dir, ensure_node_image, file_sha256

PORT = 5000
STORAGE = Path("/var/lib/testbed/registry")
RUNNER_DOCKERFILE = """\
# testbed's swarm runner: the node image and this machine's Prometheus (testbed/results/swarm/image.py)
ARG NODE
FROM ${NODE}
COPY prometheus /usr/bin/prometheus
LABEL testbed.image=runner
"""


def runner_image(c: Any, progress: Callable[[str], None]) -> str:
    """The runner image's tag, built when missing."""
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        raise EnvironmentProblem("--swarm: the prometheus binary is missing; run bash install.sh")
    node = ensure_node_image(c, progress=progress)
    digest = hashlib.sha256(
        f"{node}\n{file_sha256(Path(prometheus))}\n{RUNNER_DOCKERFILE}".encode()
    ).hexdigest()
    tag = f"testbed-runner:{digest[:12]}"
    with contextlib.suppress(Exception):
        c.images.get(tag)
        return tag
    ctx = cache_dir() / f"runner-{digest[:12]}"
    shutil.rmtree(ctx, ignore_errors=True)
    ctx.mkdir(parents=True)
    try:
        (ctx / "Dockerfile").write_text(RUNNER_DOCKERFILE)
        shutil.copy2(prometheus, ctx / "prometheus")
        progress(f"building the swarm runner image {tag} on {node}")
        for chunk in c.api.build(path=str(ctx), tag=tag, buildargs={"NODE": node},
                                 network_mode="none", rm=True, pull=False, decode=True):  # fmt: skip
            if "error" in chunk:
                raise EnvironmentProblem(f"docker build of {tag} failed: {chunk['error'].strip()}")
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
    return tag


class Registry:
    """A registry process on the manager for the sweep's duration; `push` puts an image in."""

    def __init__(self, manager: str) -> None:
        self.manager = manager
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Registry:
        binary = shutil.which("docker-registry")
        if binary is None:
            raise EnvironmentProblem(
                "--swarm: the docker-registry binary is missing (the manager serves the image "
                "to the nodes); apt-get install docker-registry, or run bash install.sh"
            )
        if _answers(f"http://127.0.0.1:{PORT}/v2/"):
            return self  # one already serves here (another sweep's, or the machine owner's)
        STORAGE.mkdir(parents=True, exist_ok=True)
        config = STORAGE / "config.yml"
        config.write_text(
            "version: 0.1\nlog: {level: warn}\n"
            f"storage: {{filesystem: {{rootdirectory: {STORAGE / 'data'}}}, delete: {{enabled: true}}}}\n"
            f"http: {{addr: '0.0.0.0:{PORT}'}}\n"
        )
        log = open(STORAGE / "registry.log", "ab")
        self.proc = subprocess.Popen(
            ["setpriv", "--pdeathsig", "TERM", "--", binary, "serve", str(config)],
            stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + 20
        while not _answers(f"http://127.0.0.1:{PORT}/v2/"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise EnvironmentProblem(
                    f"--swarm: docker-registry did not start on port {PORT} (its log: "
                    f"{STORAGE / 'registry.log'})"
                )
            time.sleep(0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def push(self, c: Any, tag: str, progress: Callable[[str], None]) -> str:
        """Push `tag` into the registry; returns the reference the nodes pull."""
        repo, _, version = tag.partition(":")
        local = f"127.0.0.1:{PORT}/{repo}"
        c.images.get(tag).tag(local, version)
        progress(f"pushing {tag} to the registry on {self.manager}:{PORT}")
        for chunk in c.images.push(local, version, stream=True, decode=True):
            checkpoint()
            if "error" in chunk:
                raise EnvironmentProblem(f"--swarm: pushing {tag} failed: {chunk['error']}")
        # the manager runs points too: its engine finds the image under the nodes' name
        c.images.get(tag).tag(f"{self.manager}:{PORT}/{repo}", version)
        return f"{self.manager}:{PORT}/{repo}:{version}"


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False
