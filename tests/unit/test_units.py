import pytest

from testbed.units import (
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
    ],
)
def test_rates(text, bits):
    assert parse_rate(text) == bits


@pytest.mark.parametrize("text", ["100mbps", "100Mbps", "10gbps", "1bps"])
def test_bps_is_refused_as_ambiguous(text):
    with pytest.raises(ValueError, match="ambiguous"):
        parse_rate(text)


@pytest.mark.parametrize("text", ["fast", "100 furlongs", "", "-5mbit", "mbit"])
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
