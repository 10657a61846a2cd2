"""What Horovod's ring would take under strict priority if the emulation were ideal: a fluid
model fed with a run's own web-search flows, against what the run's Horovod timeline measured.

    .venv/bin/python docs/results/thesis-exact/ring_model.py RUN_FOLDER...     (runs with the ring in "low")
    .venv/bin/python docs/results/thesis-exact/ring_model.py --ratios 2,4,8,16 RUN_FOLDER
        (the ideal iteration at other compute-to-network ratios, beside that run's own flows)

Every run gets the iteration model; a run made with `timeline: true` also its ring operations.

For docs/results/thesis-exact/README.md. Independent of testbed's code except for reading the run's
records (flows.csv, summary.json, the timeline through testbed.workloads.training.timeline).

The model, in scenario time on a 1 µs grid:
- Each link direction (a host's uplink, its downlink) carries the high band's web-search flows:
  a flow adds its wire bytes spread over its lifetime (start to end in flows.csv) to both links
  of its path, so the links' high-band load over the window equals the flows' wire bytes; the
  low band (the ring) gets what the high band leaves (strict priority), at most the link rate.
- A ring operation of S bytes on N ranks is 2 (N - 1) lock-step steps of S / N bytes: rank i
  sends step k to rank i + 1 once it holds step k - 1 from rank i - 1 (ns-3's partition ring,
  the thesis' 5.2.1, and Gloo's ring); a step crosses the sender's uplink, then the receiver's
  downlink, a fluid tandem with the switch's queue between them (1000 packets hold a step).
- Operations: each starts when the run's rank 0 started it; the model returns its duration.
- Iterations: testbed's event model (`testbed predict`: the job's layers and compute, Horovod's
  dynamic fusion, the barrier) run from the window's start with this ring in place of the free
  one, back to back through the window; its mean iteration is what an ideal emulator (or
  simulator) of the same scenario would measure alongside these very flows.
No TCP, no CPU, no coordination: what is left is the physics of strict priority and a ring.
"""

from __future__ import annotations

import csv
import itertools
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from testbed.scenario.resolve import load_scenario, with_overrides
from testbed.scenario.schema import Scenario
from testbed.workloads.training.model.predict import Network, Schedule, for_instance, simulate
from testbed.workloads.training.model.synthetic import layers_for
from testbed.workloads.training.timeline import TIMELINE_FILE, events, operations

DT = 1e-6  # the grid: 1 µs of scenario time
PAYLOAD = 1448 / 1514  # TCP payload per byte on the wire (1500-byte MTU, Ethernet framing)


@dataclass
class Links:
    """Per link direction, the cumulative capacity the high band left the low band, in grid
    steps (a float: a step is the link's full rate for 1 µs)."""

    free: dict[tuple[str, str], np.ndarray]
    cap: float  # payload bytes per grid step at the link rate

    def finish(self, link: tuple[str, str], t0: int, units: float) -> int:
        """First grid index by which `link` gave `units` steps of free capacity after t0."""
        f = self.free[link]
        return int(np.searchsorted(f, f[t0] + units - 1e-9, side="left"))

    def transfer(self, up: tuple[str, str], down: tuple[str, str], t0: int, nbytes: float) -> int:
        """nbytes from t0 through `up` then `down`: D(t) = Fd(t) + min_{s≤t} (U(s) - Fd(s))."""
        units = nbytes / self.cap
        end = self.finish(up, t0, units)
        last = len(self.free[down]) - 1
        while True:
            hi = min(end, last)
            u = np.minimum(self.free[up][t0 : hi + 1] - self.free[up][t0], units)
            fd = self.free[down][t0 : hi + 1] - self.free[down][t0]
            done = np.nonzero(fd + np.minimum.accumulate(u - fd) >= units - 1e-9)[0]
            if len(done):
                return t0 + int(done[0])
            if hi == last:
                return last
            end = hi + max(1000, int(units))  # the downlink still holds bytes: look further

    def ring(self, hosts: list[str], t0: int, nbytes: float) -> int:
        """The end of a lock-step ring allreduce of nbytes started at t0 (grid indices)."""
        n = len(hosts)
        holds = [t0] * n  # when rank i holds the data of the step it sends next
        uplink_done = [t0] * n
        for _ in range(2 * (n - 1)):
            got = [0] * n
            for i in range(n):
                j = (i + 1) % n
                start = max(holds[i], uplink_done[i])
                uplink_done[i] = got[j] = self.transfer(
                    ("up", hosts[i]), ("down", hosts[j]), start, nbytes / n
                )
            holds = got
        return max(holds)


def links_of(flows: list[dict[str, str]], hosts: list[str], lo: float, n: int, k: float,
             rate: float) -> Links:  # fmt: skip
    """The high band's fluid load of each link direction from the flows (times in Unix
    seconds on the run's clock; lo is grid index 0, k the run's time_scale)."""
    load = {(d, h): np.zeros(n + 1) for d in ("up", "down") for h in hosts}

    def idx(t: float) -> int:
        return min(n, max(0, int((t - lo) / k / DT)))

    for r in flows:
        if not r.get("end"):
            continue  # censored or failed: no end to spread its bytes to
        a, b = float(r["start"]), float(r["end"])
        wire = int(r["size_bytes"]) / PAYLOAD * 8 / rate  # scenario seconds on the wire
        share = min(1.0, wire / max((b - a) / k, DT))
        i = idx(a)
        j = min(n, max(i + 1, idx(b)))
        for link in (("up", r["src"]), ("down", r["dst"])):
            load[link][i] += share  # a difference array
            load[link][j] -= share
    free = {}
    for link, d in load.items():
        busy = np.minimum(1.0, np.cumsum(d)[:n])
        free[link] = np.concatenate(([0.0], np.cumsum(1.0 - busy)))
    return Links(free, rate / 8 * DT * PAYLOAD)


@dataclass(frozen=True)
class PriorityRing(Network):
    """The event model's network with this ring: a buffer's time depends on when it starts
    (seconds after grid index `origin`)."""

    links: Links | None = None
    hosts: tuple[str, ...] = ()
    origin: int = 0

    def ring_time(self, nbytes: float, start: float = 0.0) -> float:
        assert self.links is not None
        last = len(self.links.free[("up", self.hosts[0])]) - 1
        if not start < (last - self.origin) * DT:  # past the grid (or never)
            return float("inf")
        t0 = self.origin + round(start / DT)
        return (self.links.ring(list(self.hosts), t0, nbytes) - t0) * DT


def iterations_model(
    scenario: Scenario, links: Links, hosts: list[str], origin: int, span_s: float
) -> list[float]:
    """The ideal iterations through the window: the event model with the priority ring."""
    h = scenario.workloads.get("horovod")
    assert h is not None
    layers = layers_for(h)
    net = PriorityRing(len(hosts), 0.0, links=links, hosts=tuple(hosts), origin=origin)
    sched = Schedule(fusion_bytes=h.fusion_threshold, fusion="dynamic", barrier=h.barrier)
    compute = sum(x.forward_s + x.backward_s for x in layers)
    p = simulate(layers, net, sched, iterations=int(span_s / compute) + 2)  # more than fit
    ends = [t for t in p.forward_ends if t <= span_s]
    return [b - a for a, b in itertools.pairwise(ends)]


def model_run(run: Path, ratio: float | None = None) -> dict[str, float]:
    """The run's ideal iteration (and, with a timeline, its ideal ring operations); with
    `ratio`, the job's compute re-derived for that R_cp_to_nw, the flows the run's own."""
    scenario = load_scenario(run / "scenario.yaml")
    if ratio is not None:
        scenario = with_overrides(
            scenario,
            {
                "workloads.horovod.compute_to_network_ratio": ratio,
                "workloads.horovod.compute_time": None,
            },
        )
    s = json.loads((run / "summary.json").read_text())
    if s["horovod"]["class"] == s["websearch"]["class"]:
        raise SystemExit(
            f"{run}: the ring shares the web flows' band; the model is for a ring in a lower one"
        )
    k = float(s.get("time_scale") or 1.0)
    w0, w1 = s["window"]["start"], s["window"]["stop"]
    rate = s["links"][0]["rate_bps"]
    hosts = sorted({x["node"] for x in s["links"]}, key=lambda h: int(h.lstrip("h")))
    lo = w0 - 0.5 * k  # half a scenario second of margin on either side
    n = int((w1 + 0.5 * k - lo) / k / DT) + 1
    with open(run / "flows.csv", newline="") as f:
        links = links_of(list(csv.DictReader(f)), hosts, lo, n, k, rate)
    its = iterations_model(scenario, links, hosts, int((w0 - lo) / k / DT), (w1 - w0) / k)
    high = [x["classes"][s["websearch"]["class"]]["rate_bps"] / x["rate_bps"] for x in s["links"]]
    model_high = [
        1 - (links.free[(x["direction"], x["node"])][int((w1 - lo) / k / DT)]
             - links.free[(x["direction"], x["node"])][int((w0 - lo) / k / DT)]) / ((w1 - w0) / k / DT)
        for x in s["links"]
    ]  # fmt: skip
    out = {
        "iteration_measured_s": s["horovod"]["iteration_time_s"]["mean"],
        "iteration_model_s": statistics.mean(its) if its else float("nan"),
        "iterations_model": len(its),
        "alone_s": for_instance("horovod", scenario)["iteration_s"],
        "high_share_counters": statistics.mean(high),
        "high_share_model": statistics.mean(model_high),
    }
    if ratio is not None or not (run / "horovod" / TIMELINE_FILE).is_file():
        return out
    ops = [
        op
        for op in operations(events(run / "horovod" / TIMELINE_FILE))
        if w0 <= op[0] and op[1] <= w1
    ]
    measured, model, free_wire = [], [], []
    for a, b, nbytes in ops:
        t0 = int((a - lo) / k / DT)
        measured.append((b - a) / k)
        model.append((links.ring(hosts, t0, nbytes) - t0) * DT)
        free_wire.append(2 * (len(hosts) - 1) / len(hosts) * nbytes / links.cap * DT)
    return out | {
        "operations": len(ops),
        "measured_s": sum(measured),
        "model_s": sum(model),
        "free_wire_s": sum(free_wire),
        "correlation": float(np.corrcoef(measured, model)[0, 1]),
    }


def main(paths: list[str]) -> None:
    results = {f"{Path(p).parent.parent.name}/{Path(p).name}": model_run(Path(p)) for p in paths}
    print("| run | iteration measured | ideal (iterations) | measured / ideal | the job alone "
          "(`testbed predict`) | ideal / alone | high band: counters / model |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {1e3 * r['iteration_measured_s']:.1f} ms "
              f"| {1e3 * r['iteration_model_s']:.1f} ms ({r['iterations_model']}) "
              f"| {r['iteration_measured_s'] / r['iteration_model_s']:.2f} | {1e3 * r['alone_s']:.1f} ms "
              f"| {r['iteration_model_s'] / r['alone_s']:.2f} "
              f"| {100 * r['high_share_counters']:.1f} % / {100 * r['high_share_model']:.1f} % |")  # fmt: skip
    timed = {name: r for name, r in results.items() if "operations" in r}
    if not timed:
        return
    print("\n| run (timeline) | ring operations in the window | measured | ideal ring | free wire "
          "| measured / ideal | ideal / free wire | per-operation correlation |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for name, r in timed.items():
        print(f"| {name} | {r['operations']} | {r['measured_s']:.3f} s | {r['model_s']:.3f} s "
              f"| {r['free_wire_s']:.3f} s | {r['measured_s'] / r['model_s']:.2f} "
              f"| {r['model_s'] / r['free_wire_s']:.2f} | {r['correlation']:.2f} |")  # fmt: skip


def ratios(values: str, path: str) -> None:
    print(f"beside the flows of {path}:\n")
    print(
        "| R | ideal iteration (iterations) | the job alone (`testbed predict`) | ideal / alone |"
    )
    print("|---|---|---|---|")
    for r in (float(x) for x in values.split(",")):
        m = model_run(Path(path), r)
        print(f"| {r:g} | {1e3 * m['iteration_model_s']:.1f} ms ({m['iterations_model']}) "
              f"| {1e3 * m['alone_s']:.1f} ms | {m['iteration_model_s'] / m['alone_s']:.3f} |")  # fmt: skip


if __name__ == "__main__":
    if sys.argv[1:2] == ["--ratios"]:
        ratios(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1:])
