"""ensemble: n models trained side by side, one per host, fed preprocessed images by p of them
(seed 004, "Scaling the training of ensembles of DNNs": peak(n), All-Shared, Single-Broadcast,
Multi-Broadcast). Preprocessing is emulated as the synthetic training compute is: a block of
`batch` images takes batch / preprocess_rate seconds (a sleep: this machine's two cores could
not preprocess for eight hosts at once, and the question is the network's), then its
batch · image_size bytes go where the pattern sends them. Every model must receive every
preprocessor's block of a round, D = [D1 … Dp], before it may train on the round:

  duplicated        each model reads its own raw images (raw_image_size each) from the
                    storage host and preprocesses them itself; nothing is shared (p = n,
                    each model gets only its own block)
  all-shared        every model preprocesses a share (p = n), then all-gather: each sends its
                    block to every other
  single-broadcast  the first p hosts preprocess and all-gather among themselves; the p-th
                    (the leader) forwards all p blocks to the n − p others (with p = n both
                    broadcasts move what all-shared moves)
  multi-broadcast   each of the first p hosts sends its own block to all n − 1 others

With `storage`, each preprocessor first reads its raw block from that host (duplicated always
does). A model trains a round of images at train_rate (none: takes it at once, the paper's
peak(n) measurement) and waits whenever the next round is not complete.

Derived, per model (images/s): the preprocessing limit, p · rp (duplicated: rp), and the
network limit, the images of a round over the time the pattern's busiest link needs for a
round's bytes at its wire rate (paths.link_seconds). The shared patterns move in rounds every
model needs, so no model can beat either. Duplicated pipelines are independent: the n streams
from storage split its uplink as TCP splits it, which is not evenly (a CI run had one model at
5 % of its share for the whole run, the other three at 4/3 of theirs), so there the network
figure is each model's fair share, and the cap is on the models together, n times it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from testbed.core.fields import FieldProblem, Size
from testbed.core.paths import link_seconds
from testbed.workloads.base import Placed, Placement
from testbed.workloads.registry import Kind, register

PORT = 5501  # the first ensemble instance's node programs; the n-th adds n
PATTERNS = ("duplicated", "all-shared", "single-broadcast", "multi-broadcast")


class EnsembleDerived(Placement):
    models: list[str] = Field(description="the model hosts, in order (n = their number)")
    preprocessors: list[str] = Field(description="the hosts that preprocess (p)")
    leader: str | None = Field(description="single-broadcast: the host that forwards to the rest")
    images_per_round: int = Field(description="images a model receives per round")
    preprocess_limit: float = Field(description="images/s a model can get from preprocessing")
    network_limit: float | None = Field(description="images/s the busiest link lets a model get")
    busiest_link: str | None = Field(description="the link that sets network_limit")
    round_bytes: dict[str, int] = Field(description="bytes a round moves: raw, preprocessed")


class EnsembleWorkload(Placed):
    """An ensemble's input pipeline (seed 004): p preprocessors feed n models through a
    communication pattern; reports each model's image rate against its limits."""

    kind: Literal["ensemble"] = "ensemble"
    pattern: Literal["duplicated", "all-shared", "single-broadcast", "multi-broadcast"] = Field(
        "all-shared", description="how preprocessed blocks reach the models (see the kind's doc)"
    )
    models: int | None = Field(
        None, ge=2, description="n: the first n hosts but the storage host (default: all of them)"
    )
    preprocessors: int | None = Field(
        None,
        ge=1,
        description="p, single- and multi-broadcast: the first p models preprocess (p = n "
        "moves what all-shared moves); all-shared and duplicated: all n do",
    )
    storage: str | None = Field(
        None,
        description="the host raw images are read from (required by duplicated; optional "
        "otherwise); not one of the models",
    )
    preprocess_rate: float = Field(
        100.0, gt=0, le=1e6, description="rp: images/s one host preprocesses (emulated)"
    )
    train_rate: float | None = Field(
        None,
        gt=0,
        le=1e7,
        description="rc: images/s a model trains (default: no training, peak(n))",
    )
    batch: int = Field(32, ge=1, le=4096, description="images per preprocessed block")
    image_size: Size = Field(
        150_528, ge=1, le=100_000_000, description="bytes of a preprocessed image (224·224·3)"
    )
    raw_image_size: Size = Field(
        110_000, ge=1, le=100_000_000, description="bytes of a raw image read from storage"
    )
    prefetch: int = Field(
        2, ge=1, le=64, description="blocks (and rounds) a stage may run ahead of the next"
    )
    port: int | None = Field(
        None, ge=1024, le=65535, description="its node programs' port (default: 5501, +1 each)"
    )
    derived: EnsembleDerived | None = Field(
        None,
        description="written when the scenario is resolved; ignored on input",
        json_schema_extra={"readOnly": True},
    )

    @property
    def d(self) -> EnsembleDerived:
        assert self.derived is not None, "scenario not resolved"
        return self.derived


def transfers(
    pattern: str,
    models: list[str],
    pre: list[str],
    storage: str | None,
    block: int,
    raw_block: int,
) -> list[tuple[str, str, float]]:
    """(src, dst, bytes) of one round."""
    out: list[tuple[str, str, float]] = []
    readers = models if pattern == "duplicated" else pre
    if storage is not None:
        out += [(storage, r, raw_block) for r in readers]
    if pattern in ("all-shared", "multi-broadcast"):
        out += [(i, m, block) for i in pre for m in models if m != i]
    elif pattern == "single-broadcast":
        out += [(i, j, block) for i in pre for j in pre if j != i]
        out += [(pre[-1], m, block * len(pre)) for m in models if m not in pre]
    return out


def resolve(
    w: EnsembleWorkload,
    s: Any,
    base_dir: Path | None,
    ordinal: int = 0,
    place: Placement | None = None,
) -> None:
    every = [f"h{i}" for i in range(1, s.topology.hosts + 1)]
    if w.storage is not None and w.storage not in every:
        raise FieldProblem(
            ("storage",), f"{w.storage!r} is not a host; hosts are h1 … h{len(every)}"
        )
    if w.hosts is not None:
        if w.models is not None:
            raise FieldProblem(("models",), "give hosts or models, not both")
        if w.storage in w.hosts:
            raise FieldProblem(("storage",), f"{w.storage} is also a model; pick another host")
        models = list(w.hosts)
    else:
        pool = [h for h in every if h != w.storage]
        n = w.models if w.models is not None else len(pool)
        if n > len(pool):
            raise FieldProblem(
                ("models",), f"{n} models need {n} hosts besides storage; there are {len(pool)}"
            )
        models = pool[:n]
    n = len(models)
    if w.pattern == "duplicated" and w.storage is None:
        raise FieldProblem(
            ("storage",), "duplicated pipelines read their raw images from a host: set storage"
        )
    if w.pattern in ("all-shared", "duplicated"):
        if w.preprocessors not in (None, n):
            raise FieldProblem(
                ("preprocessors",),
                f"{w.pattern}: every model preprocesses (p = n = {n}); leave it out",
            )
        p = n
    else:
        if w.preprocessors is None:
            raise FieldProblem(("preprocessors",), f"{w.pattern}: set p, the hosts that preprocess")
        p = w.preprocessors
        if p > n:
            raise FieldProblem(
                ("preprocessors",), f"{p} of {n} models; {w.pattern} takes at most {n}"
            )
    pre = models[:p]
    block, raw_block = w.batch * w.image_size, w.batch * w.raw_image_size
    busy = link_seconds(s.topology, transfers(w.pattern, models, pre, w.storage, block, raw_block))
    images = w.batch * (1 if w.pattern == "duplicated" else p)
    link, seconds = max(busy.items(), key=lambda kv: kv[1]) if busy else (None, 0.0)
    if w.port is None:
        w.port = PORT + ordinal
    assert place is not None
    w.derived = EnsembleDerived(
        **place.model_dump(),
        models=models,
        preprocessors=pre,
        leader=pre[-1] if w.pattern == "single-broadcast" else None,
        images_per_round=images,
        preprocess_limit=images * w.preprocess_rate / w.batch,
        network_limit=images / seconds if seconds else None,
        busiest_link=link,
        round_bytes={
            "raw": raw_block * (len(models if w.pattern == "duplicated" else pre))
            if w.storage
            else 0,
            "preprocessed": int(
                sum(b for src, _, b in transfers(w.pattern, models, pre, None, block, 0))
            ),
        },
    )


def servers(w: EnsembleWorkload, every: list[str]) -> set[str]:
    """Its hosts' node programs listen on its port, and so does the storage host's."""
    return set(w.hosts or every) | ({w.storage} if w.storage else set())


def work(w: EnsembleWorkload, s: Any) -> float:
    """Payload bits/s a round's transfers move, at the rounds per second the slower of
    preprocessing and the busiest link allows (budget.py)."""
    d = w.d
    images = min(d.preprocess_limit, d.network_limit or float("inf"))
    return images / d.images_per_round * sum(d.round_bytes.values()) * 8


def probe() -> dict[str, Any]:
    """Its CPU-cost probe (budget_probe.py): 8 models sharing their preprocessing, each node
    preprocessing 2 images/s one image at a time, so each model receives 16 images/s
    (preprocessing-bound: about a sixth of every link at 100 Mbit/s). One image a block: the
    default 32 would take 16 s a block, longer than the probe, which then carried nothing but
    its connections' setup (a cost of ~180 µs a byte, every ensemble run "1000 × busy")."""
    return {"kind": "ensemble", "pattern": "all-shared", "preprocess_rate": 2, "batch": 1}


def dilate(w: EnsembleWorkload, k: float) -> dict[str, Any]:
    return {
        "preprocess_rate": w.preprocess_rate / k,
        "train_rate": w.train_rate / k if w.train_rate else None,
    }


def rounds_file(name: str) -> str:
    """The merged records: rounds.csv for the instance named ensemble, rounds-<name>.csv else."""
    return "rounds.csv" if name == "ensemble" else f"rounds-{name}.csv"


register(
    Kind(
        name="ensemble",
        metrics="testbed.workloads.ensemble.node:registry",
        config=EnsembleWorkload,
        controller="testbed.workloads.ensemble.controller:Ensemble",
        work=work,
        probe=probe,
        report="testbed.workloads.ensemble.report",
        servers=servers,
        summary={
            "models": "1",
            "preprocessors": "1",
            "rounds_measured": "1",
            "images_delivered": "1",
            "image_rate": {
                "mean": "hz",
                "min": "hz",
                "max": "hz",
                "total": "hz",
                "resolution": "hz",
                "per_model": {"*": "hz"},
            },
            "limits": {"preprocess": "hz", "network": "hz", "limit": "hz", "together": "hz"},
            "rate_over_limit": "1",
            "preprocessing_rate": {"per_host": {"*": "hz"}, "max": "hz", "allowed": "hz"},
            "link_load": {"max": "1"},
            "counted_s": {"window": "s", "counters": "s"},
            "wait_share": {"mean": "1", "max": "1"},
            "wait_s": {"mean": "s", "p99": "s"},
            "round_bytes": {"raw": "B", "preprocessed": "B"},
            "bytes_sent": {"raw": "B", "preprocessed": "B", "per_image": "B"},
            "dscp": "1",
        },
        resolve=resolve,
        dilate=dilate,
        records=rounds_file,
        record_durations=("wait_s", "train_s"),
        doc=EnsembleWorkload.__doc__ or "",
    )
)
