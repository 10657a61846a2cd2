"""Controller for an ensemble instance: one node program per model host and one on the storage
host; the rounds merged into rounds.csv (rounds-<name>.csv for an instance not named ensemble)
and summarised: each model's image rate in the measured window (peak(n) without train_rate),
its share of the window spent waiting for data, the bytes the pattern moved, and the physics
check that no model beat its limits (preprocessing, and the pattern's busiest link; for
duplicated pipelines, whose streams split the storage's uplink unevenly, the models together)."""

from __future__ import annotations

import csv
import json
import logging
from typing import Any

from testbed.metrics import describe
from testbed.topology import Host
from testbed.workloads.controller import Controller
from testbed.workloads.ensemble.node import FIELDS
from testbed.workloads.ensemble.spec import rounds_file
from testbed.workloads.procs import count_rows, read_csvs

log = logging.getLogger(__name__)
NODE_MODULE = "testbed.workloads.ensemble.node"


def steady_rate(rounds: list[dict[str, str]]) -> float | None:
    """Images/s of one model from the rounds completed in the window: the images after the
    first round over the time from the first to the last (a count over the window would be off
    by up to a round, a tenth of the figure in a short run)."""
    if len(rounds) < 2:
        return None
    t = sorted(float(r["ready"]) for r in rounds)
    images = sum(int(r["images"]) for r in rounds) - int(rounds[0]["images"])
    return images / (t[-1] - t[0]) if t[-1] > t[0] else None


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
        span = max(0.0, min(win.stop, win.end) - max(win.start, win.t0))
        measured = [r for r in rows if r["measured"] == "True"]
        per_model = {m: steady_rate([r for r in measured if r["model"] == m]) for m in d.models}
        rates = [v for v in per_model.values() if v is not None]
        waits = {m: 0.0 for m in d.models}
        for r in rows:  # the part of each wait inside the window
            taken = float(r["taken"])
            lo, hi = max(taken - float(r["wait_s"]), win.start), min(taken, win.stop)
            waits[r["model"]] += max(0.0, hi - lo)
        sent = {"raw": 0, "preprocessed": 0}  # in the window (node.count_window)
        for p in self.procs:
            path = p.out.with_name(p.out.stem + "-bytes.json")
            at = json.loads(path.read_text()) if path.exists() else {}
            if "start" in at and "stop" in at:
                for k in sent:
                    sent[k] += at["stop"][k] - at["start"][k]
        delivered = sum(int(r["images"]) for r in measured)
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
            "wait_share": {
                "mean": sum(waits.values()) / len(waits) / span if span else None,
                "max": max(waits.values()) / span if span else None,
            },
            "wait_s": {
                k: describe([float(r["wait_s"]) for r in measured])[k] for k in ("mean", "p99")
            },
            "round_bytes": d.round_bytes,
            "bytes_sent": {
                **sent,
                "per_image": sum(sent.values()) / delivered if delivered else None,
            },
            "dscp": d.dscp,
            "class": d.tc_class,
        }

    def warnings(self, section: dict[str, Any]) -> list[str]:
        out = []
        over = section.get("rate_over_limit")
        if over is not None and over > 1.02:
            out.append(
                f"{self.name}: {over:.3f}x the images/s the limits allow "
                f"({section['limits']['limit']:.1f} a model): the emulated preprocessing or a "
                "link is faster than configured"
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
