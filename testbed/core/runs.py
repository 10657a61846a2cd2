"""A finished run folder, read back: its summary, its records and its workload instances, and the
few helpers every report of it shares (percent change, number formats, matplotlib). What a
kind reports of its own section is in its report module (workloads/<kind>/report.py)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from testbed.core.errors import ScenarioError


class Run:
    def __init__(self, path: Path) -> None:
        self.path = path
        summary = path / "summary.json"
        if not summary.is_file():
            raise ScenarioError(f"{path}: not a run folder (no summary.json)")
        self.summary: dict[str, Any] = json.loads(summary.read_text())
        self.name = path.name

    def rows(self, fname: str) -> list[dict[str, str]]:
        p = self.path / fname
        if not p.is_file():
            return []
        with open(p, newline="") as f:
            return list(csv.DictReader(f))

    def instances(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(name, kind, section) of each workload instance that reported."""
        return instances(self.summary)

    def of_kind(self, *kinds: str) -> list[tuple[str, dict[str, Any]]]:
        return [(n, sec) for n, k, sec in self.instances() if k in kinds]

    @property
    def time_scale(self) -> float:
        """The run's time dilation: its summary is in scenario time, the timestamps in its
        records (start, end, links.csv's time) on the real clock; divide their differences
        by this."""
        return float(self.summary.get("time_scale") or 1.0)

    def utilization(self) -> dict[str, dict[str, float]]:
        """Mean share of the link per direction and class over the run window (0–1): host
        links as "up"/"down" (the thesis' view), fabric links, where there are any, as
        "fabric up"/"fabric down"."""
        out: dict[str, dict[str, float]] = {}
        for tier, direction in (
            ("host", "up"),
            ("host", "down"),
            ("fabric", "up"),
            ("fabric", "down"),
        ):
            links = [
                x
                for x in self.summary.get("links", [])
                if x["direction"] == direction and x.get("tier", "host") == tier
            ]
            if not links:
                continue
            key = direction if tier == "host" else f"fabric {direction}"
            classes = sorted({c for x in links for c in x["classes"]})
            out[key] = {
                c: sum(
                    (x["classes"].get(c, {}).get("rate_bps") or 0) / x["rate_bps"] for x in links
                )
                / len(links)
                for c in classes
            }
        return out

    def scenario(self) -> dict[str, Any]:
        import yaml

        p = self.path / "scenario.yaml"
        return yaml.safe_load(p.read_text()) if p.is_file() else {}


def instances(summary: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, kind, section) of each workload instance a summary reports. Runs made before
    named instances have no `workloads` index: their sections were named by their kinds."""
    index = summary.get("workloads")
    if index is None:
        index = {k: k for k in ("linkcheck", "horovod", "websearch") if k in summary}
    return [(n, k, summary[n]) for n, k in index.items() if summary.get(n)]


def pct_change(new: float | None, base: float | None) -> float | None:
    if new is None or base is None or base == 0:
        return None
    return (new - base) / base * 100


def fmt_ms(x: float | None) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 1e3:.1f}"


def fmt_pct(x: float | None) -> str:
    return "–" if x is None else f"{x:+.1f}%"


LEGACY = ("linkcheck", "horovod", "websearch")  # the workloads: keys before named instances


def legacy(name: str, kind: str) -> bool:
    """An instance named as its kind (every scenario before named instances): its figures keep
    their old names (flows.csv, `iteration_mean_s`, `small`); another's carry its name."""
    return name in LEGACY and (name == kind or (name == "horovod" and kind == "torch-ddp"))


def prefixed(name: str, kind: str, key: str) -> str:
    return key if legacy(name, kind) else f"{name}.{key}"


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
