"""Horovod's timeline read back: spans nest per tensor, fused operations merge with their bytes,
each iteration splits into operations and coordination in scenario time, and the file a
stopped run leaves (array open, last event cut) still reads. The trace below is written by hand
in the shape Horovod 0.28 writes: `[` first, events joined by commas with several on a line,
cycle marks under pid 0 (whose process_name carries the trace's zero as a Unix time), `]` only
on a clean exit. Expected values are worked out by hand from the trace."""

from __future__ import annotations

import json
from functools import partial

import pytest

from testbed.workloads.training.timeline import breakdown, cycles, events, operations, spans

ZERO_US = 1_000_000_000_000_000  # the trace's zero: Unix time 1e9 s


def _cycle(ts):
    return {"ph": "i", "name": "CYCLE_START", "ts": ts, "s": "g"}


LINES = [
    {
        "name": "process_name",
        "ph": "M",
        "pid": 0,
        "args": {"start_time_since_epoch_in_micros": ZERO_US},
    },
    {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "allreduce.grad.1"}},
    {"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "allreduce.grad.0"}},
    _cycle(0),
    # cycle 1 at 1000 µs: both gradients negotiated, then reduced in ONE fused operation
    _cycle(1000),
    {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 500, "pid": 1},
    {"ph": "X", "name": "0", "ts": 500, "pid": 1, "dur": 0},  # a rank's readiness tick
    {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 600, "pid": 2},
    {"ph": "E", "ts": 1300, "pid": 1},
    {"ph": "E", "ts": 1300, "pid": 2},
    {"ph": "B", "name": "ALLREDUCE", "ts": 1300, "pid": 1},
    {"ph": "B", "name": "ALLREDUCE", "ts": 1301, "pid": 2},
    {"ph": "B", "name": "GLOO_ALLREDUCE", "ts": 1302, "pid": 1},
    {"ph": "E", "ts": 5000, "pid": 1},
    {"ph": "E", "ts": 5300, "pid": 1, "args": {"dtype": "float32", "shape": "[1000, 2]"}},
    {"ph": "E", "ts": 5300, "pid": 2, "args": {"dtype": "float32", "shape": "[500]"}},
    # cycle 2 at 5300 µs: idle (no operation before the next cycle)
    _cycle(5300),
    # cycle 3 at 7000 µs: grad.0 alone, coordination 2000 µs
    _cycle(7000),
    {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 6500, "pid": 2},
    {"ph": "E", "ts": 9000, "pid": 2},
    {"ph": "B", "name": "ALLREDUCE", "ts": 9000, "pid": 2},
    {"ph": "E", "ts": 12000, "pid": 2, "args": {"dtype": "float32", "shape": "[500]"}},
    _cycle(12000),
]


def _write(path, lines, tail="]"):
    # a newline after every third event, none between the others (Horovod's own layout)
    body = "".join(json.dumps(e) + (",\n" if k % 3 == 2 else ",") for k, e in enumerate(lines))
    path.write_text("[\n" + body.rstrip(",\n") + ("," if tail != "]" else "") + tail)
    return path


def test_spans_nest_per_tensor(tmp_path):
    ss = spans(events(_write(tmp_path / "t.json", LINES)))
    got = {(s["tensor"], s["name"], s["depth"], s["end"] - s["start"]) for s in ss}
    assert got == {
        ("allreduce.grad.1", "NEGOTIATE_ALLREDUCE", 0, 800),
        ("allreduce.grad.0", "NEGOTIATE_ALLREDUCE", 0, 700),
        ("allreduce.grad.1", "ALLREDUCE", 0, 4000),
        ("allreduce.grad.1", "GLOO_ALLREDUCE", 1, 3698),
        ("allreduce.grad.0", "ALLREDUCE", 0, 3999),
        ("allreduce.grad.0", "NEGOTIATE_ALLREDUCE", 0, 2500),
        ("allreduce.grad.0", "ALLREDUCE", 0, 3000),
    }


def test_fused_tensors_are_one_operation_with_their_bytes(tmp_path):
    evs = events(_write(tmp_path / "t.json", LINES))
    ops = operations(evs)
    # 2000 + 500 floats fused, then 500 floats alone; times on the Unix clock
    assert [(round(a - 1e9, 6), round(b - 1e9, 6), n) for a, b, n in ops] == [
        (0.0013, 0.0053, 10_000),
        (0.009, 0.012, 2_000),
    ]
    assert [round(c - 1e9, 6) for c in cycles(evs)] == [0.0, 0.001, 0.0053, 0.007, 0.012]


def test_an_iteration_splits_into_operations_and_coordination(tmp_path):
    path = _write(tmp_path / "t.json", LINES)
    approx = partial(pytest.approx, rel=1e-3)  # Unix times near 1e9 s: doubles keep ~0.2 µs
    # one iteration over the whole trace, time_scale 100: operations 4000 + 3000 µs, coordination
    # 300 µs (cycle 1: 1000 → 1300) + 2000 µs (cycle 3: 7000 → 9000); the idle cycle counts
    # for nothing. Divided by 100.
    b = breakdown(path, [(1e9, 1e9 + 0.012)], time_scale=100)
    assert b["iterations"] == 1 and b["operations"] == 2
    assert b["operations_s"] == approx(70e-6)
    assert b["coordination_s"] == approx(23e-6)
    assert b["coordination_per_cycle_s"]["mean"] == approx(11.5e-6)
    assert b["coordination_per_cycle_s"]["p99"] == approx(20e-6)
    # an iteration that covers only the second half sees only what happened in it
    half = breakdown(path, [(1e9 + 0.006, 1e9 + 0.012)], time_scale=1)
    assert half["operations_s"] == approx(0.003) and half["operations"] == 1
    assert half["coordination_s"] == approx(0.002)


def test_a_cut_last_event_and_an_open_span_are_dropped(tmp_path):
    cut = _write(tmp_path / "t.json", [*LINES, {"ph": "B", "name": "ALLREDUCE", "ts": 12500,
                                                "pid": 1}], tail='{"ph": "E", "ts": 99')  # fmt: skip
    evs = events(cut)
    assert evs[-1] == {"ph": "B", "name": "ALLREDUCE", "ts": 12500, "pid": 1}
    assert len(operations(evs)) == 2  # grad.1's second reduction never ended


def test_a_trace_without_its_zero_is_refused(tmp_path):
    with pytest.raises(ValueError, match="start_time_since_epoch"):
        operations(events(_write(tmp_path / "t.json", LINES[1:])))
