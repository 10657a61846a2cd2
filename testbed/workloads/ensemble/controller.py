"""Controller for an ensemble instance: one node program per model host and one on the storage
host; the rounds merged into rounds.csv (rounds-<name>.csv for an instance not named ensemble)
and summarised: each model's image rate in the measured window (peak(n) without train_rate),
its share of the window spent waiting for data, the bytes the pattern moved, each
preprocessor's measured pace against its configured one, each rate against its limits
(preprocessing, and the pattern's busiest link; for duplicated pipelines, whose streams split
the storage's uplink unevenly, the models together), and the load the delivered bytes put on
the busiest link (link_load: the physics, whichever models ran ahead).

A model's image rate is the rounds it completed between the window's two edges, capped by the
bytes its streams received between them as its kernel counted them (window_rate): by
construction no more than its links carried then (the kernel counts bytes in order, so after
a loss, at most what it held out of order at the first edge comes on top: none where queues
drop nothing), exact to one round (image_rate.resolution). Rounds from the first to the last
completed in the window, each model over its own span, read up to 13 % above what the wire
could have carried (issue 35): rounds complete in bursts, the edges cut them unevenly, and
rates over different spans do not add up to a link's. Bytes alone read up to 2.2 times the
preprocessing a model trained at, where its raw stream was held back and its buffers grew."""

from __future__ import annotations

import csv
import json
import logging
from typing import Any

from testbed.core.paths import link_seconds
from testbed.core.stats import describe
from testbed.scenario.topology import Host
from testbed.workloads.controller import Controller
from testbed.workloads.ensemble.node import FIELDS, HEADER
from testbed.workloads.ensemble.spec import EnsembleWorkload, rounds_file, transfers
from testbed.workloads.procs import count_rows, read_csvs

log = logging.getLogger(__name__)
NODE_MODULE = "testbed.workloads.ensemble.node"


def round_bytes_in(c: EnsembleWorkload) -> dict[str, int]:
    """The bytes a round brings each model over the network, block headers included."""
    d = c.d
    block, raw = c.batch * c.image_size, c.batch * c.raw_image_size
    out = dict.fromkeys(d.models, 0)
    for src, dst, b in transfers(c.pattern, d.models, d.preprocessors, c.storage, block, raw):
        blocks = round(b / (raw if src == c.storage else block))
        out[dst] = out.get(dst, 0) + int(b) + blocks * HEADER.size
    return out


def edge_span(at: dict[str, Any]) -> float | None:
    """Seconds between a node's two reads of its counters (None: it made no two)."""
    if "start" not in at or "stop" not in at:
        return None
    span = float(at["stop"]["t"] - at["start"]["t"])
    return span if span > 0 else None


def waits_in(
    rows: list[dict[str, str]], models: list[str], start: float, stop: float
) -> dict[str, float]:
    """Seconds each model waited for a round inside [start, stop]."""
    waits = dict.fromkeys(models, 0.0)
    for r in rows:
        taken = float(r["taken"])
        lo, hi = max(taken - float(r["wait_s"]), start), min(taken, stop)
        waits[r["model"]] += max(0.0, hi - lo)
    return waits


def sent_in(counters: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Raw and preprocessed bytes every node sent between the window's edges."""
    sent = {"raw": 0, "preprocessed": 0}
    for at in counters.values():
        if "start" in at and "stop" in at:
            for k in sent:
                sent[k] += at["stop"]["sent"][k] - at["start"]["sent"][k]
    return sent


def bytes_per_image(
    counters: dict[str, dict[str, Any]], models: list[str], images: int
) -> float | None:
    """Bytes every node sent between its reads per image the models completed between theirs
    (images: a round's): both over the counters' own time, which is less than the window where
    the machine stood still at an edge."""
    done = sum(
        counters[m]["stop"]["rounds"] - counters[m]["start"]["rounds"]
        for m in models
        if edge_span(counters.get(m, {})) is not None
    )
    return sum(sent_in(counters).values()) / (done * images) if done else None


def window_rate(at: dict[str, Any], per_round: int, images: int) -> float | None:
    """A model's images/s in the window from its counters at the edges: the rounds it
    completed between the reads (what it trained on), but never more than the bytes its
    streams received between them (per_round: a round's bytes into it) could carry, times a
    round's images, over the time between the reads. Completions alone can count rounds whose
    bytes crossed before the window (its buffers held them); arrivals alone count bytes still
    waiting in its buffers (a stream held back, as a preprocessor's raw reads are)."""
    span = edge_span(at)
    if span is None:
        return None
    done = (at["stop"]["rounds"] - at["start"]["rounds"]) * images / span
    if not per_round:  # its rounds cross no link
        return done
    got = sum(at["stop"]["received"].values()) - sum(at["start"]["received"].values())
    return min(done, got / per_round * images / span)


def counted_span(counters: dict[str, dict[str, Any]]) -> float | None:
    """Seconds the nodes' counters cover: the mean time between each node's two reads. The
    window's span where they read on time; less where the machine stood still at an edge
    (2026-12-07: every node read its start 14 s late, 11.9 s of a 26 s window)."""
    spans = [s for at in counters.values() if (s := edge_span(at)) is not None]
    return sum(spans) / len(spans) if spans else None


def link_load(topology: Any, counters: dict[str, dict[str, Any]], span: float) -> dict[str, Any]:
    """The busiest link's share of its wire time taken by the bytes the pattern delivered
    (every stream's, as its receiver's kernel counted them) between the nodes' reads (span
    where they made none): payload only, so at most 1448/1514 with TCP's timestamps, whichever
    models ran ahead of the others."""
    span = counted_span(counters) or span
    moved = [
        (src, host, got - at["start"]["received"].get(src, 0))
        for host, at in counters.items()
        if "start" in at and "stop" in at
        for src, got in at["stop"]["received"].items()
    ]
    busy = link_seconds(topology, moved) if moved and span > 0 else {}
    if not busy:
        return {"max": None, "link": None}
    link = max(busy, key=lambda k: busy[k])
    return {"max": busy[link] / span, "link": link}


def over_limit(
    pattern: str,
    rates: list[float],
    preprocess: float,
    limit: float,
    together: float | None,
) -> float | None:
    """The most any rate came to of what physics allows it: each model's own rate against
    its limit where the models move in shared rounds; where the pipelines are independent
    (duplicated), each against its preprocessing and their sum against the storage's uplink."""
    if not rates:
        return None
    if pattern != "duplicated":
        return max(rates) / limit
    return max(max(rates) / preprocess, sum(rates) / together if together else 0.0)


class Ensemble(Controller):
    kind = "ensemble"
    exports = True

    def hosts(self) -> list[Host]:
        """Its models, then the storage host."""
        d = self.cfg.d
        extra = [self.cfg.storage] if self.cfg.storage else []
        return [self.topo.host(n) for n in [*d.models, *extra]]

    def launch(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        c, d = self.cfg, self.cfg.d
        hosts = self.hosts()
        config = self.dir / "ensemble-config.json"
        config.write_text(json.dumps({
            "name": self.name, "pattern": c.pattern, "hosts": [h.name for h in hosts],
            "addresses": {h.name: str(h.data_ip) for h in hosts}, "models": d.models,
            "preprocessors": d.preprocessors, "leader": d.leader, "storage": c.storage,
            "batch": c.batch, "image_size": c.image_size, "raw_image_size": c.raw_image_size,
            "preprocess_rate": c.preprocess_rate, "train_rate": c.train_rate,
            "images_per_round": d.images_per_round, "prefetch": c.prefetch, "port": c.port,
            "dscp": d.dscp, "time_scale": self.time_scale,
        }))  # fmt: skip
        for h in hosts:
            out = self.dir / f"rounds-{h.name}.csv"
            argv = ["--host", h.name, "--bind", str(h.data_ip), "--config", str(config),
                    "--go", str(self.go_file), "--out", str(out), *self.metrics_arg(h)]  # fmt: skip
            role = "model" if h.name in d.models else "storage"
            self.spawn(h, role, NODE_MODULE, argv, out)
        net = f"{d.network_limit:.1f}" if d.network_limit else "none"
        log.info(
            "%s: %s, %d models, %d preprocessing at %.1f images/s; limits per model: "
            "preprocessing %.1f, network %s images/s (%s); DSCP %d (%s)",
            self.name, c.pattern, len(d.models), len(d.preprocessors), c.preprocess_rate,
            d.preprocess_limit, net, d.busiest_link or "no link", d.dscp, d.tc_class,
        )  # fmt: skip

    def progress(self) -> str:
        return f"{sum(count_rows(p.out) for p in self.procs if p.role == 'model')} rounds"

    def summarize(self) -> dict[str, Any]:
        assert self.window is not None
        c, d = self.cfg, self.cfg.d
        rows = sorted(
            read_csvs(p.out for p in self.procs if p.role == "model"),
            key=lambda r: (float(r["ready"]), r["model"]),
        )
        with open(self.run_dir / rounds_file(self.name), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            w.writerows(rows)
        win = self.window
        window_span = max(0.0, min(win.stop, win.end) - max(win.start, win.t0))
        measured = [r for r in rows if r["measured"] == "True"]
        counters = self._edge_counters()
        span = counted_span(counters) or window_span  # what the rates are over
        per_round = round_bytes_in(c)
        per_model = {
            m: window_rate(counters.get(m, {}), per_round[m], d.images_per_round) for m in d.models
        }
        rates = [v for v in per_model.values() if v is not None]
        pace = {}  # images/s each preprocessor made in the window
        for h in d.preprocessors:
            at, edges = counters.get(h, {}), edge_span(counters.get(h, {}))
            if edges:
                pace[h] = (at["stop"]["produced"] - at["start"]["produced"]) * c.batch / edges
        waits = waits_in(rows, d.models, win.start, win.stop)
        sent = sent_in(counters)
        limit = min(x for x in (d.preprocess_limit, d.network_limit) if x is not None)
        n = len(d.models)
        together = n * d.network_limit if d.network_limit is not None else None
        total = sum(rates) if rates else None  # a model with under two rounds adds nothing
        return {
            "pattern": c.pattern,
            "models": n,
            "preprocessors": len(d.preprocessors),
            "rounds_measured": len(measured),
            "images_delivered": sum(int(r["images"]) for r in rows),
            "image_rate": {
                "mean": sum(rates) / len(rates) if rates else None,
                "min": min(rates, default=None),
                "max": max(rates, default=None),
                "total": total,
                # one round over the window: a model's rate can read that much above its
                # long-run pace where rounds arrive in bursts (preprocessing-bound: all
                # blocks of a round together), as the window holds one round more or less
                "resolution": d.images_per_round / span if span else None,
                "per_model": per_model,
            },
            "limits": {
                "preprocess": d.preprocess_limit,
                "network": d.network_limit,
                "limit": limit,
                "together": together,
                "busiest_link": d.busiest_link,
            },
            "rate_over_limit": over_limit(c.pattern, rates, d.preprocess_limit, limit, together),
            "link_load": link_load(self.s.topology, counters, span),
            "counted_s": {"window": window_span, "counters": counted_span(counters)},
            "preprocessing_rate": {
                "per_host": pace,
                "max": max(pace.values(), default=None),
                # a block begun before the window may end inside it: one block over the span
                "allowed": c.preprocess_rate + c.batch / span if span else None,
            },
            "wait_share": {
                "mean": sum(waits.values()) / len(waits) / window_span if window_span else None,
                "max": max(waits.values()) / window_span if window_span else None,
            },
            "wait_s": {
                k: describe([float(r["wait_s"]) for r in measured])[k] for k in ("mean", "p99")
            },
            "round_bytes": d.round_bytes,
            "bytes_sent": {
                **sent,
                "per_image": bytes_per_image(counters, d.models, d.images_per_round),
            },
            "dscp": d.dscp,
            "class": d.tc_class,
        }

    def _edge_counters(self) -> dict[str, dict[str, Any]]:
        """host → its counters at the window's edges (node.count_window), {} where none."""
        counters = {}
        for p in self.procs:
            path = p.out.with_name(p.out.stem + "-bytes.json")
            counters[p.host.name] = json.loads(path.read_text()) if path.exists() else {}
        return counters

    def warnings(self, section: dict[str, Any]) -> list[str]:
        """What says the emulation itself is off: a preprocessor faster than configured. (A
        link faster than its cap is the orchestrator's check, for every kind; a model's rate
        cannot exceed what its links carried, see window_rate.)"""
        out = []
        pre = section.get("preprocessing_rate") or {}
        fast = {h: r for h, r in (pre.get("per_host") or {}).items()
                if pre.get("allowed") is not None and r > pre["allowed"]}  # fmt: skip
        if fast:
            h = max(fast, key=lambda k: fast[k])
            out.append(
                f"{self.name}: {h} preprocessed {fast[h]:.1f} images/s in the window, above "
                f"the configured {self.cfg.preprocess_rate:g} (at most {pre['allowed']:.1f} with "
                "a block begun before it): the emulated preprocessing ran faster than configured"
            )
        counted = section.get("counted_s") or {}
        if counted.get("counters") and counted["counters"] < 0.9 * counted["window"]:
            out.append(
                f"{self.name}: its nodes' counters cover {counted['counters']:.1f} s of the "
                f"{counted['window']:.1f} s window (read late: the machine stood still); its "
                "rates and link load are over that time, a round being a larger share of it"
            )
        limit = section["limits"]["limit"]  # its uplink share, or its preprocessing if slower
        if section["pattern"] == "duplicated":
            low = {m: (r or 0.0) / limit for m, r in section["image_rate"]["per_model"].items()}
            starved = sorted(m for m, x in low.items() if x < 0.5)
            if starved:
                out.append(
                    f"{self.name}: {', '.join(starved)} got under half of a model's share "
                    f"(least {min(low.values()):.0%}): a stream from storage lost out to the "
                    "others (TCP does not split a link evenly)"
                )
        return out

    def metric_queries(self, section: dict[str, Any]) -> list[tuple[str, str, str, Any]]:
        return [
            (self.name, f"{self.name}: images delivered",
             "sum(max_over_time(testbed_ensemble_images_total{{sel}}[{rng}]))",
             section["images_delivered"]),
        ]  # fmt: skip
