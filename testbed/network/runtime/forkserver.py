"""A fork server: imports a node program's heavy modules once, then forks one child per node.

`import torch` costs ~2.5 s of CPU here; eight Horovod workers importing it at once kept a
2-core machine busy for 15 s before every run. The server imports torch and Horovod once
(single-threaded: OMP/OpenBLAS pools are pinned to one thread, and the server refuses to fork
if any other thread exists) and forks a child per worker. Each child, before running the
program's `main(argv)`:
- enters the node's network namespace (setns), and its own UTS namespace when asked;
- drops to the requested group (the DSCP owner match keys on it), *then* sets
  PDEATHSIG, because a credential change clears it: the child dies with the server, and the
  server (started through `setpriv --pdeathsig KILL`) dies with the orchestrator;
- gets its own session, its log as stdout/stderr, and the requested environment.

Protocol (JSON lines): the client writes {"id", "module", "argv", "env", "netns", "uts",
"gid", "log"}; the server answers {"id", "pid"} (or {"id", "error"}), and reports
{"exit": pid, "code": n} when a child ends (negative n: killed by signal -n). Closing the
server's stdin ends it, and with it every child still running.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from testbed.core.stopping import checkpoint
from testbed.network.runtime.base import Launch, PolledProcess

CLONE_NEWUTS = 0x04000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
SINGLE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

# ---------------------------------------------------------------- server side (its own process)


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _child(req: dict[str, Any], server_pid: int, server_out: int) -> None:
    """In the forked child: enter the node, then run the program. Never returns."""
    code = 1
    try:
        os.close(server_out)  # the server's reply pipe is the server's alone
        # the program's log first, so that a failure to enter the node is reported there
        log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGUSR1):
            signal.signal(sig, signal.SIG_DFL)
        libc = _libc()
        os.setsid()
        fd = os.open(req["netns"], os.O_RDONLY)
        try:
            _check(libc.setns(fd, CLONE_NEWNET), f"setns {req['netns']}")
        finally:
            os.close(fd)
        if req.get("uts"):
            _check(libc.unshare(CLONE_NEWUTS), "unshare UTS")
        if req.get("gid") is not None:
            os.setgroups([])
            os.setgid(int(req["gid"]))
        _check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL), "prctl PDEATHSIG")
        if os.getppid() != server_pid:  # the server died between fork and prctl
            os._exit(1)
        os.environ.clear()
        os.environ.update(req["env"])
        sys.argv = [req["module"], *req["argv"]]
        rc = importlib.import_module(req["module"]).main(req["argv"])
        code = rc if isinstance(rc, int) else 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(preload: list[str]) -> int:
    # The reply pipe is fd 1; keep a private copy and point fd 1 at the log, so that nothing a
    # preloaded module prints can corrupt the protocol.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    out = os.fdopen(out_fd, "w", buffering=1)
    for name in preload:
        importlib.import_module(name)

    def say(msg: dict[str, Any]) -> None:
        out.write(json.dumps(msg) + "\n")

    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        say({"fatal": f"{threads} threads after importing {preload}; forking would be unsafe"})
        return 1
    say({"ready": True, "pid": os.getpid()})
    me = os.getpid()
    buf = b""
    while True:
        readable, _, _ = select.select([0], [], [], 0.05)
        while True:  # report children that ended
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            say({"exit": pid, "code": os.waitstatus_to_exitcode(status)})
        if not readable:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return 0  # the orchestrator is done with us; our children die with us
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            req = json.loads(line)
            try:
                pid = os.fork()
            except OSError as e:
                say({"id": req["id"], "error": str(e)})
                continue
            if pid == 0:
                _child(req, me, out_fd)
            say({"id": req["id"], "pid": pid})


def main(argv: list[str] | None = None) -> int:
    return serve(list(argv if argv is not None else sys.argv[1:]))


# ---------------------------------------------------------------- client side (orchestrator)


class ExitTable:
    """Which children ended, with what code, in what order. A sweep forks thousands of
    processes and pids wrap (at 32768 here), so a new child can get the pid of one that ended
    in an earlier run: its start forgets that old exit, or the new child would look dead."""

    def __init__(self) -> None:
        self._codes: dict[int, int] = {}
        self._order: dict[int, int] = {}
        self._seq = 0

    def started(self, pid: int) -> None:
        self._codes.pop(pid, None)
        self._order.pop(pid, None)

    def ended(self, pid: int, code: int) -> None:
        self._codes[pid] = code
        self._order[pid] = self._seq
        self._seq += 1

    def code(self, pid: int) -> int | None:
        return self._codes.get(pid)

    def order(self, pid: int) -> int:
        return self._order.get(pid, self._seq)


class ForkedProcess(PolledProcess):
    """A child of the fork server, with the parts of Popen's interface the workloads use."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server, self.pid = server, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid)
        return self.returncode

    @property
    def exit_order(self) -> int:
        """Children that ended are numbered in the order the server reaped them."""
        return self.server.exit_order(self.pid)


class ForkServer:
    def __init__(self, preload: list[str], log_path: Path) -> None:
        self.preload = preload
        log = open(log_path, "ab")  # noqa: SIM115 - handed to the server, closed below
        try:
            self.proc = subprocess.Popen(
                ["setpriv", "--pdeathsig", "KILL", "--",
                 sys.executable, "-m", "testbed.network.runtime.forkserver", *preload],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env={**os.environ, **SINGLE_THREAD_ENV},
                start_new_session=True,
            )  # fmt: skip
        finally:
            log.close()
        self._cv = threading.Condition()
        self._replies: dict[int, dict[str, Any]] = {}
        self._exits = ExitTable()
        self._ready: dict[str, Any] | None = None
        self._next = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue  # not ours (the server sends only JSON lines)
            with self._cv:
                if "exit" in msg:
                    self._exits.ended(msg["exit"], msg["code"])
                elif "id" in msg:
                    if "pid" in msg:
                        self._exits.started(msg["pid"])
                    self._replies[msg["id"]] = msg
                else:
                    self._ready = msg
                self._cv.notify_all()
        with self._cv:
            self._cv.notify_all()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, timeout: float) -> None:
        from testbed.core.errors import RunFailure

        deadline = time.monotonic() + timeout
        with self._cv:
            # in short waits: the imports take seconds, and Ctrl-C must not wait for them
            while self._ready is None and self.alive() and time.monotonic() < deadline:
                self._cv.wait(0.2)
                checkpoint()
            msg = self._ready
        if msg is None or "fatal" in msg:
            why = (msg or {}).get("fatal") or "it exited or did not answer in time"
            raise RunFailure(f"the fork server for {', '.join(self.preload)} failed: {why}")

    def spawn(self, netns_path: Path, launch: Launch) -> ForkedProcess:
        from testbed.core.errors import RunFailure

        with self._cv:
            rid = self._next
            self._next += 1
        req = {"id": rid, "module": launch.module, "argv": list(launch.argv),
               "env": {**os.environ, **launch.env}, "netns": str(netns_path),
               "uts": launch.new_uts, "gid": launch.gid, "log": str(launch.log_path)}  # fmt: skip
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(req) + "\n").encode())
        self.proc.stdin.flush()
        with self._cv:
            self._cv.wait_for(lambda: rid in self._replies or not self.alive(), 30)
            reply = self._replies.pop(rid, None)
        if reply is None or "error" in reply:
            raise RunFailure(
                f"the fork server could not start {launch.module}: {reply or 'no answer'}"
            )
        return ForkedProcess(self, reply["pid"])

    def exit_code(self, pid: int) -> int | None:
        with self._cv:
            code = self._exits.code(pid)
        if code is not None:
            return code
        if not self.alive():  # the server is gone, and PDEATHSIG took its children
            return -signal.SIGKILL
        return None

    def exit_order(self, pid: int) -> int:
        with self._cv:
            return self._exits.order(pid)

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_SHARED: dict[tuple[str, ...], ForkServer] = {}


def shared(preload: tuple[str, ...], log_path: Path) -> ForkServer:
    """One server per preload list for the life of this process: a sweep's runs share it, so
    only the first run pays for the imports. It is no run's object (no state file entry): it
    holds nothing of any run, and it dies with this process (PDEATHSIG) or at exit."""
    fs = _SHARED.get(preload)
    if fs is None or not fs.alive():
        fs = ForkServer(list(preload), log_path)
        try:
            fs.wait_ready(timeout=120)
        except BaseException:
            fs.close()
            raise
        _SHARED[preload] = fs
    return fs


def discard(preload: tuple[str, ...]) -> None:
    """Forget a server that failed to start a program; the next run starts a new one."""
    fs = _SHARED.pop(preload, None)
    if fs is not None:
        with contextlib.suppress(Exception):
            fs.close()


@atexit.register
def _close_shared() -> None:
    for fs in _SHARED.values():
        with contextlib.suppress(Exception):
            fs.close()
    _SHARED.clear()


if __name__ == "__main__":
    sys.exit(main())
