"""DSCP marking by process group, for workloads whose sockets a library opens (the training
backends): iptables rules in the node's own namespace, by the sockets' group or, for a class
of a job's transfers, by the class's addresses."""

from __future__ import annotations

from testbed.core.errors import EnvironmentProblem
from testbed.network.runtime.base import Runtime


def mark_group(
    rt: Runtime, ns: str, ifname: str, gid: int, dscp: int, who: str, switchable: bool = False
) -> None:
    """Mark with `dscp` every packet that processes of group `gid` send out of `ifname` in
    namespace `ns`: a job whose sockets are opened by a library (Gloo, NCCL, Horovod) cannot
    mark them itself. iptables is the one tool with an owner match and a DSCP target that every kernel
    here supports; pyroute2's nftables API cannot express them. The rule lives in the node's
    own namespace and goes with it; it is made from this machine, in that namespace only, so
    a container needs no capability for it. `switchable`: the DSCP rule sits alone in a chain
    of its own (chain_of(gid)), so that `set_mark` changes it with one call while the job
    runs (a policy switching the job's class)."""
    if not switchable:
        _iptables(rt, ns, who, "-A", "OUTPUT", *_owner(ifname, gid), "-j", "DSCP",
                  "--set-dscp", str(dscp))  # fmt: skip
        return
    chain = chain_of(gid)
    _iptables(rt, ns, who, "-N", chain)
    _iptables(rt, ns, who, "-A", chain, "-j", "DSCP", "--set-dscp", str(dscp))
    _iptables(rt, ns, who, "-A", "OUTPUT", *_owner(ifname, gid), "-j", chain)


def set_mark(rt: Runtime, ns: str, gid: int, dscp: int, who: str) -> None:
    """The DSCP a switchable mark (mark_group(switchable=True)) gives from now on."""
    _iptables(rt, ns, who, "-R", chain_of(gid), "1", "-j", "DSCP", "--set-dscp", str(dscp))


def mark_addresses(
    rt: Runtime, ns: str, ifname: str, own: str, peers: list[str], dscp: int, who: str
) -> None:
    """Mark with `dscp` every packet out of `ifname` in namespace `ns` from address `own` or
    to one of `peers`: the connections of one class of a job whose transfers use several
    (training/policies/per_transfer.py), each class over addresses of its own. Both directions,
    because Gloo's connecting side does not bind its source: its packets carry the host's
    primary address and are known by their destination, the accepting side's by their
    source. Appended after the job's group rule (mark_group), so they override its DSCP."""
    _iptables(rt, ns, who, "-A", "OUTPUT", "-o", ifname, "-s", own, "-j", "DSCP",
              "--set-dscp", str(dscp))  # fmt: skip
    _iptables(rt, ns, who, "-A", "OUTPUT", "-o", ifname, "-d", ",".join(peers), "-j", "DSCP",
              "--set-dscp", str(dscp))  # fmt: skip


def demote_after(
    rt: Runtime, ns: str, ifname: str, port: int, after: int, dscp: int, who: str
) -> None:
    """Mark with `dscp` the packets the server on `port` in namespace `ns` sends on a
    connection once it has sent `after` bytes on it (the connection's reply direction: the
    fetching side connects): PIAS's demotion, counted by conntrack's byte accounting (the
    connbytes match turns it on for the namespace). The flow's own mark (IP_TOS, set by the
    server) stays on its first bytes."""
    _iptables(rt, ns, who, "-A", "OUTPUT", "-o", ifname, "-p", "tcp", "--sport", str(port),
              "-m", "connbytes", "--connbytes", f"{after}:", "--connbytes-dir", "reply",
              "--connbytes-mode", "bytes", "-j", "DSCP", "--set-dscp", str(dscp))  # fmt: skip


def chain_of(gid: int) -> str:
    return f"TB-MARK-{gid}"


def _owner(ifname: str, gid: int) -> list[str]:
    return ["-o", ifname, "-m", "owner", "--gid-owner", str(gid)]


def _iptables(rt: Runtime, ns: str, who: str, *args: str) -> None:
    try:
        r = rt.net_exec(ns, ["iptables", "-w", "-t", "mangle", *args])
    except FileNotFoundError:
        raise EnvironmentProblem(
            "iptables is missing; install it (apt-get install iptables)"
        ) from None
    if r.returncode != 0:
        raise EnvironmentProblem(
            f"cannot mark {who}'s traffic in {ns}: iptables said {r.stderr.strip()!r} "
            "(the kernel needs xt_owner, xt_connbytes and xt_DSCP)"
        )
