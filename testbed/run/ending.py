"""The one ending of a run, whoever ends it: its own process (`Claim.release`), its guardian
after a kill -9, or `testbed down`. Each holds the run's lock when it calls `end_run`, and
each ends the same way: delete what the state file records, on the runtime it records
(runtime/registry.py); then, only when nothing is left, the state file; then the lock, whose
file goes with the state file. A run whose teardown left something keeps its state file, so
`testbed down` can try again."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from testbed.core.state import RunLock, RunState
from testbed.network.runtime import registry as runtimes


@dataclass(frozen=True)
class Ending:
    problems: list[str]  # what would not go away (empty: the run is gone)
    seconds: float  # the teardown's time


def end_run(
    st: RunState, lock: RunLock | None, before_forgetting: Callable[[], None] | None = None
) -> Ending:
    """Tear down what `st` records and forget the run when that worked; then release `lock`,
    held by the caller (None: the caller keeps it a while, as a run writing its summary does,
    and releases it later: a guardian woken in between would tear down beside it).
    `before_forgetting`: what the caller writes once the teardown is clean and before the
    state file goes (the guardian's "killed" summary), so that whoever waits for the state
    file to vanish finds it written."""
    t0 = time.monotonic()
    try:
        problems = runtimes.teardown(st) if st.objects else []
        if not problems:
            if before_forgetting is not None:
                before_forgetting()
            st.remove()
    finally:
        if lock is not None:
            lock.release(unlink=not st.path.exists())
    return Ending(problems, time.monotonic() - t0)
