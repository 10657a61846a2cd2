"""The runner of a policy that gives a job's transfers classes of their own (policies.py's
`layers` and `tail`). Nothing switches while the job runs: the runner chooses the layers whose
buffers go to the policy's class (the first k; or the model's exposed tail), gives every host
one more data address for that class (topology.class_address) and marks that address's
connections with the class's DSCP (marking.mark_addresses), all before the workers start;
each worker opens a second Gloo group bound to its address (ddp_worker.class_groups) and
reduces the class's buffers over it (ddp_schedule.Ring). The job's other traffic keeps the
job's own mark (its group rule), the agreement rounds included.

Its summary section says what the policy put where: the layers and buffers, and the class's
share of the bytes reduced per iteration, which the links' class counters must show
(tests/integration/test_policies.py)."""

from __future__ import annotations

import errno
from typing import Any

from pyroute2.netlink.exceptions import NetlinkError

from testbed.scenario.topology import class_address
from testbed.workloads.marking import mark_addresses
from testbed.workloads.training.model.models import BYTES_PER_PARAM
from testbed.workloads.training.policies import LayersPolicy
from testbed.workloads.training.workers.ddp_schedule import class_bytes, plan_for


class PerTransfer:
    def __init__(
        self,
        kind: str,
        to: str,
        layers: list[int],
        addresses: list[str],
        bytes_to: tuple[int, int],
        buffers: int | None,
    ):
        """`bytes_to`: (the class's bytes, all bytes) reduced per iteration; `buffers`: how
        many of the job's buffers go to the class (None in real mode: DDP's buckets are split
        by layer in the communication hook, whatever they hold)."""
        self.kind, self.to, self.layers, self.addresses = kind, to, layers, addresses
        self.class_bytes, self.total_bytes = bytes_to
        self.buffers = buffers

    def worker_config(self) -> dict[str, Any]:
        return {"transfer_classes": {"layers": self.layers, "addresses": self.addresses}}

    def tick(self, now: float) -> None:
        pass  # the classes are fixed per buffer; nothing acts inside the window

    def section(self, t0: float, t1: float) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "to": self.to,
            "layers_to": len(self.layers),
            "buffers_to": self.buffers,
            "bytes_to": self.class_bytes,
            "share_to": self.class_bytes / self.total_bytes if self.total_bytes else None,
        }

    def warning(self) -> str | None:
        if self.class_bytes:
            return None
        return (
            f"policy {self.kind} put no buffer in {self.to}: the model has none of the job's "
            "reductions exposed after backward (the job runs all in its own class)"
        )

    def address_classes(self) -> dict[str, str]:
        """The class of a job's socket whose own or peer address is one of these (a class
        group's connections; the job's others are in its own class)."""
        return dict.fromkeys(self.addresses, self.to)

    def close(self) -> None:
        pass


def chosen_layers(job: Any, sizes: list[int]) -> list[int]:
    """The layers whose buffers go to the policy's class."""
    from testbed.workloads.training.model.predict import exposed_layers

    p = job.cfg.policy
    if isinstance(p, LayersPolicy):
        return list(range(p.first_layers(sizes)))
    return sorted(exposed_layers(job.name, job.s))


def start(job: Any) -> PerTransfer:
    """The runner of torch-ddp job `job` (ddp.DdpJob) whose policy gives classes per transfer:
    the class's addresses made and marked on every host before its workers start."""
    policy = job.cfg.policy
    profile = job.s.tc_profile
    worker_cfg = job.worker_config()
    params = [int(x[1]) for x in worker_cfg["layers"]]
    layers = chosen_layers(job, params)
    if job.cfg.mode == "real":  # the hook reduces exactly these layers' gradients in the class
        bytes_to = (sum(params[j] for j in layers) * BYTES_PER_PARAM, sum(params) * BYTES_PER_PARAM)
        buffers = None
    else:
        plan = plan_for({**worker_cfg, "transfer_classes": {"layers": layers}})
        bytes_to, buffers = (class_bytes(plan), sum(plan.nbytes)), sum(plan.classes)
    hosts = job.hosts()
    number = profile.class_names.index(policy.to)
    addresses = [str(class_address(job.topo, h, number)) for h in hosts]
    dscp = profile.cls(policy.to).mark
    for h, own in zip(hosts, addresses, strict=True):
        _add_address(job.rt, h, own)
        peers = [a for a in addresses if a != own]
        mark_addresses(job.rt, h.netns, h.data_if, own, peers, dscp, job.name)
    return PerTransfer(policy.kind, policy.to, layers, addresses, bytes_to, buffers)


def _add_address(rt: Any, h: Any, address: str) -> None:
    """One more address on the host's data interface (a secondary of its subnet: the
    host's own address stays the source of what it starts). Two jobs with such a policy and
    the same class on one host share it."""
    ipr = rt.ipr(h.netns)
    index = ipr.link_lookup(ifname=h.data_if)[0]
    try:
        ipr.addr("add", index=index, address=address, prefixlen=h.prefixlen)
    except NetlinkError as e:
        if e.code != errno.EEXIST:
            raise
