"""`testbed sweep SWEEP.yaml`: a grid of runs, one after another, resumable.

    name: thesis-grid
    base: thesis-grid-base.yaml             # a scenario file, relative to the sweep file
    set: {duration: 64s}                    # overrides for every run (optional)
    axes:                                   # dotted scenario paths → values (cartesian product)
      workloads.horovod.compute_to_network_ratio: [16, 8, 4, 2]
      workloads.websearch.utilization: [3.125%, 6.25%, 12.5%, 25%]
    paired:                                 # values that change together, one label each
      scheme:
        same: {workloads.horovod.tc_class: high, workloads.websearch.tc_class: high}
        low: {workloads.horovod.tc_class: low, workloads.websearch.tc_class: high}
    seeds: [1, 2, 3]
    compare: {axis: scheme, baseline: same} # what `testbed report SWEEP_DIR` compares

Order: the axes outermost, then the seed, then the paired axes, so that the runs a comparison
needs (same cell, same seed) follow each other and a stopped sweep leaves whole cells.

A point is identified by its resolved scenario (a hash of the scenario as the run folder
would hold it), so a finished run is never run again, whatever its folder is called; a failed
run is recorded, the sweep goes on, and the next invocation runs it again. Every point is
resolved before the first run starts, so a bad axis value is refused with nothing created.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from testbed.core.errors import EnvironmentProblem, ScenarioError, TestbedError
from testbed.core.runs import instances
from testbed.scenario import aims as aims_mod
from testbed.scenario import expect
from testbed.scenario.resolve import load_scenario, with_overrides
from testbed.scenario.schema import Scenario, format_validation_error
from testbed.workloads import kinds
from testbed.workloads.registry import load
from testbed.workloads.reporting import SweepColumns

log = logging.getLogger("testbed")


class Compare(BaseModel):
    model_config = ConfigDict(extra="forbid")

    axis: str = Field(description="the axis (or paired axis) whose values are compared")
    baseline: str = Field(description="the value (label) the others are compared against")


class MapAxes(BaseModel):
    model_config = ConfigDict(extra="forbid")

    x: str
    y: str


class SeedPlan(BaseModel):
    """Seeds added until the aims are decided: `min` first, then `step` more at a time (in
    pairs by default, so the alternating order stays balanced) up to `max`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    from_: int = Field(1, alias="from", description="the first seed")
    min: int = Field(3, ge=2, description="seeds run before the aims are first judged")
    max: int = Field(20, ge=2, description="the most seeds; undecided after them is a verdict")
    step: int = Field(2, ge=1, description="seeds added at a time while an aim is undecided")
    until: Literal["decided"] = Field(description="decided: every aim holds or misses")

    @model_validator(mode="after")
    def _order(self) -> SeedPlan:
        if self.min > self.max:
            raise ValueError(f"seeds: min ({self.min}) is above max ({self.max})")
        return self

    def first(self, n: int) -> list[int]:
        return list(range(self.from_, self.from_ + n))


class SweepSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)
    description: str = ""
    base: str = Field(description="the base scenario file, relative to the sweep file")
    set: dict[str, Any] = Field(default_factory=dict, description="overrides for every run")
    axes: dict[str, list[Any]] = Field(default_factory=dict)
    paired: dict[str, dict[str, dict[str, Any]]] = Field(default_factory=dict)
    seeds: list[int] | SeedPlan = Field(default_factory=lambda: [1])
    compare: Compare | None = None
    aims: list[str] = Field(
        default_factory=list, description="what the comparison is to decide (aims.py)"
    )
    order: Literal["alternate", "fixed"] = Field(
        "alternate",
        description="alternate: the compared runs of a cell and seed in turn, reversed on "
        "every other seed (same-low, low-same: ABBA); fixed: as the file lists them",
    )
    map: MapAxes | None = Field(None, description="the report's map: x and y axes")

    @field_validator("seeds", mode="before")
    @classmethod
    def _seeds(cls, v: Any) -> Any:
        """A list, or a plan; one line for either (a union's errors would name both)."""
        if isinstance(v, dict):
            try:
                return SeedPlan.model_validate(v)
            except ValidationError as e:
                err = e.errors()[0]
                where = ".".join(str(x) for x in err["loc"])
                msg = str(err["msg"]).removeprefix("Value error, ")
                raise ValueError(f"{where}: {msg}" if where else msg) from None
        if isinstance(v, list) and not v:
            raise ValueError("give at least one seed")
        if not isinstance(v, list):
            raise ValueError("a list of seeds, or {from: 1, min: 3, max: 20, until: decided}")
        return v

    def seed_list(self, n: int | None = None) -> list[int]:
        """The seeds to run: the file's list, or a plan's first `n` (default: its min)."""
        if isinstance(self.seeds, list):
            return list(self.seeds)
        return self.seeds.first(self.seeds.min if n is None else n)

    def all_seeds(self) -> list[int]:
        """Every seed the sweep may run (a plan's up to its max)."""
        if isinstance(self.seeds, list):
            return list(self.seeds)
        return self.seeds.first(self.seeds.max)

    def parsed_aims(self) -> list[aims_mod.Aim]:
        assert self.compare is not None
        values = axis_values(self, self.compare.axis)
        return aims_mod.parse(self.aims, values, self.compare.baseline, cell_axes(self))

    @field_validator("axes")
    @classmethod
    def _nonempty(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for k, values in v.items():
            if not values:
                raise ValueError(f"{k}: give at least one value")
        return v

    @field_validator("axes", "set")
    @classmethod
    def _no_seed(cls, v: dict[str, Any]) -> dict[str, Any]:
        if "seed" in v:
            raise ValueError("seed: the seeds of a sweep are given by `seeds:`, not here")
        return v

    def axis_names(self) -> list[str]:
        return [*self.axes, "seed", *self.paired]

    def column(self, axis: str) -> str:
        """The axis' column in sweep.csv: the last part of its path, or, where two axes end
        alike (job-a's and job-b's compute_to_network_ratio), the path after `workloads.`."""
        if axis not in self.axes:
            return axis
        short = short_name(axis)
        if sum(1 for a in self.axes if short_name(a) == short) > 1:
            return axis.removeprefix("workloads.")
        return short


@dataclass
class Point:
    index: int
    labels: dict[str, str]  # axis name → value as written (paired: the label); includes seed
    overrides: dict[str, Any]
    scenario: Scenario
    identity: str  # hash of the resolved scenario
    folder: str

    @property
    def title(self) -> str:
        return "  ".join(f"{short_name(k)}={v}" for k, v in self.labels.items())


@dataclass
class Outcome:
    point: Point
    status: str  # ok | failed | skipped (finished earlier) | interrupted | not run (--only)
    wall_s: float = 0.0
    error: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    failed_checks: list[str] = field(default_factory=list)  # the scenario's expect:, FAIL lines
    checks: int = 0

    @property
    def expect_column(self) -> str:
        """sweep.csv's `expect`: empty without checks (or without a run to check)."""
        if not self.checks or self.status not in ("ok", "skipped"):
            return ""
        n = len(self.failed_checks)
        return f"{n} of {self.checks} failed" if n else "passed"


def short_name(axis: str) -> str:
    """An axis' column in sweep.csv and tables: the last part of its dotted path."""
    return axis.rsplit(".", 1)[-1]


# sweep.csv's own columns; an axis may not be called like one of them
RESERVED = {"index", "folder", "seed", "status", "wall_s", "error", "expect", "started", "pair"}


def _label(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def _slug(values: list[str]) -> str:
    text = "_".join(values).replace("%", "pct")
    return re.sub(r"[^A-Za-z0-9._=-]+", "-", text).strip("-")[:80]


# Fields added after sweeps had run, whose default is what every run did before they existed:
# left out of a point's identity at that default, so that a finished point stays finished.
LATER_FIELDS: dict[tuple[str, ...], Any] = {
    ("topology", "link_mode"): "exact",
    ("tc_profile", "shared_limit"): None,
    ("tc_profile", "host_limit"): None,
    ("topology", "tcp_recovery"): "linux",
    ("topology", "tcp_idle_restart"): True,
    ("topology", "tcp_rto_initial"): None,
    ("machines",): None,
}
# the same, in every workload instance
LATER_INSTANCE_FIELDS: dict[tuple[str, ...], Any] = {
    ("policy",): {"kind": "static"},
    ("demote",): None,
    ("derived", "demote_dscp"): None,
    ("real_model",): None,
}


def _drop_at_default(data: dict[str, Any], fields: dict[tuple[str, ...], Any]) -> None:
    for (*parents, key), default in fields.items():
        node = data
        for p in parents:
            node = node.get(p) or {}
        if node.get(key, default) == default:
            node.pop(key, None)


def identity_of(s: Scenario) -> str:
    """What makes two runs the same run: the resolved scenario without its name and
    description, with files (a flow-size CSV, a layer profile) by content, not by path, so
    that renaming the sweep or moving the checkout does not make finished points run again."""
    data = s.model_dump(mode="json")
    data.pop("name", None)
    data.pop("description", None)
    _drop_at_default(data, LATER_FIELDS)
    for name, instance in s.workloads.items():
        w = data["workloads"][name]
        _drop_at_default(w, LATER_INSTANCE_FIELDS)
        for field_name in kinds.get(instance.kind).files:
            if w.get(field_name) and Path(w[field_name]).is_file():
                digest = hashlib.sha256(Path(w[field_name]).read_bytes()).hexdigest()
                w[field_name] = "sha256:" + digest
    text = json.dumps(data, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_spec(path: Path) -> SweepSpec:
    if not path.is_file():
        raise ScenarioError(f"{path}: no such sweep file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ScenarioError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: a sweep must be a YAML mapping with name, base, axes, ...")
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as e:
        raise ScenarioError(format_validation_error(e, str(path))) from None
    names = spec.axis_names()
    columns: dict[str, str] = {}
    for axis in names:
        col = spec.column(axis)
        if col in columns or (col in RESERVED and axis != "seed") or col in key_columns():
            other = columns.get(col, "a column of sweep.csv")
            raise ScenarioError(
                f"{path}: axes: {axis!r} and {other!r} would share the column {col!r}; "
                "name a paired axis instead, or drop one"
            )
        columns[col] = axis
    if spec.compare is not None:
        if spec.compare.axis not in names:
            raise ScenarioError(
                f"{path}: compare.axis: {spec.compare.axis!r} is not an axis; axes: {names}"
            )
        values = axis_values(spec, spec.compare.axis)
        if spec.compare.baseline not in values:
            raise ScenarioError(
                f"{path}: compare.baseline: {spec.compare.baseline!r} is not a value of "
                f"{spec.compare.axis}; values: {values}"
            )
    if spec.aims:
        if spec.compare is None:
            raise ScenarioError(
                f"{path}: aims: judge a comparison; add compare: {{axis: ..., baseline: ...}}"
            )
        try:
            spec.parsed_aims()
        except aims_mod.AimError as e:
            raise ScenarioError(f"{path}: {e}") from None
    if isinstance(spec.seeds, SeedPlan) and not spec.aims:
        raise ScenarioError(
            f"{path}: seeds.until: decided needs aims: to decide; add aims:, or give the "
            "seeds as a list"
        )
    if spec.map is not None:
        for k in ("x", "y"):
            if getattr(spec.map, k) not in spec.axes:
                raise ScenarioError(f"{path}: map.{k}: not one of the axes {list(spec.axes)}")
    return spec


def cell_axes(spec: SweepSpec) -> dict[str, tuple[str, list[str]]]:
    """The axes that make a cell (all but the compared one and the seed), by column and by
    path → (path, labels): what an aim's `where` may name."""
    compared = spec.compare.axis if spec.compare else None
    out: dict[str, tuple[str, list[str]]] = {}
    for axis in [*spec.axes, *spec.paired]:
        if axis != compared:
            out[axis] = out[spec.column(axis)] = (axis, axis_values(spec, axis))
    return out


def axis_values(spec: SweepSpec, axis: str) -> list[str]:
    """An axis' values as the sweep file writes them (a paired axis: its labels)."""
    if axis == "seed":
        return [str(s) for s in spec.all_seeds()]
    if axis in spec.axes:
        return [_label(v) for v in spec.axes[axis]]
    return list(spec.paired[axis])


def expand(spec: SweepSpec, sweep_file: Path, seeds: list[int] | None = None) -> list[Point]:
    """Every point, resolved, in the order they run (`ordered`); a bad value is refused naming
    the sweep field and the point. `seeds`: the seeds to expand (default: the file's list, or
    a seed plan's first `min`)."""
    base_path = (sweep_file.parent / spec.base).resolve()
    try:
        base = load_scenario(base_path)
    except ScenarioError as e:
        raise ScenarioError(f"{sweep_file}: base: {e}") from None
    _refuse_new_instances(spec, base, sweep_file)
    aims = spec.parsed_aims() if spec.aims else []
    points: list[Point] = []
    seen: dict[str, int] = {}
    names = spec.axis_names()
    for i, combo in enumerate(ordered(spec, spec.seed_list() if seeds is None else seeds)):
        labels = {name: label for name, label, _ in sorted(combo, key=lambda c: names.index(c[0]))}
        overrides: dict[str, Any] = dict(spec.set)
        for _, _, o in combo:
            overrides.update(o)
        where = ", ".join(f"{k}={v}" for k, v in labels.items())
        try:
            s = with_overrides(
                base,
                overrides,
                source=f"{sweep_file} ({where})",
                base_dir=sweep_file.parent.resolve(),
            )
        except ScenarioError as e:
            raise ScenarioError(str(e)) from None
        if aims and spec.compare is not None:
            c = spec.compare
            skip = frozenset(
                j
                for j, a in enumerate(aims)
                if not aims_mod.concerns(a, labels, c.axis, c.baseline)
            )
            try:
                aims_mod.check_paths(aims, s, f"point {i} ({where})", skip)
            except aims_mod.AimError as e:
                raise ScenarioError(f"{sweep_file}: {e}") from None
        ident = identity_of(s)
        if ident in seen:
            raise ScenarioError(
                f"{sweep_file}: points {seen[ident]} and {i} resolve to the same scenario "
                f"({where}); an axis changes nothing"
            )
        seen[ident] = i
        folder = f"{i:03d}-{_slug([f's{v}' if k == 'seed' else v for k, v in labels.items()])}"
        points.append(Point(i, labels, overrides, s, ident, folder))
    if aims:
        like_with_like(spec, aims, points, sweep_file)
    return points


def tenants(s: Scenario) -> dict[str, Any]:
    """The tenants' treatment in a scenario: every workload instance that is not a training
    job (an instance whose kind takes a `policy`), as its fields resolve, by dotted path."""
    out: dict[str, Any] = {}

    def flat(prefix: str, v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                flat(f"{prefix}.{k}", x)
        else:
            out[prefix] = v

    for name, w in s.workloads.items():
        if "policy" not in type(w).model_fields:
            flat(f"workloads.{name}", w.model_dump(mode="json"))
    return out


def like_with_like(
    spec: SweepSpec, aims: list[aims_mod.Aim], points: list[Point], sweep_file: Path
) -> None:
    """An aim compares runs whose tenants are treated alike: a compared value that changes
    the tenants (web search's band, its demotion, its ACKs) against its baseline would credit
    the job's policy with what the tenants' own treatment did. Refused in one line, naming
    the field, unless the aim names a baseline (a control) with the same tenant treatment.
    Without a training job in the sweep there is no policy to credit, and nothing to check."""
    assert spec.compare is not None
    if not any(
        "policy" in type(w).model_fields for p in points for w in p.scenario.workloads.values()
    ):
        return
    axis = spec.compare.axis
    by_cell: dict[tuple[tuple[str, str], ...], dict[str, Scenario]] = {}
    for p in points:
        cell = tuple((k, v) for k, v in p.labels.items() if k != axis)
        by_cell.setdefault(cell, {})[p.labels[axis]] = p.scenario
    for i, aim in enumerate(aims):
        base = aim.baseline or spec.compare.baseline
        for cell, runs in by_cell.items():
            if base not in runs or not aim.judges(dict(cell)):
                continue
            wanted = [aim.value] if aim.value else [v for v in runs if v != base]
            for value in [*wanted, *([aim.other] if aim.other else [])]:
                if value not in runs:
                    continue
                mine, theirs = tenants(runs[value]), tenants(runs[base])
                differ = sorted(  # a field the user set before the values derived from it
                    (k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k)),
                    key=lambda k: (".derived." in k, k),
                )
                if differ:
                    f = differ[0]
                    raise ScenarioError(
                        f"{sweep_file}: aims[{i}]: {value!r} treats the tenants otherwise than "
                        f"{base!r} ({f}: {mine.get(f)!r} against {theirs.get(f)!r}), so the "
                        f"change would not be the job's; add a control value with {value}'s "
                        f"tenant treatment and the job static, and judge against it: "
                        f"'({value} vs CONTROL)'"
                    )


Dim = list[tuple[str, str, dict[str, Any]]]


def ordered(spec: SweepSpec, seeds: list[int]) -> list[tuple[tuple[str, str, dict[str, Any]], ...]]:
    """The points' (axis, label, overrides) combinations in the order they run.

    fixed: the axes outermost, then the seed, then the paired axes (the file's order).
    alternate (the default): the compared axis and the paired axes innermost, so the runs a
    comparison needs (one cell, one seed) run back to back, and in reverse order on every
    other seed (same-low, low-same, ...: a slow drift of the machine cancels in the mean).
    With a seed plan the seed is outermost, so that seeds added later come after every
    point run before and a stopped sweep leaves whole rounds of seeds."""
    axes: dict[str, Dim] = {
        path: [(path, _label(v), {path: v}) for v in values] for path, values in spec.axes.items()
    }
    paired: dict[str, Dim] = {
        name: [(name, label, dict(o)) for label, o in options.items()]
        for name, options in spec.paired.items()
    }
    seed_dim: Dim = [("seed", str(s), {"seed": s}) for s in seeds]
    if spec.order == "fixed":
        return list(itertools.product(*axes.values(), seed_dim, *paired.values()))
    compared = spec.compare.axis if spec.compare else None
    inner = [d for a, d in paired.items() if a != compared]  # the compared axis innermost
    inner += [axes[compared]] if compared in axes else [paired[compared]] if compared else []
    outer = [d for a, d in axes.items() if a != compared]
    planned = isinstance(spec.seeds, SeedPlan)
    out = []
    for combo in itertools.product(*([seed_dim, *outer] if planned else [*outer, seed_dim])):
        seed = next(int(label) for name, label, _ in combo if name == "seed")
        position = (
            seed - spec.seeds.from_ if isinstance(spec.seeds, SeedPlan) else seeds.index(seed)
        )
        turns = list(itertools.product(*inner))
        out += [(*combo, *t) for t in (turns[::-1] if position % 2 else turns)]
    return out


def _refuse_new_instances(spec: SweepSpec, base: Scenario, sweep_file: Path) -> None:
    """`workloads.NAME.FIELD` must name an instance the base has (or one the same overrides set
    whole): a typo would otherwise add an instance of the kind NAME names, quietly."""
    groups = [
        spec.set,
        *spec.axes.values(),
        *(o for opts in spec.paired.values() for o in opts.values()),
    ]
    whole = {
        p.split(".")[1]
        for g in groups
        for p in (g if isinstance(g, dict) else {})
        if p.startswith("workloads.") and p.count(".") == 1
    }
    paths = [
        *spec.set,
        *spec.axes,
        *(p for opts in spec.paired.values() for o in opts.values() for p in o),
    ]
    for path in paths:
        parts = path.split(".")
        if parts[0] == "workloads" and len(parts) > 2:
            name = parts[1]
            if name not in base.workloads and name not in whole:
                raise ScenarioError(
                    f"{sweep_file}: {path}: the base scenario has no workload instance {name!r} "
                    f"(its instances: {', '.join(base.workloads) or 'none'}); set "
                    f"workloads.{name} whole to add one"
                )


class SweepUI:
    """What the sweep reports to its display (the CLI draws it with rich)."""

    def start_point(self, p: Point, done: int, total: int, eta_s: float | None) -> Any: ...
    def end_point(self, o: Outcome, done: int, total: int) -> None: ...


def finished_runs(runs_dir: Path) -> dict[str, Path]:
    """identity → run folder, for runs that completed (status ok)."""
    out: dict[str, Path] = {}
    if not runs_dir.is_dir():
        return out
    for p in sorted(runs_dir.iterdir()):
        point, summary = p / "point.json", p / "summary.json"
        if not (point.is_file() and summary.is_file()):
            continue
        try:
            if json.loads(summary.read_text()).get("status") == "ok":
                out[json.loads(point.read_text())["identity"]] = p
        except (OSError, ValueError, KeyError):
            continue
    return out


def _set_aside(folder: Path) -> None:
    """An earlier attempt keeps its records, out of the way: `.failed-N` for a run that did
    not finish, `.stale-N` for a finished run of another scenario (the sweep file changed)."""
    kind = "stale" if _summary_of(folder).get("status") == "ok" else "failed"
    for n in itertools.count(1):
        dest = folder.with_name(f"{folder.name}.{kind}-{n}")
        if not dest.exists():
            folder.rename(dest)
            return


NOT_RUN = "not run"  # a point `--only` left out that had not finished before


def only_points(spec: SweepSpec, points: list[Point], only: tuple[str, ...]) -> set[int]:
    """The indices of the points that `--only AXIS=VALUE[,VALUE...]` keeps (each filter must
    hold). AXIS is sweep.csv's column for it, its full path, `seed` or a paired axis; VALUE
    as the sweep file writes it. Refused in one line: a filter without `=`, an axis or value
    the file does not have."""
    axes = {a: a for a in spec.axis_names()} | {spec.column(a): a for a in spec.axis_names()}
    kept = {p.index for p in points}
    for f in only:
        name, eq, values = f.partition("=")
        if not eq or not name.strip() or not values.strip():
            raise ScenarioError(f"--only {f}: write AXIS=VALUE[,VALUE...], e.g. --only seed=3")
        axis = axes.get(name.strip())
        if axis is None:
            known = ", ".join(spec.column(a) for a in spec.axis_names())
            raise ScenarioError(
                f"--only {f}: the sweep has no axis {name.strip()!r}; its axes: {known}"
            )
        wanted = [v.strip() for v in values.split(",") if v.strip()]
        have = axis_values(spec, axis)
        for v in wanted:
            if v not in have:
                raise ScenarioError(
                    f"--only {f}: {v!r} is not a value of {spec.column(axis)}; "
                    f"its values: {', '.join(have)}"
                )
        kept &= {p.index for p in points if p.labels[axis] in wanted}
    return kept


def split(
    points: list[Point], done_before: dict[str, Path], only: set[int] | None
) -> tuple[list[Point], list[Point]]:
    """The points to run now (not finished before, and kept by `--only`) and those `--only`
    left out that had not finished (recorded as `not run`, so that the sweep's record still
    holds every point of its file and `report` every finished one)."""
    unfinished = [p for p in points if p.identity not in done_before]
    if only is None:
        return unfinished, []
    return [p for p in unfinished if p.index in only], [
        p for p in unfinished if p.index not in only
    ]


RunFn = Callable[[Scenario, Path, Any], dict[str, Any]]


def run_sweep(
    spec: SweepSpec,
    points: list[Point],
    out: Path,
    run_one: RunFn,
    ui: SweepUI,
    only: set[int] | None = None,
) -> list[Outcome]:
    """Run every point not finished before (of those in `only`, the indices `--only` keeps;
    None: all). `run_one(scenario, run_dir, point_ui)` runs one point and returns its summary
    (raising TestbedError on failure, Interrupted on Ctrl-C)."""
    from testbed.run.orchestrator import Interrupted

    runs_dir = out / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    (out / "sweep.yaml").write_text(
        yaml.safe_dump(spec.model_dump(mode="json", by_alias=True), sort_keys=False)
    )
    done_before = finished_runs(runs_dir)
    todo, left_out = split(points, done_before, only)
    not_run = {p.index for p in left_out}
    total = len(points) - len(not_run)  # what the display counts: finished or to run
    outcomes: list[Outcome] = []
    walls: list[float] = []
    t_sweep = time.monotonic()
    try:
        for p in points:
            done = len(outcomes) - sum(o.status == NOT_RUN for o in outcomes)
            prior = done_before.get(p.identity)
            if prior is not None:
                if prior.name != p.folder:
                    log.info("point %d finished earlier in %s", p.index, prior.name)
                summary = json.loads((prior / "summary.json").read_text())
                p.folder = prior.name
                outcomes.append(Outcome(p, "skipped", recorded_wall(prior), None, summary))
                check(outcomes[-1], prior)
                ui.end_point(outcomes[-1], done + 1, total)
                continue
            if p.index in not_run:
                outcomes.append(Outcome(p, NOT_RUN))
                continue
            folder = runs_dir / p.folder
            if folder.exists():
                _set_aside(folder)
            left = len(todo) - len(walls)
            eta = sum(walls) / len(walls) * left if walls else None
            point_ui = ui.start_point(p, done, total, eta)
            t0 = time.monotonic()
            try:
                summary = run_one(p.scenario, folder, point_ui)
                o = Outcome(p, "ok", time.monotonic() - t0, None, summary)
            except Interrupted:
                outcomes.append(Outcome(p, "interrupted", time.monotonic() - t0, "interrupted"))
                raise
            except EnvironmentProblem:
                raise  # every other point would fail the same way
            except TestbedError as e:
                o = Outcome(p, "failed", time.monotonic() - t0, str(e), _summary_of(folder))
                log.error("point %d (%s) failed: %s", p.index, p.title, e)
            finally:
                if folder.is_dir():  # the run folder names its point (resume looks for it)
                    (folder / "point.json").write_text(json.dumps(
                        {"index": p.index, "labels": p.labels, "overrides": p.overrides,
                         "identity": p.identity, "wall_s": round(time.monotonic() - t0, 2)},
                        indent=1))  # fmt: skip
            check(o, folder)
            walls.append(o.wall_s)
            outcomes.append(o)
            ui.end_point(o, done + 1, total)
            write_results(spec, points, outcomes, out, time.monotonic() - t_sweep)
    finally:
        write_results(spec, points, outcomes, out, time.monotonic() - t_sweep)
    return outcomes


def recorded_wall(folder: Path) -> float:
    """The wall time a finished point's run took, as point.json kept it, so that a resumed
    sweep's sweep.csv still says how long each of its runs took (0.0 in folders made before
    point.json kept it)."""
    try:
        return float(json.loads((folder / "point.json").read_text()).get("wall_s") or 0.0)
    except (OSError, ValueError):
        return 0.0


def check(o: Outcome, folder: Path) -> None:
    """The point's `expect:` checks on its summary, as `up` evaluates them, kept in the run
    folder (expectations.json); a failed check does not stop the sweep."""
    s = o.point.scenario
    if not s.expect or o.status not in ("ok", "skipped"):
        return
    outcomes = expect.verdict(s, o.summary)
    (folder / "expectations.json").write_text(json.dumps(expect.to_json(outcomes), indent=2))
    o.checks = len(outcomes)
    o.failed_checks = [x.line() for x in outcomes if not x.passed]


def _summary_of(folder: Path) -> dict[str, Any]:
    try:
        return json.loads((folder / "summary.json").read_text())
    except (OSError, ValueError):
        return {}


# ------------------------------------------------------------------ results


def key_columns() -> set[str]:
    """sweep.csv's figure columns (of instances named as their kinds): an axis may not take
    one's name."""
    out = {"duration_s", "drain_s"}
    for name in kinds.names():
        ref = kinds.get(name).report
        if ref is not None and isinstance(mod := load(ref), SweepColumns):  # optional
            out |= set(mod.COLUMNS)
    return out


def key_metrics(summary: dict[str, Any]) -> dict[str, Any]:
    """The per-run columns of sweep.csv: the run's own, then each workload instance's (its
    kind's report module says which; `iteration_mean_s`, `fct_small_mean_s`, ... for an
    instance named as its kind, prefixed with the name for another)."""
    out: dict[str, Any] = {
        "duration_s": summary.get("duration_s"),
        "drain_s": summary.get("drain_s"),
    }
    for name, kind, section in instances(summary):
        ref = kinds.get(kind).report
        if ref is not None:
            out.update(load(ref).key_metrics(name, section))
    return out


def pair_column(spec: SweepSpec, outcomes: list[Outcome]) -> dict[int, str]:
    """Point index → why its pair (the baseline's run of its cell and seed) is not a fair one
    (aims.pair_flags), for the compared runs of a sweep that compares."""
    if spec.compare is None:
        return {}
    axis, baseline = spec.compare.axis, spec.compare.baseline

    def key(o: Outcome) -> tuple[tuple[str, str], ...]:
        return tuple((k, v) for k, v in o.point.labels.items() if k != axis)

    ok = [o for o in outcomes if o.status in ("ok", "skipped") and o.summary]
    bases = {key(o): o for o in ok if o.point.labels[axis] == baseline}
    out = {}
    for o in ok:
        b = bases.get(key(o))
        if b is not None and b is not o:
            out[o.point.index] = "; ".join(aims_mod.pair_flags(b.summary, o.summary))
    return out


def _started(summary: dict[str, Any]) -> str:
    t = summary.get("started_at")
    if not isinstance(t, (int, float)):
        return ""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def write_results(
    spec: SweepSpec, points: list[Point], outcomes: list[Outcome], out: Path, wall_s: float
) -> None:
    names = spec.axis_names()
    flags = pair_column(spec, outcomes)
    rows = []
    for o in outcomes:
        rows.append({
            "index": o.point.index, "folder": f"runs/{o.point.folder}",
            **{spec.column(k): o.point.labels[k] for k in names},
            "status": "ok" if o.status == "skipped" else o.status,
            "wall_s": round(o.wall_s, 2), "error": o.error or "", "expect": o.expect_column,
            "started": _started(o.summary), "pair": flags.get(o.point.index, ""),
            **key_metrics(o.summary),
        })  # fmt: skip
    if rows:
        tmp = out / "sweep.csv.tmp"
        # every row's columns (a failed point has no figures; instances differ across points)
        fields = list(dict.fromkeys(k for r in rows for k in r))
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)
        tmp.replace(out / "sweep.csv")
    doc = {
        "name": spec.name,
        "spec": spec.model_dump(mode="json", by_alias=True),
        "points": len(points),
        "ran": sum(1 for o in outcomes if o.status in ("ok", "failed")),
        "ok": sum(1 for o in outcomes if o.status in ("ok", "skipped")),
        "failed": sum(1 for o in outcomes if o.status == "failed"),
        "not_run": sum(1 for o in outcomes if o.status == NOT_RUN),
        "expect_failed": sum(1 for o in outcomes if o.failed_checks),
        "wall_s": round(wall_s, 1),
        "run_s": round(sum(o.wall_s for o in outcomes), 1),
        "results": rows,
        # the same points keyed by full axis names, for `testbed report`
        "labels": [o.point.labels for o in outcomes],
    }
    text = json.dumps(doc, indent=1)
    # sweep.json is the last sweep's; sweeps/NAME.json keeps each sweep that shares the folder
    # (an ablation that reuses a grid's points), for `testbed report OUT --sweep NAME`
    (out / SWEEPS_DIR).mkdir(exist_ok=True)
    for path in (out / "sweep.json", out / SWEEPS_DIR / f"{spec.name}.json"):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)


SWEEPS_DIR = "sweeps"


def sweeps_in(out: Path) -> list[str]:
    """The names of the sweeps that wrote into the folder `out`, oldest first."""
    files = sorted((out / SWEEPS_DIR).glob("*.json"), key=lambda f: f.stat().st_mtime)
    return [f.stem for f in files]


def sweep_doc(out: Path, name: str | None = None) -> dict[str, Any]:
    """The sweep.json of the sweep `name` in `out` (None: the last to run there)."""
    last = json.loads((out / "sweep.json").read_text())
    if name is None or name == last["name"]:
        return last
    path = out / SWEEPS_DIR / f"{name}.json"
    if not path.is_file():
        known = sweeps_in(out) or [last["name"]]
        raise ScenarioError(
            f"--sweep: no sweep {name!r} ran in {out}; it holds: {', '.join(known)}"
        )
    return json.loads(path.read_text())


def default_out(spec: SweepSpec) -> Path:
    return Path("runs") / f"sweep-{spec.name}"
