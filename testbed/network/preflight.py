"""Checks that run before anything is created: root, binaries, kernel features, addresses."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from pyroute2 import IPRoute

from testbed.core import hostcpu
from testbed.core.errors import EnvironmentProblem, ScenarioError
from testbed.core.state import STATE_DIR, RunState, all_states
from testbed.network.runtime.kernel_probe import HOW, Capabilities, probe
from testbed.scenario.schema import TCP_MACHINE, Scenario
from testbed.scenario.topology import CLASSIC_RECOVERY, name_of

log = logging.getLogger(__name__)

PACKAGES = {"iptables": "iptables", "nsenter": "util-linux", "setpriv": "util-linux"}
BINARIES = {
    "nsenter": "util-linux (apt-get install util-linux)",
    "setpriv": "util-linux (apt-get install util-linux)",
}


def require_root(action: str) -> None:
    if os.geteuid() != 0:
        raise EnvironmentProblem(
            f"{action} needs root (it creates network namespaces and qdiscs); run it with sudo"
        )


def require_binaries(s: Scenario | None = None) -> None:
    """The host tools a run of `s` needs, refused before anything exists (the training's DSCP
    rule needs iptables: a missing one used to surface only once the network was built)."""
    from testbed.workloads import kinds

    needed = dict(BINARIES)
    for w in s.workloads.values() if s is not None else []:
        for b in kinds.get(w.kind).binaries:
            needed[b] = f"{b} (apt-get install {PACKAGES.get(b, b)})"
    for name, pkg in needed.items():
        if shutil.which(name) is None:
            raise EnvironmentProblem(f"the {name} binary is missing; install {pkg}")


CONGESTION = Path("/proc/sys/net/ipv4/tcp_congestion_control")
AVAILABLE_CONGESTION = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
ALLOWED_CONGESTION = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")


RTO_MIN = Path("/proc/sys/net/ipv4/tcp_rto_min_us")


def tcp_rto_min(s: Scenario) -> float:
    """The minimum RTO the hosts will have, in seconds of this machine's clock: the scenario's
    (wall scenario: already × time_scale), or the kernel's 200 ms."""
    if s.topology.tcp_rto_min is None:
        return 0.2
    if not RTO_MIN.exists():
        raise EnvironmentProblem(
            "topology.tcp_rto_min: this kernel has no net.ipv4.tcp_rto_min_us (Linux 6.11 or "
            "later has it); leave tcp_rto_min out to keep the kernel's 200 ms"
        )
    return s.topology.tcp_rto_min


def tcp_rto_initial(s: Scenario) -> float | None:
    """The initial RTO the hosts' sockets will have, in seconds of this machine's clock (None:
    the kernel's 1 s), once a trial of the sock_ops program (shaping/sockops.py: a map, the
    program, a BPF link on the cgroup v2 root) has loaded and attached here."""
    init = s.topology.tcp_rto_initial
    if init is None:
        return None
    from testbed.network.shaping.sockops import NamespaceTimers

    try:
        NamespaceTimers(rto_init_us=round(init * 1e6)).open().close()
    except (OSError, RuntimeError, ValueError) as e:
        raise EnvironmentProblem(
            f"topology.tcp_rto_initial: this machine cannot set it ({e}); it needs cgroup v2 "
            "mounted and a kernel with BPF sock_ops programs and BPF links (Linux ≥ 5.15); "
            "leave tcp_rto_initial out to keep the kernel's 1 s"
        ) from None
    return init


def tcp_recovery(s: Scenario) -> None:
    """topology.tcp_recovery: classic and tcp_idle_restart: false set per-namespace sysctls
    (Linux 4.15 or later has them all); write_sysctl passes over absent ones, so say it here."""
    wanted = []
    if s.topology.tcp_recovery == "classic":
        wanted = [("tcp_recovery", key) for key in CLASSIC_RECOVERY[::2]]
    if not s.topology.tcp_idle_restart:
        wanted.append(("tcp_idle_restart", "net.ipv4.tcp_slow_start_after_idle"))
    for field, key in wanted:
        if not Path("/proc/sys", key.replace(".", "/")).exists():
            raise EnvironmentProblem(
                f"topology.{field}: this kernel has no {key} (Linux 4.15 or later has it); "
                f"leave {field} out to keep the kernel's own"
            )


def tcp_congestion(s: Scenario) -> str:
    """The congestion control the hosts will use: the scenario's (Reno unless it says), or
    with `machine` this machine's default, which new namespaces inherit. Outside the root
    namespace the kernel lets a namespace choose only the algorithms in the machine-wide
    allowed list (EPERM otherwise), and changing that list is the machine owner's decision,
    so a missing one is refused."""
    default = CONGESTION.read_text().strip()
    want = s.topology.tcp
    if want in (TCP_MACHINE, default):
        return default
    available = AVAILABLE_CONGESTION.read_text().split()
    allowed = ALLOWED_CONGESTION.read_text().split()
    if want not in available:
        raise EnvironmentProblem(
            f"topology.tcp: this kernel has no {want!r} congestion control (it has "
            f"{', '.join(available)}); load it with `modprobe tcp_{want}`, or choose one of those"
        )
    if want not in allowed:
        raise EnvironmentProblem(
            f"topology.tcp: {want!r} is loaded but not in net.ipv4.tcp_allowed_congestion_control "
            f"({' '.join(allowed)}), so namespaces may not use it; allow it with `sysctl -w "
            f"net.ipv4.tcp_allowed_congestion_control='{' '.join([*allowed, want])}'`, or "
            f"choose one of {', '.join(sorted({*allowed, default}))}"
        )
    return want


KERNEL_CACHE = STATE_DIR / ".kernel-capabilities"  # no .json: all_states() reads those


def _kernel_identity() -> str:
    """What the kernel's features can change with: the boot, and the modules loaded (a
    kernel without module support has no /proc/modules)."""
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    try:
        modules = sorted(line.split()[0] for line in Path("/proc/modules").read_text().splitlines())
    except OSError:
        modules = []
    return f"{boot} {' '.join(modules)}"


def kernel_capabilities(state: RunState | None = None) -> Capabilities:
    """Probe the kernel; raise on a missing required feature. With a run's `state`, the
    probe's namespace is recorded there while it exists. The answer is kept until the next
    boot or module load (KERNEL_CACHE, under /run): a probe costs a throwaway namespace, whose
    teardown the kernel does in the background while the run builds."""
    ident = _kernel_identity()
    caps: Capabilities | None = None
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        cached = json.loads(KERNEL_CACHE.read_text())
        # an answer is only as good as what was asked: a testbed that probes more asks again
        if cached["kernel"] == ident and cached["probed"] == sorted(HOW):
            caps = Capabilities(frozenset(cached["present"]))
    if caps is None:
        if state is None:
            caps = probe()
        else:
            obj = {"kind": "netns", "name": name_of("probe", state.run_id)}
            state.record(obj)
            caps = probe(obj["name"])
            state.forget(obj)
        with contextlib.suppress(OSError):
            KERNEL_CACHE.parent.mkdir(parents=True, exist_ok=True)
            tmp = KERNEL_CACHE.with_suffix(f".{os.getpid()}")
            tmp.write_text(
                json.dumps(
                    {"kernel": ident, "probed": sorted(HOW), "present": sorted(caps.present)}
                )
            )
            tmp.replace(KERNEL_CACHE)
    missing = caps.missing_required()
    if missing:
        raise EnvironmentProblem(
            "this kernel lacks "
            + ", ".join(f"{m} ({HOW[m]})" for m in missing)
            + "; testbed cannot shape links without it"
        )
    # Missing optional features are reported once per run: netem by the shaping plan,
    # receive steering by kernel_warnings.
    return caps


def require_bpf(s: Scenario, caps: Capabilities) -> None:
    """link_mode exact-gso feeds hosts' uplinks through a BPF program, and a shared limit
    counts through two (shaping/uplink.py, shared_limit.py): without cls_bpf, say which field
    needs it before anything is built."""
    needs = [
        *(["topology.link_mode: exact-gso"] if s.topology.link_mode == "exact-gso" else []),
        *(["tc_profile.shared_limit"] if s.tc_profile.shared_limit is not None else []),
    ]
    if needs and not caps.has("cls_bpf"):
        raise EnvironmentProblem(
            f"{' and '.join(needs)} need{'s' if len(needs) == 1 else ''} BPF tc filters, "
            f"and this kernel lacks cls_bpf "
            f"({HOW['cls_bpf']}); use link_mode: exact and a profile without shared_limit"
        )


def kernel_warnings(caps: Capabilities, backlog: int | None) -> list[str]:
    """What a missing optional feature or a short kernel setting costs the run, one line each;
    `backlog` is net.core.netdev_max_backlog (hostcpu.backlog_limit())."""
    out = []
    if not caps.has("rps"):
        out.append(
            "kernel has no net.core.rps_default_mask (" + HOW["rps"] + "): a shaped queue sent "
            "from two CPUs can deliver a flow's packets out of order, which TCP takes for loss; "
            "the summary's tcp.reorders_detected counts it (docs/network.md, Reordering)"
        )
    if w := hostcpu.backlog_warning(backlog):
        out.append(w)
    return out


def host_routes() -> list[tuple[ipaddress.IPv4Network, str]]:
    """IPv4 routes and addresses of the root namespace, as (prefix, description)."""
    out: list[tuple[ipaddress.IPv4Network, str]] = []
    with IPRoute() as ipr:
        names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}
        for r in ipr.get_routes(family=socket.AF_INET, table=0):
            if r["dst_len"] == 0:
                continue  # a default route "overlaps" everything; it is not a conflict
            dst = r.get_attr("RTA_DST")
            if dst is None:
                continue
            net = ipaddress.IPv4Network(f"{dst}/{r['dst_len']}", strict=False)
            dev = names.get(r.get_attr("RTA_OIF"), "?")
            out.append((net, f"route {net} dev {dev}"))
        for a in ipr.get_addr(family=socket.AF_INET):
            net = ipaddress.IPv4Network(
                f"{a.get_attr('IFA_ADDRESS')}/{a['prefixlen']}", strict=False
            )
            if net.is_loopback:
                continue
            out.append(
                (
                    net,
                    f"address {a.get_attr('IFA_ADDRESS')}/{a['prefixlen']} on {names.get(a['index'], '?')}",
                )
            )
    return out


def check_prefixes(s: Scenario) -> Scenario:
    """Refuse prefixes the user chose that collide with the host's own networks or a live run.

    A prefix left at its default moves to the next free one of its size instead (10.10.1.0/24,
    ...), so two runs at once, or a run beside another tool's 10.10/16, need no editing. The
    returned scenario carries the prefixes actually used; the run's scenario.yaml records them."""
    routes = host_routes()
    states = all_states()
    live = {st.run_id for st in states if st.alive()}
    # prefixes other runs have claimed but may not have built yet (their bridge is not up)
    routes += [
        (ipaddress.IPv4Network(p), f"prefix of run {st.run_id} (tb{st.run_id})")
        for st in states
        for p in st.root_prefixes
    ]
    chosen: dict[str, ipaddress.IPv4Network] = {}
    for field in ("prefix", "management_prefix"):
        net: ipaddress.IPv4Network = getattr(s.topology, field)
        clash = next((what for other, what in routes if net.overlaps(other)), None)
        if clash is None:
            continue
        if field not in s.topology.model_fields_set:
            mine = [getattr(s.topology, f) for f in ("prefix", "management_prefix")]
            taken = [o for o, _ in routes] + mine + list(chosen.values())
            chosen[field] = _free_prefix(net, taken)
            log.info("topology.%s: %s is taken (%s); using %s", field, net, clash, chosen[field])
            continue
        owner = next((r for r in live if f"tb{r}" in clash), None)
        cause = f" (run {owner} is using it)" if owner else ""
        raise ScenarioError(
            f"topology.{field}: {net} overlaps the host's {clash}{cause}; "
            f"choose another private prefix for topology.{field}"
        )
    if not chosen:
        return s
    return s.model_copy(update={"topology": s.topology.model_copy(update=chosen)})


def _free_prefix(
    start: ipaddress.IPv4Network, taken: list[ipaddress.IPv4Network]
) -> ipaddress.IPv4Network:
    """The first prefix of start's size after start, inside 10/8, that overlaps nothing taken."""
    size = start.num_addresses
    base = int(start.network_address)
    end = int(ipaddress.IPv4Address("10.255.255.255"))
    candidate = base + size
    while candidate + size - 1 <= end:
        net = ipaddress.IPv4Network((candidate, start.prefixlen))
        if not any(net.overlaps(t) for t in taken):
            return net
        candidate += size
    raise ScenarioError(
        f"topology: no free {start.prefixlen}-bit prefix left in 10.0.0.0/8 after {start}; "
        "set topology.prefix and topology.management_prefix yourself"
    )


def visible_gpus() -> list[int]:
    """NVIDIA GPUs this machine shows (driver's /proc entries, else `nvidia-smi -L`), by index.
    No torch import: the orchestrator must not pay 2.5 s of CPU to learn there are none."""
    proc = "/proc/driver/nvidia/gpus"
    if os.path.isdir(proc):
        return list(range(len(os.listdir(proc))))
    if shutil.which("nvidia-smi") is None:
        return []
    import subprocess

    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [i for i, line in enumerate(r.stdout.splitlines()) if line.startswith("GPU ")]


def horovod_has_nccl(python: str = sys.executable) -> bool:
    """Whether the Horovod the workers import reduces GPU tensors with NCCL. Asked in a child
    so that this process need not load torch (2 s) for a scenario that uses no GPU. A Horovod
    that does not import at all is an error, not "no NCCL": that answer used to turn a broken
    GPU build into a skipped GPU test."""
    probe = "import sys, horovod.torch as h; sys.exit(0 if h.nccl_built() else 3)"
    r = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    if r.returncode in (0, 3):
        return r.returncode == 0
    last = (r.stderr.strip().splitlines() or ["no output"])[-1]
    raise EnvironmentProblem(
        f"horovod.torch does not import in {python} ({last}); run install.sh, or for GPUs "
        "bash scripts/build-horovod.sh --gpu"
    )


def torch_has_cuda() -> bool | None:
    """Whether the torch the workers import is a CUDA build (it ships libtorch_cuda), found
    without importing it; None when there is no torch at all."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    return any(
        any((Path(d) / "lib").glob("libtorch_cuda*.so*")) for d in spec.submodule_search_locations
    )


def check_workloads(s: Scenario) -> list[str]:
    """Each workload instance's own checks of this machine (a training job's GPUs), through
    its kind; the warnings of requests met differently (`gpus: auto` without GPUs)."""
    from testbed.workloads import kinds
    from testbed.workloads.registry import load

    warnings: list[str] = []
    for name, w in s.workloads.items():
        hook = kinds.get(w.kind).preflight
        if hook is not None:
            warnings += load(hook)(name, w, s)
    return warnings
