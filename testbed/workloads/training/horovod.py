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
  one Gloo context falls back to gethostname() → 127.0.0.1 (shared/reference, checked).
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
import signal
import time
from pathlib import Path
from typing import Any

from testbed.errors import EnvironmentProblem, RunFailure
from testbed.metrics import describe
from testbed.metrics.exporters import HOROVOD_PORT
from testbed.runtime.base import NodeProcess, Runtime, host_gpus
from testbed.scenario import HorovodWorkload, Scenario
from testbed.stopping import checkpoint
from testbed.topology import Host, TopologyPlan
from testbed.workloads import derive
from testbed.workloads.procs import Synchronised, count_rows, present, read_csvs, stop_all
from testbed.workloads.training.horovod_worker import FIELDS
from testbed.workloads.training.rendezvous import RendezvousStore

log = logging.getLogger(__name__)
WORKER_GID = 64242  # the group whose sockets get Horovod's DSCP
WORKER_MODULE = "testbed.workloads.training.horovod_worker"
# imported once per run by the fork server: ~2.5 s of CPU each that workers need not repeat
PRELOAD = ("torch", "horovod.torch", WORKER_MODULE)
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


def selected_hosts(topo: TopologyPlan, names: list[str] | None) -> list[Host]:
    return [topo.host(n) for n in names] if names else list(topo.hosts)


def mark_group(rt: Runtime, ns: str, ifname: str, gid: int, dscp: int) -> None:
    """iptables is the one tool with an owner match and a DSCP target that every kernel
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
            f"cannot mark Horovod traffic in {ns}: iptables said {r.stderr.strip()!r} "
            "(the kernel needs xt_owner and xt_DSCP)"
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


class HorovodJob(Synchronised):
    name = "horovod"

    def __init__(
        self, cfg: HorovodWorkload, s: Scenario, topo: TopologyPlan, rt: Runtime, run_dir: Path
    ) -> None:
        self.cfg, self.s, self.topo, self.rt = cfg, s, topo, rt
        self.run_dir = run_dir
        self.dir = run_dir / "horovod"
        self.hosts = selected_hosts(topo, cfg.hosts)
        self.dscp = cfg.d.dscp
        self.procs: list[tuple[Host, NodeProcess]] = []
        self.rdv: Rendezvous | None = None
        gpus = host_gpus(s, topo)  # the same devices the docker runtime passes through
        self.devices = [gpus.get(h.name, []) for h in self.hosts]

    @property
    def on_gpu(self) -> bool:
        return any(self.devices)

    def _device_env(self, h: Host, devices: list[int]) -> dict[str, str]:
        """A worker's devices, and its own NCCL host identity: NCCL takes ranks with one
        hostname and boot id for one machine, and then refuses two of them on one GPU and
        may connect them through shared memory. NCCL_HOSTID makes each worker a host of its
        own, as it is in the emulated network, so workers may share a GPU and every byte
        between them crosses the links."""
        if not self.on_gpu:
            return {}
        hostid = f"testbed-{self.s.name}-{h.name}"
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
        devices = {h.name: d for h, d in zip(self.hosts, self.devices, strict=True)}
        (self.dir / "backend-env.json").write_text(
            json.dumps({"dist_backend": backend, "env": env, "devices": devices}, indent=1)
        )

    def _config(self) -> dict[str, Any]:
        cfg = self.cfg
        layers = derive.layers_for(cfg) if cfg.mode == "synthetic" else []
        return {
            "mode": cfg.mode,
            "layers": [[x.name, x.params, x.forward_s, x.backward_s] for x in layers],
            "barrier": cfg.barrier,
            "iterations": cfg.iterations,
            "device": "cuda" if self.on_gpu else "cpu",
            "batch_size": cfg.batch_size,
            "seed": self.s.seed,
            "time_scale": self.time_scale,
        }

    def launch(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        config = self.dir / "worker-config.json"
        config.write_text(json.dumps(self._config()))
        for h in self.hosts:
            mark_group(self.rt, h.netns, h.data_if, WORKER_GID, self.dscp)
        self.rdv = Rendezvous(str(self.topo.mgmt_bridge_ip), self.hosts)
        base_env = {
            "HOROVOD_GLOO_RENDEZVOUS_ADDR": str(self.topo.mgmt_bridge_ip),
            "HOROVOD_GLOO_RENDEZVOUS_PORT": str(self.rdv.port),
            "HOROVOD_CONTROLLER": "gloo",
            "HOROVOD_CPU_OPERATIONS": "gloo",
            "HOROVOD_GLOO_IFACE": "eth0",
            "NCCL_SOCKET_IFNAME": "eth0",
            "HOROVOD_FUSION_THRESHOLD": str(self.cfg.fusion_threshold),
            "HOROVOD_CYCLE_TIME": f"{self.cfg.cycle_time * 1e3:g}",
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": "1",
            **(nccl_env(self.cfg) if self.on_gpu else {}),
        }
        self._record_backend("nccl" if self.on_gpu else "gloo", base_env)
        by_host = {slot.hostname: slot for slot in self.rdv.slots}
        for h in self.hosts:
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
                **self._device_env(h, self.devices[self.hosts.index(h)]),
            }
            argv = [
                "--config",
                str(config),
                "--out",
                str(self.dir / f"iterations-{h.name}.csv"),
                "--worker",
                h.name,
                "--go",
                str(self.go_file),
            ]
            if self.s.metrics.prometheus != "off":
                argv += ["--metrics", f"{h.mgmt_ip}:{HOROVOD_PORT}"]
            # its own hostname (= its data IP, see above; a container has one already) and
            # the group the DSCP rule matches
            if self.rt.shares_hostname:
                argv += ["--hostname", str(h.data_ip)]
            proc = self.rt.spawn_python(
                h.netns,
                WORKER_MODULE,
                argv,
                self.dir / f"worker-{h.name}.log",
                env,
                preload=PRELOAD,
                gid=WORKER_GID,
                new_uts=self.rt.shares_hostname,
            )
            self.procs.append((h, proc))
        log.info(
            "horovod: %d %s workers, DSCP %d (%s), compute %.0f ms/iteration, R_cp_to_nw %.2f",
            len(self.hosts),
            self.cfg.mode,
            self.dscp,
            self.cfg.d.tc_class,
            self.cfg.d.compute_time * 1e3,
            self.cfg.d.compute_to_network_ratio,
        )

    def _marker(self, h: Host, kind: str) -> Path:
        return self.dir / f"iterations-{h.name}.{kind}"

    def ready(self) -> tuple[int, int]:
        """Workers are ready once Horovod is initialised and every rank is connected."""
        return present(self._marker(h, "ready") for h in self.hosts), len(self.hosts)

    def draining(self) -> bool:
        return False  # training runs on until finish(); it has nothing of its own to drain

    def targets(self) -> list[str]:
        if self.s.metrics.prometheus == "off":
            return []
        return [f"{h.mgmt_ip}:{HOROVOD_PORT}" for h in self.hosts]

    def progress(self) -> str:
        n = min(count_rows(self.dir / f"iterations-{h.name}.csv") for h in self.hosts)
        return f"{n} iterations"

    def finish(self) -> None:
        """Ask for the collective stop (SIGUSR1 to every worker; they agree on the last
        iteration among themselves) and wait for every worker's `.done`. The vote is read one
        iteration late with a barrier and two without (horovod_worker.StopVote), so a stop
        takes at most that many iterations plus the current one; the run's slowest iteration
        bounds how long one can take. Usually the workers have already stopped at the run's
        end on their own vote, and this returns at once."""
        for _, p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGUSR1)
        longest = max([self.cfg.d.compute_time, *(float(r["duration_s"]) for r in self.records())])
        iterations = 2 if self.cfg.barrier else 3
        limit = max(10.0, (iterations + 1) * longest)
        deadline = time.monotonic() + limit
        done = [self._marker(h, "done") for h in self.hosts]
        while not all(d.exists() for d in done) and time.monotonic() < deadline:
            if any(p.poll() not in (None, 0) for _, p in self.procs):
                break
            checkpoint()
            time.sleep(0.05)
        late = [h.name for h, d in zip(self.hosts, done, strict=True) if not d.exists()]
        if late:
            log.warning("horovod: workers %s did not stop within %.0f s", ", ".join(late), limit)

    def check(self) -> None:
        """One dead worker makes its peers fail moments later (their ring connections
        break), so name the cause: a worker killed by a signal before one that exited with an
        error, and otherwise the one that ended first."""
        dead = [
            (rc >= 0, p.exit_order, h, rc)
            for h, p in self.procs
            if (rc := p.poll()) is not None and (rc != 0 or not self._marker(h, "done").exists())
        ]
        if dead:
            *_, h, rc = min(dead, key=lambda d: d[:2])
            raise RunFailure(
                f"horovod worker on {h.name} exited with code {rc}; see {self.dir / f'worker-{h.name}.log'}"
            )

    def stop(self) -> None:
        stop_all(p for _, p in self.procs)
        if self.rdv is not None:
            self.rdv.stop()
            self.rdv = None

    def collect(self) -> dict[str, Any]:
        self.check()
        self.stop()
        return self.summarize()

    def records(self) -> list[dict[str, Any]]:
        return read_csvs(self.dir / f"iterations-{h.name}.csv" for h in self.hosts)

    def summarize(self) -> dict[str, Any]:
        assert self.window is not None
        rows = self.records()
        with open(self.run_dir / "iterations.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            w.writerows(sorted(rows, key=lambda r: (int(r["iteration"]), int(r["rank"]))))
        win = self.window
        inside = [
            r for r in rows if win.contains(float(r["start"])) and float(r["end"]) <= win.stop
        ]
        per_worker = {h.name: sum(1 for r in rows if r["worker"] == h.name) for h in self.hosts}
        stat = describe([float(r["duration_s"]) for r in inside])
        d = self.cfg.d
        return {
            "workers": len(self.hosts),
            "iterations": min(per_worker.values()) if per_worker else 0,
            "iterations_per_worker": per_worker,
            "iterations_measured": len(inside) // max(1, len(self.hosts)),
            "iteration_time_s": {k: stat[k] for k in ("mean", "p50", "p99")},
            "compute_time_s": d.compute_time if self.cfg.mode == "synthetic" else None,
            "compute_to_network_ratio": d.compute_to_network_ratio,
            "bytes_per_iteration": d.bytes_per_iteration,
            "compute_s_mean": _mean([float(r["compute_s"]) for r in inside]),
            "wait_s_mean": _mean([float(r["wait_s"]) for r in inside]),
            # physics: no iteration can be faster than its compute
            "min_iteration_over_compute": (
                min(float(r["duration_s"]) / float(r["compute_s"]) for r in inside)
                if inside and self.cfg.mode == "synthetic"
                else None
            ),
            "dscp": self.dscp,
            "class": d.tc_class,
            "mode": self.cfg.mode,
        }


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None
