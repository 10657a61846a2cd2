"""Reaching the hosts of a live run (`testbed exec`, `testbed shell`), as Mininet users type
`h1 ping h2` and containerlab users `docker exec` into a node.

The command replaces the `testbed` process (exec), so its stdin, stdout, stderr, terminal and
exit status are the user's own, with nothing in between. It enters only the host's network
namespace (nsenter), or its container (the docker CLI, which already does what a terminal
needs: raw mode, window size, signals; the SDK's attach socket would be that code again, by
hand). Either way the process lives inside the run's host, and teardown ends every process
there, so nothing started by exec outlives the run.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from testbed.core.errors import ScenarioError
from testbed.core.state import RunState, all_states
from testbed.network.runtime import registry as runtimes


def live_run(run_id: str | None) -> RunState:
    """The run named, or the only live one; ScenarioError (exit 2) says which exist."""
    states = all_states()
    if run_id is not None:
        for st in states:
            if st.run_id == run_id:
                if not st.alive():
                    raise ScenarioError(
                        f"--run: run {run_id} is not live (its orchestrator is gone; "
                        "`testbed down` removes what is left)"
                    )
                return st
        known = ", ".join(st.run_id for st in states if st.alive()) or "none"
        raise ScenarioError(f"--run: no run {run_id} on this machine (live runs: {known})")
    live = [st for st in states if st.alive()]
    if not live:
        raise ScenarioError(
            "no live run: start one with `testbed up SCENARIO --hold` (see `testbed status`)"
        )
    if len(live) > 1:
        ids = ", ".join(f"{st.run_id} ({st.scenario})" for st in live)
        raise ScenarioError(f"several live runs: {ids}; choose one with --run ID")
    return live[0]


def host_of(st: RunState, name: str) -> dict[str, Any]:
    if not st.hosts:
        raise ScenarioError(
            f"run {st.run_id} has no hosts yet (phase {st.phase!r}); try again in a moment"
        )
    for h in st.hosts:
        if h["name"] == name:
            return h
    names = " ".join(h["name"] for h in st.hosts)
    raise ScenarioError(f"HOST: run {st.run_id} has no host {name!r}; its hosts: {names}")


def argv_for(st: RunState, host: dict[str, Any], command: list[str], tty: bool) -> list[str]:
    """The command line that runs `command` inside `host`, as its runtime reaches it."""
    return runtimes.get(st.runtime).exec_argv(st, host, command, tty)


def shell_command(st: RunState, host: dict[str, Any]) -> list[str]:
    """An interactive shell whose prompt names the run and host (no rc file: one that sets
    PS1 would hide where the shell is)."""
    prompt = f"[{st.run_id} {host['name']} {host['data_ip']}] \\w\\$ "
    return runtimes.get(st.runtime).shell(prompt)


def run_in_host(run_id: str | None, name: str, command: list[str], shell: bool = False) -> None:
    """exec: never returns."""
    from testbed.network.preflight import require_root

    require_root("testbed exec")
    st = live_run(run_id)
    host = host_of(st, name)
    if shell:
        command = shell_command(st, host)
    elif not command:
        raise ScenarioError("CMD: give a command after --, e.g. testbed exec h1 -- ping -c1 h2")
    else:
        # as in Mininet's CLI: an argument that is exactly a host's name means its data
        # address (`testbed exec h1 -- ping -c1 h2`); a namespace has no name resolution
        addresses = {h["name"]: h["data_ip"] for h in st.hosts}
        command = [addresses.get(a, a) for a in command]
    argv = argv_for(st, host, command, tty=shell or sys.stdin.isatty())
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)
