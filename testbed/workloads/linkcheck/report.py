"""What a linkcheck instance reports: goodput per pair and class, short-transfer completion
times."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from testbed.core.runs import Run, prefixed

COLUMNS: tuple[str, ...] = ()  # sweep.csv: none


def _rate(bps: float) -> str:
    return f"{bps / 1e6:.1f} Mbit/s" if bps < 1e9 else f"{bps / 1e9:.2f} Gbit/s"


def describe(run: Run, name: str, lc: dict[str, Any]) -> dict[str, Any]:
    return lc


def print_section(out: Console, name: str, lc: dict[str, Any]) -> None:
    who = "linkcheck" if name == "linkcheck" else f"{name} (linkcheck)"
    t = Table(title=f"{who}: goodput per pair and class (link {_rate(lc['link_rate_bps'])})")
    for col in ("src", "dst", "class", "dscp", "goodput", "of link"):
        t.add_column(col, justify="right" if col in ("dscp", "goodput", "of link") else "left")
    for f in lc["bulk"]:
        t.add_row(f["src"], f["dst"], f["class"], str(f["dscp"]), _rate(f["goodput_bps"]),
                  f"{f['goodput_bps'] / lc['link_rate_bps']:.1%}")  # fmt: skip
    out.print(t)
    sh = lc["short"]
    if sh["class"] is None:
        return
    st = sh["fct_s"]
    if st["count"]:
        out.print(
            f"short transfers ({sh['size_bytes']} B, class {sh['class']}): "
            f"{sh['completed']}/{sh['started']} completed, completion time "
            f"mean {st['mean'] * 1e3:.2f} ms, p50 {st['p50'] * 1e3:.2f} ms, p99 {st['p99'] * 1e3:.2f} ms"
        )
    else:
        out.print(f"short transfers: {sh['completed']}/{sh['started']} completed")


def comparable(run: Run, name: str, lc: dict[str, Any]) -> dict[str, float | None]:
    return {
        prefixed(name, "linkcheck", "short_fct"): (lc.get("short") or {})
        .get("fct_s", {})
        .get("mean")
    }


def compare(base: Run, other: Run, name: str) -> dict[str, Any]:
    return {}


def print_compare(out: Console, name: str, entries: list[tuple[str, dict[str, Any]]]) -> None:
    """linkcheck's change is its comparable (short transfers' mean), in report's own table."""


def key_metrics(name: str, lc: dict[str, Any]) -> dict[str, Any]:
    return {}


def counts(name: str, lc: dict[str, Any]) -> dict[str, int]:
    return {}


def plots(run: Run, name: str, lc: dict[str, Any], out_dir: Path) -> list[Path]:
    return []


def compare_plots(runs: list[Run], name: str, out_dir: Path) -> list[Path]:
    return []
