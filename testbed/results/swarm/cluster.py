"""The swarm as the local engine (a manager) sees it: its address, its nodes, and what runs
where. Everything here asks the Docker engine through the SDK; nothing is changed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from testbed.core.errors import EnvironmentProblem

LABEL_SWEEP = "testbed.sweep"  # on a point's service, config and container: the sweep's id
LABEL_POINT = "testbed.point"  # the point's index
LABEL_FOLDER = "testbed.folder"  # its run folder's name


@dataclass(frozen=True)
class Node:
    id: str
    hostname: str
    role: str  # manager | worker
    state: str  # ready | down | unknown | disconnected
    availability: str  # active | pause | drain
    cpus: float
    address: str

    @property
    def usable(self) -> bool:
        """Swarm would place a task here."""
        return self.state == "ready" and self.availability == "active"


def client() -> Any:
    import docker

    try:
        c = docker.from_env(timeout=60)
        c.ping()
        return c
    except (docker.errors.DockerException, OSError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
        raise EnvironmentProblem(
            f"swarm: no Docker engine answers here ({first}); run bash install.sh, which "
            "starts dockerd"
        ) from None


def manager_address(c: Any) -> str:
    """The address the swarm knows this machine by; refuses an engine that is no manager."""
    swarm = c.info().get("Swarm") or {}
    if swarm.get("LocalNodeState") != "active":
        raise EnvironmentProblem(
            "swarm: this machine's Docker engine is not in a swarm; make it a manager with "
            "`docker swarm init --advertise-addr ADDR` and join the other machines "
            "(docs/swarm.md)"
        )
    if not swarm.get("ControlAvailable"):
        raise EnvironmentProblem(
            "swarm: this machine is a worker of its swarm; run the sweep on a manager "
            "(`docker node ls` there lists the nodes)"
        )
    return str(swarm["NodeAddr"])


def nodes(c: Any) -> list[Node]:
    out = []
    for n in c.nodes.list():
        a = n.attrs
        out.append(
            Node(
                id=a["ID"],
                hostname=a["Description"]["Hostname"],
                role=a["Spec"].get("Role", "worker"),
                state=a["Status"].get("State", "unknown"),
                availability=a["Spec"].get("Availability", "active"),
                cpus=a["Description"].get("Resources", {}).get("NanoCPUs", 0) / 1e9,
                address=a["Status"].get("Addr", ""),
            )
        )
    return sorted(out, key=lambda n: (n.role != "manager", n.hostname))


def points_running(c: Any) -> list[dict[str, str]]:
    """The points of any sweep now on the swarm: sweep, point, folder, node, state."""
    out = []
    for svc in c.services.list(filters={"label": LABEL_SWEEP}):
        labels = svc.attrs["Spec"].get("Labels", {})
        for t in svc.tasks():
            out.append({
                "sweep": labels.get(LABEL_SWEEP, ""), "point": labels.get(LABEL_POINT, ""),
                "folder": labels.get(LABEL_FOLDER, ""), "node": t.get("NodeID", ""),
                "state": t.get("Status", {}).get("State", ""),
            })  # fmt: skip
    return out
