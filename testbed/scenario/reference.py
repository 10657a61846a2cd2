"""The scenario reference (docs/scenario-reference.md), written from the schema itself: every
field of every section and of every registered workload kind, with its type, default, limits
and description, and each kind's summary section with units (what `expect:` paths name).
`testbed schema --markdown` prints it; a unit test fails when the committed file and the
schema differ, so the reference cannot drift from what the loader accepts."""

from __future__ import annotations

import json
from typing import Any

from testbed.core.units import (
    DURATION_PATTERN,
    PERCENT_PATTERN,
    RATE_PATTERN,
    SIZE_PATTERN,
    format_duration,
    format_rate,
    format_size,
)
from testbed.scenario.runtimes import with_options
from testbed.scenario.schema import json_schema
from testbed.workloads import kinds

UNITS = {
    RATE_PATTERN: ("rate", format_rate),
    DURATION_PATTERN: ("duration", format_duration),
    SIZE_PATTERN: ("size", format_size),
    PERCENT_PATTERN: ("percent", lambda v: f"{v:g}%"),
}
SECTIONS = [  # top-level fields that are sections of their own, in the order a scenario reads
    ("topology", "Topology"),
    ("measure", "Measure"),
    ("metrics", "Metrics"),
    *((d.name, d.options.__name__) for d in with_options() if d.options is not None),
    ("machines", "Machines"),
]
COMMON = ("kind", "start", "stop", "hosts", "tc_class", "dscp", "derived")
UNIT_WORDS = {
    "s": "seconds (scenario time)",
    "wall": "seconds of this machine's clock",
    "bps": "bit/s",
    "hz": "per second",
    "B": "bytes",
    "pct": "percent",
    "1": "",
}


def _unit(prop: dict[str, Any]) -> tuple[str, Any] | None:
    for alt in prop.get("anyOf", []):
        if alt.get("type") == "string" and alt.get("pattern") in UNITS:
            return UNITS[alt["pattern"]]
    return None


def _type(prop: dict[str, Any]) -> str:
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        kind = next((k for k in kinds.names() if kinds.get(k).config.__name__ == name), None)
        if kind is not None:  # a workload kind's fields: under its own heading
            return f"[{kind}](#kind-{kind})"
        return f"[{name}](#{name.lower()})"
    unit = _unit(prop)
    if unit is not None:
        return unit[0]
    if "enum" in prop:
        return " \\| ".join(f"`{v}`" for v in prop["enum"])
    if "const" in prop:
        return f"`{prop['const']}`"
    if "anyOf" in prop or "oneOf" in prop:
        alts = [_type(a) for a in prop.get("anyOf", prop.get("oneOf")) if a.get("type") != "null"]
        return " or ".join(dict.fromkeys(alts))
    t = prop.get("type")
    if t == "array":
        return f"list of {_type(prop.get('items', {}))}"
    if t == "object":
        extra = prop.get("additionalProperties")
        return f"map to {_type(extra)}" if isinstance(extra, dict) and extra else "map"
    return {"integer": "integer", "number": "number", "string": "string", "boolean": "boolean"}.get(
        t or "", "any"
    )


def _limits(prop: dict[str, Any]) -> str:
    alts = [a for a in prop.get("anyOf", []) if a.get("type") not in ("null", "string")]
    if len(alts) == 1 and _unit(prop) is None:  # an optional number: its limits are inside
        return _limits(alts[0])
    out = []
    for key, sign in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"),
                      ("exclusiveMaximum", "<"), ("minItems", "items ≥"), ("maxLength", "length ≤"),
                      ("pattern", "matches")):  # fmt: skip
        if key in prop:
            value = prop[key]
            out.append(f"{sign} `{value}`" if key == "pattern" else f"{sign} {value:g}"
                       if isinstance(value, float) else f"{sign} {value}")  # fmt: skip
    return ", ".join(out)


def _default(prop: dict[str, Any]) -> str:
    if "default" not in prop:
        return "required"
    value = prop["default"]
    unit = _unit(prop)
    if value is None:
        return "–"
    if unit is not None and isinstance(value, (int, float)):
        return f"`{unit[1](value)}`"
    return f"`{json.dumps(value)}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _table(schema: dict[str, Any], skip: tuple[str, ...] = ()) -> list[str]:
    required = set(schema.get("required", []))
    lines = ["| field | type | default | limits | description |", "|---|---|---|---|---|"]
    for name, prop in schema.get("properties", {}).items():
        if name in skip or prop.get("readOnly"):
            continue
        if name in required:
            default = "required"
        elif "default" not in prop:  # a section or list made fresh: its own defaults
            default = "`[]`" if prop.get("type") == "array" else "its fields'"
        else:
            default = _default(prop)
        lines.append(
            f"| `{name}` | {_type(prop)} | {default} | {_cell(_limits(prop))} | "
            f"{_cell(prop.get('description', ''))} |"
        )
    return lines


def _shape(shape: Any, prefix: str) -> list[str]:
    """A kind's summary section as paths with units (`{"*": u}` is any key, `[..]` a list)."""
    if isinstance(shape, str):
        return [f"- `{prefix}` {UNIT_WORDS.get(shape, shape)}".rstrip()]
    if isinstance(shape, list):
        return _shape(shape[0], f"{prefix}.N")
    out = []
    for key, sub in shape.items():
        out += _shape(sub, f"{prefix}.{'KEY' if key == '*' else key}" if prefix else key)
    return out


def markdown() -> str:
    s = json_schema()
    defs = s["$defs"]
    out = [
        "# Scenario reference",
        "",
        "Generated from the schema by `testbed schema --markdown > docs/scenario-reference.md`;",
        "`tests/unit/test_reference.py` fails when this file and the schema differ. The guide to",
        "scenarios is [scenarios.md](scenarios.md); `testbed schema` prints the JSON Schema for",
        "editors. Rates, sizes, durations and percents take units (`100mbit`, `64KB`, `20ms`,",
        "`12.5%`; a bare number is bit/s, bytes, seconds or percent).",
        "",
        "## Top level",
        "",
        *_table(s),
    ]
    for field, model in SECTIONS:
        out += ["", f"## {model}", "", f"`{field}:`", "", *_table(defs[model])]
    out += ["", "## Machine", "", "An item of `machines.nodes`:", "", *_table(defs["Machine"])]
    out += [
        "",
        "## TcProfile",
        "",
        "`tc_profile:` a name from `testbed/tc_profiles/`, a path to a YAML file, or inline:",
        "",
        *_table(defs["TcProfile"]),
        "",
        "## TrafficClass",
        "",
        *_table(defs["TrafficClass"]),
        "",
        "## Workloads",
        "",
        "`workloads:` maps instance names (`^[a-z][a-z0-9_-]{0,31}$`) to instances; each has a",
        "`kind`. A key that names a kind (`horovod:`, `websearch:`) is an instance of that kind.",
        "Every instance takes `start` and `stop`; the kinds that place themselves also take",
        "`hosts`, `tc_class` and `dscp`:",
        "",
    ]
    placed = defs["WebsearchWorkload"]
    common = {"properties": {k: v for k, v in placed["properties"].items() if k in COMMON}}
    common["properties"]["kind"] = {"type": "string", "description": "one of the kinds below"}
    out += _table({**common, "required": ["kind"]})
    for name in kinds.names():
        kind = kinds.get(name)
        model = kind.config.__name__
        schema = defs.get(model) or defs.get(f"{model}_{name}") or {}
        out += ["", f"### kind: {name}", "", _cell(kind.doc), "", *_table(schema, COMMON)]
        for part in kind.models:  # its fields' own models (a training job's policies)
            sub = defs.get(part.__name__) or part.model_json_schema()
            out += ["", f"#### {part.__name__}", "", _cell(part.__doc__ or ""), "", *_table(sub)]
        out += ["", "Its summary section (`<instance>.…` in `expect:`, `summary.json`):", ""]
        out += _shape(dict(kind.summary), "")
    return "\n".join(out) + "\n"
