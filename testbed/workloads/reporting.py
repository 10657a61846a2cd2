"""The contract of a kind's report module (`Kind.report`): what `testbed report`, a sweep's
sweep.csv and the aggregate of a sweep (report.py, sweep.py, aggregate.py) call for every
instance of the kind. Named here so that a new kind knows what to write and
tests/unit/test_report_hooks.py can check every registered kind against it.

A report module is a plain module of functions, so these are Protocols a *module* satisfies:
`ReportHooks` what every report module has; `SweepColumns`, `MatchedChange` and `Planned` the
optional parts, each a Protocol of its own, which a caller tests with isinstance() (or
getattr with a default) before it uses them. Parameters are positional-only: callers pass
them by position, and each kind names the summary section its own way (`w`, `q`, `h`, ...).

`section` is the instance's section of summary.json; in `print_section` it is what
`describe` returned. `name` is the instance's name (an instance named as its kind keeps the
unprefixed columns and figures of the scenarios before named instances: runs.prefixed).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from rich.console import Console

# testbed.core.runs.Run and testbed.scenario.schema.Scenario sit in layers above this one, so the protocols
# cannot import them; the aliases keep the signatures readable (and equal to the modules').
Run = Any
Scenario = Any


@runtime_checkable
class ReportHooks(Protocol):
    """The nine functions every report module provides."""

    def describe(self, run: Run, name: str, section: dict[str, Any], /) -> dict[str, Any]:
        """The instance's part of `testbed report --json`: the figures a reader looks at."""

    def print_section(self, out: Console, name: str, section: dict[str, Any], /) -> None:
        """Print what `describe` returned (its `section`) as the instance's tables."""

    def comparable(
        self, run: Run, name: str, section: dict[str, Any], /
    ) -> dict[str, float | None]:
        """The figures a comparison takes the % change of, keyed as in the comparison table."""

    def compare(self, base: Run, other: Run, name: str, /) -> dict[str, Any]:
        """What the kind adds to a comparison of `other` against `base` ({} when either lacks it)."""

    def print_compare(
        self, out: Console, name: str, entries: list[tuple[str, dict[str, Any]]], /
    ) -> None:
        """Print the kind's comparison tables: (run, what `compare` returned) per other run."""

    def key_metrics(self, name: str, section: dict[str, Any], /) -> dict[str, Any]:
        """The instance's columns of sweep.csv (prefixed with `name` unless named as its kind)."""

    def counts(self, name: str, section: dict[str, Any], /) -> dict[str, int]:
        """How many samples stand behind each comparable figure (a sweep's aggregate shows them)."""

    def plots(self, run: Run, name: str, section: dict[str, Any], out_dir: Path, /) -> list[Path]:
        """Draw the instance's plots of one run into `out_dir`; the files written."""

    def compare_plots(self, runs: list[Run], name: str, out_dir: Path, /) -> list[Path]:
        """Draw the instance's plots across runs (the first the baseline); the files written."""


@runtime_checkable
class SweepColumns(Protocol):
    """Optional: the names `key_metrics` gives an instance named as its kind. A sweep axis may
    not take one (sweep.key_columns); without it the kind reserves none."""

    COLUMNS: tuple[str, ...]


@runtime_checkable
class MatchedChange(Protocol):
    """Optional: a comparison of the same events in two runs of one seed (aggregate.py)."""

    def matched_change(self, base: Run, other: Run, name: str, /) -> dict[str, dict[str, Any]]:
        """Per figure: change_pct, matched and censored, over the events both runs completed."""


@runtime_checkable
class Planned(Protocol):
    """Optional: what `testbed sweep --dry-run` shows of a point before it runs."""

    def planned(self, name: str, scenario: Scenario, /) -> dict[str, int]:
        """What the instance will do in the measured window, counted ("flows": 120, ...)."""


OPTIONAL: tuple[type, ...] = (SweepColumns, MatchedChange, Planned)
