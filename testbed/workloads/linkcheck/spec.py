"""linkcheck: bulk TCP per traffic class plus short request/response transfers, to check that the
links are capped and classified as configured. Its configuration, summary shape and
registration."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from testbed.core.fields import Duration, FieldProblem, Size
from testbed.core.profile import Dscp
from testbed.workloads.base import WorkloadConfig
from testbed.workloads.registry import Kind, register

PORT = 5201  # the first linkcheck instance's servers; the n-th adds 2 × n


class LinkcheckWorkload(WorkloadConfig):
    """Bulk TCP per traffic class plus short request/response transfers: checks the links."""

    kind: Literal["linkcheck"] = "linkcheck"
    pattern: Literal["ring", "single", "incast", "outcast", "across"] = Field(
        "ring",
        description=(
            "who sends to whom: ring (h_i → h_i+1, every link busy), single (h1 → h2), "
            "incast (every host → h1: tests the shared downlink), outcast (h1 → every host: "
            "tests the uplink), across (every host → the host at its place on the next leaf; "
            "single-tor: the host half the ring away)"
        ),
    )
    bulk_classes: list[str] | None = Field(
        None, description="classes that get one bulk flow per pair (default: every class)"
    )
    bulk_dscp: list[Dscp] | None = Field(
        None,
        description="one bulk flow per pair for each of these DSCP values, instead of bulk_classes "
        "(e.g. to show that EF and CS1 share one queue under the fifo profile)",
    )
    short: bool = Field(True, description="run short request/response transfers")
    short_class: str | None = Field(
        None, description="class of the short transfers (default: highest)"
    )
    short_interval: Duration = Field(0.1, gt=0, le=60, description="time between short transfers")
    short_size: Size = Field(
        10_000, ge=1, le=100_000_000, description="response size of a short transfer"
    )
    port: int | None = Field(
        None, ge=1024, le=65535, description="its servers' port (default: 5201, +2 per instance)"
    )


def resolve(
    cfg: LinkcheckWorkload, s: Any, base_dir: Path | None, ordinal: int = 0, place: Any = None
) -> None:
    names = s.tc_profile.class_names
    for i, c in enumerate(cfg.bulk_classes or []):
        if c not in names:
            raise FieldProblem(
                ("bulk_classes", i),
                f"{c!r} is not a class of tc profile {s.tc_profile.name!r}; classes: {names}",
            )
    if cfg.bulk_dscp is not None and cfg.bulk_classes is not None:
        raise FieldProblem(("bulk_dscp",), "give bulk_classes or bulk_dscp, not both")
    if cfg.short_class is not None and cfg.short_class not in names:
        raise FieldProblem(
            ("short_class",),
            f"{cfg.short_class!r} is not a class of tc profile {s.tc_profile.name!r}; "
            f"classes: {names}",
        )
    if cfg.port is None:
        cfg.port = PORT + 2 * ordinal


def dilate(cfg: LinkcheckWorkload, k: float) -> dict[str, Any]:
    return {"short_interval": cfg.short_interval * k}


_STATS = {"count": "1", "mean": "s", "p50": "s", "p99": "s", "max": "s"}

register(
    Kind(
        name="linkcheck",
        config=LinkcheckWorkload,
        controller="testbed.workloads.linkcheck.controller:Linkcheck",
        report="testbed.workloads.linkcheck.report",
        summary={
            "window_s": ["s"],
            "link_rate_bps": "bps",
            "bulk": [{"dscp": "1", "bytes": "B", "goodput_bps": "bps"}],
            "short": {"size_bytes": "B", "started": "1", "completed": "1", "fct_s": _STATS},
        },
        resolve=resolve,
        dilate=dilate,
        records=lambda name: f"{name}/short.csv",
        record_durations=("fct_s",),
        hosts_field=False,
        doc=LinkcheckWorkload.__doc__ or "",
    )
)
