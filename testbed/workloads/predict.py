"""Predict a synthetic job's iteration time from its layer profile and the link: the model the
benchmark checks the emulation against (thesis ch. 4, with real-TCP goodput).

Each layer's gradient becomes ready when its backward compute ends (backward runs from the
last layer to the first). Ready gradients are reduced one after another, in ready order
(FIFO, as Horovod's default), each taking the ring-allreduce time
    2 (1 - 1/N) · bytes / B_eff
where B_eff is TCP goodput on a shaped link that also carries the ring's ACKs in the reverse
direction: a delayed ACK (66 B on the wire) per two 1514-byte frames of 1448 B payload, so
B_eff = rate · 2·1448 / (2·1514 + 66) ≈ 0.936 · rate. Fusion, Horovod's cycle time and
per-step latency are ignored (microseconds on these links).

With a barrier the iteration is forward + max(backward, time the last reduction ends); without
one, the next forward may start as soon as backward ends, but each layer's forward waits for
that layer's reduction (first layers' gradients are reduced last), so in steady state the
iteration is the fixed point of the same schedule shifted by one iteration.
"""

from __future__ import annotations

from testbed.workloads.models import Layer

ACK_EFFICIENCY = 2 * 1448 / (2 * 1514 + 66)


def effective_rate(rate_bps: float) -> float:
    return rate_bps * ACK_EFFICIENCY


def reduce_times(layers: list[Layer], n_workers: int, rate_bps: float) -> list[float]:
    b = effective_rate(rate_bps)
    return [2 * (1 - 1 / n_workers) * x.nbytes * 8 / b for x in layers]


def iteration_time(
    layers: list[Layer], n_workers: int, rate_bps: float, barrier: bool = True
) -> float:
    """Predicted wall time of one steady-state iteration."""
    tx = reduce_times(layers, n_workers, rate_bps)
    fwd = sum(x.forward_s for x in layers)
    if barrier:
        t = fwd  # backward starts after forward
        link_free = fwd
        for j in range(len(layers) - 1, -1, -1):
            t += layers[j].backward_s
            link_free = max(link_free, t) + tx[j]
        return max(t, link_free)
    # Without a barrier: simulate a few iterations and take the last start-to-start interval.
    n = len(layers)
    done = [0.0] * n  # when each layer's previous reduction finished
    link_free = 0.0
    start = 0.0
    starts = []
    for _ in range(8):
        starts.append(start)
        t = start
        for j in range(n):
            t = max(t, done[j]) + layers[j].forward_s
        for j in range(n - 1, -1, -1):
            t += layers[j].backward_s
            link_free = max(link_free, t) + tx[j]
            done[j] = link_free
        start = t
    return starts[-1] - starts[-2]
