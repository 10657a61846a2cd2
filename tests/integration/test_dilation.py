"""A dilated run (time_scale 10: a 1 Gbit/s network on 100 Mbit/s links, every clock ten times
slower) reports in scenario time, and physics holds in scenario time: no flow beats its link,
no iteration beats its compute, the class counters carry the training's bytes, flows arrive at
the configured rate. Compared with hand-computed values and the raw records' wall clock."""

from __future__ import annotations

import csv
import json

import pytest

from testbed.run.prometheus import scalar
from testbed.scenario.resolve import load_scenario_data
from testbed.workloads.training.model.predict import for_scenario
from tests.bounds import rate_at_least, time_at_most
from tests.needs import need

from .helpers import reopened_tsdb, run_scenario

need("horovod.torch", "Horovod is installed by install.sh")

K = 10
LINK = 1_000_000_000  # scenario: 1 Gbit/s; the machine: 100 Mbit/s
DATA = {
    "duration": "2.4s",
    "time_scale": K,
    "measure": {"warmup": "0.3s", "cooldown": "0.3s", "drain": "2s"},
    "topology": {"hosts": 4, "link_rate": "1gbit"},
    "tc_profile": "thesis-2band",
    "workloads": {
        "horovod": {"model_size": "10MB", "compute_to_network_ratio": 4, "tc_class": "low"},
        "websearch": {"utilization": "10%"},
    },
    "metrics": {"scrape_interval": "1s"},
}


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def dilated(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dilated")
    return run_scenario(tmp, DATA), tmp / "run"


def test_the_summary_is_in_scenario_time(dilated):
    s, run = dilated
    assert s["status"] == "ok" and s["time_scale"] == K
    assert s["duration_s"] == pytest.approx(2.4) and s["wall"]["duration_s"] == pytest.approx(24)
    assert s["window"]["span_s"] == pytest.approx(1.8)
    # the machine's links ran at 100 Mbit/s; the summary speaks of the scenario's 1 Gbit/s
    assert {x["rate_bps"] for x in s["links"]} == {LINK}
    h = s["horovod"]
    # 2 (1 - 1/4) 10 MB = 15 MB per iteration; R = 4 at 1 Gbit/s: 480 ms of compute
    assert h["compute_time_s"] == pytest.approx(0.48)
    assert h["min_iteration_over_compute"] >= 1.0  # no iteration beats its compute
    its = rows(run / "iterations.csv")
    assert all(float(r["duration_s"]) >= 0.48 for r in its)
    for r in its:  # both clocks in the raw records
        assert float(r["duration_wall_s"]) == pytest.approx(K * float(r["duration_s"]), rel=1e-6)
    resolved = (run / "scenario.yaml").read_text()
    assert "time_scale: 10" in resolved and "link_rate: 1gbit" in resolved
    # Horovod's clocks, dilated: its cycle (1 ms) and how long Gloo waits for a peer (30 s)
    env = json.loads((run / "horovod" / "backend-env.json").read_text())["env"]
    assert env["HOROVOD_CYCLE_TIME"] == "10" and env["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "300"
    # the event model's time for the job alone, in scenario time; the job runs in the low
    # class beside web-search flows, so it can only be slower (0.49-0.59 s seen)
    pred = for_scenario(load_scenario_data({"name": "p", **DATA}, "p"))["iteration_s"]
    assert h["iteration_time_s"]["mean"] >= 0.98 * pred
    time_at_most(h["iteration_time_s"]["mean"], 2 * pred, s, "the mean iteration")


def test_flows_arrive_at_the_scenario_rate_and_never_beat_the_link(dilated):
    s, run = dilated
    w = s["websearch"]
    # 10 % of 1 Gbit/s in flows of ~1.71 MB: 7.3 flows/s per host in scenario time
    per_host = 0.10 * LINK / (w["mean_flow_size"] * 8)
    assert w["arrival_rate_per_host"]["configured"] == pytest.approx(per_host)
    flows = rows(run / "flows.csv")
    measured = [f for f in flows if f["measured"] == "True"]
    # 4 hosts × 7.3/s × 1.8 s = 53 expected; ±4σ ≈ ±29
    assert 24 <= len(measured) <= 82, len(measured)
    done = [f for f in flows if f["completed"] == "True"]
    assert done
    for f in done:  # serialisation at the scenario's 1 Gbit/s is the floor of every FCT
        fct = float(f["fct_s"])
        assert int(f["size_bytes"]) * 8 / fct <= LINK, f
        assert float(f["fct_wall_s"]) == pytest.approx(K * fct, rel=1e-6)
    assert w["max_flow_rate_over_link"] <= 1.0


def test_class_counters_carry_the_training_bytes(dilated):
    s, run = dilated
    its = rows(run / "iterations.csv")
    for x in (x for x in s["links"] if x["direction"] == "up"):
        n = sum(1 for r in its if r["worker"] == x["node"])
        assert x["classes"]["low"]["bytes"] >= n * 15_000_000, (x["node"], n)
    # the low class' rate over the window, in scenario units: 15 MB per ~0.49 s iteration
    # is ~245 Mbit/s of a 1 Gbit/s link (U_horovod = 1/R = 25 % at the ratio's own time)
    for x in (x for x in s["links"] if x["direction"] == "up"):
        low = x["classes"]["low"]["rate_bps"]
        assert low <= 0.26 * LINK * 1.1, (x["node"], low)
        rate_at_least(low, 0.15 * LINK, s, f"the training on {x['node']}'s uplink")


def test_prometheus_holds_scenario_durations(dilated):
    s, run = dilated
    with reopened_tsdb(run / "prometheus") as url:
        assert scalar(url, "max(max_over_time(testbed_time_scale[1h]))") == K
        assert scalar(url, "max(max_over_time(testbed_link_rate_bytes_per_second[1h]))") == LINK / 8
        total = scalar(url, "sum(max_over_time(testbed_iteration_duration_seconds_sum[1h]))")
        count = scalar(url, "sum(max_over_time(testbed_iteration_duration_seconds_count[1h]))")
    its = rows(run / "iterations.csv")
    assert count == len(its)
    assert total / count == pytest.approx(
        sum(float(r["duration_s"]) for r in its) / len(its), rel=1e-3
    )
    json.dumps(s)


def test_the_minimum_rto_is_set_in_every_host_and_its_timeouts_counted(tmp_path):
    """topology.tcp_rto_min reaches each host's net.ipv4.tcp_rto_min_us, K times longer when
    dilated; the summary counts the hosts' TCP segments, retransmissions and timeouts."""
    from pathlib import Path

    from testbed.network.runtime.namespaces import inside

    from .helpers import built_network

    with built_network({"hosts": 2, "tcp_rto_min": "300ms"}, "70e001") as (topo, _):
        for h in topo.hosts:
            with inside(h.netns):
                value = Path("/proc/sys/net/ipv4/tcp_rto_min_us").read_text()
            assert int(value) == 300_000, h.name
    s = run_scenario(tmp_path, {
        "duration": "0.3s", "time_scale": 10, "measure": {"warmup": "0.1s", "cooldown": "0s"},
        "topology": {"hosts": 2, "link_rate": "1gbit", "tcp_rto_min": "100ms"},
        "workloads": {"linkcheck": {}},
    })  # fmt: skip
    assert s["tcp_rto_min_s"] == pytest.approx(0.1)  # scenario time; 1 s on the machine
    assert s["tcp"]["segments_sent"] > 1000 and s["tcp"]["timeouts"] >= 0
