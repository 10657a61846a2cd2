"""Named network namespaces under /run/netns: make one, enter one. The primitive every stage
that touches a node's network uses (the runtime's build, netlink sockets, the kernel probe,
the counters), whatever made the node: a namespace of our own or a container's, attached
under the same folder by its runtime (containerlab's model: links reach any node through a
namespace handle).

Netlink sockets are opened *inside* a namespace by switching the calling thread there (setns)
and back, several times faster than pyroute2's `IPRoute(netns=...)`, which forks a helper per
socket."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from pyroute2 import netns

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
    fd = os.open(NETNS_DIR / ns, os.O_RDONLY | os.O_CLOEXEC)
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
