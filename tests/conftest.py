"""Markers follow the folder: tests/unit → unit, tests/integration → integration, tests/docker →
docker. Integration and docker tests need root, docker tests a Docker engine that answers;
without them they are skipped with the reason (CI starts dockerd, so they run there)."""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from tests.bounds import (
    QUIET_BUDGET_S,
    QUIET_WAIT_S,
    STEAL_LIMIT,
    SlowMachine,
    machine_steal_over,
    wait_for_quiet,
)

ROOT = Path(__file__).resolve().parents[1]


def _engine_problem() -> str | None:
    try:
        import docker

        c = docker.from_env(timeout=10)
        c.ping()
        c.close()
    except Exception as e:
        return f"docker tests need a Docker engine (install.sh starts dockerd): {e}"
    return None


# A bound that a slow machine can break (tests/bounds.py) raises SlowMachine when the steal of
# its own window explains the miss: such a test is run again from scratch, up to
# ROOT_TEST_RERUNS more times, and only for that exception, each rerun once the machine looks
# quiet (wait_for_quiet). Every other failure (an assertion, a testbed exception, a leftover
# object) fails at once, never rerun. pytest-rerunfailures does the reruns and lists them as
# RERUN. TESTBED_QUIET_WAIT_S overrides how long a rerun waits (0: not at all); the reruns of
# a suite wait QUIET_BUDGET_S in all at most, then run at once.
ROOT_TEST_RERUNS = 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    engine: list[str | None] = []
    for item in items:
        parts = Path(str(item.fspath)).relative_to(ROOT / "tests").parts
        if parts[0] != "unit":
            item.add_marker(pytest.mark.flaky(reruns=ROOT_TEST_RERUNS, only_rerun=[SlowMachine]))
        if parts[0] == "unit":
            item.add_marker(pytest.mark.unit)
        elif parts[0] == "integration":
            item.add_marker(pytest.mark.integration)
            if os.geteuid() != 0:
                item.add_marker(pytest.mark.skip(reason="integration tests need root"))
        elif parts[0] == "gpu":
            from testbed.network.preflight import visible_gpus

            item.add_marker(pytest.mark.gpu)
            if os.geteuid() != 0:
                item.add_marker(pytest.mark.skip(reason="gpu tests need root"))
            elif not visible_gpus():
                item.add_marker(pytest.mark.skip(
                    reason="gpu tests need an NVIDIA GPU; this machine shows none (the GPU "
                    "path is unverified here)"
                ))  # fmt: skip
        elif parts[0] == "docker":
            item.add_marker(pytest.mark.docker)
            if os.geteuid() != 0:
                item.add_marker(pytest.mark.skip(reason="docker tests need root"))
                continue
            if not engine:
                engine.append(_engine_problem())
            if engine[0]:
                item.add_marker(pytest.mark.skip(reason=engine[0]))


# What the suite tells at its end: every excused bound (the limit on them is CI's, through
# TESTBED_MAX_EXCUSED), every skip with its reason, and how much CPU the hypervisor took.
_EXCUSED: list[str] = []
_SKIPPED: list[str] = []
_ROOT_STEALS: list[tuple[float, str]] = []  # (steal over the call phase, test) of root tests
_WAITS: list[float] = []  # seconds each rerun waited for a quiet machine
_STEAL = pytest.StashKey[object]()


def _max_excused() -> int | None:
    value = os.environ.get("TESTBED_MAX_EXCUSED")
    return int(value) if value else None


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before a rerun (the previous run was excused), wait for the steal to fall."""
    if getattr(item, "execution_count", 1) <= 1:
        return
    wait = os.environ.get("TESTBED_QUIET_WAIT_S")
    wait_s = min(float(wait) if wait else QUIET_WAIT_S, QUIET_BUDGET_S - sum(_WAITS))
    waited, _ = wait_for_quiet(machine_steal_over, wait_s=wait_s)
    _WAITS.append(waited)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    from testbed.core import hostcpu

    before = hostcpu.read()
    yield
    steal = hostcpu.between(before, hostcpu.read())["steal"]
    if item.get_closest_marker("unit") is None and isinstance(steal, float):
        item.stash[_STEAL] = steal
        _ROOT_STEALS.append((steal, item.nodeid))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[Any, Any, None]:
    """A SlowMachine on the last run of a test is reported as skipped, "excused: ...", and
    counted; on an earlier run it stays a failure, which the rerun plugin turns into RERUN."""
    outcome = yield
    rep = outcome.get_result()
    if rep.when != "call":
        if rep.skipped and rep.when == "setup":
            _SKIPPED.append(f"{item.nodeid}: {_reason(rep)}")
        return
    if rep.skipped:
        _SKIPPED.append(f"{item.nodeid}: {_reason(rep)}")
    if not (rep.failed and call.excinfo is not None and call.excinfo.errisinstance(SlowMachine)):
        return
    last = getattr(item, "execution_count", 1) > ROOT_TEST_RERUNS
    if last:
        why = str(call.excinfo.value)
        _EXCUSED.append(f"{item.nodeid}: {why}")
        rep.outcome = "skipped"
        rep.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: excused: {why}")


def _reason(rep: Any) -> str:
    longrepr = rep.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)[:300]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The excused bounds and the skips, then the hypervisor's share of the CPU during the
    root tests: the first things to read when a rate or time bound failed in CI."""
    for line in _EXCUSED:
        terminalreporter.write_line(f"excused for this machine's sake: {line}")
    for line in _SKIPPED:
        terminalreporter.write_line(f"skipped: {line}")
    limit = _max_excused()
    terminalreporter.write_line(
        f"{len(_EXCUSED)} test(s) excused for this machine's sake"
        + (f" (at most {limit} allowed)" if limit is not None else "")
        + f", {len(_SKIPPED)} skipped"
    )
    if limit is not None and len(_EXCUSED) > limit:
        terminalreporter.write_line(
            f"FAILED: {len(_EXCUSED)} tests excused, more than {limit}: this run measured the "
            "machine, not testbed; run it again when the machine is quiet",
            red=True,
        )
    if _ROOT_STEALS:
        worst = sorted(_ROOT_STEALS, reverse=True)
        over = sum(1 for x, _ in worst if x > STEAL_LIMIT)
        terminalreporter.write_line(
            f"hypervisor steal during {len(worst)} root tests' call phases: mean "
            f"{sum(x for x, _ in worst) / len(worst):.1%}, {over} over {STEAL_LIMIT:.0%}, most "
            f"{worst[0][0]:.1%} ({worst[0][1]})"
        )
    if _WAITS:
        terminalreporter.write_line(
            f"{len(_WAITS)} rerun(s) waited {sum(_WAITS):.0f} s in all for a quiet machine"
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """More excused tests than TESTBED_MAX_EXCUSED (.ci/run sets 3) fail the run: that many
    bounds could not be judged, so the run says little about testbed."""
    limit = _max_excused()
    if limit is not None and len(_EXCUSED) > limit and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
