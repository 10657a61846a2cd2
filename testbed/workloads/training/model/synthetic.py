"""A synthetic job's layers and fusion, from its configuration (training/spec.py's
HorovodWorkload, resolved): what its workers emulate (horovod.py, ddp.py) and what its event
model predicts (predict.py). Apart from the spec so that the model, which the spec's checks
consult, does not import the spec."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from testbed.workloads.training.model import models


def real_layers(w: Any) -> list[models.Layer] | None:
    """The layers of the real model a mode real job trains on CPU (or names), without their
    compute; None where it is not one of models.REAL_MODELS (synthetic mode, ResNet-50 on
    GPUs)."""
    if w.mode != "real" or (w.real_model is None and w.gpus is not None):
        return None
    return [
        models.Layer(n, params)
        for n, params in models.REAL_MODELS[w.real_model or "small-cnn"].layers
    ]


def layers_for(w: Any) -> list[models.Layer]:
    """The synthetic worker's layers: sizes scaled, compute spread (no I/O beyond the trace).
    A trace keeps its own per-layer times, stretched in proportion when the compute asked for
    differs (a ratio, or time dilation); a model gets the thesis' arithmetic progression. In
    mode real, the real model's layers with the compute it states spread the same way (what
    the event model predicts for it; the workers compute for real)."""
    if (real := real_layers(w)) is not None:
        return models.with_compute(real, w.d.compute_time)
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
        layers = models.COMPUTE_SPREADS.get(w.model, models.with_compute)(layers, compute)
    return layers


def fusion_of(w: Any) -> str:
    """The job's fusion: its own, else its backend's (Horovod's dynamic, DDP's buckets)."""
    return w.fusion or ("buckets" if w.backend == "torch-ddp" else "dynamic")
