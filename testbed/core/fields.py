"""The field types every part of a scenario is written in: rates, durations, sizes and
percentages as a user types them ("100mbit", "10us", "6.28MB", "12.5%"), parsed by
testbed.core.units (the one source of truth; the JSON Schema patterns come from the parsers' own
unit tables, so editors accept the same spellings), and the error that names a field's path.

Shared by the schema (scenario.py) and every workload kind's configuration, which is why it
sits below both."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, ConfigDict, PlainSerializer, WithJsonSchema

from testbed.core.units import (
    DURATION_PATTERN,
    PERCENT_PATTERN,
    RATE_PATTERN,
    SIZE_PATTERN,
    format_duration,
    format_rate,
    format_size,
    parse_duration,
    parse_percent,
    parse_rate,
    parse_size,
)

STRICT = ConfigDict(extra="forbid")

Rate = Annotated[
    int,
    BeforeValidator(parse_rate),
    PlainSerializer(format_rate, return_type=str),
    WithJsonSchema(
        {
            "anyOf": [{"type": "number"}, {"type": "string", "pattern": RATE_PATTERN}],
            "description": "bits per second; e.g. 100mbit, 10Gbit, 1.5gbit/s (units in any case)",
        }
    ),
]
Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema(
        {
            "anyOf": [{"type": "number"}, {"type": "string", "pattern": DURATION_PATTERN}],
            "description": "seconds; e.g. 10us, 2ms, 60s, 2m (units in any case)",
        }
    ),
]
Size = Annotated[
    int,
    BeforeValidator(parse_size),
    PlainSerializer(format_size, return_type=str),
    WithJsonSchema(
        {
            "anyOf": [{"type": "number"}, {"type": "string", "pattern": SIZE_PATTERN}],
            "description": "bytes; e.g. 1500B, 64KB, 6.28MB, 1MiB (units in any case; KB = 1000 B)",
        }
    ),
]
Percent = Annotated[
    float,
    BeforeValidator(parse_percent),
    WithJsonSchema(
        {
            "anyOf": [{"type": "number"}, {"type": "string", "pattern": PERCENT_PATTERN}],
            "description": "percent; e.g. 0.1%",
        }
    ),
]


class FieldProblem(ValueError):
    """A problem that knows the path of the field it belongs to (relative to where it is
    raised: a validator of `workloads.web` raises ("utilization",), the loader adds the
    rest). Raised inside a pydantic validator it becomes that field's one-line error; raised
    while resolving a scenario, the same."""

    def __init__(self, loc: tuple[str | int, ...], msg: str) -> None:
        super().__init__(msg)
        self.loc = loc
        self.msg = msg


def path(loc: tuple[str | int, ...]) -> str:
    """("workloads", "web", "hosts", 0) → workloads.web.hosts[0]"""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out or "(top level)"
