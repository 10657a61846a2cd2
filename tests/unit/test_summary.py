"""The summary's declaration (testbed/core/summary.py): the units time dilation and `expect:` read
from it, against the table they were written as by hand before it existed; every key a real
summary has (tests/integration/data/summary_keys.json) is declared and reserved."""

from __future__ import annotations

import json
from pathlib import Path

from testbed.core import summary
from testbed.core.summary import CLASS
from testbed.scenario.schema import RESERVED_NAMES

RECORDED = Path(__file__).parents[1] / "integration" / "data" / "summary_keys.json"
TCP = {
    "segments_sent", "retransmitted_segments", "timeouts", "spurious_timeouts", "loss_probes",
    "receive_buffer_drops", "out_of_order_drops", "receive_prunes", "delayed_acks",
    "reorders_detected", "dsacks_received",
}  # fmt: skip
# expect.CORE as it was written by hand (2026-11-27, commit f76c06c), plus what the
# declaration added: the queues' counts
BY_HAND = {
    "duration_s": "s",
    "time_scale": "1",
    "drain_s": "wall",
    "tcp_rto_min_s": "s",
    "tcp_rto_initial_s": "s",
    "tcp_rcvbuf_bytes": "B",
    "tcp_sndbuf_bytes": "B",
    "tcp_segment_bytes": "B",
    "tcp": dict.fromkeys(TCP, "1"),
    "teardown_s": "wall",
    "link_budget": {
        "one_flow_bps": "bps", "all_flows_bps": "bps", "demand_one_flow_bps": "bps",
        "demand_all_flows_bps": "bps", "hosts": "1", "link_load": "1", "cores": "1",
        "cpu_s_per_s": "1", "cpu_by_workload": {"*": "1"}, "cpu_fixed_cores": "1",
        "cpu_busy": "1", "cpu_load": "1",
        "load": "1", "fitting_time_scale": "1",
    },
    "setup_s": {"build": "wall", "shape": "wall", "workloads_ready": "wall"},
    "window": {"warmup_s": "s", "cooldown_s": "s", "span_s": "s", "drain_limit_s": "s",
               "edges_late_s": ["wall"]},
    "host_cpu": {"cores": "1", "busy": "1", "steal": "1", "backlog_drops": "1"},
    "links": [{"rate_bps": "bps",
               "classes": {CLASS: {"bytes": "B", "packets": "1", "drops": "1", "rate_bps": "bps",
                                  "packet_rate_hz": "hz"}},
               "shared_limit_drops": "1"}],
    "queues": {"limit_packets": "1", "samples": "1", "samples_over_limit": "1", "max_packets": "1"},
}  # fmt: skip


def test_units_are_the_ones_written_by_hand():
    assert summary.units() == BY_HAND


def test_every_recorded_key_is_declared_and_reserved():
    recorded = json.loads(RECORDED.read_text())
    for example, paths in recorded.items():
        instances = {p.split(".")[1] for p in paths if p.startswith("workloads.")}
        top = {p.split(".")[0].split("[")[0] for p in paths} - instances
        assert top <= summary.KEYS, (example, top - summary.KEYS)
    assert summary.KEYS <= RESERVED_NAMES
