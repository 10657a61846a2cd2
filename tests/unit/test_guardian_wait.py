"""`testbed down` returns only once the run's guardian process has ended: the guardian lets go
of the run's lock a moment before it exits, and a check right after `down` (a user's `ps`, the
suite's leftover check) must not find it. The stand-in processes carry a guardian's command-line
tail, which is what RunState matches on (a reused pid is not a guardian of this run)."""

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from testbed.core.state import RunState


@contextlib.contextmanager
def _stand_in(run_id: str, seconds: float) -> Iterator[int]:
    """A process with a guardian's command-line tail, once it has exec'd (until then its
    /proc cmdline is the test's own); killed and reaped on leaving. Yields its pid."""
    code = f"import time; time.sleep({seconds})"
    p = subprocess.Popen([sys.executable, "-c", code, "testbed.run.guardian", run_id, "1", "2"])
    try:
        deadline = time.monotonic() + 10
        while b"testbed.run.guardian" not in Path(f"/proc/{p.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline, "the stand-in did not start"
            time.sleep(0.01)
        yield p.pid
    finally:
        p.kill()
        p.wait()


def _state(run_id: str, pid: int | None) -> RunState:
    return RunState(run_id=run_id, scenario="s", out_dir="/nonexistent", guardian_pid=pid)


def test_down_waits_until_the_guardian_has_exited() -> None:
    with _stand_in("a1b2c3", 0.6) as pid:
        st = _state("a1b2c3", pid)
        assert st.guardian_running()
        t0 = time.monotonic()
        assert st.wait_for_guardian(timeout=5)  # an exited, unreaped guardian (zombie) is gone
        assert 0.3 < time.monotonic() - t0 < 5
        assert not st.guardian_running()


def test_a_guardian_that_does_not_end_is_reported() -> None:
    with _stand_in("d4e5f6", 30) as pid:
        t0 = time.monotonic()
        assert not _state("d4e5f6", pid).wait_for_guardian(timeout=0.3)
        assert time.monotonic() - t0 >= 0.3


def test_another_runs_guardian_or_a_reused_pid_is_not_waited_for() -> None:
    with _stand_in("d4e5f6", 30) as pid:
        assert not _state("0a0b0c", pid).guardian_running()
        assert _state("0a0b0c", pid).wait_for_guardian(timeout=5)
        assert _state("0a0b0c", None).wait_for_guardian(timeout=5)  # a run before its guardian
