"""Print the tables of docs/results/thesis-exact/README.md (Markdown) from the cells' sweep folders
(one, or several whose runs are merged: seeds or cells run as separate sweeps).

    .venv/bin/python docs/results/thesis-exact/thesis_exact_tables.py runs/thesis-exact [MORE SWEEPS...]

Per cell: "low" against "same" per seed and their mean, beside the thesis (its text, chapter 5),
the same cells before the queues filled (2026-11-25) and the 1/100 grid
(docs/results/thesis-grid/README.md, mean over its seeds); the small flows split in
thirds by FCT; and the physics of every run, computed here from its records and kernel counters
(flows.csv, iterations.csv, summary.json's links), not from testbed's own checks.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

# cell → (small, medium, large, iteration): the thesis' words, and the 1/100 grid's mean Δ
THESIS = {
    "r16-3.125%": ("about −40 % (seeds up to −73 %)", "", "about −10 %", "no degradation"),
    "r4-12.5%": ("up to −25 %", "", "up to −35 %", "+15.6 %"),
    "r2-12.5%": ("about −35 %", "", "about −35 %", "+23.1 %"),
}
GRID = {
    "r16-3.125%": ("−14 %", "−1 %", "−2 %", "−1 %"),
    "r4-12.5%": ("+5 %", "−1 %", "−1 %", "+26 %"),
    "r2-12.5%": ("−2 %", "−3 %", "−1 %", "+36 %"),
}
# the same cells before 2026-11-26 (mean Δ of seeds 1 and 2): queues that never filled (TCP
# Small Queues held every sender, docs/network.md) and ns-3's 1 s RTO floor
BEFORE = {
    "r16-3.125%": ("−41 %", "−13 %", "−7 %", "+0.0 %"),
    "r4-12.5%": ("−53 %", "−49 %", "−41 %", "+17.0 %"),
    "r2-12.5%": ("−74 %", "−72 %", "−62 %", "+66.2 %"),
}
CLASSES = ("small", "medium", "large")


def load(sweep: Path) -> dict[str, dict[str, dict[str, Path]]]:
    """cell → seed → scheme → run folder (finished runs only)."""
    out: dict[str, dict[str, dict[str, Path]]] = defaultdict(lambda: defaultdict(dict))
    for p in sorted((sweep / "runs").iterdir()):
        point, summary = p / "point.json", p / "summary.json"
        if (
            not (point.is_file() and summary.is_file())
            or ".failed-" in p.name
            or ".stale-" in p.name
        ):
            continue
        if json.loads(summary.read_text()).get("status") != "ok":
            continue
        lab = json.loads(point.read_text())["labels"]
        out[lab["cell"]][lab["seed"]][lab["scheme"]] = p
    return out


def walls(sweep: Path) -> dict[str, str]:
    """run folder name → the whole run's wall time (s) as the sweep measured it: sweep.csv's,
    or point.json's for a run an earlier invocation of a resumed sweep made."""
    out = {}
    with open(sweep / "sweep.csv", newline="") as f:
        for r in csv.DictReader(f):
            name = Path(r["folder"]).name
            out[name] = r["wall_s"]
            if not float(r["wall_s"] or 0) > 0:  # made by an earlier invocation
                point = json.loads((sweep / "runs" / name / "point.json").read_text())
                out[name] = point.get("wall_s", "?")
    return out


def summary(p: Path) -> dict:
    return json.loads((p / "summary.json").read_text())


def pct(a: float, b: float) -> float:
    return (b / a - 1) * 100


def signed(x: float, digits: int) -> str:
    return f"{x:+.{digits}f} %".replace("-", "−")


def fmt_t(s: float) -> str:
    return f"{s * 1e6:.1f} µs" if s < 1e-3 else f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.4f} s"


def cell_table(cell: str, seeds: dict[str, dict[str, Path]]) -> None:
    print(f"\n#### {cell}\n")
    heads = [f"seed {s}: same → low" for s in sorted(seeds)]
    print("| | " + " | ".join(heads) + " | mean Δ | thesis | before 2026-11-26 | 1/100 grid |")
    print("|---|" + "---|" * (len(heads) + 4))
    rows = []
    for i, c in enumerate(CLASSES):
        rows.append((f"{c} flows, mean FCT", lambda s, c=c: s["websearch"]["fct_s"][c]["mean"], i))
    rows.append(("iteration, mean", lambda s: s["horovod"]["iteration_time_s"]["mean"], 3))
    for label, get, ti in rows:
        cells, deltas = [], []
        for seed in sorted(seeds):
            same, low = summary(seeds[seed]["same"]), summary(seeds[seed]["low"])
            a, b = get(same), get(low)
            deltas.append(pct(a, b))
            cells.append(f"{fmt_t(a)} → {fmt_t(b)} (**{signed(pct(a, b), 1 if ti == 3 else 0)}**)")
        m = signed(statistics.mean(deltas), 1 if ti == 3 else 0)
        print(
            f"| {label} | "
            + " | ".join(cells)
            + f" | {m} | {THESIS[cell][ti]} | {BEFORE[cell][ti]} | {GRID[cell][ti]} |"
        )
    counts = []
    for seed in sorted(seeds):
        s = summary(seeds[seed]["low"])
        its = [summary(seeds[seed][k])["horovod"]["iterations_measured"] for k in ("same", "low")]
        n = "/".join(str(s["websearch"]["fct_s"][c]["count"]) for c in CLASSES)
        counts.append(f"flows {n}; iterations {its[0]} / {its[1]}")
    print(
        "| measured (small/medium/large; iterations same / low) | "
        + " | ".join(counts)
        + " | | | | |"
    )


def thirds(seeds: dict[str, dict[str, Path]]) -> None:
    print(
        "\n| small flows, by FCT | "
        + " | ".join(f"seed {s} same | seed {s} low" for s in sorted(seeds))
        + " |"
    )
    print("|---|" + "---|---|" * len(seeds))
    out: dict[str, list[str]] = defaultdict(list)
    for seed in sorted(seeds):
        for scheme in ("same", "low"):
            with open(seeds[seed][scheme] / "flows.csv", newline="") as f:
                fct = sorted(float(r["fct_s"]) for r in csv.DictReader(f)
                             if r["measured"] == "True" and r["completed"] == "True"
                             and int(r["size_bytes"]) < 100_000)  # fmt: skip
            k = len(fct) // 3
            parts = (fct[:k], fct[k : 2 * k], fct[2 * k :])
            for name, part in zip(
                ("fastest third", "middle third", "slowest third"), parts, strict=True
            ):
                out[name].append(fmt_t(statistics.mean(part)))
            p50, p99 = (fct[min(len(fct) - 1, int(x * len(fct)))] for x in (0.5, 0.99))
            out["p50 / p99"].append(f"{fmt_t(p50)} / {fmt_t(p99)}")
    for name, vals in out.items():
        print(f"| {name} | " + " | ".join(vals) + " |")


def physics(cells: dict[str, dict[str, dict[str, Path]]], wall_s: dict[str, str]) -> None:
    print("\n| run | fastest flow / link | min iteration / compute | high class / flow payload "
          "| low class / ring payload | arrivals / configured | offered load | censored, failed "
          "| drops, uplinks / downlinks | TCP timeouts (segments retransmitted) | busy, steal "
          "| wall |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for cell in cells:
        for seed in sorted(cells[cell]):
            for scheme, p in sorted(cells[cell][seed].items()):
                s = summary(p)
                w, h = s["websearch"], s["horovod"]
                with open(p / "flows.csv", newline="") as f:
                    flows = list(csv.DictReader(f))
                payload = sum(int(r["bytes_received"] or 0) for r in flows)
                link = s["links"][0]["rate_bps"]
                big = [
                    r for r in flows if r["completed"] == "True" and int(r["size_bytes"]) >= 10**6
                ]
                fastest = max(
                    (int(r["size_bytes"]) * 8 / float(r["fct_s"]) / link for r in big), default=0
                )
                up = [x for x in s["links"] if x["direction"] == "up"]
                cls = h["class"]
                ring_cls = sum(x["classes"][cls]["bytes"] for x in up)
                web_cls = sum(x["classes"][w["class"]]["bytes"] for x in up)
                with open(p / "iterations.csv", newline="") as f:
                    worker_its = sum(1 for _ in csv.DictReader(f))
                ring = worker_its * 2 * (1 - 1 / h["workers"]) * 100e6
                if cls == w["class"]:
                    hi, lo_ = f"{(web_cls) / (payload + ring):.3f} (one class)", "–"
                else:
                    hi, lo_ = f"{web_cls / payload:.3f}", f"{ring_cls / ring:.3f}"
                drops = "{} / {}".format(*(
                    sum(c["drops"] for x in s["links"] if x["direction"] == d
                        for c in x["classes"].values())
                    for d in ("up", "down")
                ))  # fmt: skip
                tcp = s.get("tcp") or {}
                ar = w["arrival_rate_per_host"]
                wall = f"{float(wall_s[p.name]):.0f} s" if p.name in wall_s else "?"
                print(f"| {cell} s{seed} {scheme} | {fastest:.3f} | {h['min_iteration_over_compute']:.3f} "
                      f"| {hi} | {lo_} | {ar['achieved'] / ar['configured']:.3f} "
                      f"| {w['utilization_pct']['offered']:.2f} % of {w['utilization_pct']['configured']} % "
                      f"| {w['censored']}, {w['failed']} | {drops} "
                      f"| {tcp.get('timeouts')} ({tcp.get('retransmitted_segments')}) "
                      f"| {100 * s['host_cpu']['busy']:.0f} %, {100 * s['host_cpu']['steal']:.1f} % "
                      f"| {wall} |")  # fmt: skip


def main(sweeps: list[Path]) -> None:
    cells: dict[str, dict[str, dict[str, Path]]] = defaultdict(lambda: defaultdict(dict))
    wall_s: dict[str, str] = {}
    for sweep in sweeps:
        for cell, seeds in load(sweep).items():
            for seed, runs in seeds.items():
                cells[cell][seed].update(runs)
        wall_s.update(walls(sweep))
    for cell in ("r16-3.125%", "r4-12.5%", "r2-12.5%"):
        pairs = {k: v for k, v in cells.get(cell, {}).items() if {"same", "low"} <= v.keys()}
        if pairs:  # seeds whose both schemes have run
            cell_table(cell, pairs)
            thirds(pairs)
    physics(cells, wall_s)


if __name__ == "__main__":
    main([Path(a) for a in sys.argv[1:]])
