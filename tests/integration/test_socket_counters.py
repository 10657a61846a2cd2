"""Each workload's TCP counters, from its own sockets, per class (`tcp_by_class`): a host's
/proc/net counters mix every class it sends in. A job in a low class whose queues hold 5
packets, beside web search in a high class that never fills its own: the drops, and so the
retransmissions, are the job's alone, and the workloads' sockets add up to what the hosts'
kernels counted (an independent count: the kernel's MIB, not the sockets)."""

from __future__ import annotations

import csv

from tests.needs import need

from .helpers import run_scenario

need("torch.distributed", "torch is installed by install.sh")


def test_a_lossy_low_class_shows_in_its_own_sockets_and_not_in_the_high_ones(tmp_path):
    s = run_scenario(tmp_path, {
        "duration": "10s",
        # the whole run measured, so the hosts' counters (the whole run) compare
        "measure": {"warmup": "0s", "cooldown": "0s", "drain": "5s"},
        "topology": {"hosts": 3, "link_rate": "100mbit"},
        "tc_profile": {
            "name": "lossy-low", "default": "high",
            "classes": [{"name": "high", "dscp": ["EF"], "limit": 10000},
                        {"name": "low", "dscp": ["CS1"], "limit": 5}],
        },
        "workloads": {
            "job": {"kind": "torch-ddp", "model_size": "5MB", "compute_time": "100ms",
                    "tc_class": "low"},
            "web": {"kind": "websearch", "utilization": "20%", "tc_class": "high"},
        },
    })  # fmt: skip
    assert s["status"] == "ok", s.get("error")
    drops = {c: sum(x["classes"][c]["drops"] for x in s["links"]) for c in ("high", "low")}
    # the premise: the 5-packet queues drop, the 10,000-packet ones do not
    assert drops["low"] > 0 and drops["high"] == 0, drops
    job, web = s["job"]["tcp_by_class"], s["web"]["tcp_by_class"]
    assert set(job) == {"low"} and set(web) == {"high"}, (job, web)
    low, high = job["low"], web["high"]
    assert low["sockets"] >= 2 and high["sockets"] >= 10, (low, high)
    assert low["retransmitted_segments"] > 0, low
    # the hosts' kernels counted every socket, the management network's and the set-up's too
    host = s["tcp"]
    for key in ("retransmitted_segments", "timeouts"):
        assert low[key] + high[key] <= host[key], (key, low, high, host)
    assert low["retransmitted_segments"] >= 0.75 * host["retransmitted_segments"], (low, host)
    # nothing of high's was dropped: what it retransmitted can only be a tail-loss probe or a
    # timeout that fired early (a stalled CPU), and far less of it than the lossy class
    assert high["retransmitted_segments"] <= host["loss_probes"] + host["timeouts"], (high, host)
    ratio = {k: v["retransmitted_segments"] / v["segments_sent"] for k, v in {**job, **web}.items()}
    assert ratio["high"] < 0.1 * ratio["low"], ratio
    assert low["timeout_time_s"] is not None and low["timeout_time_s"] >= 0.0  # Linux >= 6.7
    # each flow's row carries its own sender's counters, found by the client's address and
    # port in the server's record: every completed flow found one, and the flows that met a
    # timeout are no more than the class's sockets counted
    with open(tmp_path / "run" / "flows-web.csv", newline="") as f:
        flows = [r for r in csv.DictReader(f) if r["completed"] == "True"]
    assert flows and all(r["timeouts"].isdigit() for r in flows), flows[:3]
    timed_out = s["web"]["fct_s"]["all"]["timed_out"]
    assert timed_out == sum(int(r["timeouts"]) > 0 for r in flows if r["measured"] == "True")
    assert timed_out <= high["timeouts"], (timed_out, high)
