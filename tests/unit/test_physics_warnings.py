"""What a workload's own section says is wrong is said out loud: flows that beat the slowest
link of their path, with the count and the worst ratio; clocks the machine could not keep."""

from testbed.workloads.controller import Context
from testbed.workloads.training.horovod import HorovodJob
from testbed.workloads.websearch.controller import Websearch


def controller(cls, name):
    c = cls.__new__(cls)
    c.name = name
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
