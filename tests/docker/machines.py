"""Machines emulated on this one: each a container running its own Docker engine, joined as a
worker into a swarm this machine's engine manages (initialised on docker0's address). No
docker-in-docker image can be pulled here, so a machine is the testbed base image (Debian
bookworm, as this machine) with this machine's /usr bind-mounted read-only: the same dockerd,
containerd and runc the host runs, in a container with the capability set a nested engine
needs (docs/swarm.md: all but CAP_SYS_RESOURCE, seccomp and system paths unconfined, a
writable cgroup tree). Each engine keeps its images under testbed's image cache (machines/<name>), so
the runner image is pulled once, not per test session.

The manager is drained while the machines exist: points then run on the emulated machines
only, which is what the tests and benchmarks/swarm.py measure.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from typing import Any

import docker

from testbed.network.images import base_tag, cache_dir, ensure_node_image

LABEL = "testbed.machine"


def docker0_address() -> str:
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "docker0"], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return out.split()[3].split("/")[0]


def base_image() -> str:
    """The base image of this checkout (its tag hashes the debootstrap recipe); built with the
    node image (Machines.__enter__)."""
    return base_tag()


class Machines:
    def __init__(self, n: int, prefix: str = "tbm") -> None:
        self.n, self.prefix = n, prefix
        self.c = docker.from_env(timeout=300)
        self.address = docker0_address()
        self.containers: dict[str, Any] = {}
        self.manager_id: str | None = None

    def names(self) -> list[str]:
        return [f"{self.prefix}{i}" for i in range(1, self.n + 1)]

    def __enter__(self) -> Machines:
        if (self.c.info().get("Swarm") or {}).get("LocalNodeState") == "active":
            raise RuntimeError("this engine is in a swarm already: the tests make their own")
        self.c.swarm.init(advertise_addr=self.address, listen_addr=f"{self.address}:2377")
        try:
            self.manager_id = self.c.info()["Swarm"]["NodeID"]
            token = self.c.swarm.attrs["JoinTokens"]["Worker"]
            ensure_node_image(self.c, progress=lambda _m: None)  # the base comes with it
            image = base_image()
            for name in self.names():
                self.containers[name] = self._start(name, image)
            for name in self.names():
                self._wait_engine(name)
                self.engine(name, "swarm", "leave", "--force", check=False)  # a stale state
                self.engine(name, "swarm", "join", "--token", token, f"{self.address}:2377")
            self._wait_nodes(self.n + 1)
            node = self.c.nodes.get(self.manager_id)
            spec = node.attrs["Spec"]
            node.update({**spec, "Availability": "drain"})
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self, name: str, image: str) -> Any:
        data = cache_dir() / "machines" / name
        data.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(docker.errors.NotFound):
            self.c.containers.get(name).remove(force=True)
        # the CLI, not the SDK: the engine API has no security option for system paths (the
        # CLI's systempaths=unconfined empties MaskedPaths/ReadonlyPaths), which a nested
        # engine needs to write /proc/sys
        subprocess.run(
            ["docker", "run", "--detach", "--name", name, "--hostname", name,
             "--label", f"{LABEL}={name}",
             "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
             "--security-opt", "seccomp=unconfined", "--security-opt", "systempaths=unconfined",
             "-v", "/usr:/usr:ro", "-v", "/etc/alternatives:/etc/alternatives:ro",
             "-v", f"{data}:/var/lib/docker:rw", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
             "--tmpfs", "/run", image,
             "dockerd", "--host", "unix:///run/docker.sock",
             "--insecure-registry", f"{self.address}:5000", "--storage-driver", "overlay2"],
            capture_output=True, text=True, check=True, timeout=120,
        )  # fmt: skip
        return self.c.containers.get(name)

    def engine(self, name: str, *args: str, check: bool = True) -> str:
        """`docker ARGS` against machine `name`'s own engine."""
        r = subprocess.run(
            ["docker", "exec", name, "docker", "-H", "unix:///run/docker.sock", *args],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if check and r.returncode != 0:
            raise RuntimeError(f"{name}: docker {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def shell(self, name: str, command: str) -> str:
        return subprocess.run(["docker", "exec", name, "sh", "-c", command], capture_output=True,
                              text=True, timeout=60).stdout  # fmt: skip

    def _wait_engine(self, name: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while subprocess.run(["docker", "exec", name, "docker", "-H", "unix:///run/docker.sock",
                              "info"], capture_output=True).returncode != 0:  # fmt: skip
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{name}: its engine did not start: {self.shell(name, 'tail -5 /run/dockerd.log')}"
                )
            time.sleep(0.5)

    def _wait_nodes(self, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while sum(n.attrs["Status"]["State"] == "ready" for n in self.c.nodes.list()) < count:
            if time.monotonic() > deadline:
                raise RuntimeError("the machines did not all become ready swarm nodes")
            time.sleep(0.5)

    def kill(self, name: str) -> None:
        """The machine dies: its container (and the engine inside) is killed at once."""
        self.containers[name].kill()

    def node_of(self, hostname: str) -> Any:
        return next(
            n for n in self.c.nodes.list() if n.attrs["Description"]["Hostname"] == hostname
        )

    def leftovers(self, name: str) -> dict[str, str]:
        """What a machine holds of testbed's after its points: its engine's containers, and
        processes of a run (a point's namespaces and links live in its task's own network
        namespace, so they exist exactly as long as a process of the task does)."""
        run = "ps -eo comm= | grep -E '^(python|prometheus|iperf3|nsenter)' || true"
        return {
            "containers": self.engine(name, "ps", "-aq", check=False).strip(),
            "processes": " ".join(self.shell(name, run).split()),
        }

    def __exit__(self, *exc: object) -> None:
        for name, ctr in self.containers.items():
            with contextlib.suppress(Exception):
                self.engine(name, "swarm", "leave", "--force", check=False)
            with contextlib.suppress(Exception):
                ctr.remove(force=True)
        with contextlib.suppress(Exception):
            self.c.swarm.leave(force=True)
        with contextlib.suppress(Exception):
            self.c.networks.get("docker_gwbridge").remove()
        self.containers.clear()
