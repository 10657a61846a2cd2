"""time_scale: what a dilated scenario runs as, and how its figures come back, checked by hand."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from testbed.core.errors import ScenarioError
from testbed.scenario import dilation
from testbed.scenario.resolve import load_scenario_data, wall_scenario

THESIS = {
    "name": "t",
    "duration": "12s",
    "time_scale": 100,
    "measure": {"warmup": "2s", "cooldown": "2s", "drain": "1s"},
    "topology": {"hosts": 8, "link_rate": "10gbit", "delay": "10us"},
    "tc_profile": "thesis-2band",
    "workloads": {
        "horovod": {"model_size": "100MB", "compute_to_network_ratio": 2, "tc_class": "low"},
        "websearch": {"utilization": "12.5%"},
        "linkcheck": {"short_interval": "10ms"},
    },
}


def test_the_machine_runs_the_thesis_at_a_hundredth_with_every_size_kept():
    s = load_scenario_data(THESIS, "t.yaml")
    w = wall_scenario(s)
    assert w.time_scale == 1
    assert w.topology.link_rate == 100_000_000  # 10 Gbit/s / 100
    assert w.topology.delay == pytest.approx(1e-3)  # 10 µs × 100
    assert (w.duration, w.measure.warmup, w.measure.cooldown) == (1200, 200, 200)
    assert w.measure.drain == 100
    h, sh = w.workloads.horovod, s.workloads.horovod
    # bytes per iteration 2 (1 - 1/8) 100 MB = 175 MB; R = 2 at 10 Gbit/s: 280 ms (thesis)
    assert sh.d.compute_time == pytest.approx(0.28)
    assert h.d.compute_time == pytest.approx(28.0)
    assert h.d.compute_to_network_ratio == pytest.approx(2.0)  # the ratio is kept
    assert h.d.model_bytes == sh.d.model_bytes == 100_000_000
    assert h.fusion_threshold == sh.fusion_threshold == 5_333_329
    assert h.cycle_time == pytest.approx(0.1)  # Horovod's 1 ms cycle, dilated
    # 12.5 % of 10 Gbit/s in flows of ~1.71 MB: 91.3 flows/s per host; 0.913 on the machine
    ws, sws = w.workloads.websearch, s.workloads.websearch
    assert sws.d.arrival_rate == pytest.approx(91.29, rel=1e-3)
    assert ws.d.arrival_rate == pytest.approx(sws.d.arrival_rate / 100)
    assert ws.d.utilization == pytest.approx(12.5)
    assert w.workloads.linkcheck.short_interval == pytest.approx(1.0)
    assert w.topology.mtu == 1500 and w.tc_profile.classes[0].limit == s.tc_profile.classes[0].limit


def test_a_profile_keeps_its_shape_when_dilated(tmp_path):
    from testbed.workloads.training.model import models
    from testbed.workloads.training.model.synthetic import layers_for

    trace = tmp_path / "p.txt"
    trace.write_text("1 a 1000 3000 0 4000\n2 b 500 1000 0 8000\n")  # µs
    s = load_scenario_data(
        {"name": "p", "time_scale": 10, "topology": {"hosts": 2, "link_rate": "1gbit"},
         "workloads": {"horovod": {"profile": str(trace)}}}, "p.yaml"
    )  # fmt: skip
    layers = layers_for(wall_scenario(s).workloads.horovod)
    times = [t for x in layers for t in (x.forward_s, x.backward_s)]
    assert times == pytest.approx([0.01, 0.03, 0.005, 0.01])
    assert models.total_compute(layers) == pytest.approx(0.055)


def test_a_minimum_rto_in_scenario_time_is_k_times_longer_on_the_machine():
    topo = {**THESIS["topology"], "tcp_rto_min": "1s"}  # ns-3's MinRto
    s = load_scenario_data({**THESIS, "topology": topo}, "t.yaml")
    assert wall_scenario(s).topology.tcp_rto_min == pytest.approx(100.0)
    from testbed.scenario.topology import build_plan

    assert build_plan(wall_scenario(s), "abcdef").tcp_rto_min_us == 100_000_000
    assert build_plan(load_scenario_data(THESIS, "t.yaml"), "abcdef").tcp_rto_min_us is None
    # the initial RTO likewise: the thesis' 43.5 ms (2 × its worst-case RTT) at K = 100
    topo = {**THESIS["topology"], "tcp_rto_initial": "43.5ms"}
    s = load_scenario_data({**THESIS, "topology": topo}, "t.yaml")
    assert build_plan(wall_scenario(s), "abcdef").tcp_rto_initial_us == 4_350_000
    assert build_plan(load_scenario_data(THESIS, "t.yaml"), "abcdef").tcp_rto_initial_us is None


def test_a_receive_buffer_is_bytes_and_is_not_dilated():
    """Sizes are kept at any K: the thesis' 128 KB window is 128 KB on the machine too."""
    from testbed.scenario.topology import build_plan

    topo = {**THESIS["topology"], "tcp_rcvbuf": "210KB"}
    s = wall_scenario(load_scenario_data({**THESIS, "topology": topo}, "t.yaml"))
    assert s.topology.tcp_rcvbuf == 210_000
    assert build_plan(s, "abcdef").tcp_rcvbuf == 210_000
    assert build_plan(load_scenario_data(THESIS, "t.yaml"), "abcdef").tcp_rcvbuf is None


def test_time_scale_one_changes_nothing():
    s = load_scenario_data({**THESIS, "time_scale": 1}, "t.yaml")
    assert dilation.wall_overrides(s) == {} and wall_scenario(s) is s


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"time_scale": 0}, "time_scale: must be > 0"),
        ({"time_scale": -2}, "time_scale: must be > 0"),
        ({"time_scale": 2e6}, "time_scale: must be ≤"),
        (
            {"time_scale": 1e6 / 2, "topology": {"hosts": 8, "link_rate": "1gbit"}},
            "below 8kbit; use time_scale ≤ 125000",
        ),
        ({"time_scale": 10000}, "more than a day"),
        ({"time_scale": 1000, "measure": {"drain": "100s"}}, "measure.drain: must be ≤"),
        # ns-3's 1 s minimum RTO at K = 200 would be 200 s here; Linux allows at most 120 s
        (
            {
                "time_scale": 200,
                "topology": {"hosts": 8, "link_rate": "10gbit", "tcp_rto_min": "1s"},
            },
            "topology.tcp_rto_min: must be ≤ 120",
        ),
        (
            {
                "time_scale": 200,
                "topology": {"hosts": 8, "link_rate": "10gbit", "tcp_rto_initial": "1s"},
            },
            "topology.tcp_rto_initial: must be ≤ 120",
        ),
    ],
)
def test_bad_time_scale_is_one_line_naming_the_field(change, message):
    with pytest.raises(ScenarioError, match="time_scale") as e:
        load_scenario_data({**THESIS, **change}, "t.yaml")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_cli_refuses_a_bad_time_scale_with_exit_2(tmp_path):
    import yaml

    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({**THESIS, "time_scale": 0}))
    r = subprocess.run([sys.executable, "-m", "testbed.cli", "validate", str(f)],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2 and "time_scale" in r.stderr and "Traceback" not in r.stderr


def test_the_summary_comes_back_in_scenario_time():
    wall = {
        "duration_s": 1200.0,
        "window": {"t0": 5.0, "start": 205.0, "stop": 1005.0, "warmup_s": 200.0,
                   "cooldown_s": 200.0, "span_s": 800.0, "drain_limit_s": 100.0},
        "setup_s": {"build": 0.3}, "teardown_s": 0.2,
        "links": [{"rate_bps": 100e6, "classes": {"high": {"bytes": 7, "rate_bps": 12.5e6}}}],
        "horovod": {"iteration_time_s": {"mean": 28.3, "p50": 28.2, "p99": 29.0},
                    "compute_time_s": 28.0, "compute_s_mean": 28.0, "wait_s_mean": 0.3,
                    "compute_to_network_ratio": 2.0, "iterations": 40},
        "websearch": {"arrival_rate_per_host": {"configured": 0.913, "achieved": 0.9},
                      "fct_s": {"small": {"count": 3, "mean": 0.05, "p50": 0.04, "p99": 0.2}},
                      "utilization_pct": {"configured": 12.5}, "max_flow_rate_over_link": 0.9},
        "linkcheck": {"link_rate_bps": 100e6, "window_s": [200.0, 1000.0],
                      "bulk": [{"goodput_bps": 95e6, "bytes": 9}],
                      "short": {"fct_s": {"mean": 0.5, "p50": 0.4, "p99": 0.9, "count": 4}}},
    }  # fmt: skip
    from testbed.scenario import expect

    templates = expect.template_for(load_scenario_data(THESIS, "t.yaml"))
    s = dilation.scenario_summary(wall, 100, templates)
    assert s["time_scale"] == 100 and s["wall"]["duration_s"] == 1200.0
    assert s["duration_s"] == 12.0 and s["window"]["span_s"] == 8.0
    assert s["window"]["start"] == 205.0  # wall-clock edges stay wall-clock
    assert s["setup_s"] == {"build": 0.3} and s["teardown_s"] == 0.2
    assert s["links"][0]["rate_bps"] == 10e9
    assert s["links"][0]["classes"]["high"] == {"bytes": 7, "rate_bps": 1.25e9}
    h = s["horovod"]
    assert h["iteration_time_s"]["mean"] == pytest.approx(0.283)
    assert (h["compute_time_s"], h["compute_to_network_ratio"], h["iterations"]) == (0.28, 2.0, 40)
    ws = s["websearch"]
    assert ws["arrival_rate_per_host"]["configured"] == pytest.approx(91.3)
    assert ws["fct_s"]["small"] == {"count": 3, "mean": 0.0005, "p50": 0.0004, "p99": 0.002}
    assert ws["max_flow_rate_over_link"] == 0.9
    lc = s["linkcheck"]
    assert lc["bulk"][0]["goodput_bps"] == 9.5e9 and lc["window_s"] == [2.0, 10.0]
    assert lc["short"]["fct_s"]["mean"] == 0.005
    assert wall["duration_s"] == 1200.0  # the input is left alone


def test_records_keep_both_clocks(tmp_path):
    (tmp_path / "flows.csv").write_text(
        "id,start,lag_s,fct_s,completed\nf,5.0,0.01,2.5,True\ng,6.0,,,False\n"
    )
    (tmp_path / "iterations.csv").write_text(
        "worker,duration_s,compute_s,wait_s\nh1,28.3,28.0,0.3\n"
    )
    files = {
        "flows.csv": ("fct_s", "lag_s"),
        "iterations.csv": ("duration_s", "compute_s", "wait_s"),
    }
    dilation.scenario_records(tmp_path, 100, files)
    dilation.scenario_records(tmp_path, 100, files)  # twice: done once
    with open(tmp_path / "flows.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == [
        "id",
        "start",
        "lag_s",
        "lag_wall_s",
        "fct_s",
        "fct_wall_s",
        "completed",
    ]
    assert (rows[0]["fct_s"], rows[0]["fct_wall_s"], rows[0]["start"]) == ("0.025", "2.5", "5.0")
    assert rows[1]["fct_s"] == "" and rows[1]["fct_wall_s"] == ""
    with open(tmp_path / "iterations.csv", newline="") as f:
        (it,) = list(csv.DictReader(f))
    assert float(it["duration_s"]) == pytest.approx(0.283) and it["duration_wall_s"] == "28.3"
    json.dumps(rows)
