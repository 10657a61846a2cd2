"""Time dilation: a scenario written in the real network's units, run K = `time_scale` times
slower (Gupta et al., "To Infinity and Beyond: Time-Warped Network Emulation", NSDI 2006).

A 10 Gbit/s data center cannot be emulated at 10 Gbit/s on a 2-core machine; it can at
100 Mbit/s if every clock of the experiment runs 100 times slower. testbed owns the clocks of
its workloads, so it dilates them without touching the kernel:

  divided by K     link rates (host and fabric), and every rate a kind's `dilate` hook
                   names: web-search arrival rates, incast query rates, the ensemble's
                   preprocessing and training rates
  multiplied by K  synthetic compute per layer, Horovod's cycle time, the linkcheck's short
                   interval, duration, warm-up, cool-down, drain, link delay and jitter, each
                   instance's start and stop
  kept             bytes, packets, MTU, queue lengths in packets, models, flow sizes, the
                   fusion buffer, DDP's buckets, every ratio (R_cp_to_nw, utilization)

Not dilated: the kernel's own clocks. TCP's minimum RTO (200 ms) and delayed-ACK timer
(40 ms) run in real time, so at K = 100 they are 2 ms and 0.4 ms of scenario time;
Prometheus scrapes and stores on the real clock; the measured window's edges, setup and
teardown are real seconds.

`wall_overrides` turn a scenario into the one the machine runs (resolve.wall_scenario);
`scenario_summary` and `scenario_records` turn what it measured back into the scenario's own
time: durations divided by K, rates multiplied by K. The raw records keep both clocks (a
`*_wall_s` column beside each duration), the summary says `time_scale` and keeps the real
durations under `wall`.
"""

from __future__ import annotations

import copy
import csv
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.core.summary import CLASS
from testbed.workloads import kinds

if TYPE_CHECKING:
    from testbed.scenario.schema import Scenario


def wall_overrides(s: Scenario) -> dict[str, Any]:
    """The dotted-path values that turn `s` into the scenario the machine runs (K = 1: none):
    the run's own clocks and rates here, each workload instance's from its kind."""
    k = s.time_scale
    if k == 1:
        return {}
    t = s.topology
    out: dict[str, Any] = {
        "time_scale": 1,
        "duration": s.duration * k,
        "measure.warmup": s.measure.warmup * k,
        "measure.cooldown": s.measure.cooldown * k,
        "measure.drain": s.measure.drain * k,
        "topology.link_rate": round(t.link_rate / k),
        "topology.delay": t.delay * k,
        "topology.jitter": t.jitter * k,
        **({"topology.tcp_rto_min": t.tcp_rto_min * k} if t.tcp_rto_min else {}),
        **({"topology.tcp_rto_initial": t.tcp_rto_initial * k} if t.tcp_rto_initial else {}),
    }
    if t.fabric_rate is not None:
        out["topology.fabric_rate"] = round(t.fabric_rate / k)
    for name, w in s.workloads.items():
        out[f"workloads.{name}.start"] = w.start * k
        if w.stop is not None:
            out[f"workloads.{name}.stop"] = w.stop * k
        dilate = kinds.get(w.kind).dilate
        for field, value in (dilate(w, k) if dilate else {}).items():
            out[f"workloads.{name}.{field}"] = value
    return out


def wall_duration(s: Scenario) -> float:
    """How long the run's measured part takes on this machine's clock, in seconds."""
    return s.duration * s.time_scale


def _convert(node: Any, shape: Any, k: float) -> Any:
    """`node` with every number the template `shape` calls s divided by K, bps or hz times K."""
    if isinstance(shape, str):
        if isinstance(node, (int, float)) and not isinstance(node, bool):
            if shape == "s":
                return node / k
            if shape in ("bps", "hz"):
                return node * k
        return node
    if isinstance(shape, list) and isinstance(node, list):
        return [_convert(x, shape[0], k) for x in node]
    if isinstance(shape, dict) and isinstance(node, dict):
        out = {}
        for key, value in node.items():
            sub = shape.get(key, shape.get(CLASS, shape.get("*")))
            out[key] = value if sub is None else _convert(value, sub, k)
        return out
    return node


def scenario_summary(
    summary: dict[str, Any], k: float, templates: dict[str, Any]
) -> dict[str, Any]:
    """A run's summary (measured on the wall clock) in the scenario's own time: every number
    its template (`templates`: section → shape, expect.template_for) calls a duration divided
    by K, every rate multiplied by K. Counts, bytes, ratios and the machine's own figures
    (setup, teardown, drain, host_cpu, the window's wall-clock edges) are left as they are."""
    out = copy.deepcopy(summary)
    out["time_scale"] = k
    if k == 1:
        return out
    window = out.get("window") or {}
    out["wall"] = {
        "duration_s": out.get("duration_s"),
        "window": {
            key: window.get(key) for key in ("warmup_s", "cooldown_s", "span_s", "drain_limit_s")
        },
    }
    for key, shape in templates.items():
        if key in out and key != "time_scale":
            out[key] = _convert(out[key], shape, k)
    return out


def scenario_records(run_dir: Path, k: float, files: dict[str, tuple[str, ...]]) -> None:
    """The run's merged records (`files`: name in the run folder → its duration columns, from
    the kinds, record_files) with their durations in scenario time, each beside its wall-clock
    twin (`fct_s` and `fct_wall_s`); timestamps (`start`, `end`) stay wall-clock epochs, where
    the window's edges in summary.json are too. Done for K = 1 as well, so the columns do not
    depend on the scenario."""
    for name, cols in files.items():
        path = run_dir / name
        if not path.is_file():
            continue
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            fields = list(reader.fieldnames or [])
            rows = list(reader)
        present = [c for c in cols if c in fields]
        if not present or any(f"{c.removesuffix('_s')}_wall_s" in fields for c in present):
            continue  # nothing to do, or done already
        for c in present:
            fields.insert(fields.index(c) + 1, f"{c.removesuffix('_s')}_wall_s")
        for r in rows:
            for c in present:
                wall = r.get(c, "")
                r[f"{c.removesuffix('_s')}_wall_s"] = wall
                r[c] = f"{float(wall) / k:.9g}" if wall not in ("", None) else wall
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
        tmp.replace(path)


def record_files(s: Scenario) -> dict[str, tuple[str, ...]]:
    """Each workload instance's merged records and their duration columns (its kind's)."""
    out: dict[str, tuple[str, ...]] = {}
    for name, w in s.workloads.items():
        kind = kinds.get(w.kind)
        if kind.records is not None:
            out[kind.records(name)] = kind.record_durations
    return out
