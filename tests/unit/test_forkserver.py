"""The fork server's bookkeeping of its children (its protocol runs in tests/integration)."""

from __future__ import annotations

from testbed.network.runtime.forkserver import ExitTable


def test_a_reused_pid_is_not_taken_for_a_dead_child():
    """Seen in the thesis grid: after ~30,000 processes pids wrap, a new worker got the pid
    of an earlier run's worker that had exited with 0, and the run was failed as if the new
    one had exited."""
    t = ExitTable()
    t.ended(4242, 0)  # a worker of an earlier run
    assert t.code(4242) == 0
    t.started(4242)  # a new child with the same pid
    assert t.code(4242) is None
    t.ended(7, 1)
    t.ended(4242, -9)
    assert (t.code(4242), t.order(7) < t.order(4242)) == (-9, True)
