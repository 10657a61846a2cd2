import pytest

from testbed.core.stats import describe, percentile
from testbed.scenario.resolve import load_scenario_data
from testbed.scenario.topology import single_tor
from testbed.workloads.linkcheck.controller import goodput_bps, pairs


def test_goodput_from_samples():
    # 1 MB/s for 10 s, sampled every second
    samples = [[float(t), t * 1_000_000] for t in range(11)]
    assert goodput_bps(samples, 2.0, 8.0) == pytest.approx(8_000_000)
    assert goodput_bps(samples, 2.5, 3.5) == pytest.approx(8_000_000)  # interpolated
    assert goodput_bps(samples, 5.0, 5.0) == 0.0
    assert goodput_bps(samples, 9.0, 20.0) == pytest.approx(
        1_000_000 * 8 / 11
    )  # no bytes after 10 s


def test_percentiles():
    xs = list(range(1, 101))
    assert percentile(xs, 50) == pytest.approx(50.5)
    assert percentile(xs, 99) == pytest.approx(99.01)
    d = describe([1.0, 2.0, 3.0])
    assert d["count"] == 3 and d["mean"] == 2.0 and d["max"] == 3.0
    assert describe([])["mean"] is None


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("ring", [("h1", "h2"), ("h2", "h3"), ("h3", "h4"), ("h4", "h1")]),
        ("single", [("h1", "h2")]),
        ("incast", [("h2", "h1"), ("h3", "h1"), ("h4", "h1")]),
        ("outcast", [("h1", "h2"), ("h1", "h3"), ("h1", "h4")]),
    ],
)
def test_pairs(pattern, expected):
    topo = single_tor(load_scenario_data({"name": "t", "topology": {"hosts": 4}}, "s"), "a1b2c3")
    assert [(a.name, b.name) for a, b in pairs(topo, pattern)] == expected
