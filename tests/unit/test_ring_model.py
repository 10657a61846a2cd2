"""docs/results/thesis-exact/ring_model.py, the fluid model the thesis-exact page holds the emulated ring
against, checked on cases worked out by hand: a free ring takes 2 (N - 1) steps of S / N bytes
at the link rate; a flow that holds one uplink for X µs at the start delays the whole lock-step
ring by X; one that takes half an uplink for the whole operation makes it twice as long (a ring
is as fast as its slowest link); a blocked downlink holds a step in the switch's queue."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "ring_model", ROOT / "docs/results/thesis-exact/ring_model.py"
)
assert _spec and _spec.loader
rm = importlib.util.module_from_spec(_spec)
sys.modules["ring_model"] = rm  # dataclasses look their module up
_spec.loader.exec_module(rm)

RATE = 10e9
HOSTS = ["h1", "h2", "h3", "h4"]
N = 20_000  # grid steps (µs)


def _flow(src: str, dst: str, start_us: float, lifetime_us: float, wire_us: float) -> dict:
    size = wire_us * 1e-6 * RATE / 8 * rm.PAYLOAD  # payload bytes whose frames take wire_us
    return {"src": src, "dst": dst, "size_bytes": str(round(size)),
            "start": str(start_us * 1e-6), "end": str((start_us + lifetime_us) * 1e-6)}  # fmt: skip


def _links(*flows: dict):
    return rm.links_of(list(flows), HOSTS, lo=0.0, n=N, k=1.0, rate=RATE)


def _op(links, m: int) -> tuple[int, float]:
    """An operation whose steps are m µs each on a free link: its duration and its bytes."""
    nbytes = len(HOSTS) * m * links.cap
    return links.ring(HOSTS, 100, nbytes) - 100, nbytes


def test_a_free_ring_takes_its_wire_time():
    links = _links()
    took, _ = _op(links, 50)
    assert took == 2 * (len(HOSTS) - 1) * 50  # 6 steps of 50 µs


def test_a_flow_on_one_uplink_at_the_start_delays_the_whole_ring_by_its_length():
    # h1's uplink is full from 100 µs to 400 µs: rank 0's first step waits 300 µs, and every
    # later step waits on it through the ring's chain
    links = _links(_flow("h1", "h3", 100, 300, 300))
    took, _ = _op(links, 50)
    assert took == pytest.approx(300 + 6 * 50, abs=2)


def test_half_an_uplink_for_the_whole_operation_doubles_it():
    links = _links(_flow("h2", "h4", 0, 10_000, 5_000))  # h2's uplink at half the rate throughout
    took, _ = _op(links, 50)
    # each of the 6 steps may end up to one grid step late (the flow's bytes are whole bytes)
    assert took == pytest.approx(2 * 6 * 50, abs=6)


def test_a_blocked_downlink_holds_the_step_in_the_switch_queue():
    # h3 → h2 holds h2's downlink (and h3's uplink) for 30 µs from the start: h1's first step
    # to h2 crosses h1's uplink on time and waits 30 µs in the queue; rank 2's first step waits
    # on h3's uplink the same 30 µs
    links = _links(_flow("h3", "h2", 100, 30, 30))
    took, _ = _op(links, 50)
    assert took == pytest.approx(30 + 6 * 50, abs=2)
    # the fluid tandem itself: 50 µs of bytes, downlink free only after 30 µs → 80 µs
    assert links.transfer(("up", "h1"), ("down", "h2"), 100, 50 * links.cap) - 100 == pytest.approx(
        80, abs=1
    )


def test_the_high_band_load_equals_the_flows_wire_bytes():
    links = _links(_flow("h1", "h2", 1000, 4000, 1000), _flow("h1", "h3", 2000, 1000, 1000))
    # h1's uplink: 1000 + 1000 µs of wire in the 20 ms grid (overlapping shares add up to 1.25
    # of the link in 2000-3000 µs, capped at the link rate: 0.25 × 1000 µs is lost to the cap)
    used = N - links.free[("up", "h1")][N]
    assert used == pytest.approx(2000 - 250, abs=2)


def test_with_free_links_the_event_models_ring_is_the_free_ring():
    """The iteration model plugs this ring into testbed's event model: on links the high band
    never uses it must give the event model's own ring time (at the payload's share of the
    rate, the model's framing), to within the grid's microsecond per step."""
    links = _links()
    ring = rm.PriorityRing(len(HOSTS), 0.0, links=links, hosts=tuple(HOSTS), origin=100)
    free = rm.Network(len(HOSTS), RATE, efficiency=rm.PAYLOAD)
    for nbytes in (1e6, 5_333_329, 8e6):
        assert ring.ring_time(nbytes, start=0.0) == pytest.approx(free.ring_time(nbytes), abs=6e-6)
    assert ring.ring_time(1e6, start=1.0) == float("inf")  # past the grid: never
