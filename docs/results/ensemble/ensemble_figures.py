"""The table and plot of docs/results/ensemble/README.md, from an ensemble-peak sweep folder:

    .venv/bin/python docs/results/ensemble/ensemble_figures.py runs/ensemble-peak

Prints a markdown table (per network, pattern and n: the mean image rate per model, its two
limits, the share of the limit reached, one round over the window, the busiest link's load)
and writes ensemble-peak.png beside this file. Each model's rate is computed from the run's
records with the kind's own window_rate, so a sweep run before the estimator changed (issue
35) reads as the current code would report it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib
import yaml

from testbed.scenario.resolve import load_scenario_data
from testbed.workloads.ensemble.controller import (
    bytes_per_image,
    counted_span,
    link_load,
    round_bytes_in,
    window_rate,
)

matplotlib.use("Agg")
import matplotlib.pyplot as plt

PATTERNS = ("duplicated", "all-shared", "single-broadcast", "multi-broadcast")


def rows(sweep: Path) -> list[dict]:
    out = []
    for p in sorted((sweep / "runs").iterdir()):
        f = p / "summary.json"
        if not f.is_file():
            continue
        s = json.loads(f.read_text())
        e = s.get("ensemble") or {}
        if s.get("status") != "ok" or e.get("image_rate", {}).get("mean") is None:
            print(f"skipped {p.name}: status {s.get('status')}, no image rate", file=sys.stderr)
            continue
        rates = recount(p, s["time_scale"])
        out.append({
            "network": "10gbit" if s["time_scale"] >= 100 else "1gbit",
            "pattern": e["pattern"], "n": e["models"], "p": e["preprocessors"],
            "rate": sum(rates) / len(rates), "min": min(rates), "total": sum(rates),
            "together": e["limits"]["together"],
            "resolution": recount_resolution(p, s),
            "load": recount_load(p, s),
            "pre": e["limits"]["preprocess"], "net": e["limits"]["network"],
            "limit": e["limits"]["limit"], "link": e["limits"].get("busiest_link"),
            "wait": e["wait_share"]["mean"], "per_image": recount_per_image(p),
        })  # fmt: skip
    return out


def _config(run: Path):
    s = load_scenario_data(yaml.safe_load((run / "scenario.yaml").read_text()), str(run))
    return next(iter(s.workloads.values()))


def recount(run: Path, k: float) -> list[float]:
    """Each model's images/s (scenario time) from its counters at the window's edges."""
    c = _config(run)
    per_round = round_bytes_in(c)
    out = []
    for m in c.d.models:
        at = json.loads((run / "ensemble" / f"rounds-{m}-bytes.json").read_text())
        rate = window_rate(at, per_round[m], c.d.images_per_round)
        out.append((rate or 0.0) * k)
    return out


def _counters(run: Path) -> dict[str, dict]:
    """host → its counters at the window's edges, as the kind reads them."""
    return {
        f.name[len("rounds-") : -len("-bytes.json")]: json.loads(f.read_text())
        for f in sorted((run / "ensemble").glob("rounds-*-bytes.json"))
    }


def _span(run: Path, s: dict) -> float:
    """Seconds the rates are over (wall clock): the nodes' reads, else the window."""
    return counted_span(_counters(run)) or s["window"]["span_s"]


def recount_resolution(run: Path, s: dict) -> float:
    """One round over the time the counters cover, images/s (scenario time)."""
    return _config(run).d.images_per_round / _span(run, s) * s["time_scale"]


def recount_per_image(run: Path) -> float | None:
    """Bytes sent per image completed, both between the nodes' reads, as the kind counts them."""
    c = _config(run)
    return bytes_per_image(_counters(run), c.d.models, c.d.images_per_round)


def recount_load(run: Path, s: dict) -> float | None:
    """The busiest link's load over the time the counters cover, as the kind computes it
    (scenario.yaml's rates are the scenario's, K times the wall clock's the bytes ran at)."""
    topo = load_scenario_data(yaml.safe_load((run / "scenario.yaml").read_text()), str(run))
    load = link_load(topo.topology, _counters(run), _span(run, s))["max"]
    return None if load is None else load * s["time_scale"]


def table(rs: list[dict]) -> str:
    lines = [
        "| network | pattern | n | p | images/s per model (min) | preprocessing limit | "
        "network limit (busiest link) | of the limit | one round | link load | "
        "bytes sent per image |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rs, key=lambda r: (r["network"], PATTERNS.index(r["pattern"]), r["n"])):
        lines.append(
            f"| {r['network']} | {r['pattern']} | {r['n']} | {r['p']} | {r['rate']:.0f} "
            f"({r['min']:.0f}) | {r['pre']:.0f} | {r['net']:.0f} ({r['link']}) | "
            f"{share(r):.0%} | {r['resolution']:.0f} | "
            f"{'–' if r['load'] is None else format(r['load'], '.3f')} | {r['per_image']:,.0f} |"
        )
    return "\n".join(lines)


def share(r: dict) -> float:
    """Of the limit: duplicated pipelines bound by storage's uplink, together; else each."""
    if r["pattern"] == "duplicated" and r["limit"] == r["net"]:
        return r["total"] / r["together"]
    return r["rate"] / r["limit"]


def plot(rs: list[dict], path: Path) -> None:
    nets = sorted({r["network"] for r in rs})
    fig, axes = plt.subplots(1, len(nets), figsize=(6 * len(nets), 4.2), squeeze=False)
    for ax, net in zip(axes[0], nets, strict=True):
        for i, pat in enumerate(PATTERNS):
            pts = sorted((r["n"], r["rate"], r["limit"]) for r in rs
                         if r["network"] == net and r["pattern"] == pat)  # fmt: skip
            if not pts:
                continue
            n, rate, limit = zip(*pts, strict=True)
            color = f"C{i}"
            ax.plot(n, rate, "o-", color=color, label=f"{pat}: measured")
            ax.plot(n, limit, "--", color=color, alpha=0.6, label=f"{pat}: limit")
        ax.set_title(f"{net} network: images/s per model")
        ax.set_xlabel("models n")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("images/s per model (scenario time)")
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    rs = rows(Path(sys.argv[1]))
    print(table(rs))
    plot(rs, Path(__file__).with_name("ensemble-peak.png"))
