import random
import re

import pytest

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


@pytest.mark.parametrize(
    ("text", "bits"),
    [
        ("100mbit", 100_000_000),
        ("10gbit", 10**10),
        ("10Gbit", 10**10),
        ("1.5kbit", 1500),
        ("64000", 64000),
        (1000, 1000),
        ("2.5 gbit", 2_500_000_000),
        ("100mbit/s", 100_000_000),
        ("10gbit", 10**10),
        ("10GBIT", 10**10),
        ("1.5Mbit", 1_500_000),
        ("1.5MBit/S", 1_500_000),
        (" +2kbit ", 2000),
        ("1e9", 10**9),
        ("2.5e3kbit", 2_500_000),
    ],
)
def test_rates(text, bits):
    assert parse_rate(text) == bits


@pytest.mark.parametrize("text", ["100mbps", "100Mbps", "10gbps", "1bps"])
def test_bps_is_refused_as_ambiguous(text):
    with pytest.raises(ValueError, match="ambiguous"):
        parse_rate(text)


@pytest.mark.parametrize(
    "text", ["fast", "100 furlongs", "", "-5mbit", "-0mbit", "mbit", "100ps", "100/s", "5mbitps"]
)
def test_bad_rates(text):
    with pytest.raises(ValueError):
        parse_rate(text)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10us", 10e-6),
        ("2ms", 0.002),
        ("60s", 60.0),
        ("1.5s", 1.5),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("250ns", 250e-9),
        ("10µs", 10e-6),
        (3, 3.0),
        ("0", 0.0),
    ],
)
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [
        ("6.28MB", 6_280_000),
        ("64KB", 64_000),
        ("1MiB", 1 << 20),
        ("1500B", 1500),
        ("1500", 1500),
        ("5333329", 5_333_329),
        ("1GB", 10**9),
        ("2KiB", 2048),
        ("64kb", 64_000),
        ("64Kb", 64_000),
        ("1.5mib", 1_572_864),
        ("1500b", 1500),
    ],
)
def test_sizes(text, nbytes):
    assert parse_size(text) == nbytes


def test_percent():
    assert parse_percent("0.1%") == pytest.approx(0.1)
    assert parse_percent(2) == 2
    with pytest.raises(ValueError):
        parse_percent("3ms")


@pytest.mark.parametrize(
    "bits", [100_000_000, 10**10, 1500, 2_500_000_000, 64_000, 12345, 123_456_789_000]
)
def test_rate_round_trip(bits):
    assert parse_rate(format_rate(bits)) == bits


@pytest.mark.parametrize("secs", [10e-6, 0.002, 60.0, 0.0, 1.25])
def test_duration_round_trip(secs):
    assert parse_duration(format_duration(secs)) == pytest.approx(secs)


@pytest.mark.parametrize("n", [6_280_000, 1500, 5_333_329, 10**9])
def test_size_round_trip(n):
    assert parse_size(format_size(n)) == n


# The JSON Schema patterns (what editors check against `testbed schema`) accept exactly the
# strings the parsers read: spot checks, then a seeded fuzz over the characters units use.

PARSERS = [
    (parse_rate, RATE_PATTERN),
    (parse_duration, DURATION_PATTERN),
    (parse_size, SIZE_PATTERN),
    (parse_percent, PERCENT_PATTERN),
]


def _reads(parse, text: str) -> bool:
    try:
        parse(text)
    except ValueError as e:
        # Magnitude is no part of a pattern: 1e999 has the syntax, and only its value is refused.
        return "finite" in str(e)
    return True


@pytest.mark.parametrize(
    ("parse", "pattern", "text", "ok"),
    [
        (parse_rate, RATE_PATTERN, "10Gbit", True),
        (parse_rate, RATE_PATTERN, "10gbit", True),
        (parse_rate, RATE_PATTERN, "1.5Mbit", True),
        (parse_rate, RATE_PATTERN, "100mbit/s", True),
        (parse_rate, RATE_PATTERN, "100000", True),
        (parse_rate, RATE_PATTERN, "100mbps", False),
        (parse_rate, RATE_PATTERN, "10 parsecs", False),
        (parse_rate, RATE_PATTERN, "-5mbit", False),
        (parse_size, SIZE_PATTERN, "64kb", True),
        (parse_size, SIZE_PATTERN, "64KB", True),
        (parse_size, SIZE_PATTERN, "1MiB", True),
        (parse_size, SIZE_PATTERN, "6.28MB", True),
        (parse_size, SIZE_PATTERN, "64 kbit", False),
        (parse_duration, DURATION_PATTERN, "10µs", True),
        (parse_duration, DURATION_PATTERN, "2MS", True),
        (parse_duration, DURATION_PATTERN, "1min", True),
        (parse_duration, DURATION_PATTERN, "1 fortnight", False),
        (parse_percent, PERCENT_PATTERN, "0.1%", True),
        (parse_percent, PERCENT_PATTERN, "0.1 %", True),
        (parse_percent, PERCENT_PATTERN, "3ms", False),
    ],
)
def test_patterns_agree_with_parsers(parse, pattern, text, ok):
    assert _reads(parse, text) is ok
    assert bool(re.search(pattern, text)) is ok


def _fuzz(rng: random.Random, pieces: list[str]) -> str:
    return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 7)))


@pytest.mark.parametrize(("parse", "pattern"), PARSERS)
def test_patterns_agree_with_parsers_fuzzed(parse, pattern):
    rng = random.Random(7)
    pieces = [
        *"0123456789.eE+- %/µ",
        *"bitkmgtsunhBITKMGTSUNH",
        "bit", "Gbit", "kb", "KiB", "MB", "ms", "us", "min", "/s", "ps", "bps", "1", "5.",
    ]  # fmt: skip
    accepted = 0
    for _ in range(20_000):
        text = _fuzz(rng, pieces)
        reads = _reads(parse, text)
        accepted += reads
        assert bool(re.search(pattern, text)) is reads, (text, reads)
    assert accepted > 200  # the fuzz does reach valid spellings


@pytest.mark.parametrize("parse", [parse_rate, parse_duration, parse_size, parse_percent])
@pytest.mark.parametrize("value", ["1e999", float("inf"), float("-inf"), float("nan")])
def test_infinite_values_are_refused_not_crashed(parse, value):
    with pytest.raises(ValueError, match="finite"):
        parse(value)
