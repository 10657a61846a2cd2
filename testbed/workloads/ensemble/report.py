"""What an ensemble instance reports: each model's image rate against its two limits, the time
it waited for data, the bytes its pattern moved; the sweep's columns; the rate over time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from testbed.core.runs import Run, fmt_pct, pct_change, prefixed, pyplot
from testbed.workloads.ensemble.spec import rounds_file

COLUMNS = ("image_rate_mean", "image_rate_min", "image_rate_limit", "wait_share_mean")


def _f(x: float | None, spec: str = ".1f") -> str:
    return "–" if x is None else format(x, spec)


def describe(run: Run, name: str, e: dict[str, Any]) -> dict[str, Any]:
    keys = ("pattern", "models", "preprocessors", "rounds_measured", "image_rate", "limits",
            "rate_over_limit", "wait_share", "bytes_sent", "class")  # fmt: skip
    return {k: e.get(k) for k in keys}


def print_section(out: Console, name: str, e: dict[str, Any]) -> None:
    lim = e["limits"]
    out.print(
        f"{name} (ensemble, {e['pattern']}): n = {e['models']} models, p = "
        f"{e['preprocessors']} preprocessing; limits per model: preprocessing "
        f"{_f(lim['preprocess'])}, network {_f(lim['network'])} images/s "
        f"({lim.get('busiest_link') or 'no link'}); class {e['class']}",
        highlight=False,
    )
    shared = e["pattern"] != "duplicated"
    t = Table()
    for col in ("model", "images/s", "of the limit" if shared else "of its share"):
        t.add_column(col, justify="right")
    for m, rate in (e["image_rate"].get("per_model") or {}).items():
        share = rate / lim["limit"] if rate is not None and lim["limit"] else None
        t.add_row(m, _f(rate), _f(share, ".1%"))
    out.print(t)
    if not shared:  # independent pipelines: the storage's uplink caps them together
        out.print(
            f"  together: {_f(e['image_rate'].get('total'))} of "
            f"{_f(lim.get('together'))} images/s the storage's uplink allows"
        )
    w, b = e.get("wait_share") or {}, e.get("bytes_sent") or {}
    out.print(
        f"  waiting for data: {_f(w.get('mean'), '.1%')} of the window (most {_f(w.get('max'), '.1%')});"
        f" bytes sent per delivered image: {_f(b.get('per_image'), ',.0f')}"
    )


def comparable(run: Run, name: str, e: dict[str, Any]) -> dict[str, float | None]:
    return {prefixed(name, "ensemble", "image_rate"): (e.get("image_rate") or {}).get("mean")}


def compare(base: Run, other: Run, name: str) -> dict[str, Any]:
    b, o = dict(base.of_kind("ensemble")).get(name), dict(other.of_kind("ensemble")).get(name)
    if not b or not o:
        return {}
    return {
        "image_rate_change_pct": pct_change(o["image_rate"]["mean"], b["image_rate"]["mean"]),
        "wait_share": {"baseline": b["wait_share"]["mean"], "run": o["wait_share"]["mean"]},
    }


def print_compare(out: Console, name: str, entries: list[tuple[str, dict[str, Any]]]) -> None:
    t = Table(title=f"{name}: change of the image rate per model against the baseline")
    for col in ("run", "images/s", "waiting (base/run)"):
        t.add_column(col, justify="right" if col != "run" else "left")
    for run, e in entries:
        w = e.get("wait_share") or {}
        t.add_row(run, fmt_pct(e.get("image_rate_change_pct")),
                  f"{_f(w.get('baseline'), '.0%')}/{_f(w.get('run'), '.0%')}")  # fmt: skip
    out.print(t)


def key_metrics(name: str, e: dict[str, Any]) -> dict[str, Any]:
    rate, lim, w = e.get("image_rate") or {}, e.get("limits") or {}, e.get("wait_share") or {}
    out = {
        "image_rate_mean": rate.get("mean"),
        "image_rate_min": rate.get("min"),
        "image_rate_limit": lim.get("limit"),
        "wait_share_mean": w.get("mean"),
    }
    return {prefixed(name, "ensemble", k): v for k, v in out.items()}


def counts(name: str, e: dict[str, Any]) -> dict[str, int]:
    return {prefixed(name, "ensemble", "image_rate"): e.get("rounds_measured") or 0}


def plots(run: Run, name: str, e: dict[str, Any], out_dir: Path) -> list[Path]:
    """Images received per model, cumulative over the run, beside the limit's slope."""
    rows = run.rows(rounds_file(name))
    if not rows:
        return []
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    t0 = min(float(r["ready"]) for r in rows)
    k = run.summary.get("time_scale", 1.0)
    for m in sorted({r["model"] for r in rows}, key=lambda h: int(h[1:])):
        mine = [r for r in rows if r["model"] == m]
        xs = [(float(r["ready"]) - t0) / k for r in mine]
        total, ys = 0, []
        for r in mine:
            total += int(r["images"])
            ys.append(total)
        ax.step(xs, ys, where="post", label=m, linewidth=1)
    limit = (e.get("limits") or {}).get("limit")
    if limit:
        end = max((float(r["ready"]) - t0) / k for r in rows)
        ax.plot([0, end], [0, limit * end], "k--", linewidth=1, label="limit")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("images received")
    ax.set_title(f"{name}: {e['pattern']}, n = {e['models']}, p = {e['preprocessors']}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", ncol=2)
    fig.tight_layout()
    out = out_dir / f"images{'' if name == 'ensemble' else '-' + name}.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return [out]


def compare_plots(runs: list[Run], name: str, out_dir: Path) -> list[Path]:
    return []
