"""The state file: a write-ahead record of every object a run creates.

An object is recorded *before* it is created, so a run killed at any instant (kill -9, power
cut of the orchestrator) leaves a file naming everything that may exist; `testbed down`
deletes exactly those objects, tolerating ones that never came to be. State lives in
/run/testbed (tmpfs): it vanishes on reboot together with the namespaces it describes.

Beside each state file lies a lock file, `<id>.lock`, held (flock) by whoever owns the run's
objects: the orchestrator from the moment it claims the id until its teardown is done, then
its guardian (testbed/run/guardian.py) or `testbed down` if the orchestrator died first. The kernel
drops a flock when its holder dies, however it dies, so "the lock is free" means "nobody is
working on this run", and two teardowns of one run can never overlap. Claiming an id is
atomic: the state file is created exclusively, under a lock over the whole state folder that
also covers the choice of prefixes, so two `up` at once cannot take the same id or prefix.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

STATE_DIR = Path(os.environ.get("TESTBED_STATE_DIR", "/run/testbed"))


def proc_start_time(pid: int) -> int | None:
    """Kernel start time of a process (clock ticks since boot); guards against PID reuse."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may contain spaces and parentheses; fields resume after the last ')'.
    return int(stat.rsplit(")", 1)[1].split()[19])


@dataclass
class RunState:
    run_id: str
    scenario: str
    out_dir: str
    # a state file written before runtimes were recorded: scenario/runtimes.py's DEFAULT (not
    # imported: the guardian reads this module, and pydantic would double its start)
    runtime: str = "netns"
    pid: int = field(default_factory=os.getpid)
    pid_start: int | None = None
    started_at: float = field(default_factory=time.time)
    phase: str = "starting"
    # prefixes this run puts in the root namespace (management_prefix), so a run choosing
    # its prefixes while this one is still building steps aside from them
    root_prefixes: list[str] = field(default_factory=list)
    guardian_pid: int | None = None
    # the hosts once built: name, netns (a container's name too), data_ip, mgmt_ip
    hosts: list[dict[str, str]] = field(default_factory=list)
    # Each object: {"kind": "netns"|"link"|"link-group"|"qdisc"|"process"|"container"|"file",
    # ...}, in creation order. A netns with "attached": true is a container's namespace, bound under /run/netns.
    objects: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.pid_start is None:
            self.pid_start = proc_start_time(self.pid)

    @property
    def path(self) -> Path:
        return STATE_DIR / f"{self.run_id}.json"

    def _write_tmp(self) -> Path:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.run_id}.{os.getpid()}.tmp")
        # fields as they are (lists of plain dicts), not asdict's deep copy: a 256-host run
        # records about 1,800 objects, written at every phase
        tmp.write_text(json.dumps({f.name: getattr(self, f.name) for f in fields(self)}))
        return tmp

    def create(self) -> bool:
        """Write the state file only if none exists (atomic: a hard link fails on an existing
        name). False: another run's state holds this id."""
        tmp = self._write_tmp()
        try:
            os.link(tmp, self.path)
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)
        return True

    def save(self) -> None:
        os.replace(self._write_tmp(), self.path)

    def record(self, *objects: dict[str, Any]) -> None:
        """Write-ahead: call before creating the objects."""
        self.objects.extend(objects)
        self.save()

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.save()

    def forget(self, obj: dict[str, Any]) -> None:
        """An object that is gone again (the kernel probe's namespace)."""
        self.objects.remove(obj)
        self.save()

    def remove(self) -> None:
        """The state file, and any half-written copy a killed writer left (`<id>.<pid>.tmp`)."""
        self.path.unlink(missing_ok=True)
        for tmp in STATE_DIR.glob(f"{self.run_id}.*.tmp"):
            tmp.unlink(missing_ok=True)

    def alive(self) -> bool:
        """Is the orchestrator that owns this run still running?"""
        return self.pid_start is not None and proc_start_time(self.pid) == self.pid_start

    def guardian_running(self) -> bool:
        """Is this run's guardian process still there (not a zombie)? Checked by its command
        line, so a reused pid is not mistaken for it."""
        if self.guardian_pid is None:
            return False
        try:
            cmd = Path(f"/proc/{self.guardian_pid}/cmdline").read_bytes()
            stat = Path(f"/proc/{self.guardian_pid}/stat").read_text()
        except OSError:
            return False
        ours = b"testbed.run.guardian\0" + self.run_id.encode() + b"\0" in cmd
        return ours and stat.rsplit(")", 1)[1].split()[0] != "Z"

    def wait_for_guardian(self, timeout: float = 10.0) -> bool:
        """Wait until the guardian has exited: it releases the run's lock a moment before its
        process ends, and `testbed down` promises that nothing of the run is left when it
        returns. False: still there after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while self.guardian_running():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

    def same_run(self, other: RunState) -> bool:
        """The same run (a reused id names a different one)."""
        return (self.pid, self.pid_start, self.started_at) == (
            other.pid,
            other.pid_start,
            other.started_at,
        )

    def namespaces(self) -> list[str]:
        return [o["name"] for o in self.objects if o["kind"] == "netns"]

    @classmethod
    def load(cls, path: Path) -> RunState:
        data = json.loads(path.read_text())
        return cls(**data)


def all_states() -> list[RunState]:
    if not STATE_DIR.is_dir():
        return []
    out = []
    for p in sorted(STATE_DIR.glob("*.json")):
        try:
            out.append(RunState.load(p))
        except (ValueError, TypeError, KeyError, OSError):
            continue  # half-written or foreign file: not ours to interpret
    return out


class RunLock:
    """The flock on `<id>.lock`: held by whoever may create or delete the run's objects."""

    def __init__(self, run_id: str) -> None:
        self.path = STATE_DIR / f"{run_id}.lock"
        self.fd: int | None = None

    def acquire(self, timeout: float | None = 0.0) -> bool:
        """Take the lock: at once (timeout 0), within `timeout` seconds, or waiting for as long
        as it takes (None). The file may be unlinked by its last holder while we wait; then
        the lock we got is on a dead file and we try again on the new one."""
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                if timeout is None:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                else:
                    while True:
                        try:
                            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                            break
                        except OSError as e:
                            if e.errno not in (errno.EAGAIN, errno.EACCES):
                                raise
                            if deadline is not None and time.monotonic() >= deadline:
                                os.close(fd)
                                return False
                            time.sleep(0.05)
                try:
                    same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
                except FileNotFoundError:
                    same = False
            except BaseException:
                os.close(fd)
                raise
            if same:
                self.fd = fd
                return True
            os.close(fd)

    def held_elsewhere(self) -> bool:
        """Is somebody working on this run now? (Tries the lock without keeping it.)"""
        if self.fd is not None:
            return False
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        finally:
            os.close(fd)
        return False

    def release(self, unlink: bool = False) -> None:
        """Drop the lock; with `unlink`, also the file (only once the run's state is gone)."""
        if self.fd is None:
            return
        if unlink:
            self.path.unlink(missing_ok=True)
        os.close(self.fd)
        self.fd = None


@contextlib.contextmanager
def claiming() -> Iterator[None]:
    """Serialises claims (id and prefixes) between `up`s started at the same moment."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(STATE_DIR / ".claim.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
