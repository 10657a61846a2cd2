"""Horovod's timeline read back (`timeline: true`): where a tensor's time went between
"ready on some rank" and "reduced everywhere", in the scenario's time.

Horovod (rank 0 only) writes a Chrome trace as it runs: one process per tensor, each reduction
a NEGOTIATE_ALLREDUCE span (from the first rank's readiness to the last's, then rank 0's
answer) followed by an ALLREDUCE span with nested activities (MEMCPY_IN_FUSION_BUFFER, the
Gloo ring itself, ...). Horovod closes the JSON array when it shuts down cleanly, but a killed
run leaves it open and may cut the last event, so the reader decodes one event after another
(json's raw_decode) and keeps what decoded. Nothing else reads the format; a library for it
would be larger than this module.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

TIMELINE_FILE = "horovod-timeline.json"
NEGOTIATE = "NEGOTIATE_ALLREDUCE"
ALLREDUCE = "ALLREDUCE"


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
    and end in the trace's microseconds. B and E nest per tensor (Chrome's rule)."""
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
            out.append(s)
    return out


def phases(path: Path, time_scale: float = 1.0) -> dict[str, Any]:
    """Per span name: how many, their mean and total in scenario seconds; and the tensors.
    The times are the trace's (this machine's clock) divided by the run's time_scale."""
    ss = spans(events(path))
    by: dict[str, list[float]] = defaultdict(list)
    for s in ss:
        by[s["name"]].append((s["end"] - s["start"]) / 1e6 / time_scale)
    stats = {n: {"count": len(d), "mean_s": sum(d) / len(d), "total_s": sum(d)}
             for n, d in sorted(by.items())}  # fmt: skip
    return {"tensors": len({s["tensor"] for s in ss}), "spans": stats}
