"""The kinds added through the registry, run for real: incast queries and ensemble pipelines.
Their figures are judged against the clock and the links (hand-computed), and the kernel's
class counters say which links carried them."""

from __future__ import annotations

import csv
import json

import pytest

from tests.bounds import rate_at_least

from .helpers import last_run, run_scenario, run_until

LINK = 100e6
BLOCK = 8 * 150_528  # the ensemble's preprocessed block below: batch 8
RAW = 8 * 110_000


def uplink(s, node: str, cls: str = "be", direction: str = "up") -> float:
    """bits/s the node's uplink (or downlink) carried in the class over the measured window."""
    (x,) = [x for x in s["links"] if x["node"] == node and x["direction"] == direction]
    return x["classes"][cls]["rate_bps"]


def assert_within_its_downlink(s: dict, model: str, rate: float, round_bytes: float, images: int):
    """A model's images/s, as the bytes its rounds bring it (`round_bytes` a round of `images`),
    is no more than its downlink's class counter carried: payload ≤ wire, whose headers (66 of
    every 1514 bytes) leave 4 % for the few ms between the model's reads and the counters'."""
    carried = uplink(s, model, direction="down")
    assert rate * round_bytes / images * 8 <= carried, (model, rate, carried)


def test_incast_queries_meet_in_the_aggregators_downlink(tmp_path):
    s = run_scenario(tmp_path, {
        "duration": "10s", "topology": {"hosts": 4, "link_rate": "100mbit"},
        "measure": {"warmup": "1s", "cooldown": "1s"},
        "workloads": {"incast": {"kind": "incast", "response_size": "100KB", "utilization": "20%"}},
    })  # fmt: skip
    q = s["incast"]
    assert s["status"] == "ok" and q["fanout"] == 3 and q["failed"] == 0
    # 20 % of 100 Mbit/s in responses of 3 × 100 KB: 8.33 queries/s per host, 8 s measured
    # × 4 hosts = 267 expected (Poisson: ±3σ = ±49)
    assert q["query_rate_per_host"]["configured"] == pytest.approx(0.2 * LINK / (3 * 100e3 * 8))
    assert 200 <= q["queries_measured"] <= 330, q["queries_measured"]
    assert q["queries_completed"] >= 0.95 * q["queries_started"]
    # no query's 300 KB arrived faster than the aggregator's downlink: ≥ 24 ms each
    with open(tmp_path / "run" / "queries.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["completed"] == "True"]
    assert len(rows) == q["queries_completed"]
    assert min(float(r["qct_s"]) for r in rows) >= 300e3 * 8 / LINK
    assert q["queries_over_link_rate"] == 0 and q["max_query_rate_over_link"] <= 1.0
    # the responses put 20 % of a link on the downlinks (headers on top: at most a tenth more)
    down = [x["classes"]["be"]["rate_bps"] for x in s["links"] if x["direction"] == "down"]
    mean = sum(down) / len(down)
    assert mean <= 0.2 * LINK * 1.25, mean
    rate_at_least(mean, 0.2 * LINK * 0.8, s, "the responses on the downlinks")


def ensemble_run(tmp_path, ok=None, **cfg):
    """Queues of 10000 packets: every round's blocks start at once, and a queue that holds
    them all drops nothing, so the network limit (a fluid bound) is what a model can reach.
    With the profile's 1000, the synchronized blocks overflow the queues and Reno's losses
    cost the models about a third of it (all-shared: 74-76 of 110.7 images/s, 5851 drops;
    with 10000 packets 100-103, none dropped): real, but a property of TCP, not the pipeline
    these tests check. With `ok`, a run that falls short of it is run again (run_until: one
    local run had every link at 80 Mbit/s with nothing queued or dropped, 82-85 images/s);
    its records are then under `last_run(tmp_path)`."""
    data = {
        "duration": "10s", "topology": {"hosts": 5, "link_rate": "100mbit", "queue_limit": 10000},
        "measure": {"warmup": "2s", "cooldown": "1s"},
        "workloads": {"ensemble": {"kind": "ensemble", "batch": 8, "models": 4, **cfg}},
    }  # fmt: skip
    return run_until(tmp_path, data, ok) if ok else run_scenario(tmp_path, data)


@pytest.mark.parametrize(
    ("cfg", "limit", "busy", "idle", "blocks", "shared"),
    [
        # hand-computed: images per round over the busiest link's bytes per round at 100 Mbit/s;
        # blocks: per model, (blocks a round brings it, of them through the busiest links);
        # shared: how many busiest links the models share (0: each its own downlink)
        ({"pattern": "all-shared"}, 32 / (3 * BLOCK * 8 / LINK), ["h1", "h2", "h3", "h4"], [],
         {"h1": (3, 3), "h2": (3, 3), "h3": (3, 3), "h4": (3, 3)}, 0),
        # busiest: h1's and h2's uplinks, each sending its block to the three others
        ({"pattern": "multi-broadcast", "preprocessors": 2}, 16 / (3 * BLOCK * 8 / LINK),
         ["h1", "h2"], ["h3", "h4"], {"h1": (1, 1), "h2": (1, 1), "h3": (2, 2), "h4": (2, 2)}, 2),
        # busiest: the leader h2's uplink, its block to h1 and both blocks to h3 and h4
        ({"pattern": "single-broadcast", "preprocessors": 2}, 16 / (5 * BLOCK * 8 / LINK),
         ["h1", "h2"], ["h3", "h4"], {"h1": (1, 1), "h2": (1, 0), "h3": (2, 2), "h4": (2, 2)}, 1),
        # p = n: the leader forwards to no one, and the pattern moves what all-shared moves
        ({"pattern": "single-broadcast", "preprocessors": 4}, 32 / (3 * BLOCK * 8 / LINK),
         ["h1", "h2", "h3", "h4"], [], {"h1": (3, 3), "h2": (3, 3), "h3": (3, 3), "h4": (3, 3)}, 0),
    ],
)  # fmt: skip
def test_each_pattern_runs_at_its_busiest_link(tmp_path, cfg, limit, busy, idle, blocks, shared):
    """Preprocessing fast enough (2000 images/s) that the network binds: the models together
    get the images their pattern's busiest links allow, no model more than its own limit, and
    each model uses what its downlink carried; only the hosts that send carry it.

    No model's own rate has a floor: its blocks come through links shared with the other
    models' (all-shared: every sender's uplink carries a block for each of three models;
    the broadcasts: the leaders' uplinks), and TCP need not split a shared link evenly over a
    7 s window (a clean clone here: h3 92.1 images/s against 0.85 × 110.7, the others above
    it, steal 0.5 %). What physics bounds from below is what the links carried together, and
    that a model consumed what reached it."""
    images = 8 * cfg.get("preprocessors", 4)  # a round: a block of batch 8 from each of p

    def busiest_bits(s: dict) -> float:
        """bits/s the models' rounds brought through their busiest links, together."""
        rates = s["ensemble"]["image_rate"]["per_model"]
        if shared:
            return sum(
                (rates[m] or 0.0) / images * via * BLOCK * 8 for m, (_, via) in blocks.items()
            )
        return sum((r or 0.0) / images * blocks[m][0] * BLOCK * 8 for m, r in rates.items())

    links = shared or len(blocks)  # the busiest links (all-shared, p = n: each model's downlink)

    def reached(s: dict) -> bool:
        return busiest_bits(s) >= 0.85 * links * LINK

    s = ensemble_run(tmp_path, ok=reached, preprocess_rate=2000, **cfg)
    e = s["ensemble"]
    assert s["status"] == "ok" and e["limits"]["network"] == pytest.approx(limit)
    assert e["limits"]["limit"] == pytest.approx(limit)
    assert not [w for w in s["warnings"] if "faster than configured" in w or "above its cap" in w]
    rates = e["image_rate"]["per_model"]
    through = busiest_bits(s)
    assert through <= links * LINK, (rates, f"{through / 1e6:.2f} Mbit/s")
    rate_at_least(through, 0.85 * links * LINK, s, "the busiest links' payload together")
    for model, rate in rates.items():
        if not shared:
            assert rate <= limit, f"{model} got {rate:.1f} images/s, above {limit:.1f}"
        assert_within_its_downlink(s, model, rate, blocks[model][0] * BLOCK, images)
        # what its downlink carried reached the model: wire = payload × 1514/1448, plus the
        # ACKs of what the host itself sends (a 66-byte ACK for every one or two 1514-byte
        # frames of its uplink: the leader h2 of single-broadcast sends 5 blocks a round and
        # receives 1, so its ACKs alone are 11-22 % of its payload), and up to two rounds
        # still buffered in 7 s
        acks = 66 / 1514 * uplink(s, model)
        carried = uplink(s, model, direction="down") - acks
        payload = rate * blocks[model][0] * BLOCK / images * 8
        rate_at_least(payload, 0.85 * carried, s, f"{model}'s payload of what its downlink carried")
    sending = min(uplink(s, h) for h in busy)
    for h in idle:  # ACKs only: a few % of what a sender carries
        assert uplink(s, h) < 0.1 * sending, (h, uplink(s, h), sending)
    with open(last_run(tmp_path) / "rounds.csv", newline="") as f:
        rounds = list(csv.DictReader(f))
    assert {r["model"] for r in rounds} == {"h1", "h2", "h3", "h4"}
    assert sum(int(r["images"]) for r in rounds) == e["images_delivered"]


def test_duplicated_pipelines_share_the_storage_uplink(tmp_path):
    """Four independent pipelines read raw blocks from h5: its uplink caps the models together
    at four times a model's share; TCP need not split it evenly (one CI run: one model at 5 %
    of its share, three at 4/3), so no model's own rate is bounded by its share."""
    share = 8 / (4 * RAW * 8 / LINK)  # hand-computed: a model's quarter of h5's uplink
    s = ensemble_run(tmp_path, preprocess_rate=2000, pattern="duplicated", storage="h5")
    e = s["ensemble"]
    assert s["status"] == "ok" and e["limits"]["network"] == pytest.approx(share)
    assert e["limits"]["together"] == pytest.approx(4 * share)
    rates = [r or 0.0 for r in e["image_rate"]["per_model"].values()]
    assert sum(rates) == pytest.approx(e["image_rate"]["total"])
    assert sum(rates) <= 4 * share, f"together {sum(rates):.1f} images/s, above {4 * share:.1f}"
    carried = uplink(s, "h5")  # payload ≤ wire: 4 % headers cover the reads' few ms apart
    assert sum(rates) / 8 * RAW * 8 <= carried, (rates, carried)  # rounds of 8, in bits
    for model, rate in zip(e["image_rate"]["per_model"], rates, strict=True):
        assert_within_its_downlink(s, model, rate, RAW, 8)
    assert max(rates) <= 2000, rates  # each preprocesses for itself at 2000 images/s
    assert e["rate_over_limit"] <= 1.0
    rate_at_least(sum(rates), 0.85 * 4 * share, s, "the models' images/s together")
    for h in ("h1", "h2", "h3", "h4"):  # ACKs only
        assert uplink(s, h) < 0.1 * uplink(s, "h5"), (h, uplink(s, h), uplink(s, "h5"))
    with open(tmp_path / "run" / "rounds.csv", newline="") as f:
        rounds = list(csv.DictReader(f))
    assert {r["model"] for r in rounds} == {"h1", "h2", "h3", "h4"}
    assert sum(int(r["images"]) for r in rounds) == e["images_delivered"]


def test_preprocessing_binds_when_it_is_slower_than_the_network(tmp_path):
    """multi-broadcast, 2 preprocessors at 20 images/s: 40 images/s a model, far below the
    network's 55; the emulated preprocessing holds it there, and nothing waits on the links."""
    s = ensemble_run(tmp_path, pattern="multi-broadcast", preprocessors=2, preprocess_rate=20)
    e = s["ensemble"]
    assert e["limits"]["preprocess"] == pytest.approx(40) and e["limits"]["limit"] == 40
    # a model's rate counts the bytes of h1's and h2's blocks that arrived in the window: each
    # preprocesses a block of 8 every 0.4 s, so the window holds at most one more block from
    # each than its span allows (one begun before it), and at least one fewer
    edge = 16 / s["window"]["span_s"]
    for model, rate in e["image_rate"]["per_model"].items():
        assert rate <= 40 + edge, (model, rate, 40 + edge)
        rate_at_least(rate, 40 - edge, s, f"{model}'s images/s")
    pre = e["preprocessing_rate"]
    assert set(pre["per_host"]) == {"h1", "h2"}
    # one block of 8 over the 7 s the nodes' reads span (CI, 2026-12-08: 7.0004 s, not 7)
    assert pre["allowed"] == pytest.approx(20 + 8 / e["counted_s"]["counters"])
    assert pre["allowed"] == pytest.approx(20 + 8 / 7, rel=0.01)
    for h, r in pre["per_host"].items():
        assert r <= 20 + 8 / s["window"]["span_s"], (h, r)
    b = e["bytes_sent"]
    # the bytes a delivered image cost: 2 blocks to 3 models each, for 16 images to 4 models
    assert b["per_image"] == pytest.approx(6 * BLOCK / 64, rel=0.1), b
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["ensemble"] == e


def test_both_kinds_keep_scenario_time_when_dilated(tmp_path):
    """time_scale 10: a 1 Gbit/s scenario on 100 Mbit/s links. The ensemble's limits, rates and
    waits, and the incast's query times, are reported in scenario time; the raw records keep
    the machine's clock beside it (K times longer)."""
    k, link = 10, 1e9
    s = run_scenario(tmp_path, {
        "duration": "1.2s", "time_scale": k,
        "topology": {"hosts": 6, "link_rate": "1gbit", "queue_limit": 10000},  # see ensemble_run
        "measure": {"warmup": "0.2s", "cooldown": "0.1s", "drain": "1s"},
        "workloads": {
            "ensemble": {"kind": "ensemble", "pattern": "all-shared", "batch": 8,
                         "hosts": ["h1", "h2", "h3", "h4"], "preprocess_rate": 20000},
            "incast": {"kind": "incast", "hosts": ["h5", "h6"], "response_size": "100KB",
                       "query_rate": 100},
        },
    })  # fmt: skip
    assert s["status"] == "ok" and s["time_scale"] == k
    # Every flow reaches its receiver in order. Without receive steering a shaped queue sent
    # one flow's frames into both CPUs' backlogs: the senders found 1,500-2,100 segments
    # reordered in this run (2026-11-28; 3,200-5,000 with the uplink of branch
    # issue33-detach, whose images then fell up to 28 % short); steered, 0-1.
    tcp = s["tcp"]
    assert tcp["reorders_detected"] <= 1e-4 * tcp["segments_sent"], tcp
    # No packet lost outside the shaped queues: at the kernel's netdev_max_backlog of 1000 a
    # CPU's receive backlog dropped 76-1,521 packets in 3 runs of 10 and the images fell up
    # to 32 % short (CI, 2026-11-28); install.sh raises it to 10,000 (docs/network.md).
    assert s["host_cpu"]["backlog_drops"] == 0, (s["host_cpu"], tcp)
    e, q = s["ensemble"], s["incast"]
    limit = 32 / (3 * BLOCK * 8 / link)  # 1107 images/s: ten times the 100 Mbit/s figure
    assert e["limits"]["network"] == pytest.approx(limit)
    for model, rate in e["image_rate"]["per_model"].items():
        assert rate <= limit, (model, rate)
        assert_within_its_downlink(s, model, rate, 3 * BLOCK, 32)  # both in scenario time
        rate_at_least(rate, 0.85 * limit, s, f"{model}'s images/s in scenario time")
    # 100 queries/s per host for 0.9 s measured: 180 for both (Poisson ±3σ: ±40)
    assert 140 <= q["queries_measured"] <= 220 and q["failed"] == 0
    assert q["query_rate_per_host"]["configured"] == 100
    with open(tmp_path / "run" / "queries.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["completed"] == "True"]
    assert min(float(r["qct_s"]) for r in rows) >= 100e3 * 8 / link  # 0.8 ms at 1 Gbit/s
    for r in rows:
        assert float(r["qct_wall_s"]) == pytest.approx(k * float(r["qct_s"]), rel=1e-4)
    with open(tmp_path / "run" / "rounds.csv", newline="") as f:
        for r in csv.DictReader(f):
            assert float(r["wait_wall_s"]) == pytest.approx(k * float(r["wait_s"]), abs=1e-5)
