"""Horovod's timeline read back: spans nest per tensor, times become scenario time, and the
file a stopped run leaves (array open, last event cut) still reads. The trace below is written
by hand in the shape Horovod 0.28 writes: `[` first, events joined by commas with several on
a line, cycle marks under pid 0 (whose process_name has no name), `]` only on a clean exit."""

from __future__ import annotations

import json

import pytest

from testbed.workloads.training.timeline import events, phases, spans

LINES = [
    {"name": "process_name", "ph": "M", "pid": 0, "args": {"start_time_since_epoch_in_micros": 1}},
    {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "grad.0"}},
    {"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "grad.1"}},
    {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 1000, "pid": 1},
    {"ph": "X", "name": "0", "ts": 1000, "pid": 1, "dur": 0},  # a rank's readiness tick
    {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 1500, "pid": 2},
    {"ph": "E", "ts": 3000, "pid": 1},
    {"ph": "E", "ts": 3000, "pid": 2},
    {"ph": "B", "name": "ALLREDUCE", "ts": 3000, "pid": 1},
    {"ph": "B", "name": "QUEUE", "ts": 3000, "pid": 1},
    {"ph": "E", "ts": 3500, "pid": 1},
    {"ph": "B", "name": "GLOO_ALLREDUCE", "ts": 3500, "pid": 1},
    {"ph": "E", "ts": 9000, "pid": 1},
    {"ph": "E", "ts": 9000, "pid": 1},
    {"ph": "i", "name": "CYCLE_START", "ts": 9500, "s": "g"},
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
        ("grad.0", "NEGOTIATE_ALLREDUCE", 0, 2000),
        ("grad.1", "NEGOTIATE_ALLREDUCE", 0, 1500),
        ("grad.0", "ALLREDUCE", 0, 6000),
        ("grad.0", "QUEUE", 1, 500),
        ("grad.0", "GLOO_ALLREDUCE", 1, 5500),
    }


def test_phases_are_in_scenario_time(tmp_path):
    # time_scale 100: 6000 µs on this machine's clock are 60 µs of the scenario
    p = phases(_write(tmp_path / "t.json", LINES), time_scale=100)
    assert p["tensors"] == 2
    assert p["spans"]["ALLREDUCE"] == {"count": 1, "mean_s": pytest.approx(60e-6),
                                       "total_s": pytest.approx(60e-6)}  # fmt: skip
    assert p["spans"]["NEGOTIATE_ALLREDUCE"]["count"] == 2
    assert p["spans"]["NEGOTIATE_ALLREDUCE"]["mean_s"] == pytest.approx(17.5e-6)


def test_a_cut_last_event_and_an_open_span_are_dropped(tmp_path):
    cut = _write(tmp_path / "t.json", [*LINES, {"ph": "B", "name": "ALLREDUCE", "ts": 9600,
                                                "pid": 2}], tail='{"ph": "E", "ts": 99')  # fmt: skip
    p = phases(cut)
    assert p["spans"]["ALLREDUCE"]["count"] == 1  # grad.1's never ended
