"""Units people write in scenarios: rates (`100mbit`), durations (`10us`), sizes (`6.28MB`).

Rates follow tc's conventions for the bit units (k = 1000) but refuse tc's `bps` family,
which means *bytes* per second to tc and bits per second to most people; an ambiguous
unit is worse than an error. Sizes accept decimal (KB, MB, GB) and binary (KiB, MiB, GiB)
prefixes. A bare number is bits/s, seconds or bytes respectively. Units are read in any case
(`10Gbit`, `64kb`, `2MS`); a rate may end in `/s` (`100mbit/s`).

The JSON Schema patterns below (RATE_PATTERN, ...) are built from the same unit tables as the
parsers, so an editor checking a scenario against `testbed schema` accepts exactly the
spellings `testbed` reads.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

# A number as people write it (1, 1.5, .5, 1e9, 2.5e-3); plain regex syntax that Python and
# ECMA-262 (JSON Schema) read alike, so the schema patterns below use it too.
_UNSIGNED = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
_NUMBER = rf"[-+]?{_UNSIGNED}"
_PATTERN = re.compile(rf"^\s*(?P<full>{_NUMBER})\s*(?P<unit>[A-Za-zµ/]*)\s*$")

RATE_UNITS = {
    "": 1,
    "bit": 1,
    "kbit": 10**3,
    "mbit": 10**6,
    "gbit": 10**9,
    "tbit": 10**12,
}
DURATION_UNITS = {
    "": 1.0,
    "s": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "µs": 1e-6,
    "ns": 1e-9,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
}
SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
}
# What a rate's unit may be spelled as (lower case): a RATE_UNITS key, optionally with "/s".
RATE_SPELLINGS = {"": 1} | {u + s: v for u, v in RATE_UNITS.items() if u for s in ("", "/s")}


def _split(text: str | float | int, what: str) -> tuple[float, str]:
    if isinstance(text, bool):
        raise ValueError(f"expected a {what}, got {text!r}")
    if isinstance(text, (int, float)):
        value, unit = float(text), ""
    else:
        m = _PATTERN.match(str(text))
        if not m:
            raise ValueError(f"cannot read {text!r} as a {what}")
        value, unit = float(m.group("full")), m.group("unit")
    if not math.isfinite(value):  # YAML's .inf and .nan, or 1e999
        raise ValueError(f"expected a finite {what}, got {text!r}")
    return value, unit


def parse_rate(text: str | float | int) -> int:
    """Return bits per second."""
    value, unit = _split(text, "rate (e.g. 100mbit, 10Gbit)")
    key = unit.lower()
    if key.endswith("bps"):
        raise ValueError(
            f"{text!r}: 'bps' units are ambiguous (tc reads them as bytes/s); "
            "write bits, e.g. 100mbit or 10gbit"
        )
    if key not in RATE_SPELLINGS:
        raise ValueError(
            f"{text!r}: unknown rate unit {unit!r}; write e.g. 100mbit, 10Gbit or 1.5gbit/s "
            "(bit, kbit, mbit, gbit or tbit, in any case)"
        )
    bits = value * RATE_SPELLINGS[key]
    if bits < 0 or (isinstance(text, str) and text.strip().startswith("-")):
        raise ValueError(f"{text!r}: a rate cannot be negative")
    return round(bits)


def parse_duration(text: str | float | int) -> float:
    """Return seconds."""
    value, unit = _split(text, "duration (e.g. 10us, 2ms, 60s)")
    key = unit if unit == "µs" else unit.lower()
    if key not in DURATION_UNITS:
        raise ValueError(
            f"{text!r}: unknown time unit {unit!r}; write e.g. 10us, 2ms or 60s "
            "(ns, us, µs, ms, s, m, min or h)"
        )
    return value * DURATION_UNITS[key]


def parse_size(text: str | float | int) -> int:
    """Return bytes."""
    value, unit = _split(text, "size (e.g. 1500B, 64KB, 6.28MB)")
    key = unit.lower()
    if key not in SIZE_UNITS:
        raise ValueError(
            f"{text!r}: unknown size unit {unit!r}; write e.g. 1500B, 64KB or 1MiB "
            "(B, KB, MB, GB, KiB, MiB or GiB, in any case)"
        )
    return round(value * SIZE_UNITS[key])


def parse_percent(text: str | float | int) -> float:
    """Return a percentage (0–100). `0.1%` and `0.1` both mean one packet in a thousand."""
    if isinstance(text, str) and text.strip().endswith("%"):
        text = text.strip()[:-1]
    value, unit = _split(text, "percentage (e.g. 0.1%)")
    if unit:
        raise ValueError(f"{text!r}: a percentage takes no unit but '%'")
    return value


# JSON Schema (ECMA-262) patterns for the string forms, from the same number syntax and unit
# tables as the parsers, units in any case.


def _any_case(unit: str) -> str:
    return "".join(
        f"[{c.lower()}{c.upper()}]" if c.isascii() and c.isalpha() else re.escape(c) for c in unit
    )


def _js_pattern(spellings: Iterable[str], sign: str) -> str:
    units = sorted((u for u in spellings if u), key=lambda u: (-len(u), u))
    alternatives = "|".join(_any_case(u) for u in units)
    return rf"^\s*{sign}{_UNSIGNED}\s*(?:{alternatives})?\s*$"


RATE_PATTERN = _js_pattern(RATE_SPELLINGS, r"\+?")  # a negative rate is refused
DURATION_PATTERN = _js_pattern(DURATION_UNITS, "[-+]?")
SIZE_PATTERN = _js_pattern(SIZE_UNITS, "[-+]?")
PERCENT_PATTERN = rf"^\s*[-+]?{_UNSIGNED}\s*%?\s*$"


def _exact(value: int, scale: int, decimals: int = 3) -> str | None:
    """`value / scale` with at most `decimals` decimals, if that is exact."""
    if value < scale or (value * 10**decimals) % scale:
        return None
    return f"{value / scale:.{decimals}f}".rstrip("0").rstrip(".")


def format_rate(bits: int) -> str:
    for unit in ("tbit", "gbit", "mbit", "kbit"):
        text = _exact(bits, RATE_UNITS[unit])
        if text is not None:
            return f"{text}{unit}"
    return f"{bits}bit"


def format_rate_about(bits: float) -> str:
    """A measured or derived rate to 3 significant figures in the largest unit it reaches
    (36.9 Mbit/s), where format_rate writes only values its units divide exactly."""
    for unit, scale in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if abs(bits) >= scale:
            return f"{bits / scale:.3g} {unit}"
    return f"{bits:.3g} bit/s"


def format_duration(seconds: float) -> str:
    if seconds == 0:
        return "0s"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.6g}{unit}"
    return f"{seconds / 1e-9:.6g}ns"


def format_size(nbytes: int) -> str:
    for unit in ("GB", "MB", "KB"):
        text = _exact(nbytes, SIZE_UNITS[unit.lower()], decimals=2)
        if text is not None:
            return f"{text}{unit}"
    return f"{nbytes}B"
