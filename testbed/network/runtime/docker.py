"""The docker runtime: every host is a container from the node image; the switch stays a
plain namespace.

How a container joins the emulated network (containerlab's model, through pyroute2):
- it starts with `network_mode=none`, its own hostname (the host's name; every other host's
  name resolves to its data address through /etc/hosts), an init process, no restart policy
  (a restart would make a fresh namespace and lose its links), and labels naming the run;
- its network namespace is attached under /run/netns by its init's PID (what `ip netns attach`
  does), so the links, addresses, offloads and queues are made from the host exactly as for
  `netns`, and `ip netns exec` reaches it too. The attachment also keeps the namespace, and so
  the veths, until teardown even if the container dies;
- processes run inside it through Docker's exec API (its file system, its interpreter, its
  cgroup and limits); their output goes to the run folder, which every container mounts at the
  same path, so the workloads' paths mean the same on both sides.

Containers are recorded in the state file before they are created (their names are known in
advance) and carry `testbed.run=<id>`, so `testbed down` finds them either way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyroute2 import IPRoute, netns

from testbed.core.errors import EnvironmentProblem, RunFailure, ScenarioError
from testbed.core.state import RunState, all_states, proc_start_time
from testbed.network.runtime.base import Launch, NodeProcess, PolledProcess
from testbed.network.runtime.engine import client, short_error
from testbed.network.runtime.namespaces import NETNS_DIR, create_netns
from testbed.network.runtime.netns import process_running, run_in_netns, spawn_python
from testbed.network.runtime.netns import teardown as netns_teardown
from testbed.network.runtime.network import Network
from testbed.scenario.runtimes import DockerOptions
from testbed.scenario.topology import RUN_PREFIX, Host, TopologyPlan, parse_name

if TYPE_CHECKING:
    import docker


log = logging.getLogger(__name__)
LABEL_RUN = "testbed.run"
LABEL_NODE = "testbed.node"
START_PARALLEL = 8  # containers created at once: dockerd serialises part of the work anyway
_EXIT_SEEN = itertools.count()


def container_spec(
    plan: TopologyPlan,
    h: Host,
    image: str,
    run_id: str,
    run_dir: Path,
    opts: DockerOptions,
    gpus: Sequence[int] = (),
) -> dict[str, Any]:
    """Keyword arguments for `containers.run` of host `h` (pure: unit-tested). With `gpus`,
    those devices are passed through (NVIDIA container toolkit), with the shared memory and
    locked-memory limits NCCL asks for (--shm-size=1g --ulimit memlock=-1)."""
    spec: dict[str, Any] = {
        "image": image,
        "command": ["sleep", "infinity"],
        "name": h.netns,
        "hostname": h.name,
        "detach": True,
        "init": True,
        "network_mode": "none",
        "labels": {LABEL_RUN: run_id, LABEL_NODE: h.name},
        "restart_policy": {"Name": "no"},
        "extra_hosts": {o.name: str(o.data_ip) for o in plan.hosts},
        "volumes": {str(run_dir): {"bind": str(run_dir), "mode": "rw"}},
        "environment": {"PYTHONUNBUFFERED": "1"},
    }
    if gpus:
        from docker.types import DeviceRequest, Ulimit

        spec["device_requests"] = [
            DeviceRequest(device_ids=[str(g) for g in gpus], capabilities=[["gpu"]])
        ]
        spec["shm_size"] = "1g"
        spec["ulimits"] = [Ulimit(name="memlock", soft=-1, hard=-1)]
    if opts.cpus is not None:
        spec["nano_cpus"] = round(opts.cpus * 1e9)
    if opts.memory is not None:
        spec["mem_limit"] = opts.memory
        spec["memswap_limit"] = opts.memory  # no swap beyond the limit: an OOM is an OOM
    return spec


class ContainerProcess(PolledProcess):
    """A process started with Docker's exec API. Its PID is a host PID, so signals go straight
    to it; the exit code comes from the engine once the process is gone."""

    def __init__(self, api: Any, exec_id: str, what: str) -> None:
        self.api, self.exec_id, self.what = api, exec_id, what
        self.returncode: int | None = None
        self._order: int | None = None
        self._start: int | None = None
        self._gone = 0.0
        self.pid = 0
        deadline = time.monotonic() + 30
        while True:
            info = api.exec_inspect(exec_id)
            if info.get("Pid"):
                self.pid = info["Pid"]
                self._start = proc_start_time(self.pid)
                return
            if not info.get("Running") and info.get("ExitCode") is not None:
                self._finished(info["ExitCode"])
                return
            if time.monotonic() > deadline:
                raise RunFailure(f"docker did not start {what} within 30 s")
            time.sleep(0.01)

    def _finished(self, code: int) -> None:
        # runc reports a death by signal n as 128 + n; Popen's convention is -n (so a program
        # that itself exits with 129-192 reads as killed: the engine does not tell them apart)
        self.returncode = -(code - 128) if 128 < code < 128 + 65 else code
        self._order = next(_EXIT_SEEN)

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if self.pid and proc_start_time(self.pid) == self._start and process_running(self.pid):
            return None
        # the process is gone: its exit code is the engine's to tell (for a removed
        # container, or an engine that lags, SIGKILL is the honest guess after a grace)
        self._gone = self._gone or time.monotonic()
        try:
            info = self.api.exec_inspect(self.exec_id)
        except Exception:
            info = {"Running": time.monotonic() - self._gone < 2.0, "ExitCode": None}
        if info.get("Running") and time.monotonic() - self._gone < 2.0:
            return None
        code = info.get("ExitCode")
        self._finished(code if code is not None else 128 + signal.SIGKILL)
        return self.returncode

    @property
    def exit_order(self) -> int:
        return self._order if self._order is not None else 1 << 62


def _net_inode(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


class DockerRuntime:
    """Every host a container (its namespace attached under /run/netns), the switches plain
    namespaces; the network over them is network.py's, as for every runtime."""

    name = "docker"
    shares_hostname = False
    renumbers_gpus = True  # the NVIDIA toolkit mounts only the requested devices

    def __init__(
        self,
        plan: TopologyPlan,
        state: RunState,
        opts: DockerOptions,
        run_dir: Path,
        image: str,
        engine: docker.DockerClient | None = None,
        gpus: dict[str, list[int]] | None = None,
    ) -> None:
        self.plan, self.state = plan, state
        self.net = Network(plan, state)
        self.classes = self.net.classes
        self.opts, self.image = opts, image
        self.gpus = gpus or {}  # host name → devices passed through to its container
        self.run_dir = run_dir.resolve()
        self.engine = engine or client()
        self._init: dict[str, tuple[int, int]] = {}  # container → its init's PID, start time
        self._ids: dict[str, str] = {}

    def netlink(self, ns: str) -> socket.socket:
        return self.net.netlink(ns)

    def ipr(self, ns: str | None) -> IPRoute:
        return self.net.ipr(ns)

    def proc_net(self, ns: str, names: tuple[str, ...]) -> list[str]:
        return self.net.proc_net(ns, names)

    def build(self) -> None:
        """The nodes (switch namespaces, then the hosts' containers, started in parallel and
        attached), then the network over them."""
        self._make_nodes()
        self.net.build()

    def net_exec(
        self, ns: str, argv: Sequence[str], timeout: float = 20
    ) -> subprocess.CompletedProcess[str]:
        """A tool of this machine (iptables) in the container's network namespace only."""
        return run_in_netns(NETNS_DIR / ns, argv, timeout)

    def _make_nodes(self) -> None:
        p = self.plan
        self.state.record(*({"kind": "netns", "name": ns} for ns in p.switch_namespaces))
        for ns in p.switch_namespaces:
            create_netns(ns)
        self.state.record(
            *({"kind": "container", "name": h.netns, "node": h.name} for h in p.hosts),
            *({"kind": "netns", "name": h.netns, "attached": True} for h in p.hosts),
        )
        with ThreadPoolExecutor(min(START_PARALLEL, len(p.hosts))) as pool:
            started = list(pool.map(self._start_container, p.hosts))
        for h, (cid, pid, start) in zip(p.hosts, started, strict=True):
            self._ids[h.netns], self._init[h.netns] = cid, (pid, start)

    def _start_container(self, h: Host) -> tuple[str, int, int]:
        import docker

        spec = container_spec(
            self.plan, h, self.image, self.state.run_id, self.run_dir, self.opts,
            self.gpus.get(h.name, ()),
        )  # fmt: skip
        try:
            c = self.engine.containers.run(**spec)
            c.reload()
        except docker.errors.DockerException as e:
            raise RunFailure(
                f"container {h.netns} (host {h.name}) did not start: {short_error(e)}"
            ) from None
        pid = c.attrs["State"]["Pid"]
        start = proc_start_time(pid) if pid else None
        if not c.attrs["State"]["Running"] or start is None:
            raise RunFailure(
                f"container {h.netns} (host {h.name}) exited at once: "
                f"{c.attrs['State'].get('Error') or c.attrs['State'].get('Status')}"
            )
        # Attach at once, and only a namespace of its own: were the PID reused by then, a
        # foreign namespace (this machine's own) would be bound under the run's name.
        if _net_inode(pid) in (None, _net_inode(1)) or proc_start_time(pid) != start:
            raise RunFailure(f"container {h.netns} (host {h.name}) stopped while starting")
        netns.attach(h.netns, pid)
        return c.id, pid, start

    def _exec(
        self,
        ns: str,
        argv: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None,
        user: str = "",
    ) -> ContainerProcess:
        if ns not in self._ids:
            raise RunFailure(f"{ns} is not a container of this run")
        # the shell only redirects, then replaces itself with the program ($0 is the log)
        cmd = ["/bin/sh", "-c", 'exec "$@" >>"$0" 2>&1', str(log_path), *argv]
        import docker

        self.check()  # a dead container: say so, not "cannot exec"
        api = self.engine.api
        try:
            ex = api.exec_create(self._ids[ns], cmd, environment=dict(env or {}), user=user)
            api.exec_start(ex["Id"], detach=True)
        except docker.errors.DockerException as e:
            raise RunFailure(
                f"cannot start {argv[-1] if argv else '?'} in container {ns}: {short_error(e)}"
            ) from None
        return ContainerProcess(api, ex["Id"], f"{argv[0]} in {ns}")

    def spawn(
        self, ns: str, argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None
    ) -> NodeProcess:
        return self._exec(ns, argv, log_path, env)

    def spawn_python(self, ns: str | None, launch: Launch) -> NodeProcess:
        """`python -m module` with the image's interpreter. No fork server: each container
        imports for itself (its own file system and cgroup), and every container has its own
        hostname already, so `new_uts` has nothing to do. `ns` None: a service of this
        machine (the root namespace, where the management bridge is), as on netns."""
        from testbed.network.images import NODE_PYTHON

        if ns is None:
            return spawn_python(None, dataclasses.replace(launch, gid=None, new_uts=False))
        user = f"0:{launch.gid}" if launch.gid is not None else ""
        argv = [NODE_PYTHON, "-m", launch.module, *launch.argv]
        return self._exec(ns, argv, launch.log_path, launch.env, user)

    def check(self) -> None:
        """A container that stopped (docker kill/stop, OOM, engine restart) ends the run with
        its name and the engine's reason; its processes are gone with it. A few /proc reads:
        cheap enough for every tick, and it runs before the workloads' own checks, so the
        container is named rather than the process that died with it."""
        for name, (pid, start) in self._init.items():
            if proc_start_time(pid) == start and process_running(pid):
                continue
            why = "it is gone"
            with contextlib.suppress(Exception):
                st = self.engine.api.inspect_container(self._ids[name])["State"]
                why = f"status {st.get('Status')}, exit code {st.get('ExitCode')}"
                if st.get("OOMKilled"):
                    why += ", killed for exceeding docker.memory"
            node = name.rsplit("-", 1)[-1]
            raise RunFailure(f"container {name} (host {node}) stopped mid-run ({why})")

    def close(self) -> None:
        self.net.close()
        with contextlib.suppress(Exception):
            self.engine.close()


def _remove_containers(engine: Any, names: set[str], run_id: str) -> list[str]:
    """Force-remove the run's containers, by recorded name and by label. Only containers that
    carry this run's label go: a name alone could be anyone's."""
    problems: list[str] = []
    try:
        listed = engine.containers.list(
            all=True, filters={"label": f"{LABEL_RUN}={run_id}"}, ignore_removed=True
        )
    except Exception as e:
        return [f"cannot list run {run_id}'s containers: {short_error(e)}"]
    found = {c.name: c for c in listed}

    def rm(name: str) -> None:
        import docker

        try:
            c = found.get(name) or engine.containers.get(name)
            if c.labels.get(LABEL_RUN) != run_id:
                problems.append(f"container {name} is not labelled as run {run_id}'s; left alone")
                return
            c.remove(force=True)
        except docker.errors.NotFound:
            pass
        except Exception as e:
            problems.append(f"could not remove container {name}: {short_error(e)}")

    todo = sorted(names | set(found))
    if todo:
        with ThreadPoolExecutor(min(START_PARALLEL, len(todo))) as pool:
            list(pool.map(rm, todo))
    return problems


def teardown(state: RunState) -> list[str]:
    """Containers first (their processes go with them), then what the netns runtime removes:
    the switch namespace, the attached container namespaces (which frees their veths), and the
    management links in the root namespace. The second part runs whatever the engine says."""
    problems: list[str] = []
    names = {o["name"] for o in state.objects if o["kind"] == "container"}
    try:
        try:
            engine = client(timeout=30)
        except EnvironmentProblem as e:
            problems.append(
                f"{e} — containers {', '.join(sorted(names))} may remain; run `testbed down` again"
            )
        else:
            try:
                problems += _remove_containers(engine, names, state.run_id)
            finally:
                engine.close()
    finally:
        problems += netns_teardown(state)
    return problems


def orphans() -> dict[str, list[str]]:
    """testbed's containers (label, node label and name all testbed's) whose run has no live
    orchestrator here, e.g. after its state file was lost: run id → container names. Empty
    when no engine answers."""
    try:
        engine = client(timeout=10)
    except EnvironmentProblem:
        return {}
    live = {st.run_id for st in all_states() if st.alive()}
    out: dict[str, list[str]] = {}
    try:
        listed = engine.containers.list(
            all=True, filters={"label": LABEL_NODE}, ignore_removed=True
        )
    except Exception:
        listed = []
    finally:
        engine.close()
    for c in listed:
        rid = c.labels.get(LABEL_RUN, "")
        named = parse_name("netns", c.name or "")  # a host's container has its namespace's name
        if rid not in live and named and named[0] == "host" and named[1]["id"] == rid:
            out.setdefault(rid, []).append(c.name)
    return out


def remove_orphans(run_id: str) -> list[str]:
    try:
        engine = client(timeout=30)
    except EnvironmentProblem as e:
        return [str(e)]
    try:
        return _remove_containers(engine, set(), run_id)
    finally:
        engine.close()


class DockerKind:
    """The docker runtime's part in the registry (runtime/registry.py)."""

    name = "docker"

    def prepare(self, s: Any, run_id: str, progress: Callable[[str], None]) -> str:
        """The node image, built first when missing (and allowed). Runs before anything of
        the run exists: a failure here leaves nothing behind."""
        import docker

        from testbed.network.images import ensure_node_image

        assert s.runtime_options is not None
        engine = client()
        try:
            clash = engine.containers.list(
                all=True, filters={"name": "^" + RUN_PREFIX.format(id=run_id)}
            )
            if clash:
                raise ScenarioError(
                    f"--run-id: containers of run {run_id} exist "
                    f"({', '.join(c.name for c in clash)}); pick another id, or run "
                    "`testbed down` if that run is dead"
                )
            if s.runtime_options.image is not None:
                try:
                    engine.images.get(s.runtime_options.image)
                except docker.errors.DockerException as e:
                    raise ScenarioError(
                        f"docker.image: {s.runtime_options.image!r} is not usable on this engine "
                        f"({type(e).__name__}); build or load it, or leave docker.image out to "
                        "use testbed's node image"
                    ) from None
                return s.runtime_options.image
            return ensure_node_image(engine, build=s.runtime_options.build, progress=progress)
        finally:
            engine.close()

    def create(
        self, plan: TopologyPlan, state: RunState, s: Any, run_dir: Path, prepared: Any,
        gpus: dict[str, list[int]], time_scale: float = 1.0,
    ) -> DockerRuntime:  # fmt: skip
        return DockerRuntime(plan, state, s.runtime_options, run_dir, prepared, gpus=gpus)

    def teardown(self, state: RunState) -> list[str]:
        return teardown(state)

    def exec_argv(
        self, st: RunState, host: dict[str, Any], command: list[str], tty: bool
    ) -> list[str]:
        """`docker exec` into the host's container: its file system, its interpreter; the
        docker CLI already does what a terminal needs (raw mode, window size, signals)."""
        import shutil

        cli = shutil.which("docker")
        if cli is None:
            raise EnvironmentProblem(
                "the docker CLI is not on PATH (apt-get install docker.io); it runs commands "
                "in a container host"
            )
        flags = ["-i", "-t"] if tty else ["-i"]
        return [cli, "exec", *flags, host["netns"], *command]

    def shell(self, prompt: str) -> list[str]:
        return ["env", f"PS1={prompt}", "bash", "--norc", "-i"]

    def gpu_access(self, s: Any) -> str | None:
        """Why the hosts' containers cannot be given GPUs, or None."""
        import shutil

        toolkit = ("nvidia-container-runtime-hook", "nvidia-ctk", "nvidia-container-runtime")
        if not any(shutil.which(b) for b in toolkit):
            return (
                "runtime: docker needs the NVIDIA container toolkit for GPUs; install it "
                "(apt-get install nvidia-container-toolkit), run `nvidia-ctk runtime configure "
                "--runtime=docker` and restart dockerd"
            )
        return None

    def node_python(self, s: Any) -> str:
        """A user's image brings its own torch; the default one this machine's torch and a
        Horovod built without NCCL (images/Dockerfile.gpu is the GPU image)."""
        return "own image" if s.runtime_options.image is not None else "default image"

    def orphans(self) -> dict[str, list[str]]:
        return (
            orphans()
            if (os.environ.get("DOCKER_HOST") or os.path.exists("/var/run/docker.sock"))
            else {}
        )

    def remove_orphans(self, run_id: str) -> list[str]:
        return remove_orphans(run_id)


KIND = DockerKind()
