"""Controller for the Horovod job: launches one worker per host without SSH or horovodrun.

- Rendezvous: Horovod's own host assignments, served by rendezvous.py (Horovod's store
  protocol, 15× faster to rendezvous than its http.server) bound to the management bridge's
  address (horovodrun's binds every address), so workers reach it over the unshaped
  management path and only ring traffic crosses the shaped links.
- Processes: forked from a fork server that imported torch and Horovod once for the run
  (runtime/forkserver.py), which also puts each worker in its node.
- Environment: what horovod.runner.gloo_run gives each slot (rank, size, local/cross ranks,
  Gloo rendezvous, HOROVOD_GLOO_IFACE=eth0).
- Hostname: each worker gets its own UTS namespace with hostname = its data IP; otherwise
  one Gloo context falls back to gethostname() → 127.0.0.1.
- GPUs (`gpus:`, a wheel built by scripts/build-horovod.sh --gpu): gradients live on the
  worker's device and Horovod reduces them with NCCL, forced onto its socket transport on the
  data interface (NCCL_SETTINGS); Gloo stays the controller. Each worker sees its devices
  through CUDA_VISIBLE_DEVICES.
- DSCP: Gloo never sets IP_TOS, so an iptables rule in each worker's namespace marks packets
  leaving eth0 from sockets owned by the worker's group. The worker runs with that group,
  load generators on the same host do not, so only training traffic is marked,
  in both directions of every ring connection (each end marks what it sends).
"""

from __future__ import annotations

import csv
import json
import logging
import math
import signal
import time
from pathlib import Path
from typing import Any

from testbed.core.errors import EnvironmentProblem
from testbed.core.stats import describe
from testbed.core.stopping import checkpoint
from testbed.core.tcpstats import SWITCHED, socket_section, window_counters
from testbed.scenario.topology import Host
from testbed.workloads.controller import Context, Controller
from testbed.workloads.marking import mark_group
from testbed.workloads.procs import count_rows, read_csvs
from testbed.workloads.registry import load
from testbed.workloads.training.gpus import devices
from testbed.workloads.training.model.synthetic import layers_for, real_layers
from testbed.workloads.training.policies import POLICIES
from testbed.workloads.training.spec import HorovodWorkload, iterations_file
from testbed.workloads.training.timeline import TIMELINE_FILE, breakdown
from testbed.workloads.training.workers.horovod_worker import FIELDS, sockets_file
from testbed.workloads.training.workers.rendezvous import RendezvousStore

log = logging.getLogger(__name__)
WORKER_MODULE = "testbed.workloads.training.workers.horovod_worker"
# imported once per run by the fork server: ~2.5 s of CPU each that workers need not repeat
PRELOAD = ("torch", "horovod.torch", WORKER_MODULE)
# Horovod's Gloo waits this long for a peer's data before it shuts the job down: a workload
# clock, dilated like the others. Undilated, one TCP retransmission timeout at ns-3's 1 s floor
# (100 s of a ×100 run's clock) killed the job 30 s into the wait.
GLOO_TIMEOUT_S = 30
# NCCL over the emulated network: sockets on the data interface only, no InfiniBand, no
# plugin, no shared-memory or peer-to-peer shortcuts between ranks on one machine (which would
# bypass the shaped links entirely). Recorded in the run folder with the threads and sockets.
NCCL_SETTINGS = {
    "NCCL_SOCKET_IFNAME": "=eth0",
    "NCCL_NET": "Socket",
    "NCCL_IB_DISABLE": "1",
    "NCCL_NET_PLUGIN": "none",
    "NCCL_P2P_DISABLE": "1",
    "NCCL_SHM_DISABLE": "1",
}


def nccl_env(cfg: HorovodWorkload) -> dict[str, str]:
    """NCCL_SETTINGS plus the scenario's socket threads and sockets per thread."""
    env = dict(NCCL_SETTINGS)
    if cfg.nccl_socket_threads is not None:
        env["NCCL_SOCKET_NTHREADS"] = str(cfg.nccl_socket_threads)
    if cfg.nccl_sockets_per_thread is not None:
        env["NCCL_NSOCKS_PERTHREAD"] = str(cfg.nccl_sockets_per_thread)
    return env


def interleave_outrun(
    section: dict[str, Any], time_scale: float = 1.0, given: bool = False
) -> str | None:
    """Why policy interleave never held, when its job's median iteration is longer than its
    slot and most iterations began late: each then begins later than the one before (a late
    one starts at once and the slack never catches up), and the jobs' phases drift through
    each other as if free-running. The period comes from the model of the job alone; what the
    workers add to each iteration is not in it (docs/results/interleave/README.md: CASSINI's
    pair, 0 % of iterations on their slot, median 316 ms against a 276 ms slot). `section`:
    on this machine's clock, as warnings() has it; the figures said in scenario time. `given`:
    the scenario gave the period (`policy.period`), which is then what fell short."""
    pol = section.get("policy") or {}
    share, p50 = pol.get("on_slot_share"), (section.get("iteration_time_s") or {}).get("p50")
    if pol.get("kind") != "interleave" or share is None or share >= 0.5 or not p50:
        return None
    if p50 <= pol["slot_s"]:
        return None
    ms = 1e3 / time_scale
    source, fix = (
        ("the period given", "a longer period:, or the jobs' phases shorter")
        if given
        else (
            "from the model of the job alone",
            "give the policy a period of at least the job's measured iteration alone (period:), "
            "or a larger margin",
        )
    )
    return (
        f"policy interleave kept {share:.0%} of its slots: its iterations ({p50 * ms:.0f} ms, "
        f"the median) run longer than its slot ({pol['slot_s'] * ms:.0f} ms, {source}), so "
        f"each began later than the one before and the plan never held; {fix}"
    )


class Rendezvous:
    """Horovod's rendezvous: its own host assignments, served on an address of our choosing."""

    def __init__(self, address: str, hosts: list[Host]) -> None:
        try:
            from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
        except ImportError as e:
            raise EnvironmentProblem(
                f"Horovod is not installed ({e}); run install.sh, which builds it once"
            ) from None
        spec = ",".join(f"{h.data_ip}:1" for h in hosts)
        self.slots = get_host_assignments(parse_hosts(spec), len(hosts))
        self.store = RendezvousStore(address, self.slots)
        self.port = self.store.port

    def stop(self) -> None:
        self.store.stop()


class HorovodJob(Controller):
    kind = "horovod"
    exports = True

    def __init__(self, name: str, cfg: HorovodWorkload, ctx: Context) -> None:
        super().__init__(name, cfg, ctx)
        self.rdv: Rendezvous | None = None
        self.policy: Any = None  # the policy's runner (policies.py), when it acts
        gpus = devices(cfg, self.hosts())  # the same devices the docker runtime passes through
        self.devices = [gpus.get(h.name, []) for h in self.hosts()]

    @property
    def on_gpu(self) -> bool:
        return any(self.devices)

    @property
    def iterations_file(self) -> str:
        return iterations_file(self.name)

    def _device_env(self, h: Host, devices: list[int]) -> dict[str, str]:
        """A worker's devices, and its own NCCL host identity: NCCL takes ranks with one
        hostname and boot id for one machine, and then refuses two of them on one GPU and
        may connect them through shared memory. NCCL_HOSTID makes each worker a host of its
        own, as it is in the emulated network, so workers may share a GPU and every byte
        between them crosses the links."""
        if not self.on_gpu:
            return {}
        hostid = f"testbed-{self.s.name}-{self.name}-{h.name}"
        # a container sees only its own devices, numbered 0, 1, ... in bus order; a namespace
        # sees them all. Bus order (not CUDA's fastest-first) is also nvidia-smi's and Docker's.
        ids = list(devices)
        if self.rt is not None and self.rt.renumbers_gpus:
            ids = [sorted(devices).index(d) for d in devices]
        return {
            "CUDA_VISIBLE_DEVICES": ",".join(map(str, ids)),
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "NCCL_HOSTID": hostid,
        }

    def _record_backend(self, backend: str, env: dict[str, str]) -> None:
        """What the workers were told: the collective backend, the environment every worker
        shares (NCCL's settings on GPUs) and the devices of each."""
        devices = {h.name: d for h, d in zip(self.hosts(), self.devices, strict=True)}
        (self.dir / "backend-env.json").write_text(
            json.dumps({"dist_backend": backend, "env": env, "devices": devices}, indent=1)
        )

    def worker_config(self) -> dict[str, Any]:
        """What every worker is told (worker-config.json): the emulated model and schedule,
        and the policy runner's part once it runs (per_transfer.py reads the rest first)."""
        cfg = self.cfg
        if cfg.mode == "synthetic":
            layers = [[x.name, x.params, x.forward_s, x.backward_s] for x in layers_for(cfg)]
        else:  # the real model's, for a policy's choice (its compute is its own)
            layers = [[x.name, x.params, 0.0, 0.0] for x in real_layers(cfg) or []]
        return {
            "mode": cfg.mode,
            "real_model": cfg.real_model,
            "layers": layers,
            "barrier": cfg.barrier,
            "iterations": cfg.iterations,
            "device": "cuda" if self.on_gpu else "cpu",
            "batch_size": cfg.batch_size,
            "seed": self.s.seed,
            "time_scale": self.time_scale,
            # what the policy's runner tells the workers (a class per transfer: its classes)
            **(self.policy.worker_config() if self.policy is not None else {}),
        }

    def _timeline_env(self) -> dict[str, str]:
        """Horovod writes the timeline on rank 0 only (every rank's readiness is in it);
        cycle marks show where a tensor waited for the next background cycle."""
        return {
            "HOROVOD_TIMELINE": str(self.dir / TIMELINE_FILE),
            "HOROVOD_TIMELINE_MARK_CYCLES": "1",
        }

    def records_of(self, h: Host) -> Path:
        """Worker `h`'s iteration records (flushed as each iteration ends)."""
        return self.dir / f"iterations-{h.name}.csv"

    def _mark(self, hosts: list[Host]) -> None:
        """The workers' DSCP rule on every host, switchable when the policy acts while the
        job runs; then the policy's runner (policies.py), if any."""
        decl = POLICIES[self.cfg.policy.kind]
        for h in hosts:
            mark_group(self.rt, h.netns, h.data_if, self.owner_gid, self.cfg.d.dscp, self.name,
                       switchable=decl.switchable)  # fmt: skip
        if decl.runner is not None:
            self.policy = load(decl.runner)(self)
            if (why := self.policy.warning()) is not None:
                log.warning("%s: %s", self.name, why)

    def tick(self, now: float) -> None:
        if self.policy is not None:
            self.policy.tick(now)

    def launch(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        hosts = self.hosts()
        self._mark(hosts)  # the policy's runner first: the workers' config carries its part
        config = self.dir / "worker-config.json"
        config.write_text(json.dumps(self.worker_config()))
        self.rdv = Rendezvous(str(self.topo.mgmt_bridge_ip), hosts)
        base_env = {
            "HOROVOD_GLOO_RENDEZVOUS_ADDR": str(self.topo.mgmt_bridge_ip),
            "HOROVOD_GLOO_RENDEZVOUS_PORT": str(self.rdv.port),
            "HOROVOD_CONTROLLER": "gloo",
            "HOROVOD_CPU_OPERATIONS": "gloo",
            "HOROVOD_GLOO_IFACE": "eth0",
            "NCCL_SOCKET_IFNAME": "eth0",
            "HOROVOD_FUSION_THRESHOLD": str(self.cfg.fusion_threshold),
            "HOROVOD_CYCLE_TIME": f"{self.cfg.cycle_time * 1e3:g}",
            "HOROVOD_GLOO_TIMEOUT_SECONDS": str(math.ceil(GLOO_TIMEOUT_S * self.time_scale)),
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",
            **(nccl_env(self.cfg) if self.on_gpu else {}),
            **(self._timeline_env() if self.cfg.timeline else {}),
        }
        self._record_backend("nccl" if self.on_gpu else "gloo", base_env)
        by_host = {slot.hostname: slot for slot in self.rdv.slots}
        for h, devs in zip(hosts, self.devices, strict=True):
            slot = by_host[str(h.data_ip)]
            env = {
                **base_env,
                "HOROVOD_HOSTNAME": slot.hostname,
                "HOROVOD_RANK": str(slot.rank),
                "HOROVOD_SIZE": str(slot.size),
                "HOROVOD_LOCAL_RANK": str(slot.local_rank),
                "HOROVOD_LOCAL_SIZE": str(slot.local_size),
                "HOROVOD_CROSS_RANK": str(slot.cross_rank),
                "HOROVOD_CROSS_SIZE": str(slot.cross_size),
                **self._device_env(h, devs),
            }
            out = self.records_of(h)
            argv = ["--config", str(config), "--out", str(out), "--worker", h.name,
                    "--go", str(self.go_file), *self.metrics_arg(h)]  # fmt: skip
            # its own hostname (= its data IP, see above; a container has one already) and
            # the group the DSCP rule matches
            if self.rt.shares_hostname:
                argv += ["--hostname", str(h.data_ip)]
            self.spawn(h, "worker", WORKER_MODULE, argv, out, env, preload=PRELOAD,
                       gid=self.owner_gid, new_uts=self.rt.shares_hostname)  # fmt: skip
        log.info(
            "%s: %d %s workers, DSCP %d (%s), compute %.0f ms/iteration, R_cp_to_nw %.2f",
            self.name, len(hosts), self.cfg.mode, self.cfg.d.dscp, self.cfg.d.tc_class,
            self.cfg.d.compute_time * 1e3, self.cfg.d.compute_to_network_ratio,
        )  # fmt: skip

    def progress(self) -> str:
        n = min((count_rows(p.out) for p in self.procs), default=0)
        return f"{n} iterations" if self.name == self.kind else f"{self.name} {n} iterations"

    def draining(self) -> bool:
        return False  # training runs on until finish(); it has nothing of its own to drain

    def finish(self) -> None:
        """Ask for the collective stop (SIGUSR1 to every worker; they agree on the last
        iteration among themselves) and wait for every worker's `.done`. The vote is read one
        iteration late with a barrier and two without (horovod_worker.StopVote), so a stop
        takes at most that many iterations plus the current one; the run's slowest iteration
        bounds how long one can take. Usually the workers have already stopped at the run's
        end on their own vote, and this returns at once."""
        for p in self.procs:
            if p.popen.poll() is None:
                p.popen.send_signal(signal.SIGUSR1)
        longest = max([self.cfg.d.compute_time, *(float(r["duration_s"]) for r in self.records())])
        iterations = 2 if self.cfg.barrier else 3
        limit = max(10.0, (iterations + 1) * longest)
        deadline = time.monotonic() + limit
        while not all(p.done() for p in self.procs) and time.monotonic() < deadline:
            if any(p.popen.poll() not in (None, 0) for p in self.procs):
                break
            checkpoint()
            time.sleep(0.05)
        late = [p.host.name for p in self.procs if not p.done()]
        if late:
            log.warning(
                "%s: workers %s did not stop within %.0f s", self.name, ", ".join(late), limit
            )

    def warnings(self, section: dict[str, Any]) -> list[str]:
        """An emulated compute that ran over its time: the machine could not keep the job's
        clock (judged on the wall clock, where the schedule lives). Interleave's slots that
        the job's own iterations outran: the plan never held (interleave_outrun)."""
        out = []
        asked, got = section.get("compute_time_s"), section.get("compute_s_mean")
        if asked and got and got > 1.05 * asked:
            out.append(
                f"{self.name}: the training's emulated compute took {got / asked - 1:.0%} longer "
                f"than asked ({got:.3g} s for {asked:.3g} s per iteration on this machine's "
                "clock): the machine could not keep the workload's clock (fewer hosts or a lower "
                "time_scale need less)"
            )
        policy = getattr(getattr(self, "cfg", None), "policy", None)  # a bare one in tests
        given = getattr(policy, "period", None) is not None
        if (why := interleave_outrun(section, self.time_scale, given)) is not None:
            out.append(f"{self.name}: {why}")
        return out

    def metric_queries(self, section: dict[str, Any]) -> list[tuple[str, str, str, Any]]:
        return [
            (self.name, f"iterations of {worker}" if self.name == self.kind else
             f"{self.name}: iterations of {worker}",
             f'max_over_time(testbed_iterations_total{{{{sel}},worker="{worker}"}}[{{rng}}])', n)
            for worker, n in section["iterations_per_worker"].items()
        ]  # fmt: skip

    def stop(self) -> None:
        super().stop()
        if self.policy is not None:
            self.policy.close()
        if self.rdv is not None:
            self.rdv.stop()
            self.rdv = None

    def records(self) -> list[dict[str, Any]]:
        return read_csvs(p.out for p in self.procs)

    def summarize(self) -> dict[str, Any]:
        assert self.window is not None
        rows = self.records()
        with open(self.run_dir / self.iterations_file, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            w.writerows(sorted(rows, key=lambda r: (int(r["iteration"]), int(r["rank"]))))
        win = self.window
        inside = [
            r for r in rows if win.contains(float(r["start"])) and float(r["end"]) <= win.stop
        ]
        hosts = self.hosts()
        per_worker = {h.name: sum(1 for r in rows if r["worker"] == h.name) for h in hosts}
        stat = describe([float(r["duration_s"]) for r in inside])
        d = self.cfg.d
        return {
            "workers": len(hosts),
            "iterations": min(per_worker.values()) if per_worker else 0,
            "iterations_per_worker": per_worker,
            "iterations_measured": len(inside) // max(1, len(hosts)),
            "iteration_time_s": {k: stat[k] for k in ("mean", "p50", "p99")},
            "compute_time_s": d.compute_time if self.cfg.mode == "synthetic" else None,
            "compute_to_network_ratio": d.compute_to_network_ratio,
            "bytes_per_iteration": d.bytes_per_iteration,
            "bottleneck_bps": d.bottleneck_bps,
            "compute_s_mean": _mean([float(r["compute_s"]) for r in inside]),
            "wait_s_mean": _mean([float(r["wait_s"]) for r in inside]),
            # physics: no iteration can be faster than its compute
            "min_iteration_over_compute": (
                min(float(r["duration_s"]) / float(r["compute_s"]) for r in inside)
                if inside and self.cfg.mode == "synthetic"
                else None
            ),
            "dscp": d.dscp,
            "class": d.tc_class,
            "mode": self.cfg.mode,
            **self._timeline([r for r in inside if int(r["rank"]) == 0]),
            **({"policy": self.policy.section(win.start, win.stop)} if self.policy else {}),
            # the workers' own sockets (SocketReads): the class's retransmissions and
            # timeouts, which a host's counters mix with the other classes'
            "tcp_by_class": self._sockets(),
        }

    def _sockets(self) -> dict[str, dict[str, Any]]:
        """The workers' sockets on the data network over the measured window, summed per
        class: the policy's class for a connection of its addresses, else the job's own
        (SWITCHED when the policy changes it while the job runs). The management network's
        (rendezvous, the store, scrapes) are left out."""
        hosts = self.hosts()
        data = {str(h.data_ip) for h in hosts}
        to = self.policy.address_classes() if self.policy is not None else {}
        own = SWITCHED if POLICIES[self.cfg.policy.kind].switchable else self.cfg.d.tc_class
        by: dict[str, list[dict[str, int | None]]] = {c: [] for c in (own, *to.values())}
        for h in hosts:
            try:
                reads = json.loads(sockets_file(self.records_of(h)).read_text())
            except (OSError, ValueError):  # the worker died before writing them
                continue
            for key, c in window_counters(reads.get("start", {}), reads["stop"]).items():
                local, peer = (_address(x) for x in key.split(">"))
                if cls := to.get(local) or to.get(peer):
                    by[cls].append(c)
                elif local in data or peer in data:
                    by[own].append(c)
        return {c: socket_section(cs) for c, cs in by.items()}

    def _timeline(self, rank0: list[dict[str, Any]]) -> dict[str, Any]:
        """`timeline: true`: rank 0's measured iterations split into Horovod's operations
        and its coordination (timeline.py says how)."""
        tl = self.dir / TIMELINE_FILE
        if not (self.cfg.timeline and tl.is_file()):
            return {}
        its = [(float(r["start"]), float(r["end"])) for r in rank0]
        try:
            return {"timeline": breakdown(tl, its, self.time_scale)}
        except (OSError, ValueError) as e:
            log.warning("%s: the Horovod timeline could not be read (%s)", self.name, e)
            return {}


def _address(endpoint: str) -> str:
    """An endpoint's address: 10.0.0.1:4711, or ::ffff:10.0.0.1:4711 (IPv4-mapped), → 10.0.0.1."""
    return endpoint.rsplit(":", 1)[0].removeprefix("::ffff:")


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None
