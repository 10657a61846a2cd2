"""The measurement itself: per-host load on the wire, no flow faster than its link, no
survivorship bias in FCT, one window, workers that start and stop together. Every check uses
values computed here from the scenario and the raw records, not testbed's own summary."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.bounds import rate_at_least
from tests.needs import need

from .helpers import run_scenario

need("horovod.torch", "Horovod is installed by install.sh")


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def cdf_file(tmp_path: Path, text: str) -> str:
    p = tmp_path / "sizes.csv"
    p.write_text(text)
    return str(p)


def test_websearch_load_is_asked_per_host_and_lands_on_every_link(tmp_path):
    """Thesis formula 5.3 is per host: at U = 10 % each host link carries 10 % of its rate,
    however many hosts there are (not 10 % / N). Fixed 100 KB flows keep the variance low."""
    rate, util, hosts = 100_000_000, 0.10, 4
    s = run_scenario(
        tmp_path,
        {
            "duration": "11s",
            "measure": {"warmup": "1s", "cooldown": "1s"},
            "topology": {"hosts": hosts, "link_rate": rate},
            "workloads": {
                "websearch": {
                    "sizes": cdf_file(tmp_path, "bytes,cdf\n100000,0\n100000,1\n"),
                    "utilization": f"{util * 100}%",
                }
            },
        },
    )
    per_host = util * rate / (100_000 * 8)  # 12.5 flows/s, by hand
    flows = [f for f in rows(tmp_path / "run" / "flows.csv") if f["measured"] == "True"]
    for h in (f"h{i}" for i in range(1, hosts + 1)):
        mine = [f for f in flows if f["src"] == h]
        assert len(mine) / 9.0 == pytest.approx(per_host, rel=0.2), h
    # the wire: each downlink carries its host's replies (100 KB + 66 B per 1448 B frame) and
    # the ACKs of what it serves; mean over the links, from the kernel's class counters
    down = [x["classes"]["be"]["rate_bps"] for x in s["links"] if x["direction"] == "down"]
    share = sum(down) / len(down) / rate
    assert share <= 1.25 * util, f"downlinks carry {share:.1%} of the link"
    rate_at_least(share, 0.95 * util, s, "the downlinks' share of the link")


def test_small_flows_never_beat_the_link_on_an_idle_slow_link(tmp_path):
    """The worst case for a token bucket: idle 10 Mbit/s links, so every bucket is full when a
    small flow starts. With 1 ms (at least two frames) of burst per hop, 41 of 119 such flows beat the wire."""
    rate = 10_000_000
    run_scenario(
        tmp_path,
        {
            "duration": "16s",
            "measure": {"warmup": "1s", "cooldown": "1s"},
            "topology": {"hosts": 3, "link_rate": rate},
            "tc_profile": "thesis-2band",
            "workloads": {
                "websearch": {
                    "sizes": cdf_file(tmp_path, "bytes,cdf\n4000,0\n100000,1\n"),
                    "utilization": "5%",
                }
            },
        },
    )
    done = [f for f in rows(tmp_path / "run" / "flows.csv") if f["completed"] == "True"]
    assert len(done) >= 20
    fastest = max(int(f["size_bytes"]) * 8 / float(f["fct_s"]) for f in done)
    assert fastest <= rate, f"a flow moved {fastest / 1e6:.2f} Mbit/s over a 10 Mbit/s link"


@pytest.mark.parametrize("drain", ["30s", "0s"])
def test_flows_that_start_in_the_window_finish_or_are_counted_censored(tmp_path, drain):
    """3 MB flows take ≥ 1.2 s at 20 Mbit/s and the cool-down is 0.5 s, so flows from the end
    of the window are still running when the run ends: with a drain they finish, without one
    they are censored and counted, never silently dropped."""
    s = run_scenario(
        tmp_path,
        {
            "seed": 3,
            "duration": "9s",
            "measure": {"warmup": "1s", "cooldown": "0.5s", "drain": drain},
            "topology": {"hosts": 3, "link_rate": "20mbit"},
            "workloads": {
                "websearch": {
                    "sizes": cdf_file(tmp_path, "bytes,cdf\n3000000,0\n3000000,1\n"),
                    "arrival_rate": 0.3,
                }
            },
        },
    )
    w, win = s["websearch"], s["window"]
    flows = rows(tmp_path / "run" / "flows.csv")
    measured = [f for f in flows if win["start"] <= float(f["start"]) < win["stop"]]
    assert {f["id"] for f in measured} == {f["id"] for f in flows if f["measured"] == "True"}
    unfinished = [f for f in measured if f["completed"] != "True"]
    assert w["flows_measured"] == len(measured) >= 3
    assert w["censored"] == len(unfinished) == w["fct_s"]["all"]["censored"]
    assert w["fct_s"]["all"]["count"] + w["censored"] == len(measured)
    end = win["t0"] + s["duration_s"]
    if drain == "30s":
        assert unfinished == []
        assert any(float(f["end"]) > end for f in measured)  # finished during the drain
    else:
        assert len(unfinished) >= 1


def test_workers_start_at_t0_and_stop_after_the_same_iteration(tmp_path):
    s = run_scenario(
        tmp_path,
        {
            "duration": "8s",
            "topology": {"hosts": 3, "link_rate": "1gbit"},
            "workloads": {"horovod": {"model_size": "1MB", "compute_time": "250ms"}},
        },
    )
    it = rows(tmp_path / "run" / "iterations.csv")
    t0 = s["window"]["t0"]
    firsts = [float(r["start"]) for r in it if r["iteration"] == "0"]
    assert len(firsts) == 3
    assert all(abs(t - t0) < 0.05 for t in firsts), [t - t0 for t in firsts]
    counts = {w: sum(1 for r in it if r["worker"] == w) for w in ("h1", "h2", "h3")}
    assert len(set(counts.values())) == 1 and counts["h1"] >= 20, counts
    # ... and stop at the run's end on their own: no iteration starts after it, and the last
    # one starts within about one iteration of it (not when the orchestrator gets round to it)
    end = t0 + s["duration_s"]
    last = max(float(r["start"]) for r in it)
    period = s["horovod"]["iteration_time_s"]["mean"]
    assert end - 2 * period < last < end, (last - end, period)
    # iterations only end after their compute: nothing faster than physics allows
    assert all(float(r["duration_s"]) >= 0.25 for r in it)
