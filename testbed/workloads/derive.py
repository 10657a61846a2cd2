"""The thesis' ratios as scenario inputs, turned into the values a run needs.

  bytes per iteration  = 2 (1 - 1/N) · model size                 (ring allreduce, N workers)
  R_cp_to_nw           = compute time · link rate / (bytes per iteration · 8)
  U_background         = arrival rate · mean flow size · 8 / link rate

Either side of each equation may be given; the other is derived and written back, so the
resolved scenario shows both. Both given must agree (a resolved scenario reloads unchanged).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.workloads import flowsizes, models

if TYPE_CHECKING:
    from testbed.scenario import Scenario

DEFAULT_COMPUTE_S = 0.9  # thesis Table 4.1


def _agree(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-4)


def layers_for(w: Any) -> list[models.Layer]:
    """The synthetic worker's layers: sizes scaled, compute spread (no I/O beyond the trace)."""
    if w.profile:
        layers = models.load_trace(Path(w.profile), w.profile_time_unit)
    else:
        layers = models.MODELS[w.model]()
    if w.model_size:
        layers = models.scale_to(layers, w.model_size)
    if w.compute_time is not None and not (
        w.profile and math.isclose(models.total_compute(layers), w.compute_time)
    ):
        layers = models.with_compute(layers, w.compute_time)
    return layers


def resolve(s: Scenario, key: str, w: Any, base_dir: Path | None) -> None:
    if key == "horovod":
        _horovod(s, w, base_dir)
    else:
        _websearch(s, w, base_dir)
    if w.tc_class is None and w.dscp is None:
        # Horovod defaults to the profile's default class; load to the highest class.
        w.tc_class = s.tc_profile.default if key == "horovod" else s.tc_profile.class_names[0]


def _horovod(s: Scenario, w: Any, base_dir: Path | None) -> None:
    if w.profile:
        p = Path(w.profile)
        p = p if p.is_absolute() else (base_dir or Path.cwd()) / p
        if not p.is_file():
            raise ValueError(f"profile: no such file {w.profile!r}")
        w.profile = str(p.resolve())
        try:
            layers = models.load_trace(p, w.profile_time_unit)
        except ValueError as e:
            raise ValueError(f"profile: {e}") from None
    else:
        layers = models.MODELS[w.model]()
    model_bytes = w.model_size or models.total_bytes(layers)
    n = len(w.hosts) if w.hosts else s.topology.hosts
    bpi = round(2 * (1 - 1 / n) * model_bytes)
    link = s.topology.link_rate
    w.model_bytes, w.bytes_per_iteration = model_bytes, bpi
    if w.compute_to_network_ratio is not None:
        derived = w.compute_to_network_ratio * bpi * 8 / link
        if w.compute_time is not None and not _agree(w.compute_time, derived):
            raise ValueError(
                "compute_time: give compute_time or compute_to_network_ratio, not both"
            )
        w.compute_time = derived
    else:
        if w.compute_time is None:
            w.compute_time = models.total_compute(layers) if w.profile else DEFAULT_COMPUTE_S
        w.compute_to_network_ratio = w.compute_time * link / (bpi * 8)


def _websearch(s: Scenario, w: Any, base_dir: Path | None) -> None:
    try:
        cdf, w.sizes = flowsizes.resolve(w.sizes, base_dir)
    except ValueError as e:
        raise ValueError(f"sizes: {e}") from None
    w.mean_flow_size = round(flowsizes.mean(cdf), 1)
    link = s.topology.link_rate
    if w.utilization is not None:
        derived = w.utilization / 100 * link / (w.mean_flow_size * 8)
        if w.arrival_rate is not None and not _agree(w.arrival_rate, derived):
            raise ValueError("arrival_rate: give arrival_rate or utilization, not both")
        w.arrival_rate = derived
    elif w.arrival_rate is not None:
        w.utilization = w.arrival_rate * w.mean_flow_size * 8 / link * 100
    else:
        raise ValueError("arrival_rate: set arrival_rate (flows/s) or utilization (e.g. 12.5%)")
