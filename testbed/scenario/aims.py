"""A sweep's aims: what its comparison is meant to decide, and the verdict its seeds give.

    compare: {axis: scheme, baseline: same}
    aims:
      - horovod.iteration_time_s.mean change <= 2%                     # each value vs same
      - websearch.fct_s.small.mean change <= -25% (low)                # low vs same only
      - horovod.iteration_time_s.mean change in [15.4%, 30.8%] (low vs same)
      - websearch.fct_s.small.mean change <= 0.8 * low (pias vs same)  # 80 % of low's gain

An aim is `PATH change OP BOUND [(VALUE [vs BASELINE])]`. PATH names one number of a run's
summary.json, as `expect:` names it (no `*`). The figure is the paired % change of that number
from the baseline run to the compared value's run of the same cell and seed. BOUND is a
percentage (`OP` one of < <= > >=), `in [LOW%, HIGH%]`, or `F * VALUE2`: then the figure of a
seed is this value's change less F × VALUE2's change at the same seed (a gain kept at F of
another's, judged as a difference so that Student's t applies; a ratio of two noisy means
would need a bootstrap and has no sign when the other's change is near 0).

Over the seeds: the mean, the paired 95 % interval (t with n − 1 degrees of freedom), and a
verdict: **holds** (the whole interval on the aim's side), **misses** (the whole interval on
the other side) or **undecided**, with the number of seeds at which the spread observed so far
would decide it (t(n−1)·sd/√n below the mean's distance to the bound). Pure arithmetic on
numbers: no run folder is read here (aggregate.py gathers the pairs).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

# Student's t, two-sided 95 %, by degrees of freedom (a table: scipy is not a dependency);
# beyond the table the normal's 1.96 is within 4 %
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
       9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
       16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 25: 2.060, 30: 2.042,
       40: 2.021, 60: 2.000, 120: 1.980}  # fmt: skip

HOLDS, MISSES, UNDECIDED = "holds", "misses", "undecided"
# the most seeds a "needs N seeds" estimate names; beyond it the aim is called out of reach
MOST_SEEDS = 1000

_AIM = re.compile(
    r"^\s*(?P<path>[A-Za-z0-9_.*-]+)\s+change\s+"
    r"(?:(?P<op><=|>=|<|>)\s*(?P<rhs>[^()\[\]]+?)|in\s*\[\s*(?P<lo>[^,\]]+?)\s*,\s*(?P<hi>[^\]]+?)\s*\])"
    r"\s*(?:\(\s*(?P<value>[^()]*?)\s*\))?(?:\s*\bwhere\s+(?P<where>.+?))?\s*$"
)
_RELATIVE = re.compile(r"^(?P<factor>[0-9.eE+-]+)\s*\*\s*(?P<other>\S+)$")
_EXAMPLE = "e.g. 'horovod.iteration_time_s.mean change <= 2% (low vs same)'"


class AimError(ValueError):
    """A malformed aim: which one (`aims[i]`) and what to write instead."""

    def __init__(self, index: int, msg: str) -> None:
        super().__init__(f"aims[{index}]: {msg}")


@dataclass(frozen=True)
class Aim:
    text: str
    path: str
    op: str  # <=, <, >=, >, or "in"
    low: float | None = None  # in %; for <, <= only `high` is set, for >, >= only `low`
    high: float | None = None
    value: str | None = None  # the compared value it judges (None: every one)
    baseline: str | None = None  # its baseline (None: compare.baseline)
    factor: float = 0.0  # relative: figure = change − factor × change of `other`
    other: str | None = None
    where: tuple[tuple[str, str], ...] = ()  # (axis, label): the cells it judges (): every one

    def judges(self, cell: dict[str, str]) -> bool:
        return all(cell.get(axis) == label for axis, label in self.where)

    def label(self) -> str:
        return self.text.strip()


def t95(df: int) -> float:
    """t's 97.5 % point at `df` ≥ 1, from the table's nearest lower row (wider, never
    narrower)."""
    return 1.96 if df > 120 else T95[max(k for k in T95 if k <= df)]


def _pct(text: str, i: int) -> float:
    t = text.strip()
    if not t.endswith("%"):
        raise AimError(i, f"{t!r}: a bound is a percentage change, e.g. 2% or -25%")
    try:
        return float(t[:-1])
    except ValueError:
        raise AimError(i, f"{t!r} is not a percentage, e.g. 2% or -25%") from None


def parse(
    texts: Any,
    values: list[str],
    baseline: str,
    cells: dict[str, tuple[str, list[str]]] | None = None,
) -> list[Aim]:
    """The aims of a sweep, checked against its compared axis: `values` are the axis' labels,
    `baseline` compare.baseline; `cells`: each other axis' names (its column or its path, as
    sweep.csv and the sweep file write it) → (its path, its labels), for `where`. Paths are
    checked against the scenarios in `check_paths`."""
    if not isinstance(texts, list):
        raise AimError(0, f"aims is a list of texts, {_EXAMPLE}")
    out = []
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise AimError(i, f"write an aim as text, {_EXAMPLE}")
        m = _AIM.match(text)
        if not m:
            raise AimError(
                i, f"{text!r} is not 'PATH change OP BOUND [(VALUE vs BASELINE)]', {_EXAMPLE}"
            )
        if "*" in m["path"]:
            raise AimError(i, f"{m['path']}: an aim judges one number; no '*'")
        value, base = _named(m["value"], values, baseline, i)
        fields: dict[str, Any] = {}
        if m["op"] is None:
            lo, hi = _pct(m["lo"], i), _pct(m["hi"], i)
            if lo >= hi:
                raise AimError(i, f"in [{m['lo']}, {m['hi']}]: the low end must be below the high")
            fields = {"op": "in", "low": lo, "high": hi}
        elif rel := _RELATIVE.match(m["rhs"].strip()):
            other = rel["other"]
            if other not in values or other == base:
                raise AimError(
                    i, f"{other!r}: a relative bound names another compared value; "
                    f"values: {', '.join(v for v in values if v != base)}",
                )  # fmt: skip
            if other == value:
                raise AimError(i, f"{other!r}: a value compared with itself decides nothing")
            try:
                factor = float(rel["factor"])
            except ValueError:
                raise AimError(i, f"{rel['factor']!r} is not a number, e.g. 0.8 * low") from None
            bound = {"high": 0.0} if m["op"].startswith("<") else {"low": 0.0}
            fields = {"op": m["op"], "factor": factor, "other": other, **bound}
        else:
            b = _pct(m["rhs"], i)
            fields = {"op": m["op"], **({"high": b} if m["op"].startswith("<") else {"low": b})}
        where = _where(m["where"], cells or {}, i) if m["where"] else ()
        out.append(Aim(text, m["path"], value=value, baseline=base, where=where, **fields))
    return out


def _where(
    text: str, cells: dict[str, tuple[str, list[str]]], i: int
) -> tuple[tuple[str, str], ...]:
    """`where AXIS=LABEL[, AXIS=LABEL]`: the cells an aim judges (the R = 2 cell's own band)."""
    out = []
    for part in text.split(","):
        name, eq, label = part.partition("=")
        name, label = name.strip(), label.strip()
        if not eq or not name or not label:
            raise AimError(i, f"where {text}: write where AXIS=VALUE, e.g. where cell=r2-12.5%")
        if name not in cells:
            known = ", ".join(sorted({n for n in cells if "." not in n} or set(cells))) or "none"
            raise AimError(i, f"where {name}: not an axis of the sweep's cells; they are: {known}")
        axis, labels = cells[name]
        if label not in labels:
            raise AimError(
                i, f"where {name}={label}: {label!r} is not one of its values: {', '.join(labels)}"
            )
        out.append((axis, label))
    return tuple(out)


def _named(text: str | None, values: list[str], baseline: str, i: int) -> tuple[str | None, str]:
    """`(VALUE)`, `(VALUE vs BASELINE)` or `(vs BASELINE)`: both must be labels of the
    compared axis, and different."""
    if not text:
        return None, baseline
    parts = re.split(r"\s*\bvs\b\s*", text.strip(), maxsplit=1)
    value = parts[0].strip() or None
    base = parts[1].strip() if len(parts) == 2 else baseline
    for v, what in ((value, "value"), (base, "baseline")):
        if v is not None and v not in values:
            raise AimError(
                i, f"({text}): {v!r} is not a {what} of the compared axis; its values: "
                f"{', '.join(values)}",
            )  # fmt: skip
    if value == base:
        raise AimError(i, f"({text}): a value compared with itself decides nothing")
    return value, base


def concerns(aim: Aim, labels: dict[str, str], axis: str, baseline: str) -> bool:
    """Whether a point with these labels is one of the runs `aim` reads: in a cell it judges,
    and on one of its values (its value, baseline or other; any value where it names none).
    A scheme that leaves a job out need not write the job's figures for aims about others."""
    if not aim.judges(labels):
        return False
    if aim.value is None:
        return True
    return labels.get(axis) in {aim.value, aim.baseline or baseline, aim.other}


def check_paths(
    aims: list[Aim], scenario: Any, where: str, skip: frozenset[int] = frozenset()
) -> None:
    """Every aim (but those numbered in `skip`) names a number the scenario's runs write (as
    `expect:` checks it)."""
    from testbed.scenario import expect

    template = expect.template_for(scenario)
    classes = scenario.tc_profile.class_names
    for i, a in enumerate(aims):
        if i in skip:
            continue
        try:
            kind = expect.kind_of(a.path, template, classes)
        except ValueError as e:
            raise AimError(i, f"{a.path}: the runs of {where} do not write it: {e}") from None
        if kind in ("wall",):
            raise AimError(
                i, f"{a.path} is on this machine's clock, not the scenario's: aim at a "
                "scenario figure",
            )  # fmt: skip


def value_at(summary: dict[str, Any], path: str) -> float | None:
    node: Any = summary
    for part in path.split("."):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return None
    return float(node) if isinstance(node, (int, float)) and not isinstance(node, bool) else None


def pct_change(new: float | None, old: float | None) -> float | None:
    if new is None or old is None or old == 0:
        return None
    return (new - old) / old * 100.0


@dataclass(frozen=True)
class Judged:
    aim: Aim
    per_seed: dict[int, float | None]  # seed → the seed's figure (None: not measured)
    n: int
    mean: float | None
    sd: float | None
    interval: tuple[float, float] | None
    verdict: str
    seeds_needed: int | None  # undecided: the seeds the observed spread needs (None: never)
    why: str = ""
    flags: tuple[tuple[int, str], ...] = ()  # (seed, why its pair is not a fair one)

    def to_json(self) -> dict[str, Any]:
        return {
            "aim": self.aim.label(), "path": self.aim.path, "op": self.aim.op,
            "low": self.aim.low, "high": self.aim.high,
            "per_seed": {str(k): v for k, v in self.per_seed.items()},
            "n": self.n, "mean": self.mean, "sd": self.sd,
            "interval": list(self.interval) if self.interval else None,
            "verdict": self.verdict, "seeds_needed": self.seeds_needed, "why": self.why or None,
            "flagged_pairs": [{"seed": s, "why": w} for s, w in self.flags],
        }  # fmt: skip

    def text(self) -> str:
        """The verdict in words: `holds`, `misses (1 flagged pair)`, `undecided: ~9 seeds`."""
        out = self.verdict
        if self.verdict == UNDECIDED:
            if self.seeds_needed is not None:
                out += f": ~{self.seeds_needed} seeds"
            elif self.why:
                out += f": {self.why}"
        if self.flags:
            n = len({s for s, _ in self.flags})
            out += f" ({n} flagged pair{'s' if n > 1 else ''})"
        return out


def judge(
    aim: Aim, per_seed: dict[int, float | None], flags: dict[int, list[str]] | None = None
) -> Judged:
    """The verdict of one aim from its seeds' figures (a seed without one left out); `flags`:
    the seeds whose pair is not a fair one (pair_flags), carried to the verdict."""
    flagged = tuple((s, w) for s, ws in sorted((flags or {}).items()) if s in per_seed for w in ws)
    xs = [x for x in per_seed.values() if x is not None and not math.isnan(x)]
    n = len(xs)
    if n < 2:
        why = "no seed measured it" if n == 0 else "one seed: no spread to judge by"
        mean = xs[0] if xs else None
        return Judged(
            aim, per_seed, n, mean, None, None, UNDECIDED, None if n == 0 else 2, why, flagged
        )
    mean = sum(xs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t95(n - 1) * sd / math.sqrt(n)
    lo, hi = mean - half, mean + half
    verdict = _side(aim, lo, hi)
    needed = None if verdict != UNDECIDED else seeds_needed(n, sd, _distance(aim, mean))
    why = ""
    if verdict == UNDECIDED and needed is None:
        why = (
            "the mean sits on the bound" if _distance(aim, mean) == 0
            else f"the spread would need more than {MOST_SEEDS} seeds"
        )  # fmt: skip
    return Judged(aim, per_seed, n, mean, sd, (lo, hi), verdict, needed, why, flagged)


def _side(aim: Aim, lo: float, hi: float) -> str:
    """Which side of the aim's bounds the interval [lo, hi] lies."""
    low = -math.inf if aim.low is None else aim.low
    high = math.inf if aim.high is None else aim.high
    if lo >= low and hi <= high:
        return HOLDS
    if hi < low or lo > high:
        return MISSES
    return UNDECIDED


def _distance(aim: Aim, mean: float) -> float:
    """How far the mean lies from the bound that would decide the aim."""
    low = -math.inf if aim.low is None else aim.low
    high = math.inf if aim.high is None else aim.high
    if mean < low:
        return low - mean
    if mean > high:
        return mean - high
    return min(mean - low, high - mean)


def seeds_needed(n: int, sd: float, distance: float) -> int | None:
    """The fewest seeds (≥ n) whose interval, at the spread `sd`, is narrower than `distance`
    on the mean's side; None when no number up to MOST_SEEDS would do."""
    if distance <= 0:
        return None
    if sd == 0:
        return n
    for k in range(max(n, 2), MOST_SEEDS + 1):
        if t95(k - 1) * sd / math.sqrt(k) < distance:
            return k
    return None


def figures(
    aim: Aim, value: str, changes: dict[str, dict[int, float | None]]
) -> dict[int, float | None]:
    """The aim's figure per seed for the compared `value`: its change from the baseline, or,
    for a relative aim, that change less factor × the other value's change at the same seed.
    `changes`: compared value → seed → change (%) of the aim's path."""
    mine = changes.get(value, {})
    if aim.other is None:
        return dict(mine)
    theirs = changes.get(aim.other, {})
    out: dict[int, float | None] = {}
    for seed, x in mine.items():
        y = theirs.get(seed)
        out[seed] = None if x is None or y is None else x - aim.factor * y
    return out


# A pair's two runs should have met the same machine: started within the hour (a slow drift
# of the machine, documented on the results pages, then cancels), at host CPU, steal and
# link-budget figures alike. Beyond these, the pair is flagged, and so is a verdict on it.
# Host CPU is partly the schemes' own: the thesis' R = 2 cell ran 77-80 % busy in "same" and
# 63-65 % in "low", back to back on a quiet machine (2026-12-07: "same"'s ring timed out 2.6
# times as often), so only a larger gap says the machine was another.
PAIR_LIMITS = {"apart_s": 3600.0, "steal": 0.02, "busy": 0.25, "load": 0.10}


def pair_flags(base: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """Why two runs of one seed are not a fair pair (empty: they are), from their summaries:
    `started_at`, `host_cpu.busy`/`steal` (0–1) and `link_budget.load`; and a pair of which a
    run asked more of the machine than its budget (load over 1: its links or its CPU), whose
    figures the emulation may have bent however alike its two runs were. Host busy and load
    are compared only between runs of the same workloads: a run that leaves one out (a job
    alone, the anchor of a several-jobs design) asks less by construction, not by drift."""
    out = []
    same_work = set(base.get("workloads") or {}) == set(other.get("workloads") or {})
    over = [x for x in (value_at(base, "link_budget.load"), value_at(other, "link_budget.load"))
            if x is not None and x > 1]  # fmt: skip
    if over:
        out.append(f"over this machine's budget (load {max(over):.2f})")
    a, b = base.get("started_at"), other.get("started_at")
    apart = abs(a - b) if isinstance(a, (int, float)) and isinstance(b, (int, float)) else 0
    if apart > PAIR_LIMITS["apart_s"]:
        out.append(f"started {apart / 3600:.1f} h apart")
    for key, path, what in (
        ("steal", "host_cpu.steal", "steal"),
        ("busy", "host_cpu.busy", "host CPU busy"),
        ("load", "link_budget.load", "link-budget load"),
    ):
        if key != "steal" and not same_work:
            continue
        x, y = value_at(base, path), value_at(other, path)
        if x is not None and y is not None and abs(x - y) > PAIR_LIMITS[key]:
            out.append(f"{what} {x:.0%} against {y:.0%}")
    return out
