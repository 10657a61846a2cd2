"""What a run needs of a runtime: the one seam every stage reaches a node through.

A runtime makes the nodes of a topology (hosts and switches) and the network between them
(network.py, the same for every runtime), opens netlink inside a node, reads its class
counters, starts processes there and runs a host tool in its network. Every other stage
(shaping, workloads, metrics, report) talks to this interface only; the choice between
runtimes is runtime/registry.py's. Nodes are named by their namespace key from the topology
plan (`Host.netns`, `Switch.netns`); each runtime makes that name reachable under /run/netns,
so `ip netns exec` works on every runtime too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pyroute2 import IPRoute

    from testbed.network.shaping.stats import ClassReader


@dataclass(frozen=True)
class Launch:
    """A Python program to start in a node: `python -m module argv`, its output to
    `log_path`. `preload`: modules a fork server imports once for every such start (a group
    or a UTS namespace needs one); `gid`: the group it runs as (DSCP marking matches it);
    `new_uts`: its own hostname, where nodes share the machine's (Runtime.shares_hostname)."""

    module: str
    argv: Sequence[str]
    log_path: Path
    env: Mapping[str, str] = field(default_factory=dict)
    preload: tuple[str, ...] = ()
    gid: int | None = None
    new_uts: bool = False


class NodeProcess(Protocol):
    """A process in a node, with the parts of Popen's interface the workloads use. Exit
    codes follow Popen: negative n means killed by signal n."""

    pid: int

    def poll(self) -> int | None: ...
    def send_signal(self, sig: int) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...
    def wait(self, timeout: float | None = None) -> int: ...

    @property
    def exit_order(self) -> int: ...  # processes that ended are numbered as they were seen


class PolledProcess:
    """Popen's signal and wait methods for a process that is not our child (a fork server's
    child, a container's exec): `poll()` is the subclass's, signals go to the host PID while
    it still runs."""

    pid: int

    def poll(self) -> int | None:
        raise NotImplementedError

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (rc := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            time.sleep(0.02)
        return rc


class Runtime(Protocol):
    name: str
    # True when every node shares the machine's hostname (plain namespaces): a program that
    # needs its own hostname must ask for its own UTS namespace (Launch(new_uts=True)).
    shares_hostname: bool
    # True when a node sees only the GPUs passed to it, numbered from 0 (a container given
    # devices 2 and 3 calls them 0 and 1), so CUDA_VISIBLE_DEVICES must count from 0 there.
    renumbers_gpus: bool

    def build(self) -> None: ...  # nodes and links, each recorded in the state file first
    def ipr(self, ns: str | None) -> IPRoute: ...  # netlink inside a node (None: the root)
    def netlink(self, ns: str) -> socket.socket: ...  # the run's raw netlink socket in a node
    def proc_net(self, ns: str, names: tuple[str, ...]) -> list[str]: ...  # /proc/net/<name>s
    @property
    def classes(self) -> ClassReader: ...  # the shaped classes' counters, read in bulk

    def spawn(
        self, ns: str, argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None
    ) -> NodeProcess: ...

    def spawn_python(
        self, ns: str | None, launch: Launch
    ) -> NodeProcess: ...  # `launch` in node `ns` (None: a service of the machine)

    def net_exec(
        self, ns: str, argv: Sequence[str], timeout: float = 20
    ) -> subprocess.CompletedProcess[str]: ...  # a host tool (iptables) in a node's network

    def check(self) -> None: ...  # raise RunFailure when a node itself has died
    def close(self) -> None: ...
