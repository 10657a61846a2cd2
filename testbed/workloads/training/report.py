"""What a training instance reports (report.py calls these for every instance of the training
kinds): iteration times beside the event model's prediction (the job alone on its links),
their change against a baseline run, the sweep's columns, the iteration and compute/wait
plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from testbed.core.errors import TestbedError
from testbed.core.runs import Run, fmt_ms, fmt_pct, pct_change, prefixed, pyplot
from testbed.workloads.training.spec import iterations_file

KINDS = ("horovod", "torch-ddp")
COLUMNS = ("iteration_mean_s", "iteration_p99_s", "iterations_measured")  # sweep.csv


def predicted(run: Run, name: str) -> float | None:
    """The event model's iteration time of the instance, alone on its links."""
    from testbed.scenario.resolve import load_scenario
    from testbed.workloads.training.model.predict import for_instance

    try:
        return for_instance(name, load_scenario(run.path / "scenario.yaml"))["iteration_s"]
    except (TestbedError, ValueError, OSError):
        return None


def describe(run: Run, name: str, h: dict[str, Any]) -> dict[str, Any]:
    return {"workers": h["workers"], "iterations": h["iterations"], "class": h.get("class"),
            "iteration_time_s": h["iteration_time_s"], "predicted_iteration_s": predicted(run, name),
            "timeline": h.get("timeline"), "policy": h.get("policy")}  # fmt: skip


def print_section(out: Console, name: str, h: dict[str, Any]) -> None:
    it = h["iteration_time_s"]
    pred = h.get("predicted_iteration_s")
    vs = ""
    if pred and it["mean"]:
        vs = f"; predicted {fmt_ms(pred)} ms alone on the links ({(it['mean'] / pred - 1) * 100:+.1f}%)"
    who = "Horovod" if name == "horovod" else name
    out.print(
        f"{who}: {h['workers']} workers, {h['iterations']} iterations, class {h['class']}; "
        f"iteration time mean {fmt_ms(it['mean'])} ms, p50 {fmt_ms(it['p50'])} ms, "
        f"p99 {fmt_ms(it['p99'])} ms{vs}"
    )
    pol = h.get("policy")
    if pol and "share_to" in pol:  # a class per transfer
        share = pol["share_to"]
        what = (
            f"{pol['layers_to']} layers (split out of DDP's buckets by its hook)"
            if pol["buffers_to"] is None
            else f"{pol['buffers_to']} buffers ({pol['layers_to']} layers)"
        )
        out.print(
            f"  policy {pol['kind']}: {what} in {pol['to']}"
            + (f", {share:.1%} of the bytes" if share is not None else "")
        )
    elif pol and pol["kind"] == "by-ratio":
        out.print(
            f"  policy by-ratio: rank {pol['rank']} of {pol['jobs']} by compute-to-network "
            f"ratio ({pol['compute_to_network_ratio']:.3g}), so class {pol['to']}"
        )
    elif pol and pol["kind"] == "interleave":
        out.print(
            f"  policy interleave: {pol['jobs']} jobs on a {fmt_ms(pol['period_s'])} ms period, "
            f"this one's iterations every {fmt_ms(pol['slot_s'])} ms from offset "
            f"{fmt_ms(pol['offset_s'])} ms; its {fmt_ms(pol['network_s'])} ms of network alone "
            f"overlap the others' by {fmt_ms(pol['planned_overlap_s'])} ms in the plan"
            + (
                f"; rank {pol['rank']} of {pol['jobs']} by compute-to-network ratio, so class "
                f"{pol['to']}"
                if pol.get("rank")
                else ""
            )
        )
        if pol.get("on_slot_share") is not None:
            over = f"one over {fmt_ms(pol.get('skip_after_s'))} ms late"
            rule = {
                "skip": f"{over} gave up slots at the next vote",
                "hold": f"{over} held its network phase for a later slot",
            }.get(pol["late"], "a late one began at once")
            out.print(
                f"    {pol['on_slot_share']:.0%} of its iterations began on their slot, "
                f"{pol['slots_missed']} slots missed ({rule})"
            )
            if pol["late"] == "catch-up" and pol["on_slot_share"] < 0.5:
                out.print(
                    "    behind its slots most of the window: a late phase that meets the next "
                    "job's makes both later, and the period's slack is all it catches up by; "
                    "`late: skip` gives late slots up, wider gaps absorb the lateness "
                    "(docs/scenarios.md)"
                )
        if pol.get("phase_overrun_s") is not None:
            out.print(
                f"    its network phase ended {fmt_ms(pol['phase_overrun_s'])} ms after the "
                f"plan's (median, iterations on their slot): {fmt_ms(pol['gap_left_s'])} ms "
                f"of its {fmt_ms(pol['gap_s'])} ms gap left"
            )
    elif pol:
        share = pol["escalated_share"]
        out.print(
            f"  policy {pol['kind']}: {pol['escalations']} escalations to {pol['to']} after "
            f"{fmt_ms(pol['escalate_after_s'])} ms of an iteration (budget {pol['budget_pct']:g}%), "
            f"in {pol['to']} {fmt_ms(pol['escalated_s'])} ms"
            + (f", {share:.0%} of the window" if share is not None else "")
        )
    tl = h.get("timeline")
    if tl and tl.get("iterations"):
        c = tl["coordination_per_cycle_s"]
        out.print(
            f"  Horovod timeline, rank 0's {tl['iterations']} measured iterations: "
            f"{fmt_ms(tl['operations_s'])} ms per iteration in {tl['operations']:.1f} operations, "
            f"{fmt_ms(tl['coordination_s'])} ms coordinating (per cycle mean "
            f"{fmt_ms(c['mean'])} ms, p99 {fmt_ms(c['p99'])} ms)"
        )


def comparable(run: Run, name: str, h: dict[str, Any]) -> dict[str, float | None]:
    """The figure a comparison takes the % change of: the mean iteration time."""
    return {prefixed(name, "horovod", "iteration"): (h.get("iteration_time_s") or {}).get("mean")}


def compare(base: Run, other: Run, name: str) -> dict[str, Any]:
    b, o = dict(base.of_kind(*KINDS)).get(name), dict(other.of_kind(*KINDS)).get(name)
    if not b or not o:
        return {}
    return {
        "iteration_time_mean_change_pct": pct_change(
            o["iteration_time_s"]["mean"], b["iteration_time_s"]["mean"]
        )
    }


def print_compare(out: Console, name: str, entries: list[tuple[str, dict[str, Any]]]) -> None:
    t = Table(title=f"{name}: change of the mean iteration time against the baseline")
    t.add_column("run")
    t.add_column("iteration time", justify="right")
    for run, e in entries:
        t.add_row(run, fmt_pct(e.get("iteration_time_mean_change_pct")))
    out.print(t)


def key_metrics(name: str, h: dict[str, Any]) -> dict[str, Any]:
    """sweep.csv's columns of the instance."""
    it = h.get("iteration_time_s") or {}
    out = {"iteration_mean_s": it.get("mean"), "iteration_p99_s": it.get("p99"),
           "iterations_measured": h.get("iterations_measured")}  # fmt: skip
    return {prefixed(name, "horovod", k): v for k, v in out.items()}


def counts(name: str, h: dict[str, Any]) -> dict[str, int]:
    return {}


def plots(run: Run, name: str, h: dict[str, Any], out_dir: Path) -> list[Path]:
    suffix = "" if name == "horovod" else f"-{name}"
    made = [
        plot_iterations(run, out_dir / f"iterations{suffix}.png", name),
        plot_timeline(run, out_dir / f"horovod_timeline{suffix}.png", name=name),
    ]
    return [p for p in made if p is not None]


def compare_plots(runs: list[Run], name: str, out_dir: Path) -> list[Path]:
    return []


def plot_iterations(run: Run, out: Path, name: str = "horovod") -> Path | None:
    its = run.rows(iterations_file(name))
    if not its:
        return None
    plt = pyplot()
    t0 = run.summary.get("started_at") or min(float(r["start"]) for r in its)
    fig, ax = plt.subplots(figsize=(9, 3.8))
    for worker in sorted({r["worker"] for r in its}):
        rs = [r for r in its if r["worker"] == worker]
        ax.plot([(float(r["start"]) - t0) / run.time_scale for r in rs],
                [float(r["duration_s"]) * 1e3 for r in rs], ".-", lw=0.8, ms=3, label=worker)  # fmt: skip
    compute = (dict(run.of_kind(*KINDS)).get(name) or {}).get("compute_time_s")
    if compute:
        ax.axhline(compute * 1e3, color="k", ls="--", lw=0.8, label="configured compute")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("iteration time (ms)")
    ax.set_title(f"{name}: iteration time — {run.name}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_timeline(run: Run, out: Path, iterations: int = 5, name: str = "horovod") -> Path | None:
    """Compute vs waiting for allreduce per worker, a few iterations (thesis Fig. 4.8 style)."""
    its = run.rows(iterations_file(name))
    if not its:
        return None
    numbers = sorted({int(r["iteration"]) for r in its})
    mid = numbers[len(numbers) // 2 : len(numbers) // 2 + iterations]
    chosen = [r for r in its if int(r["iteration"]) in mid]
    if not chosen:
        return None
    t0 = min(float(r["start"]) for r in chosen)
    workers = sorted({r["worker"] for r in chosen})
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 0.6 + 0.5 * len(workers)))
    for y, worker in enumerate(workers):
        for r in (r for r in chosen if r["worker"] == worker):
            start = (float(r["start"]) - t0) / run.time_scale
            comp, wait = float(r["compute_s"]), float(r["wait_s"])
            ax.broken_barh([(start * 1e3, comp * 1e3)], (y - 0.35, 0.7), color="tab:blue")
            ax.broken_barh(
                [((start + comp) * 1e3, wait * 1e3)], (y - 0.35, 0.7), color="tab:orange"
            )
    ax.set_yticks(range(len(workers)), workers)
    ax.set_xlabel("time (ms)")
    ax.set_title(f"iterations {mid[0]}–{mid[-1]}: compute (blue) vs waiting for allreduce (orange) — {run.name}",
                 fontsize=9)  # fmt: skip
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
