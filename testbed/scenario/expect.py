"""Expectations: checks over a run's summary that give CI a verdict.

    expect:
      - websearch.fct_s.small.p99 < 20ms
      - horovod.iteration_time_s.mean < 1.05 * predicted
      - links.*.classes.high.drops == 0

A check is `PATH OP VALUE`. PATH names a number in summary.json; `*` stands for every list
element or every key at that level, and the check must hold for each. OP is one of
< <= > >= == !=. VALUE is a number with the unit of the metric's kind (20ms, 1.5MB, 900mbit,
12.5%), or `FACTOR * REF`, where REF is another PATH or `predicted` (the thesis model's
iteration time of that instance, `testbed predict`).

Paths are checked against what the scenario will report before anything is created: the
sections of its workload instances (named as in `workloads:`), the classes of its tc profile.
summary.py (`CORE` below) and each kind's `summary` (workloads/registry.py) list every number
a summary holds; tests/integration/test_expect.py compares them with real summaries, so they
cannot drift from what the workloads write. A hand-written grammar: no library evaluates dotted paths
with wildcards and units, and `eval` of user text is not an option.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from xml.etree import ElementTree as ET

from testbed.core.summary import CLASS, units
from testbed.core.units import format_duration, format_size, parse_duration, parse_rate, parse_size

# The unit of each number of the summary, declared with its type (summary.py); the sections
# of workload instances come from their kinds.
CORE: dict[str, Any] = units()
OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, ">=": operator.ge, "==": operator.eq, "!=": operator.ne,
    "<": operator.lt, ">": operator.gt,
}  # fmt: skip
_CHECK = re.compile(r"^\s*(?P<path>[A-Za-z0-9_.*-]+)\s*(?P<op><=|>=|==|!=|<|>)\s*(?P<rhs>.+?)\s*$")
_SCALED = re.compile(r"^(?:(?P<factor>[0-9.eE+-]+)\s*\*\s*)?(?P<ref>[A-Za-z_][A-Za-z0-9_.*-]*)$")
_PARSE: dict[str, Callable[[str], float]] = {
    "s": parse_duration,
    "wall": parse_duration,
    "B": lambda t: float(parse_size(t)),
    "bps": lambda t: float(parse_rate(t)),
}
_UNIT_HINT = {
    "s": "e.g. 20ms", "wall": "e.g. 2s", "B": "e.g. 1.5MB", "bps": "e.g. 900mbit", "pct": "e.g. 12.5%",
}  # fmt: skip


class ExpectError(ValueError):
    """A malformed check: which one (its index in `expect`) and what to write instead."""

    def __init__(self, index: int, msg: str) -> None:
        super().__init__(f"expect[{index}]: {msg}")
        self.index, self.msg = index, msg


@dataclass(frozen=True)
class Check:
    text: str
    path: str
    op: str
    kind: str
    value: float | None = None  # a constant in the metric's base unit
    factor: float = 1.0  # or factor × ref
    ref: str | None = None


@dataclass(frozen=True)
class Outcome:
    check: Check
    passed: bool
    measured: list[tuple[str, float | None]]  # (concrete path, value) per match
    limit: float | None
    reason: str = ""

    def line(self) -> str:
        mark = "PASS" if self.passed else "FAIL"
        shown = self.measured
        if not self.passed and self.limit is not None:  # the values that break it first
            op, limit = OPS[self.check.op], self.limit
            shown = sorted(shown, key=lambda pv: pv[1] is not None and op(pv[1], limit))
        vals = ", ".join(f"{p}={fmt(v, self.check.kind)}" for p, v in shown[:4]) + (
            f", … ({len(self.measured)} values)" if len(self.measured) > 4 else ""
        )
        limit = "" if self.limit is None else f" (limit {fmt(self.limit, self.check.kind)})"
        extra = f": {self.reason}" if self.reason else ""
        return f"{mark}  {self.check.text}  → {vals or 'no value'}{limit}{extra}"


def fmt(v: float | None, kind: str) -> str:
    if v is None:
        return "none"
    if kind in ("s", "wall"):
        return format_duration(v)
    if kind == "B":
        return format_size(round(v))
    if kind == "bps":  # readable, not exact (format_rate spells exact tc rates)
        return f"{v / 1e9:.4g}gbit" if v >= 1e9 else f"{v / 1e6:.4g}mbit"
    if kind == "pct":
        return f"{v:g}%"
    return f"{v:g}"


def kind_of(path: str, template: dict[str, Any], classes: list[str]) -> str:
    """The kind of the number PATH names, or ValueError saying where the path goes wrong."""
    node: Any = template
    done: list[str] = []
    for part in path.split("."):
        where = ".".join(done) or "the summary"
        if isinstance(node, list):
            if part != "*" and not part.isdigit():
                raise ValueError(f"{where} is a list: write {where}.* (each) or {where}.0")
            node = node[0]
        elif isinstance(node, dict):
            if CLASS in node:
                if part != "*" and part not in classes:
                    raise ValueError(
                        f"{where} has the tc profile's classes {classes}, not {part!r}"
                    )
                node = node[CLASS]
            elif "*" in node:
                node = node["*"]
            elif part in node:
                node = node[part]
            else:
                raise ValueError(f"{where} has no {part!r}; it has {', '.join(sorted(node))}")
        else:
            raise ValueError(f"{where} is a number; nothing below it")
        done.append(part)
    if not isinstance(node, str):
        keys = ", ".join(sorted(node[0] if isinstance(node, list) else node))
        raise ValueError(f"{path} is not a number; name one of its parts: {keys}")
    return node


def template_for(s: Any) -> dict[str, Any]:
    """The summary's shape for scenario `s`: the run's own sections, and one per workload
    instance, its kind's (as its fields leave it: Horovod's timeline only with `timeline: true`)."""
    from testbed.workloads import kinds

    def shape(w: Any) -> Any:
        kind = kinds.get(w.kind)
        return kind.summary_of(w) if kind.summary_of else kind.summary

    return {**CORE, **{name: shape(w) for name, w in s.workloads.items()}}


def predictable(s: Any) -> dict[str, str]:
    """Instance name → why its time cannot be predicted ("" when it can)."""
    from testbed.workloads import kinds

    out = {}
    for name, w in s.workloads.items():
        kind = kinds.get(w.kind)
        if kind.predict is None:
            out[name] = f"{name} ({w.kind}) has no model to predict it"
        elif kind.predictable is not None and not kind.predictable(w):
            out[name] = (
                f"{name}: a real job is predicted from the compute it states (give it "
                "compute_time or compute_to_network_ratio)"
            )
        else:
            out[name] = ""
    return out


def parse(texts: list[str], s: Any) -> list[Check]:
    """Checks from the scenario's `expect:` list; ExpectError names `expect[i]` and the fix."""
    template = template_for(s)
    classes = s.tc_profile.class_names
    why_not = predictable(s)
    out = []
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ExpectError(i, "write a check as text, e.g. 'websearch.censored == 0'")
        m = _CHECK.match(text)
        if not m:
            raise ExpectError(
                i,
                f"{text!r} is not PATH OP VALUE (OP one of < <= > >= == !=), "
                "e.g. 'websearch.fct_s.small.p99 < 20ms'",
            )
        path, op, rhs = m["path"], m["op"], m["rhs"]
        try:
            kind = kind_of(path, template, classes)
        except ValueError as e:
            raise ExpectError(i, f"{path}: {e}") from None
        scaled = _SCALED.match(rhs)
        if scaled and not re.match(r"^[0-9.]", scaled["ref"]):
            try:
                factor = float(scaled["factor"] or 1.0)
            except ValueError:
                raise ExpectError(
                    i,
                    f"{scaled['factor']!r} is not a number: write FACTOR * REF, e.g. 1.05 * predicted",
                ) from None
            ref = scaled["ref"]
            if ref == "predicted":
                instance = path.split(".")[0]
                if instance not in why_not or kind != "s":
                    raise ExpectError(
                        i,
                        "'predicted' is the model's iteration time: compare a training "
                        "instance's time with it, e.g. horovod.iteration_time_s.mean",
                    )
                if why_not[instance]:
                    raise ExpectError(i, f"'predicted': {why_not[instance]}; compare with a number")
            else:
                if "*" in ref:
                    raise ExpectError(i, f"{ref}: a reference names one value, no '*'")
                try:
                    ref_kind = kind_of(ref, template, classes)
                except ValueError as e:
                    raise ExpectError(i, f"{ref}: {e}") from None
                if ref_kind != kind:
                    raise ExpectError(
                        i, f"{path} ({kind}) and {ref} ({ref_kind}) are different kinds"
                    )
            out.append(Check(text, path, op, kind, factor=factor, ref=ref))
            continue
        try:
            value = _value(rhs, kind)
        except ValueError as e:
            raise ExpectError(i, f"{rhs!r}: {e}") from None
        out.append(Check(text, path, op, kind, value=value))
    return out


def _value(text: str, kind: str) -> float:
    t = text.strip()
    if kind == "pct":
        return float(t[:-1] if t.endswith("%") else t)
    if kind in _PARSE:
        try:
            return _PARSE[kind](t)
        except ValueError as e:
            raise ValueError(f"{e} ({_UNIT_HINT[kind]})") from None
    try:
        return float(t)
    except ValueError:
        raise ValueError("this metric is a plain number; write one, e.g. 0 or 1.5") from None


def matches(summary: Any, path: str) -> Iterator[tuple[str, Any]]:
    """(concrete path, value) for every element PATH names in summary."""

    def walk(node: Any, parts: list[str], done: list[str]) -> Iterator[tuple[str, Any]]:
        if not parts:
            yield ".".join(done), node
            return
        head, rest = parts[0], parts[1:]
        if isinstance(node, list):
            if head == "*":
                for i, x in enumerate(node):
                    label = _label(x, i)
                    yield from walk(x, rest, [*done, label])
            elif head.isdigit() and int(head) < len(node):
                yield from walk(node[int(head)], rest, [*done, head])
        elif isinstance(node, dict):
            if head == "*":
                for k, v in node.items():
                    yield from walk(v, rest, [*done, k])
            elif head in node:
                yield from walk(node[head], rest, [*done, head])

    return walk(summary, path.split("."), [])


def _label(x: Any, i: int) -> str:
    """A list element's name in results: a link as node/direction, else its index."""
    if isinstance(x, dict) and "node" in x and "direction" in x:
        return f"{x['node']}/{x['direction']}"
    return str(i)


def evaluate(
    checks: list[Check], summary: dict[str, Any], predicted: dict[str, float | None]
) -> list[Outcome]:
    """`predicted`: the model's iteration time of each instance that has one."""
    out = []
    for c in checks:
        found = list(matches(summary, c.path))
        values = [(p, float(v) if isinstance(v, (int, float)) else None) for p, v in found]
        if c.ref is None:
            limit = c.value
        elif c.ref == "predicted":
            mine = predicted.get(c.path.split(".")[0])
            limit = None if mine is None else c.factor * mine
        else:
            refs = [v for _, v in matches(summary, c.ref)]
            limit = (
                c.factor * float(refs[0]) if refs and isinstance(refs[0], (int, float)) else None
            )
        if limit is None:
            out.append(Outcome(c, False, values, None, f"{c.ref} has no value in this run"))
        elif not values or any(v is None for _, v in values):
            out.append(Outcome(c, False, values, limit, "the run measured no value here"))
        else:
            ok = all(OPS[c.op](v, limit) for _, v in values)  # type: ignore[arg-type]
            out.append(Outcome(c, ok, values, limit))
    return out


def junit(outcomes: list[Outcome], suite: str, run_dir: str) -> bytes:
    """One test case per check, its measured values in the message and in system-out."""
    fails = sum(not o.passed for o in outcomes)
    ts = ET.Element("testsuite", name=suite, tests=str(len(outcomes)), failures=str(fails),
                    errors="0", skipped="0")  # fmt: skip
    props = ET.SubElement(ts, "properties")
    ET.SubElement(props, "property", name="run_dir", value=run_dir)
    for o in outcomes:
        case = ET.SubElement(ts, "testcase", classname=f"testbed.{suite}", name=o.check.text)
        ET.SubElement(case, "system-out").text = o.line()
        if not o.passed:
            f = ET.SubElement(case, "failure", message=o.line(), type="expectation")
            f.text = o.line()
    root = ET.Element("testsuites", tests=str(len(outcomes)), failures=str(fails))
    root.append(ts)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def verdict(s: Any, summary: dict[str, Any]) -> list[Outcome]:
    """The scenario's checks evaluated on a summary, `predicted` from each instance's model."""
    from testbed.workloads import kinds
    from testbed.workloads.registry import load

    checks = parse(s.expect, s)
    wanted = {c.path.split(".")[0] for c in checks if c.ref == "predicted"}
    predicted: dict[str, float | None] = {}
    for name in wanted:
        kind = kinds.get(s.workloads[name].kind)
        assert kind.predict is not None
        predicted[name] = load(kind.predict)(name, s)["iteration_s"]
    return evaluate(checks, summary, predicted)


def to_json(outcomes: list[Outcome]) -> list[dict[str, Any]]:
    return [
        {"check": o.check.text, "passed": o.passed, "limit": o.limit, "reason": o.reason or None,
         "measured": [{"path": p, "value": v} for p, v in o.measured]}
        for o in outcomes
    ]  # fmt: skip
