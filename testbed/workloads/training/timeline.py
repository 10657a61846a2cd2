"""Horovod's timeline read back (`timeline: true`): where rank 0's iterations spent the time
the network cost them, in the scenario's time.

Horovod (rank 0 only) writes a Chrome trace as it runs: one process per tensor, each reduction
a NEGOTIATE_ALLREDUCE span followed by an ALLREDUCE span (the operation: fusion-buffer copies
and the Gloo ring), and with HOROVOD_TIMELINE_MARK_CYCLES an instant at the start of every
background cycle. A cycle first coordinates (every rank says which tensors it has ready; the
collective waits for every rank's background thread), then performs the operations agreed on,
one after another. So per cycle, "coordination" is cycle start → its first operation, and
"operations" is the union of the ALLREDUCE spans. (A NEGOTIATE span is not the coordination's
cost: it runs from the first rank's readiness until the response, which includes waiting for
the operations ahead of it.)

Horovod closes the JSON array when it shuts down cleanly, but a killed run leaves it open and
may cut the last event, so the reader decodes one event after another (json's raw_decode) and
keeps what decoded. Nothing else reads the format; a library for it would be larger than this
module.
"""

from __future__ import annotations

import bisect
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

TIMELINE_FILE = "horovod-timeline.json"
ALLREDUCE = "ALLREDUCE"
CYCLE_START = "CYCLE_START"
FUSED_WITHIN_S = 1e-3  # the spans of one fused operation start within this (real seconds)


def events(path: Path) -> list[dict[str, Any]]:
    """The trace's events, in file order; a cut last event (a run stopped mid-write) is
    dropped. Horovod writes several events to a line, so the text is decoded object by object."""
    text = path.read_text(errors="replace")
    dec = json.JSONDecoder()
    out: list[dict[str, Any]] = []
    i = text.find("[") + 1
    while True:
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        if i >= len(text) or text[i] == "]":
            return out
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            return out  # the cut tail
        if isinstance(obj, dict):
            out.append(obj)


def spans(evs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every closed B/E span: tensor, name, depth (0: the phase, 1+: its activities), start
    and end in the trace's microseconds, and the closing event's args (an ALLREDUCE's dtype
    and shape). B and E nest per tensor (Chrome's rule)."""
    names = {e["pid"]: e["args"]["name"] for e in evs  # pid 0 (the cycles) has no name
             if e.get("ph") == "M" and e.get("name") == "process_name" and "name" in e.get("args", {})}  # fmt: skip
    open_: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    out = []
    for e in evs:
        ph, pid = e.get("ph"), e.get("pid")
        if ph == "B":
            open_[pid].append({"tensor": names.get(pid, str(pid)), "name": e.get("name", ""),
                               "depth": len(open_[pid]), "start": float(e["ts"])})  # fmt: skip
        elif ph == "E" and open_[pid]:
            s = open_[pid].pop()
            s["end"] = float(e["ts"])
            s["args"] = e.get("args", {})
            out.append(s)
    return out


def epoch_of(evs: list[dict[str, Any]]) -> float:
    """The trace's zero as a Unix time (Horovod records it in pid 0's metadata)."""
    for e in evs:
        us = e.get("args", {}).get("start_time_since_epoch_in_micros")
        if e.get("ph") == "M" and us is not None:
            return float(us) / 1e6
    raise ValueError("no start_time_since_epoch_in_micros in the timeline")


def _nbytes(args: dict[str, Any]) -> int:
    dims = [int(x) for x in str(args.get("shape", "[]")).strip("[]").split(",") if x.strip()]
    width = 8 if args.get("dtype") in ("float64", "int64") else 2 if "16" in str(args.get("dtype")) else 4  # fmt: skip
    return width * math.prod(dims)


def operations(evs: list[dict[str, Any]]) -> list[tuple[float, float, int]]:
    """Rank 0's operations as (start, end, bytes), Unix times on this machine's clock: the
    ALLREDUCE spans of tensors fused into one operation start together and are merged."""
    t0 = epoch_of(evs)
    ops: list[list[float]] = []
    for s in sorted((s for s in spans(evs) if s["name"] == ALLREDUCE and s["depth"] == 0),
                    key=lambda s: s["start"]):  # fmt: skip
        a, b = t0 + s["start"] / 1e6, t0 + s["end"] / 1e6
        if ops and a - ops[-1][0] < FUSED_WITHIN_S:
            ops[-1][1] = max(ops[-1][1], b)
            ops[-1][2] += _nbytes(s["args"])
        else:
            ops.append([a, b, _nbytes(s["args"])])
    return [(a, b, int(n)) for a, b, n in ops]


def cycles(evs: list[dict[str, Any]]) -> list[float]:
    """The background cycles' start times (Unix, this machine's clock)."""
    t0 = epoch_of(evs)
    return sorted(t0 + e["ts"] / 1e6 for e in evs if e.get("ph") == "i" and e.get("name") == CYCLE_START)  # fmt: skip


def _overlap(iv: list[tuple[float, float]], a: float, b: float) -> float:
    return sum(max(0.0, min(y, b) - max(x, a)) for x, y in iv)


def breakdown(
    path: Path, iterations: list[tuple[float, float]], time_scale: float = 1.0
) -> dict[str, Any]:
    """Per iteration of rank 0 (its (start, end) Unix times: the measured ones), the scenario
    seconds spent in operations and in coordination, and the operations per iteration; per
    cycle that performed any, its coordination's mean and p99. Times are divided by
    time_scale."""
    evs = events(path)
    ops = operations(evs)
    cyc = cycles(evs)
    starts = [a for a, _, _ in ops]
    coord: list[tuple[float, float]] = []
    for c, nxt in zip(cyc, [*cyc[1:], math.inf], strict=True):
        i = bisect.bisect_left(starts, c)
        if i < len(starts) and starts[i] < nxt:
            coord.append((c, starts[i]))
    busy = [(a, b) for a, b, _ in ops]
    k = time_scale
    per = [(_overlap(busy, a, b) / k, _overlap(coord, a, b) / k,
            sum(1 for x in starts if a <= x < b)) for a, b in iterations]  # fmt: skip
    lo, hi = (
        (min(a for a, _ in iterations), max(b for _, b in iterations)) if iterations else (0, 0)
    )
    cd = sorted((y - x) / k for x, y in coord if lo <= x < hi)
    n = len(per)
    return {
        "iterations": n,
        "operations_s": sum(p[0] for p in per) / n if n else None,
        "coordination_s": sum(p[1] for p in per) / n if n else None,
        "operations": sum(p[2] for p in per) / n if n else None,
        "coordination_per_cycle_s": {
            "mean": sum(cd) / len(cd) if cd else None,
            "p99": cd[min(len(cd) - 1, int(0.99 * len(cd)))] if cd else None,
        },
    }
