"""DSCP marking by process group, for workloads whose sockets a library opens (the training
backends): one iptables rule per node, in the node's own namespace."""

from __future__ import annotations

from testbed.errors import EnvironmentProblem
from testbed.runtime.base import Runtime


def mark_group(rt: Runtime, ns: str, ifname: str, gid: int, dscp: int, who: str) -> None:
    """Mark with `dscp` every packet that processes of group `gid` send out of `ifname` in
    namespace `ns`: a job whose sockets are opened by a library (Gloo, NCCL, Horovod) cannot
    mark them itself. iptables is the one tool with an owner match and a DSCP target that every kernel
    here supports; pyroute2's nftables API cannot express them. The rule lives in the node's
    own namespace and goes with it; it is made from this machine, in that namespace only, so
    a container needs no capability for it."""
    cmd = [
        "iptables",
        "-w",
        "-t",
        "mangle",
        "-A",
        "OUTPUT",
        "-o",
        ifname,
        "-m",
        "owner",
        "--gid-owner",
        str(gid),
        "-j",
        "DSCP",
        "--set-dscp",
        str(dscp),
    ]
    try:
        r = rt.net_exec(ns, cmd)
    except FileNotFoundError:
        raise EnvironmentProblem(
            "iptables is missing; install it (apt-get install iptables)"
        ) from None
    if r.returncode != 0:
        raise EnvironmentProblem(
            f"cannot mark {who}'s traffic in {ns}: iptables said {r.stderr.strip()!r} "
            "(the kernel needs xt_owner and xt_DSCP)"
        )
