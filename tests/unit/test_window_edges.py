"""The link rates' window edges: a stop edge read after the load stopped is said, not hidden."""

import logging

import pytest

from testbed.core.window import Window
from testbed.run.live import late_edges


def snap(t: float):
    return (t, [])


def test_prompt_edges_are_quiet(caplog):
    w = Window(t0=100.0, duration=5.0, warmup=1.0, cooldown=0.0, drain=0.0)
    with caplog.at_level(logging.WARNING):
        assert late_edges(w, snap(101.004), snap(105.02)) == [0.004, 0.02]
    assert not caplog.records


def test_a_stop_edge_read_past_the_load_is_warned(caplog):
    """CI saw 44.4 of 50 Mbit/s: a read 0.5 s after a load that stopped at the window's end
    spreads 4 s of bytes over 4.5 s (0.889, the measured ratio)."""
    w = Window(t0=100.0, duration=5.0, warmup=1.0, cooldown=0.0, drain=0.0)
    with caplog.at_level(logging.WARNING):
        late = late_edges(w, snap(101.0), snap(105.5))
    assert late == [0.0, 0.5]
    (rec,) = caplog.records
    assert "0.50 s after the load stopped" in rec.getMessage()
    assert "11 %" in rec.getMessage()  # 0.5 / 4.5, hand-computed
    assert "measure.cooldown" in rec.getMessage()


@pytest.mark.parametrize("read_at", [104.5, 104.9])
def test_a_cooldown_covers_a_late_read(caplog, read_at):
    w = Window(t0=100.0, duration=5.0, warmup=1.0, cooldown=1.0, drain=0.0)
    with caplog.at_level(logging.WARNING):
        late_edges(w, snap(101.0), snap(read_at))
    assert not caplog.records


def test_a_start_edge_read_seconds_late_says_the_machine_stood_still():
    """2026-12-07: a start edge read 6.85 s late (steal 0 %) and nothing said it; the
    workloads' own edges were 14 s late. Said through the run's warnings, with the time left."""
    w = Window(t0=100.0, duration=30.0, warmup=10.0, cooldown=0.0, drain=0.0)
    said: list[str] = []
    assert late_edges(w, snap(116.85), snap(130.0), said.append) == [6.85, 0.0]
    (msg,) = said
    assert "6.85 s after the measured window began" in msg and "13.2 s after" in msg
    assert late_edges(w, snap(110.9), snap(130.0), said.append) == [0.9, 0.0] and len(said) == 1
