"""The machine's CPU over the window, from /proc/stat lines worked out by hand."""

import pytest

from testbed.core import hostcpu
from testbed.core.errors import ScenarioError
from testbed.scenario.resolve import load_scenario_data


def test_busy_and_steal_shares_between_two_reads():
    # cpu  user nice system idle iowait irq softirq steal guest guest_nice
    a = hostcpu.parse("cpu  1000 0 500 8000 100 0 400 0 0 0")
    b = hostcpu.parse("cpu  1600 0 700 8300 100 0 500 300 0 0")
    # busy grew 600 + 200 + 100 = 900, steal 300, idle 300: 1500 jiffies in all
    cpu = hostcpu.between(a, b)
    assert (cpu["busy"], cpu["steal"]) == (0.6, 0.2)
    (w,) = hostcpu.warnings(cpu, 10_000)
    assert "hypervisor took 20%" in w


def test_a_saturated_machine_is_called_out_and_a_quiet_one_is_not():
    a = hostcpu.parse("cpu  0 0 0 0 0 0 0 0 0 0")
    assert (
        "98% busy"
        in hostcpu.warnings(hostcpu.between(a, hostcpu.parse("cpu  980 0 0 20 0 0 0 0")), None)[0]
    )
    assert (
        hostcpu.warnings(hostcpu.between(a, hostcpu.parse("cpu  300 0 0 700 0 0 0 10")), None) == []
    )
    assert hostcpu.between(a, a)["busy"] is None  # no time passed: no share


def test_this_machines_stat_reads():
    cpu = hostcpu.read()
    assert cpu.total >= cpu.busy + cpu.steal > 0


def test_expectations_may_gate_on_steal():
    s = load_scenario_data(
        {"name": "x", "topology": {"hosts": 2}, "workloads": {"linkcheck": {}},
         "expect": ["host_cpu.steal < 0.05"]}, "s.yaml",
    )  # fmt: skip
    assert len(s.expect) == 1
    with pytest.raises(ScenarioError, match=r"host_cpu\.stael"):
        load_scenario_data(
            {"name": "x", "topology": {"hosts": 2}, "workloads": {"linkcheck": {}},
             "expect": ["host_cpu.stael < 0.05"]}, "s.yaml",
        )  # fmt: skip


def test_backlog_drops_between_two_reads_and_the_warning():
    # /proc/net/softnet_stat: one line per CPU, hex; the second column is drops
    before = hostcpu.softnet_drops("002ded85 00000000 00000000\n002eb697 00000003 00000001\n")
    after = hostcpu.softnet_drops("002ded99 00000367 00000000\n002eb6a0 000005d3 00000005\n")
    assert (before, after) == (3, 0x367 + 0x5D3)  # 871 + 1491 = 2362
    a = hostcpu.parse("cpu  0 0 0 0 0 0 0 0 0 0")
    cpu = hostcpu.between(
        hostcpu.CpuTimes(a.busy, a.steal, a.total, before),
        hostcpu.CpuTimes(300, 0, 1000, after),
    )
    assert cpu["backlog_drops"] == 2359
    (w,) = hostcpu.warnings(cpu, 1000)
    assert "dropped 2359 packets" in w and "netdev_max_backlog = 1000" in w
    assert hostcpu.warnings({**cpu, "backlog_drops": 0}, 1000) == []


def test_a_short_backlog_is_named_with_its_fix():
    w = hostcpu.backlog_warning(1000)
    assert w is not None and "is 1000" in w and "sysctl -w net.core.netdev_max_backlog=10000" in w
    assert hostcpu.backlog_warning(hostcpu.BACKLOG_MIN) is None
    assert hostcpu.backlog_warning(None) is None  # not readable: nothing to say
    assert hostcpu.read().backlog_drops >= 0 and hostcpu.backlog_limit() is not None
