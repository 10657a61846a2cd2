"""The default runtime: every node is a Linux network namespace (needs root and nothing else).

The network over the nodes is network.py's, as for every runtime. Processes are started in a
node with `nsenter`, the util-linux tool for exactly this, so that no Python code runs between
fork and exec (or forked from a fork server, forkserver.py). Teardown deletes exactly what the
run's state file records.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import itertools
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from testbed.core.errors import EnvironmentProblem, RunFailure, ScenarioError
from testbed.core.state import STATE_DIR, RunLock, RunState, proc_start_time
from testbed.core.units import format_rate_about
from testbed.network import netlink as nl
from testbed.network.runtime import forkserver, underlay_probe
from testbed.network.runtime.base import Launch, NodeProcess
from testbed.network.runtime.namespaces import (
    NETNS_DIR,
    create_netns,
    remove_netns,
    write_sysctl,
)
from testbed.network.runtime.network import Cutting, Network
from testbed.network.shaping.apply import tc_call
from testbed.network.shaping.plan import capped
from testbed.scenario.partition import (
    Part,
    admit,
    cut_demand,
    in_scenario_time,
    parts,
    place,
    placement_record,
    probe_vni,
)
from testbed.scenario.topology import TopologyPlan, link_group, name_of, parse_name

log = logging.getLogger(__name__)
SYS_NET = Path("/sys/class/net")  # the root namespace's interfaces
# machines.emulate: the emulated machines' own network (link-local: it exists only between
# their namespaces and the underlay's, never routed anywhere)
UNDERLAY = ipaddress.IPv4Network("169.254.77.0/24")


@dataclass(frozen=True)
class Admission:
    """What an emulated run asks of its machines' network before its nodes exist (issue 76):
    the machine pairs its cut joins, the rule that judges what the probe carried between
    them (partition.admit, bound to the placement in scenario time: a reason to refuse, or
    None), where the probe's figures go (placement.json), and the emulated network's rate
    (None: unshaped)."""

    pairs: list[tuple[str, str]]
    judge: Callable[[dict[tuple[str, str], float]], str | None]
    report: Callable[[dict[tuple[str, str], float]], None]
    underlay_bps: int | None = None


class NetnsRuntime:
    """Every node a network namespace of its own; the network over them (network.Network)."""

    name = "netns"
    shares_hostname = True
    renumbers_gpus = False  # a namespace sees every GPU of the machine

    def __init__(
        self,
        plan: TopologyPlan,
        state: RunState,
        emulated: Mapping[str, Part] | None = None,
        port: int = 14789,
        admission: Admission | None = None,
        underlay_mtu: int = 1500,
    ) -> None:
        """`emulated`: each machine's part of a run placed over several (machines.emulate),
        every one built here, each machine a namespace on an underlay (a bridge) that
        `admission` probes before the nodes are built."""
        self.plan = plan
        self.state = state
        self.port = port
        self.admission = admission
        self.underlay_mtu = underlay_mtu
        names = list(emulated or {})
        self.machines = {m: name_of("emulated machine", plan.run_id, i)
                         for i, m in enumerate(names, start=1)}  # fmt: skip
        self.underlay = name_of("underlay", plan.run_id) if names else None
        self.address = {m: UNDERLAY[i] for i, m in enumerate(names, start=1)}
        cuts = [
            Cutting(part, self.address, port, self.machines[m])
            for m, part in (emulated or {}).items()
        ]
        self.net = Network(plan, state, cuts)
        self.classes = self.net.classes

    def netlink(self, ns: str) -> socket.socket:
        return self.net.netlink(ns)

    def ipr(self, ns: str | None) -> IPRoute:
        return self.net.ipr(ns)

    def proc_net(self, ns: str, names: tuple[str, ...]) -> list[str]:
        return self.net.proc_net(ns, names)

    def close(self) -> None:
        self.net.close()

    def build(self) -> None:
        """The nodes (a namespace each, named as the plan says), the emulated machines if any
        (a namespace each, and their underlay), then the network over them."""
        extra = [*self.machines.values(), self.underlay] if self.underlay else []
        every = [*self.plan.namespaces, *extra]
        self.state.record(*({"kind": "netns", "name": ns} for ns in every))
        for ns in every:
            create_netns(ns)
        if self.underlay is not None:
            self._build_underlay(self.underlay)
            self._admit()
        self.net.build()

    def _admit(self) -> None:
        """The machines' network probed between every pair the cut joins, through a probe
        tunnel as the cut links' (underlay_probe.py), and judged before any node exists: a
        cut that asks more than it carried is refused in one line (exit 2), naming the
        time_scale that fits."""
        a = self.admission
        if a is None:
            return
        probed: dict[tuple[str, str], float] = {}
        a.report(probed)  # the placement, whatever the probe does
        if a.pairs:
            vxlan = (probe_vni(self.plan.run_id), self.port, self.plan.mtu)
            probed = underlay_probe.carried(self.net.ipr, lambda ns: NETNS_DIR / ns,
                                            self.machines, self.address, a.pairs, vxlan)  # fmt: skip
        if not probed:
            return
        a.report(probed)
        for (src, dst), bps in sorted(probed.items()):
            log.info("admission: %s → %s carried %s through a probe tunnel", src, dst,
                     format_rate_about(bps))  # fmt: skip
        why = a.judge(probed)
        if why is not None:
            raise ScenarioError(f"machines: {why}")

    def _build_underlay(self, underlay: str) -> None:
        """A bridge in the underlay's namespace and a veth to each emulated machine, whose end
        there (eth0) has the machine's address: the machines' own network, IPv6 off (nothing
        on it but the tunnels' frames), unshaped unless machines.underlay_rate holds each
        machine's veth to a rate both ways."""
        for ns in (underlay, *self.machines.values()):
            write_sysctl(ns, "net.ipv6.conf.all.disable_ipv6", "1",
                         "net.ipv6.conf.default.disable_ipv6", "1")  # fmt: skip
        u = self.net.ipr(underlay)
        u.link("add", ifname="br", kind="bridge")
        (br,) = u.link_lookup(ifname="br")
        u.link("set", index=br, state="up")
        rate = self.admission.underlay_bps if self.admission is not None else None
        for i, ns in enumerate(self.machines.values(), start=1):
            u.link("add", ifname=f"m{i}", kind="veth", peer={"ifname": "eth0", "net_ns_fd": ns})
            (port,) = u.link_lookup(ifname=f"m{i}")
            u.link("set", index=port, master=br, mtu=self.underlay_mtu, state="up")
            m = self.net.ipr(ns)
            (eth0,) = m.link_lookup(ifname="eth0")
            m.link("set", index=eth0, mtu=self.underlay_mtu)  # machines.underlay_mtu
            m.addr("add", index=eth0, address=str(UNDERLAY[i]), prefixlen=UNDERLAY.prefixlen)
            m.link("set", index=eth0, state="up")
            if rate is not None:  # the machine's link to the others, both ways
                for ipr, index in ((m, eth0), (u, port)):
                    for obj in capped(rate):
                        tc_call(ipr, index, obj)

    def spawn(
        self,
        ns: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> NodeProcess:
        return spawn_in_netns(NETNS_DIR / ns, argv, log_path, env)

    def spawn_python(self, ns: str | None, launch: Launch) -> NodeProcess:
        return spawn_python(ns, launch)

    def net_exec(
        self, ns: str, argv: Sequence[str], timeout: float = 20
    ) -> subprocess.CompletedProcess[str]:
        """A tool of this machine (iptables) run in the node's network namespace only."""
        return run_in_netns(NETNS_DIR / ns, argv, timeout)

    def check(self) -> None:
        """A namespace cannot die by itself while the run holds it."""


def spawn_python(ns: str | None, launch: Launch) -> NodeProcess:
    """Start `launch` with this interpreter inside namespace `ns` (None: this machine's own,
    where a run's services such as torch's store live). With `preload`, it is forked (its
    `main(argv)`) from a server that imported those modules once for this process (see
    forkserver.py); a group or a UTS namespace needs one."""
    path = NETNS_DIR / ns if ns is not None else Path(f"/proc/{os.getpid()}/ns/net")
    if not launch.preload:
        if launch.gid is not None or launch.new_uts:
            raise ValueError("gid and new_uts need the fork server: give preload")
        argv = [sys.executable, "-m", launch.module, *launch.argv]
        return spawn_in_netns(path, argv, launch.log_path, launch.env)
    fs = forkserver.shared(launch.preload, launch.log_path.parent / "forkserver.log")
    try:
        return fs.spawn(path, launch)
    except RunFailure:
        forkserver.discard(launch.preload)
        raise


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

    The run's root-namespace interfaces (the management bridge, the hosts' management veths)
    go first, all in one request by their link group, the veths with their peers: deleting
    them one by one waits for an RCU grace period each. Then the namespaces' names: the
    kernel destroys a namespace and what is inside it once nothing holds it, in the
    background and out of sight (0.15 s for 64 hosts, 0.45 s for 256, which this used to
    wait for). Recorded root-namespace links still present afterwards (those of a run made
    before link groups, which go with their namespaces) are deleted by name.
    """
    for obj in state.objects:
        if obj["kind"] == "process":
            kill_recorded(obj["pid"], obj["start"])
    root = [o for o in state.objects if o.get("netns") is None]
    return _remove(
        f"run {state.run_id}",
        state.namespaces(),
        [o for o in root if o["kind"] == "link"],
        [o["group"] for o in root if o["kind"] == "link-group"],
    )


def _remove(
    whose: str, namespaces: Sequence[str], root_links: Sequence[Mapping[str, Any]],
    groups: Sequence[int],
) -> list[str]:  # fmt: skip
    """The processes in `namespaces`, the link groups `groups` and the namespaces' names, then
    the interfaces `root_links` still there (teardown says in which order, and why)."""
    problems: list[str] = []
    left = kill_processes(namespaces)
    if left:
        problems.append(f"{left} process(es) in the namespaces of {whose} would not die")
    for group in groups:
        problems += _delete_group(group, {o["name"] for o in root_links})
    for ns in reversed(namespaces):
        try:
            remove_netns(ns)
        except FileNotFoundError:
            pass
        except OSError as e:
            problems.append(f"could not remove namespace {ns}: {e}")
    veths = [o["name"] for o in root_links if o.get("type") == "veth"]
    deadline = time.monotonic() + 3.0
    while any(_link_exists(n) for n in veths) and time.monotonic() < deadline:
        time.sleep(0.02)
    with IPRoute() as root:
        for obj in reversed(root_links):
            if not _link_exists(obj["name"]):
                continue  # gone with its namespace (a lookup per veth cost 1 ms)
            try:
                idx = root.link_lookup(ifname=obj["name"])
                if idx:
                    root.link("del", index=idx[0])
            except NetlinkError as e:
                if e.code != errno.ENODEV:
                    problems.append(f"could not delete link {obj['name']}: {e}")
    return problems


# a stray root interface's kind by its role (topology.ROOT_LINK_NAMES); a veth goes with its
# namespace, so _remove waits for veths only
STRAY_TYPES = {"management bridge": "bridge", "tunnel": "vxlan"}


def strays() -> dict[str | None, list[str]]:
    """Namespaces and root-namespace interfaces named as testbed names them (topology's
    NETNS_NAMES, ROOT_LINK_NAMES) whose run has no state file, as after kill -9 of `up` and
    its guardian when the file was lost too; whatever the runtime (a container's namespace is
    attached here too). By run id; None: kernel probes whose process is gone."""
    # The kernel first, the state files after: every object is recorded before it exists, so
    # the state file of a run that starts in between is there to be read below.
    found: list[tuple[Literal["netns", "link"], str]] = []
    if NETNS_DIR.is_dir():
        found += [("netns", p.name) for p in NETNS_DIR.iterdir()]
    found += [("link", p.name) for p in SYS_NET.iterdir()]
    recorded = {p.stem for p in STATE_DIR.glob("*.json")} if STATE_DIR.is_dir() else set()
    out: dict[str | None, list[str]] = {}
    for kind, name in found:
        named = parse_name(kind, name)
        if named is None:
            continue
        rid = named[1].get("id")
        if rid in recorded or (rid is None and process_running(int(named[1]["pid"]))):
            continue
        out.setdefault(rid, []).append(name)
    return out


def remove_strays(run_id: str | None, names: Sequence[str]) -> list[str]:
    """Remove `names` of `strays()`: processes in the namespaces, the root interfaces (by the
    run's link group, if nothing else is in it), the namespaces. Under the run's lock, and only
    while the run still has no state file (a run of that id may have been claimed since)."""
    namespaces = [n for n in names if parse_name("netns", n) is not None]
    links = [
        {"name": n, "type": STRAY_TYPES.get(named[0], "veth")}
        for n in names
        if (named := parse_name("link", n)) is not None
    ]
    if run_id is None:
        return _remove("kernel probes", namespaces, links, [])
    lock = RunLock(run_id)
    if not lock.acquire(timeout=10):
        return [f"its lock is held by another process; {' '.join(names)} left alone"]
    try:
        if (STATE_DIR / f"{run_id}.json").exists():
            return ["a run of this id has started since; left to it"]
        return _remove(f"run {run_id}", namespaces, links, [link_group(run_id)])
    finally:
        lock.release(unlink=not (STATE_DIR / f"{run_id}.json").exists())


def _delete_group(group: int, ours: set[str]) -> list[str]:
    """Delete link group `group` in the root namespace if every interface in it is one this
    run recorded (else leave it: the per-name deletes after the namespaces go do the job)."""
    net = Path("/sys/class/net")
    members = set()
    for dev in net.iterdir():
        with contextlib.suppress(OSError, ValueError):
            if int((dev / "netdev_group").read_text()) == group:
                members.add(dev.name)
    if not members:
        return []
    strangers = members - ours
    if strangers:
        log.warning(
            "link group %d holds interfaces this run did not make (%s); deleting by name",
            group, ", ".join(sorted(strangers)[:5]),
        )  # fmt: skip
        return []
    batch = nl.Batch(None)
    batch.add(nl.delete_group(group), f"deleting link group {group}")
    try:
        batch.commit()
    except RunFailure as e:
        return [str(e)]
    return []


def _link_exists(ifname: str) -> bool:
    return os.path.exists(f"/sys/class/net/{ifname}")


class NetnsKind:
    """The netns runtime's part in the registry (runtime/registry.py): how a run gets its
    runtime, how a user reaches a host, what its hosts' Python can do with GPUs."""

    name = "netns"

    def prepare(self, s: Any, run_id: str, progress: Callable[[str], None]) -> None:
        """Nothing to build before a run."""

    def create(
        self, plan: TopologyPlan, state: RunState, s: Any, run_dir: Path, prepared: Any,
        gpus: dict[str, list[int]], time_scale: float = 1.0,
    ) -> NetnsRuntime:  # fmt: skip
        m = getattr(s, "machines", None)
        if m is None or not m.emulate:
            return NetnsRuntime(plan, state)
        placed = place(s, plan)  # `s` is the run's dilated twin: rates on this machine's clock
        scenario = in_scenario_time(placed, time_scale)
        # an unshaped emulated network is this machine's own CPU, which the link budget
        # judges already: admission probes an emulated network given a rate
        admission = Admission(
            pairs=sorted(cut_demand(placed)) if m.underlay_rate is not None else [],
            judge=lambda probed: admit(scenario, time_scale, probed),
            report=lambda probed: (run_dir / "placement.json").write_text(
                json.dumps(placement_record(scenario, probed), indent=2)
            ),
            underlay_bps=m.underlay_rate,
        )
        return NetnsRuntime(plan, state, parts(plan, placed), m.vxlan_port, admission,
                            m.underlay_mtu)  # fmt: skip

    def teardown(self, state: RunState) -> list[str]:
        return teardown(state)

    def exec_argv(
        self, st: RunState, host: dict[str, Any], command: list[str], tty: bool
    ) -> list[str]:
        """`nsenter --net` into the host's namespace: the command runs with this machine's
        file system, inside the host's network."""
        nsenter = shutil.which("nsenter")
        if nsenter is None:
            raise EnvironmentProblem("nsenter is not on PATH (apt-get install util-linux)")
        path = NETNS_DIR / host["netns"]
        if not path.exists():
            raise ScenarioError(
                f"run {st.run_id}: host {host['name']}'s namespace is gone ({path})"
            )
        return [nsenter, f"--net={path}", "--", *command]

    def shell(self, prompt: str) -> list[str]:
        """The user's own shell; bash is told the prompt (no rc file, which would hide it)."""
        shell = os.environ.get("SHELL") or "/bin/bash"
        if os.path.basename(shell) == "bash":
            return ["env", f"PS1={prompt}", shell, "--norc", "-i"]
        return [shell, "-i"]

    def gpu_access(self, s: Any) -> str | None:
        """A namespace sees this machine's devices: nothing stands between a host and a GPU."""
        return None

    def node_python(self, s: Any) -> str:
        return "this machine"  # the hosts run this checkout's .venv

    def orphans(self) -> dict[str, list[str]]:
        """Nothing of a namespace outlives its state file unrecorded."""
        return {}

    def remove_orphans(self, run_id: str) -> list[str]:
        return []


KIND = NetnsKind()
