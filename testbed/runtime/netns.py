"""The default runtime: every node is a Linux network namespace (needs root and nothing else).

Building is plain netlink through pyroute2. Netlink sockets are opened *inside* each namespace
by switching the calling thread there (setns) and back, which is several times faster than
pyroute2's `IPRoute(netns=...)` (that forks a helper per socket). Processes are started in a
node with `nsenter`, the util-linux tool for exactly this, so that no Python code runs between
fork and exec.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import itertools
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from pyroute2 import IPRoute, netns
from pyroute2.ethtool import Ethtool
from pyroute2.netlink.exceptions import NetlinkError

from testbed.errors import RunFailure
from testbed.runtime import forkserver
from testbed.runtime.base import NodeProcess
from testbed.state import RunState, proc_start_time
from testbed.topology import Host, Link, Switch, TopologyPlan

log = logging.getLogger(__name__)

NETNS_DIR = Path("/run/netns")
# Offloads that make a veth hand 64 KB super-packets to the qdisc: HTB then counts and queues
# super-packets, so rates overshoot in bursts and a 1000-packet FIFO holds 64 MB.
OFFLOADS_OFF = (
    "tx-tcp-segmentation",
    "tx-tcp6-segmentation",
    "tx-tcp-ecn-segmentation",
    "tx-tcp-mangleid-segmentation",
    "tx-generic-segmentation",
    "tx-udp-segmentation",
    "rx-gro",
    "rx-gro-list",
    "rx-udp-gro-forwarding",
)


@contextlib.contextmanager
def inside(ns: str | None) -> Iterator[None]:
    """Run the block with the calling thread in namespace `ns` (None: stay where we are)."""
    if ns is None:
        yield
        return
    netns.pushns(ns)
    try:
        yield
    finally:
        netns.popns()


def open_ipr(ns: str | None) -> IPRoute:
    if ns is not None and not (NETNS_DIR / ns).exists():
        raise RunFailure(f"network namespace {ns} does not exist")
    with inside(ns):
        return IPRoute()


def create_netns(name: str) -> None:
    """Create a named namespace without forking (O_EXCL: refuse one that exists)."""
    netns.pushns()
    try:
        netns.setns(name, flags=os.O_CREAT | os.O_EXCL, fork=False)
    finally:
        netns.popns()


def write_sysctl(ns: str | None, key: str, value: str) -> None:
    """Write /proc/sys/<key> as seen from inside `ns`; absent keys (no IPv6) are fine."""
    with inside(ns), contextlib.suppress(FileNotFoundError):
        Path("/proc/sys", key.replace(".", "/")).write_text(value)


def disable_offloads(ns: str | None, ifnames: Sequence[str]) -> None:
    with inside(ns):
        et = Ethtool()
        try:
            for ifname in ifnames:
                feats = et.get_features(ifname)
                changed = False
                for name in OFFLOADS_OFF:
                    f = feats.features.get(name)
                    if f is not None and f.enable and f.available:
                        f.enable = False
                        changed = True
                if changed:
                    et.set_features(ifname, feats)
        finally:
            et.close()


class NetnsRuntime:
    """Builds the network of `plan` (any topology kind), recording each object in `state` first."""

    name = "netns"
    shares_hostname = True

    def __init__(self, plan: TopologyPlan, state: RunState) -> None:
        self.plan = plan
        self.state = state
        self._iprs: dict[str | None, IPRoute] = {}

    def ipr(self, ns: str | None) -> IPRoute:
        if ns not in self._iprs:
            self._iprs[ns] = open_ipr(ns)
        return self._iprs[ns]

    def close(self) -> None:
        for ipr in self._iprs.values():
            with contextlib.suppress(Exception):
                ipr.close()
        self._iprs.clear()

    def _ifindex(self, ns: str | None, ifname: str) -> int:
        found = self.ipr(ns).link_lookup(ifname=ifname)
        if not found:
            raise RunFailure(f"interface {ifname} not found in {ns or 'the root namespace'}")
        return found[0]

    def _make_nodes(self) -> None:
        """Every node's network namespace, named as the plan says (the docker runtime makes
        the hosts' as containers instead)."""
        p = self.plan
        self.state.record(*({"kind": "netns", "name": ns} for ns in p.namespaces))
        for ns in p.namespaces:
            create_netns(ns)

    def build(self) -> None:
        p = self.plan
        self._make_nodes()
        for ns in p.namespaces:
            # No IPv6: router solicitations and MLD reports would be stray traffic in the
            # class counters, and the testbed's addresses are IPv4 only.
            write_sysctl(ns, "net.ipv6.conf.all.disable_ipv6", "1")
            write_sysctl(ns, "net.ipv6.conf.default.disable_ipv6", "1")
            ipr = self.ipr(ns)
            ipr.link("set", index=self._ifindex(ns, "lo"), state="up")
        for sw in p.switches:
            self._build_switch(sw)
        by_switch = {sw.name: sw for sw in p.switches}
        for lk in p.links:
            if lk.tier == "host":
                self._build_host_link(p.host(lk.a.node), by_switch[lk.b.node])
            else:
                self._build_fabric_link(lk)
        for sw in p.switches:
            ports = [lk.b.ifname for lk in p.links if lk.b.node == sw.name]
            ports += [lk.a.ifname for lk in p.links if lk.a.node == sw.name]
            disable_offloads(sw.netns, ports)
        for r in p.routes:
            self._add_route(r.netns, r.dst, r.via)
        self._build_management()

    def _build_switch(self, sw: Switch) -> None:
        """A bridge for the hosts (tor, leaf); routing on (leaf, spine). The switch is ours and
        has no netfilter rules: br_netfilter (loaded by dockerd, among others) would pass
        every bridged frame through netfilter there, so that is off."""
        for family in ("iptables", "ip6tables", "arptables"):
            write_sysctl(sw.netns, f"net.bridge.bridge-nf-call-{family}", "0")
        if sw.role != "tor":
            write_sysctl(sw.netns, "net.ipv4.ip_forward", "1")
            # ECMP by 5-tuple, so the flows between two hosts spread over the spines
            write_sysctl(sw.netns, "net.ipv4.fib_multipath_hash_policy", "1")
            # replies may come back over another spine than their request took
            for conf in ("all", "default"):
                write_sysctl(sw.netns, f"net.ipv4.conf.{conf}.rp_filter", "0")
        if sw.bridge is None:
            return
        ipr = self.ipr(sw.netns)
        ipr.link("add", ifname=sw.bridge, kind="bridge")
        br = self._ifindex(sw.netns, sw.bridge)
        if sw.gateway is not None:
            ipr.addr(
                "add", index=br, address=str(sw.gateway.ip), prefixlen=sw.gateway.network.prefixlen
            )
        ipr.link("set", index=br, state="up")

    def _build_host_link(self, h: Host, sw: Switch) -> None:
        """The veth is created in the switch with its peer placed straight into the host."""
        assert sw.bridge is not None
        si = self.ipr(sw.netns)
        si.link(
            "add",
            ifname=h.switch_port,
            kind="veth",
            peer={"ifname": h.data_if, "net_ns_fd": h.netns},
        )
        port = self._ifindex(sw.netns, h.switch_port)
        si.link("set", index=port, master=self._ifindex(sw.netns, sw.bridge))
        si.link("set", index=port, state="up")
        hi = self.ipr(h.netns)
        eth = self._ifindex(h.netns, h.data_if)
        hi.addr("add", index=eth, address=str(h.data_ip), prefixlen=h.prefixlen)
        hi.link("set", index=eth, state="up")
        disable_offloads(h.netns, [h.data_if])
        if self.plan.tcp_congestion is not None:  # per namespace; new ones copy the machine's
            write_sysctl(h.netns, "net.ipv4.tcp_congestion_control", self.plan.tcp_congestion)
        if h.gateway is not None:  # the data prefix only: no default route, nothing leaves
            self._add_route(h.netns, self.plan.data_prefix, (h.gateway,))

    def _build_fabric_link(self, lk: Link) -> None:
        a = self.ipr(lk.a.netns)
        a.link(
            "add",
            ifname=lk.a.ifname,
            kind="veth",
            peer={"ifname": lk.b.ifname, "net_ns_fd": lk.b.netns},
        )
        for end in (lk.a, lk.b):
            ipr = self.ipr(end.netns)
            idx = self._ifindex(end.netns, end.ifname)
            if end.address is not None:
                ipr.addr(
                    "add",
                    index=idx,
                    address=str(end.address.ip),
                    prefixlen=end.address.network.prefixlen,
                )
            ipr.link("set", index=idx, state="up")

    def _add_route(
        self, ns: str, dst: ipaddress.IPv4Network, via: tuple[ipaddress.IPv4Address, ...]
    ) -> None:
        ipr = self.ipr(ns)
        if len(via) == 1:
            ipr.route("add", dst=str(dst), gateway=str(via[0]))
        else:
            ipr.route("add", dst=str(dst), multipath=[{"gateway": str(g)} for g in via])

    def _build_management(self) -> None:
        """Root-namespace bridge with one isolated port per host: root reaches every host,
        hosts cannot reach each other this way, and nothing here is shaped."""
        p = self.plan
        self.state.record(
            {"kind": "link", "netns": None, "name": p.mgmt_bridge, "type": "bridge"},
            *(
                {"kind": "link", "netns": None, "name": h.mgmt_peer, "type": "veth"}
                for h in p.hosts
            ),
        )
        root = self.ipr(None)
        root.link("add", ifname=p.mgmt_bridge, kind="bridge")
        write_sysctl(None, f"net.ipv6.conf.{p.mgmt_bridge}.disable_ipv6", "1")
        mbr = self._ifindex(None, p.mgmt_bridge)
        root.addr(
            "add", index=mbr, address=str(p.mgmt_bridge_ip), prefixlen=p.mgmt_prefix.prefixlen
        )
        root.link("set", index=mbr, state="up")
        for h in p.hosts:
            root.link(
                "add",
                ifname=h.mgmt_peer,
                kind="veth",
                peer={"ifname": h.mgmt_if, "net_ns_fd": h.netns},
            )
            write_sysctl(None, f"net.ipv6.conf.{h.mgmt_peer}.disable_ipv6", "1")
            peer = self._ifindex(None, h.mgmt_peer)
            root.link("set", index=peer, master=mbr)
            root.brport("set", index=peer, isolated=1)
            root.link("set", index=peer, state="up")
            hi = self.ipr(h.netns)
            m = self._ifindex(h.netns, h.mgmt_if)
            hi.addr("add", index=m, address=str(h.mgmt_ip), prefixlen=p.mgmt_prefix.prefixlen)
            hi.link("set", index=m, state="up")

    def spawn(
        self,
        ns: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> NodeProcess:
        return spawn_in_netns(NETNS_DIR / ns, argv, log_path, env)

    def spawn_python(
        self,
        ns: str,
        module: str,
        argv: list[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
        preload: Sequence[str] = (),
        gid: int | None = None,
        new_uts: bool = False,
    ) -> NodeProcess:
        """Start Python program `module` inside namespace `ns` with this interpreter. With
        `preload`, it is forked (its `main(argv)`) from a server that imported those modules
        once for this process (see forkserver.py); a group or a UTS namespace needs one."""
        if not preload:
            if gid is not None or new_uts:
                raise ValueError("gid and new_uts need the fork server: give preload")
            return self.spawn(ns, [sys.executable, "-m", module, *argv], log_path, env)
        fs = forkserver.shared(tuple(preload), log_path.parent / "forkserver.log")
        try:
            return fs.spawn(
                NETNS_DIR / ns, module, argv, log_path, dict(env or {}), gid=gid, new_uts=new_uts
            )
        except RunFailure:
            forkserver.discard(tuple(preload))
            raise

    def net_exec(
        self, ns: str, argv: Sequence[str], timeout: float = 20
    ) -> subprocess.CompletedProcess[str]:
        """A tool of this machine (iptables) run in the node's network namespace only."""
        return run_in_netns(NETNS_DIR / ns, argv, timeout)

    def check(self) -> None:
        """A namespace cannot die by itself while the run holds it."""


def spawn_in_netns(
    path: Path, argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None
) -> NodePopen:
    """Start `argv` in the network namespace at `path`, output to `log_path`. The child dies
    with us (PDEATHSIG, set by setpriv: no Python runs between fork and exec, which a
    preexec_fn would do, unsafely once the exporter threads run) and sits in its own session,
    so a terminal's Ctrl-C reaches only the orchestrator, which then stops the workloads in
    order. nsenter and the program keep the PDEATHSIG: neither changes credentials."""
    cmd = ["setpriv", "--pdeathsig", "KILL", "--", "nsenter", f"--net={path}", "--", *argv]
    out = open(log_path, "ab")  # noqa: SIM115 - handed to the child, closed below
    try:
        return NodePopen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    finally:
        out.close()


def run_in_netns(
    path: Path, argv: Sequence[str], timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nsenter", f"--net={path}", "--", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


_EXIT_SEEN = itertools.count()


class NodePopen(subprocess.Popen[bytes]):
    """Popen with the exit order the workloads use to name the first process that died."""

    _order: int | None = None

    def poll(self) -> int | None:
        rc = super().poll()
        if rc is not None and self._order is None:
            self._order = next(_EXIT_SEEN)
        return rc

    @property
    def exit_order(self) -> int:
        return self._order if self._order is not None else 1 << 62


def _ns_inode(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def pids_in(namespaces: Sequence[str]) -> list[int]:
    """Processes whose network namespace is one of ours."""
    wanted = {i for ns in namespaces if (i := _ns_inode(NETNS_DIR / ns)) is not None}
    wanted.discard(_ns_inode(Path("/proc/1/ns/net")))  # never this machine's own namespace
    if not wanted:
        return []
    me = os.getpid()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        i = _ns_inode(Path("/proc", entry, "ns", "net"))
        if i in wanted:
            out.append(int(entry))
    return out


def kill_processes(namespaces: Sequence[str], grace_s: float = 3.0) -> int:
    """SIGTERM everything living in our namespaces, SIGKILL what is left after `grace_s`."""
    pids = pids_in(namespaces)
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            pids = [p for p in pids if process_running(p)]
            if not pids:
                return 0
            time.sleep(0.05)
    return len(pids)


def kill_recorded(pid: int, start: int | None, grace_s: float = 10.0) -> None:
    """Stop a process recorded in the state file, if it is still that process (same start
    time: a recycled PID belongs to someone else and is left alone)."""
    if start is None or proc_start_time(pid) != start:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while process_running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if process_running(pid) and proc_start_time(pid) == start:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def process_running(pid: int) -> bool:
    """Alive and not a zombie. A zombie has ended; whoever started it reaps it (Popen does for
    its own), so nobody here waits on children that are not theirs (waitpid(-1) would steal
    Popen's exit codes)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def teardown(state: RunState) -> list[str]:
    """Delete what `state` records; return problems (empty when clean).

    Namespaces go first: the kernel then destroys all their interfaces, and the root-side
    ends of their veth pairs, in one batch, which is far faster than deleting veths one by
    one (each delete waits for an RCU grace period). Recorded root-namespace links still
    present afterwards (the management bridge) are deleted by name.
    """
    problems: list[str] = []
    for obj in state.objects:
        if obj["kind"] == "process":
            kill_recorded(obj["pid"], obj["start"])
    namespaces = state.namespaces()
    left = kill_processes(namespaces)
    if left:
        problems.append(f"{left} process(es) in run {state.run_id}'s namespaces would not die")
    for ns in reversed(namespaces):
        try:
            netns.remove(ns)
        except FileNotFoundError:
            pass
        except OSError as e:
            problems.append(f"could not remove namespace {ns}: {e}")
    root_links = [o for o in state.objects if o["kind"] == "link" and o.get("netns") is None]
    veths = [o["name"] for o in root_links if o.get("type") == "veth"]
    deadline = time.monotonic() + 3.0
    while any(_link_exists(n) for n in veths) and time.monotonic() < deadline:
        time.sleep(0.02)
    with IPRoute() as root:
        for obj in reversed(root_links):
            try:
                idx = root.link_lookup(ifname=obj["name"])
                if idx:
                    root.link("del", index=idx[0])
            except NetlinkError as e:
                if e.code != errno.ENODEV:
                    problems.append(f"could not delete link {obj['name']}: {e}")
    return problems


def _link_exists(ifname: str) -> bool:
    return os.path.exists(f"/sys/class/net/{ifname}")
