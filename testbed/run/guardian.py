"""A run's guardian: tears the run down when its orchestrator dies without doing so.

PDEATHSIG takes the orchestrator's own children with it when it dies, but a container's
processes belong to the engine, and namespaces, links, containers and file_sd files outlive
every process. So each run starts a guardian as soon as it has claimed its id: a small process
in its own session (a terminal's Ctrl-C and a kill of the orchestrator's process group miss
it) that waits on the run's lock (state.RunLock). The kernel releases that lock when the
orchestrator exits, however it exits. After a normal run the state file is gone by then and
the guardian exits at once; after a kill -9 (or a crash, or an OOM kill) it finds the state
file, finishes the teardown the orchestrator would have done, notes it in the run folder, and
leaves the state file for `testbed down` only if something would not go away.

    python -m testbed.run.guardian RUN_ID PID PID_START
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from testbed.core.state import RunLock, RunState


def _note(out_dir: str, line: str) -> None:
    folder = Path(out_dir)
    if folder.is_dir():
        with open(folder / "testbed.log", "a") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} guardian: {line}\n")


def main(argv: list[str]) -> int:
    run_id, pid, pid_start = argv[0], int(argv[1]), int(argv[2])
    lock = RunLock(run_id)
    lock.acquire(timeout=None)  # free once the orchestrator has exited or finished
    try:
        st = RunState.load(lock.path.with_suffix(".json"))
    except (OSError, ValueError, TypeError):
        lock.release(unlink=True)  # a clean end: nothing to do
        return 0
    if (st.pid, st.pid_start) != (pid, pid_start):
        lock.release()  # the id names a later run now; not ours
        return 0
    from testbed.run.ending import end_run

    phase = st.phase
    st.set_phase("torn down by its guardian")
    t0 = time.monotonic()

    def killed() -> None:
        """Said before the state file goes: whoever waits for it to vanish reads this."""
        took = time.monotonic() - t0
        _note(
            st.out_dir,
            f"orchestrator pid {pid} ended without tearing down run {run_id}; "
            f"removed what it had created in {took:.2f} s",
        )
        summary = Path(st.out_dir) / "summary.json"
        if summary.parent.is_dir() and not summary.exists():
            summary.write_text(
                json.dumps(
                    {
                        "scenario": st.scenario,
                        "run_id": run_id,
                        "runtime": st.runtime,
                        "status": "killed",
                        "error": f"the orchestrator (pid {pid}) died in phase {phase!r}; "
                        "its guardian tore the run down",
                    },
                    indent=2,
                )
            )

    ending = end_run(st, lock, before_forgetting=killed)
    for p in ending.problems:
        _note(st.out_dir, f"teardown: {p}")
    if ending.problems:
        _note(st.out_dir, "teardown incomplete; run `testbed down`")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
