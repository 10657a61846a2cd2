"""A point as a Swarm service: one task, on the node the sweep chose, that never restarts (a
failed point is the sweep's to judge), reserving the node's CPUs so that Swarm places nothing
else of ours beside it. Pure data here (`spec`), created by the dispatcher."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from testbed.results.swarm.cluster import LABEL_FOLDER, LABEL_POINT, LABEL_SWEEP

SCENARIO_PATH = "/run/testbed-point/scenario.yaml"
STOP_GRACE_S = 90  # `testbed up` tears down on SIGTERM; a 256-host run needs seconds
# what a run needs inside its task: every capability but the one this machine's bounding set
# lacks (docs/swarm.md, "Tested on one machine"; a run needs SYS_ADMIN, NET_ADMIN, SYS_PTRACE
# for nsenter, ...)
CAP_ADD = ["ALL"]
CAP_DROP = ["SYS_RESOURCE"]


@dataclass(frozen=True)
class PointService:
    name: str
    image: str
    node_id: str
    cpus: float
    config_id: str
    config_name: str
    folder: str
    sweep_id: str
    index: int
    upload_url: str
    token: str
    owner: str = ""  # the sweep process (dispatch.remove_stale finds services it left)

    def labels(self) -> dict[str, str]:
        return {LABEL_SWEEP: self.sweep_id, LABEL_POINT: str(self.index),
                LABEL_FOLDER: self.folder, "testbed.owner": self.owner}  # fmt: skip

    def create_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of docker's `services.create`."""
        from docker.types import ConfigReference, Resources, RestartPolicy, ServiceMode

        return {
            "image": self.image,
            "name": self.name,
            "command": [
                "python",
                "-m",
                "testbed.results.swarm.point",
                "--scenario",
                SCENARIO_PATH,
                "--folder",
                self.folder,
                "--upload",
                self.upload_url,
                "--token",
                self.token,
            ],
            "constraints": [f"node.id=={self.node_id}"],
            "mode": ServiceMode("replicated", replicas=1),
            "restart_policy": RestartPolicy(condition="none"),
            "resources": Resources(cpu_reservation=int(self.cpus * 1e9)),
            "cap_add": CAP_ADD,
            "cap_drop": CAP_DROP,
            "configs": [ConfigReference(self.config_id, self.config_name, filename=SCENARIO_PATH)],
            "labels": self.labels(),
            "container_labels": self.labels(),
            "stop_grace_period": STOP_GRACE_S * 10**9,
        }


def probe_kwargs(image: str, node_id: str, sweep_id: str, owner: str = "") -> dict[str, Any]:
    """A one-task service that prints a node's kernel capabilities (point.py --probe)."""
    from docker.types import RestartPolicy, ServiceMode

    return {
        "image": image,
        "name": f"tb-{sweep_id}-probe-{node_id[:12]}",
        "command": ["python", "-m", "testbed.results.swarm.point", "--probe"],
        "constraints": [f"node.id=={node_id}"],
        "mode": ServiceMode("replicated", replicas=1),
        "restart_policy": RestartPolicy(condition="none"),
        "cap_add": CAP_ADD,
        "cap_drop": CAP_DROP,
        "labels": {LABEL_SWEEP: sweep_id, "testbed.owner": owner},
    }
