"""The thesis' ch. 5 model (`model: thesis-ns3`) against the numbers its run script writes
(hgao10/ns3 runs/pfabric_flows_horovod/generate_traffic_and_run_pfabric_horovod.py), worked
out by hand; and the emulated compute's clock, on a step clock and (a lower bound only) on
the real one."""

import time

import pytest

from testbed.scenario.resolve import load_scenario_data
from testbed.workloads.training.model import models
from testbed.workloads.training.model.synthetic import layers_for
from testbed.workloads.training.workers.horovod_worker import Clock
from tests.clocks import StepClock


def test_the_layer_sizes_are_the_run_scripts():
    """min_layer_size = int(2 · 1e8 / (9 · 50)) = 444,444 B; i < 25 one unit, 25 ≤ i ≤ 37.5
    four, the rest twelve."""
    sizes = [x.nbytes for x in models.thesis_ns3_layers()]
    assert len(sizes) == 50
    assert sizes[:25] == [444_444] * 25
    assert sizes[25:38] == [1_777_776] * 13
    assert sizes[38:] == [5_333_328] * 12
    assert sum(sizes) == 98_222_124


def test_its_static_buffers_are_the_simulators():
    """InitializeRingAllReduceMap from layer 49 down while ≤ the fusion buffer, max layer + 1
    = 5,333,329 B: twelve single layers, four of three, then {17-25} (the thesis' 5.4.5 names
    that buffer), {5-16} and {0-4}: 19 buffers."""
    sizes = [x.nbytes for x in models.thesis_ns3_layers()]
    buffers = models.static_buffers(sizes, 5_333_329)
    assert len(buffers) == 19
    assert [[j] for j in range(49, 37, -1)] == buffers[:12]
    assert buffers[12:] == [
        list(range(35, 38)), list(range(32, 35)), list(range(29, 32)), list(range(26, 29)),
        list(range(17, 26)), list(range(5, 17)), list(range(0, 5)),
    ]  # fmt: skip


def test_its_compute_spread_is_the_run_scripts():
    """T = R × 140 ms = 2240 ms at R = 16: forward T/3 from 2(T/3)/50 = 29.867 ms falling by
    2(T/3)/(50 · 49) = 0.6095 ms a layer; backward rising by 1.2190 ms; the zero ends become
    one step each, so the iteration computes 2240 + 0.6095 + 1.2190 = 2241.829 ms."""
    s = load_scenario_data(
        {
            "name": "t",
            "topology": {"hosts": 8, "link_rate": "10gbit"},
            "workloads": {
                "torch-ddp": {"model": "thesis-ns3", "compute_time": "2240ms", "queue": "priority",
                              "barrier": False, "fusion": "static"},
            },
        },
        "t.yaml",
    )  # fmt: skip
    ((_, w),) = s.workloads.of_kind("torch-ddp")
    layers = layers_for(w)
    assert sum(x.nbytes for x in layers) == 98_222_124  # no scaling without model_size
    assert layers[0].forward_s == pytest.approx(0.029867, abs=1e-6)
    assert layers[1].forward_s - layers[0].forward_s == pytest.approx(-0.00060952, abs=1e-8)
    assert layers[49].forward_s == pytest.approx(0.00060952, abs=1e-8)
    assert layers[0].backward_s == pytest.approx(0.0012190, abs=1e-7)
    assert layers[49].backward_s == pytest.approx(0.0597333, abs=1e-7)  # 2(2T/3)/50
    assert models.total_compute(layers) == pytest.approx(2.241829, abs=1e-6)


def test_oversleep_is_not_carried_across_a_wait():
    """A layer that overslept may shorten the next one only when it follows at once: after a
    wait (for gradients, the network) the next layer computes its whole time, so no
    iteration is faster than its compute. On a step clock (tests/clocks.py): a real 10 ms
    sleep bounded under 25 ms fails when the hypervisor takes the CPU."""
    step = StepClock()
    clock = Clock(step)
    clock.compute(0.01)
    clock.debt = 0.02  # as if the last layer had overslept by 20 ms
    step.sleep(0.05)  # then waited 50 ms for the network
    t0 = step.perf_counter()
    clock.compute(0.03)
    assert step.perf_counter() - t0 == pytest.approx(0.03)  # the whole 30 ms
    clock.debt = 0.02  # back to back, the debt is paid by the next layer
    t0 = step.perf_counter()
    clock.compute(0.03)
    assert step.perf_counter() - t0 == pytest.approx(0.01)  # 30 ms less the 20 owed


def test_after_a_wait_a_real_layer_computes_its_whole_time():
    """The same on the real clock, as a lower bound only (a sleep may overshoot, never end
    early): the debt of an overslept layer does not shorten a layer after a wait."""
    clock = Clock()
    clock.compute(0.01)
    clock.debt = 0.02
    time.sleep(0.05)
    t0 = time.perf_counter()
    clock.compute(0.03)
    assert time.perf_counter() - t0 >= 0.03
