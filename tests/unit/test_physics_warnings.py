"""What a workload's own section says is wrong is said out loud: flows that beat the slowest
link of their path, with the count and the worst ratio; clocks the machine could not keep."""

from testbed.network.shaping.stats import over_cap
from testbed.workloads.controller import Context
from testbed.workloads.training.horovod import HorovodJob
from testbed.workloads.websearch.controller import Websearch


def controller(cls, name):
    c = cls.__new__(cls)
    c.name, c.time_scale = name, 1.0
    return c


def test_flows_faster_than_their_link_make_a_warning():
    (w,) = controller(Websearch, "web").warnings(
        {"flows_over_link_rate": 29, "max_flow_rate_over_link": 1.208}
    )
    assert w.startswith("web: ") and "29 web-search flow(s)" in w and "1.21x" in w


def test_no_warning_when_every_flow_kept_to_its_link():
    ws = controller(Websearch, "websearch")
    assert ws.warnings({"flows_over_link_rate": 0, "max_flow_rate_over_link": 0.97}) == []


def test_a_late_clock_makes_a_warning():
    ws = controller(Websearch, "websearch")
    (w,) = ws.warnings({"start_lag_s": {"p99": 0.2}, "arrival_rate_per_host": {"configured": 1.0}})
    assert "started late" in w and "200.0 ms" in w
    (w,) = controller(HorovodJob, "job").warnings({"compute_time_s": 1.0, "compute_s_mean": 1.2})
    assert w.startswith("job: ") and "20% longer" in w
    assert (
        controller(HorovodJob, "job").warnings({"compute_time_s": 1.0, "compute_s_mean": 1.01})
        == []
    )
    assert Context  # the controllers' shared context (a smoke check of the import)


def test_a_link_that_carried_more_than_its_cap_makes_a_warning():
    """100 Mbit/s over 10 s is 125 MB; 1 % for the counters' reads, the bucket's 100 µs
    (1250 B) and two jumbo frames on top are all a shaped link may add: 101.1 Mbit/s is over,
    101.0 is not."""

    def link(*rates: float) -> dict:
        return {"from": "h1", "to": "sw", "rate_bps": 100_000_000,
                "classes": {f"c{i}": {"rate_bps": r} for i, r in enumerate(rates)}}  # fmt: skip

    assert over_cap([link(60e6, 41e6)], 10.0) == []
    (msg,) = over_cap([link(60e6, 41.1e6)], 10.0)
    assert "h1 -> sw carried 101.10 Mbit/s" in msg and "cap of 100 Mbit/s" in msg


def test_a_fast_link_may_add_two_of_its_packets_not_more():
    """link_mode: fast hands on packets of up to 43 frames (65,102 B): two of them over 10 s
    at 100 Mbit/s is 0.104 Mbit/s more than two jumbo frames allow."""

    def link(rate: float) -> dict:
        return {
            "from": "h1",
            "to": "sw",
            "rate_bps": 100_000_000,
            "classes": {"be": {"rate_bps": rate}},
        }

    assert over_cap([link(101.05e6)], 10.0) != []
    assert over_cap([link(101.05e6)], 10.0, packet=43 * 1514) == []
    assert over_cap([link(101.11e6)], 10.0, packet=43 * 1514) != []
