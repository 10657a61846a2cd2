"""Named network namespaces under /run/netns: make one, enter one, open a socket or read
/proc inside one. The primitive under every runtime (the build, netlink sockets, the kernel
probe, the counters), whatever made the node: a namespace of our own or a container's,
attached under the same folder by its runtime (containerlab's model: links reach any node
through a namespace handle). Only runtime/ uses it: every other stage reaches a node through
the Runtime it is given (base.py), so a runtime whose nodes live elsewhere replaces this
module, not its callers (tests/unit/test_layers.py checks).

Netlink sockets are opened *inside* a namespace by switching the calling thread there (setns)
and back, several times faster than pyroute2's `IPRoute(netns=...)`, which forks a helper per
socket."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from pyroute2 import IPRoute, netns

from testbed.core.errors import RunFailure
from testbed.network import netlink as nl

NETNS_DIR = Path("/run/netns")


@contextlib.contextmanager
def inside(ns: str | None) -> Iterator[None]:
    """Run the block with the calling thread in namespace `ns` (None: stay where we are).

    pyroute2 is handed an open descriptor, not the name: by name it lists /run/netns on every
    switch (a third of a 256-host build went there) and creates a namespace that is missing;
    a missing one is an error here (FileNotFoundError)."""
    if ns is None:
        yield
        return
    fd = netns_fd(ns)
    try:
        netns.pushns(fd)
    finally:
        os.close(fd)
    try:
        yield
    finally:
        netns.popns()


def create_netns(name: str) -> None:
    """Create a named namespace without forking (O_EXCL: refuse one that exists)."""
    netns.pushns()
    try:
        netns.setns(name, flags=os.O_CREAT | os.O_EXCL, fork=False)
    finally:
        netns.popns()


def remove_netns(name: str) -> None:
    """Unmount and unlink the name; the kernel frees the namespace once nothing holds it."""
    netns.remove(name)


def write_sysctl(ns: str | None, key: str, value: str, *more: str) -> None:
    """Write /proc/sys/<key> as seen from inside `ns` (and further key, value pairs, in the
    same visit); absent keys (no IPv6) are fine."""
    pairs = (key, value, *more)
    with inside(ns):
        for k, v in zip(pairs[::2], pairs[1::2], strict=True):
            with contextlib.suppress(FileNotFoundError):
                Path("/proc/sys", k.replace(".", "/")).write_text(v)


def netns_fd(name: str) -> int:
    """An open descriptor of namespace `name` (a veth's peer is placed by it)."""
    return os.open(NETNS_DIR / name, os.O_RDONLY | os.O_CLOEXEC)


def open_netlink(ns: str | None) -> socket.socket:
    """A netlink socket that lives in `ns` (a socket keeps the namespace it was made in)."""
    with inside(ns):
        return nl.open_socket()


def open_ipr(ns: str | None) -> IPRoute:
    """pyroute2's IPRoute inside `ns`, or one line saying that the namespace is gone."""
    if ns is not None and not (NETNS_DIR / ns).exists():
        raise RunFailure(f"network namespace {ns} does not exist")
    with inside(ns):
        return IPRoute()


# /proc/<pid>/net follows a process's main thread; the calling thread's namespace is here
PROC_NET = Path("/proc/thread-self/net")


def read_proc_net(ns: str | None, names: tuple[str, ...]) -> list[str]:
    """/proc/net/<name> for each of `names` as seen from inside `ns` (snmp, netstat, ...)."""
    with inside(ns):
        return [(PROC_NET / name).read_text() for name in names]


def names_with_prefix(prefix: str) -> list[str]:
    """The namespaces under /run/netns whose name starts with `prefix`."""
    return [p.name for p in NETNS_DIR.glob(f"{prefix}*")] if NETNS_DIR.is_dir() else []


@contextlib.contextmanager
def scratch(name: str) -> Iterator[IPRoute]:
    """A throwaway namespace `name` and an IPRoute inside it, both gone after the block."""
    create_netns(name)
    try:
        ipr = open_ipr(name)
        try:
            yield ipr
        finally:
            ipr.close()
    finally:
        with contextlib.suppress(OSError):
            remove_netns(name)
