"""How a run stops early: SIGINT, SIGTERM and SIGHUP only set a flag, and the run raises
`Interrupted` at its next checkpoint, then tears down.

Raising from the signal handler itself could land inside pyroute2's asyncio event loop in the
middle of a netlink call, and teardown's own netlink calls could then hang on the broken loop.
Checkpoints sit between phases, on every tick of the running phase, and inside every wait that
can last more than a moment (the image build, Prometheus' start and final scrape, the fork
server's imports, the workloads' stop): those call `checkpoint()`, which reaches the flag of
the run in progress without every module having to be handed it. A stop takes effect within
about half a second. SIGHUP is there for a dropped ssh session: the run must not die without
its teardown because its terminal went away.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(BaseException):
    """A stop signal during a run; BaseException so no `except Exception` swallows it."""

    def __init__(self, signame: str) -> None:
        super().__init__(signame)
        self.signame = signame


class StopFlag:
    def __init__(self) -> None:
        self.signame: str | None = None

    def check(self) -> None:
        if self.signame is not None:
            raise Interrupted(self.signame)


_current: StopFlag | None = None


def checkpoint() -> None:
    """Raise Interrupted if the run in progress was asked to stop (no-op outside a run)."""
    if _current is not None:
        _current.check()


@contextmanager
def signals_flag() -> Iterator[StopFlag]:
    """Stop signals set the flag of the block's run; the old handlers come back after it."""
    global _current
    flag = StopFlag()

    def handler(signum: int, _frame: object) -> None:
        flag.signame = signal.Signals(signum).name

    old = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    outer, _current = _current, flag
    try:
        yield flag
    finally:
        _current = outer
        for s, h in old.items():
            signal.signal(s, h)


@contextmanager
def signals_ignored() -> Iterator[None]:
    """For teardown: a second Ctrl-C must not leave half a network behind. The flag stays set,
    but checkpoints inside the block do not fire."""
    global _current
    old = {s: signal.signal(s, signal.SIG_IGN) for s in STOP_SIGNALS}
    outer, _current = _current, None
    try:
        yield
    finally:
        _current = outer
        for s, h in old.items():
            signal.signal(s, h)
