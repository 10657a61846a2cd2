"""Error types that map onto the CLI's exit codes (2: bad input, 1: runtime failure)."""

from __future__ import annotations


class TestbedError(Exception):
    """Base: the message is one line, written for the user, and printed without a traceback."""

    exit_code = 1


class ScenarioError(TestbedError):
    """The scenario (or a command-line value) is wrong; the message names the field and the fix."""

    exit_code = 2


class EnvironmentProblem(TestbedError):
    """This machine cannot run the scenario: not root, a missing kernel qdisc or binary."""

    exit_code = 1


class RunFailure(TestbedError):
    """Something broke while a run was live (a workload died, netlink refused a call)."""

    exit_code = 1
