"""The thesis' ratios as scenario inputs, turned into the values a run needs.

  bytes per iteration  = 2 (1 - 1/N) · model size                 (ring allreduce, N workers)
  R_cp_to_nw           = compute time · link rate / (bytes per iteration · 8)
  U_background         = arrival rate · mean flow size · 8 / link rate

Either side of each equation may be given, not both; the other is derived into the workload's
`derived` block. The inputs stay as given, so a resolved scenario can be changed (a new link
rate, more hosts) and re-resolved: `derived` is recomputed on every load.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.workloads.training import models
from testbed.workloads.websearch import flowsizes

if TYPE_CHECKING:
    from testbed.scenario import Scenario

DEFAULT_COMPUTE_S = 0.9  # thesis Table 4.1


def layers_for(w: Any) -> list[models.Layer]:
    """The synthetic worker's layers: sizes scaled, compute spread (no I/O beyond the trace).
    A trace keeps its own per-layer times, stretched in proportion when the compute asked for
    differs (a ratio, or time dilation); a model gets the thesis' arithmetic progression."""
    if w.profile:
        layers = models.load_trace(Path(w.profile), w.profile_time_unit)
    else:
        layers = models.MODELS[w.model]()
    if w.model_size:
        layers = models.scale_to(layers, w.model_size)
    compute = w.d.compute_time
    total = models.total_compute(layers)
    if w.profile and total > 0:
        if not math.isclose(total, compute):
            f = compute / total
            layers = [
                models.Layer(x.name, x.params, x.forward_s * f, x.backward_s * f) for x in layers
            ]
    else:
        layers = models.with_compute(layers, compute)
    return layers


def resolve(s: Scenario, key: str, w: Any, base_dir: Path | None) -> None:
    """Fill in `w.derived` from the inputs; the inputs themselves are left as given."""
    from testbed.scenario import Placement

    # Horovod defaults to the profile's default class; load to the highest class.
    if w.dscp is not None:
        place = Placement(tc_class=s.tc_profile.class_of(w.dscp), dscp=w.dscp)
    else:
        name = w.tc_class or (
            s.tc_profile.default if key == "horovod" else s.tc_profile.class_names[0]
        )
        place = Placement(tc_class=name, dscp=s.tc_profile.cls(name).mark)
    if key == "horovod":
        _horovod(s, w, base_dir, place)
    else:
        _websearch(s, w, base_dir, place)


def _horovod(s: Scenario, w: Any, base_dir: Path | None, place: Any) -> None:
    from testbed.scenario import HorovodDerived

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
    if w.compute_to_network_ratio is not None:
        if w.compute_time is not None:
            raise ValueError(
                "compute_time: give compute_time or compute_to_network_ratio, not both"
            )
        ratio = w.compute_to_network_ratio
        compute = ratio * bpi * 8 / link
    else:
        compute = w.compute_time
        if compute is None:
            compute = models.total_compute(layers) if w.profile else DEFAULT_COMPUTE_S
        ratio = compute * link / (bpi * 8)
    w.derived = HorovodDerived(
        **place.model_dump(),
        compute_time=compute,
        compute_to_network_ratio=ratio,
        model_bytes=model_bytes,
        bytes_per_iteration=bpi,
    )


def _websearch(s: Scenario, w: Any, base_dir: Path | None, place: Any) -> None:
    """Per host, as in the thesis: each host starts `arrival_rate` flows/s, so each host link
    carries arrival_rate · mean size on average (its own flows' replies come in on its downlink,
    and the requests of the others go out on its uplink)."""
    from testbed.scenario import WebsearchDerived

    try:
        cdf, w.sizes = flowsizes.resolve(w.sizes, base_dir)
    except ValueError as e:
        raise ValueError(f"sizes: {e}") from None
    mean = round(flowsizes.mean(cdf), 1)
    link = s.topology.link_rate
    if w.utilization is not None:
        if w.arrival_rate is not None:
            raise ValueError("arrival_rate: give arrival_rate or utilization, not both")
        util = w.utilization
        rate = util / 100 * link / (mean * 8)
    elif w.arrival_rate is not None:
        rate = w.arrival_rate
        util = rate * mean * 8 / link * 100
    else:
        raise ValueError(
            "arrival_rate: set arrival_rate (flows/s per host) or utilization (e.g. 12.5%)"
        )
    w.derived = WebsearchDerived(
        **place.model_dump(), arrival_rate=rate, utilization=util, mean_flow_size=mean
    )
