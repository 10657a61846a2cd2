"""Layer profiles, flow-size CDFs and the thesis' derived quantities: pure functions."""

import itertools
import random
from pathlib import Path

import pytest
import yaml

from testbed.core.errors import ScenarioError
from testbed.scenario.resolve import load_scenario, load_scenario_data, with_overrides
from testbed.scenario.schema import dump_scenario
from testbed.workloads.training.model import models
from testbed.workloads.training.model.synthetic import layers_for
from testbed.workloads.websearch import flowsizes

ROOT = Path(__file__).resolve().parents[2]


def test_resnet50_is_derived_from_the_architecture():
    layers = models.resnet50_layers()
    assert sum(x.params for x in layers) == 25_557_032  # torchvision's resnet50()
    assert len(layers) == 54  # 53 conv+bn, 1 fc
    # the thesis' observation: the last layers hold most parameters
    last30 = sum(x.params for x in layers[-30:])
    assert last30 / sum(x.params for x in layers) > 0.8


def test_scaling_keeps_distribution_and_total():
    layers = models.resnet50_layers()
    scaled = models.scale_to(layers, 100_000_000)
    assert models.total_bytes(scaled) == pytest.approx(100_000_000, rel=1e-5)
    assert scaled[-1].params / scaled[0].params == pytest.approx(
        layers[-1].params / layers[0].params, rel=1e-3
    )


def test_compute_progressions():
    layers = models.with_compute(models.resnet50_layers(), 0.9)
    fwd = [x.forward_s for x in layers]
    bwd = [x.backward_s for x in layers]
    assert sum(fwd) == pytest.approx(0.3) and sum(bwd) == pytest.approx(0.6)  # 1 : 2
    assert all(a > b for a, b in itertools.pairwise(fwd))  # forward falls with the index
    assert all(a < b for a, b in itertools.pairwise(bwd))  # backward rises
    steps = {round(a - b, 12) for a, b in itertools.pairwise(fwd)}
    assert len(steps) == 1  # arithmetic


def test_trace_in_seed_002_shape():
    layers = models.load_trace(ROOT / "examples/profiles/alexnet-k80.txt", "us")
    assert [x.name for x in layers] == [
        "conv1",
        "conv2",
        "conv3",
        "conv4",
        "conv5",
        "fc6",
        "fc7",
        "fc8",
    ]
    assert layers[5].nbytes == 151_011_328
    # compute-only layers (data, relu, pool, loss) are folded into gradient layers
    assert models.total_compute(layers) == pytest.approx(
        (1.2e6 + 3.27e6 + 17234.5 + 32175.7 + 3.14e6 + 11507.5 + 19831.2 + 3.886e6 + 4770.3 + 1.87e6 + 4760.26
         + 1.13e6 + 3201.22 + 5812 + 44689.7 + 295.168 + 359.744 + 19787.8 + 295.04 + 358.048 + 8033.12 + 1723.49
         + 288202 + 27650.9 + 60732.6 + 1.03216e6 + 18422.5 + 32459 + 791825 + 10996.3 + 510405 + 7872.45
         + 306129 + 4939.42 + 18666.2 + 73935 + 1092.83 + 131247 + 34423.8 + 451.904 + 317.312 + 9922.72
         + 293.024) * 1e-6, rel=1e-9)  # fmt: skip


def test_trace_errors(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("0 a 1 2\n")
    with pytest.raises(ValueError, match="6 columns"):
        models.load_trace(p)


# The published CDFs, copied from the literature (not from the module): DCTCP web search
# (Alizadeh et al. 2010, as tabulated by pFabric/HPCC, first point 4 KB as in the thesis' ns-3
# file) and VL2 data mining (Greenberg et al. 2009, as tabulated by pFabric).
WEBSEARCH_PAPER = [
    (4_000, 0.00), (10_000, 0.15), (20_000, 0.20), (30_000, 0.30), (50_000, 0.40),
    (80_000, 0.53), (200_000, 0.60), (1_000_000, 0.70), (2_000_000, 0.80),
    (5_000_000, 0.90), (10_000_000, 0.97), (30_000_000, 1.00),
]  # fmt: skip
DATAMINING_PAPER = [
    (100, 0.0), (180, 0.1), (216, 0.2), (560, 0.3), (900, 0.4), (1_100, 0.5), (1_870, 0.6),
    (3_160, 0.7), (10_000, 0.8), (400_000, 0.9), (3_160_000, 0.95), (100_000_000, 0.98),
    (1_000_000_000, 1.0),
]  # fmt: skip
# Mean of a piecewise-linear CDF: each segment is uniform, so it adds its midpoint × its mass.
# Web search, by hand:
#   7k×.15 + 15k×.05 + 25k×.10 + 40k×.10 + 65k×.13 + 140k×.07 + 600k×.10 + 1.5M×.10
#   + 3.5M×.10 + 7.5M×.07 + 20M×.03
#   = 1 050 + 750 + 2 500 + 4 000 + 8 450 + 9 800 + 60 000 + 150 000 + 350 000 + 525 000 + 600 000
#   = 1 711 550 bytes (the thesis' "1.7 MB")
WEBSEARCH_MEAN = 1_711_550
# Data mining: 140×.1 + 198×.1 + 388×.1 + 730×.1 + 1000×.1 + 1485×.1 + 2515×.1 + 6580×.1
#   + 205 000×.1 + 1 780 000×.05 + 51 580 000×.03 + 550 000 000×.02
#   = 14 + 19.8 + 38.8 + 73 + 100 + 148.5 + 251.5 + 658 + 20 500 + 89 000 + 1 547 400 + 11 000 000
#   = 12 658 203.6 bytes (pFabric's "12.7 MB")
DATAMINING_MEAN = 12_658_203.6
PAPER = {
    "websearch": (WEBSEARCH_PAPER, WEBSEARCH_MEAN),
    "datamining": (DATAMINING_PAPER, DATAMINING_MEAN),
}


@pytest.mark.parametrize("name", ["websearch", "datamining"])
def test_builtin_cdf_is_the_published_one_and_its_mean_is_the_hand_computed_one(name):
    # broken: an edited table point, or a mean that integrates steps (upper or lower sums)
    # instead of the linear segments, is off by far more than 1e-9
    table, mean = PAPER[name]
    assert flowsizes.BUILTIN[name] == table
    assert flowsizes.mean(flowsizes.BUILTIN[name]) == pytest.approx(mean, rel=1e-9)


@pytest.mark.parametrize("name", ["websearch", "datamining"])
def test_sampling_follows_the_cdf(name):
    """20 000 draws: at every published point (x, p) the share of draws ≤ x is p, and at every
    segment's midpoint it is the mean of the ends' p (linear interpolation). One binomial
    standard deviation is at most √(.25/20000) = 0.0035; the bound is 0.015, over 4σ."""
    # broken: sampling without interpolation (steps), in log space, or with u mapped the wrong
    # way (1 − u) moves these shares by 0.05 or more
    table, mean = PAPER[name]
    rng = random.Random(7)
    n = 20_000
    xs = [flowsizes.sample(flowsizes.BUILTIN[name], rng) for _ in range(n)]
    assert table[0][0] <= min(xs) and max(xs) <= table[-1][0]
    checks = list(table)
    checks += [((x0 + x1) / 2, (p0 + p1) / 2) for (x0, p0), (x1, p1) in itertools.pairwise(table)]
    for x, p in checks:
        share = sum(1 for v in xs if v <= x) / n
        assert share == pytest.approx(p, abs=0.015), (x, p, share)
    if name == "websearch":  # its sd is ~3.8 MB, so 20 000 draws give the mean ± 27 kB (1.6 %)
        assert sum(xs) / n == pytest.approx(mean, rel=0.06)


def test_csv_cdf(tmp_path):
    p = tmp_path / "c.csv"
    p.write_text("bytes,cdf\n1000,0\n2000,0.5\n3000,1\n")
    assert flowsizes.mean(flowsizes.load_csv(p)) == pytest.approx(2000)
    p.write_text("1000,0\n500,1\n")
    with pytest.raises(ValueError, match="must not decrease"):
        flowsizes.load_csv(p)


def scenario(**wl):
    return load_scenario_data(
        {
            "name": "t",
            "topology": {"hosts": 4, "link_rate": "100mbit"},
            "tc_profile": "thesis-2band",
            "workloads": wl,
        },
        "s.yaml",
    )


def test_ratio_derives_compute_time():
    h = scenario(horovod={"model_size": "1MB", "compute_to_network_ratio": 4}).workloads.horovod
    assert h.d.bytes_per_iteration == 1_500_000  # 2 (1 - 1/4) · 1 MB
    assert h.d.compute_time == pytest.approx(4 * 1_500_000 * 8 / 100e6)  # 0.48 s
    assert h.d.tc_class == "high"  # the profile's default class when none is named
    assert h.compute_time is None  # inputs stay as given


def test_compute_time_derives_ratio():
    h = scenario(horovod={"compute_time": "900ms"}).workloads.horovod
    assert h.d.model_bytes == 25_557_032 * 4
    assert h.d.compute_to_network_ratio == pytest.approx(0.9 * 100e6 / (1.5 * 25_557_032 * 4 * 8))


def test_utilization_is_the_load_of_one_host_link():
    """Thesis Table 5.5: ~1450 flows in 8 s from 8 hosts at 23 flows/s → 23 flows/s per host;
    formula 5.3: 23 × 1.7 MB × 8 / 10 Gbit/s = 3.1 % of ONE link. So the per-host rate does not
    shrink with the number of hosts."""
    mean = WEBSEARCH_MEAN  # hand-computed above
    for hosts in (2, 4, 8):
        w = load_scenario_data(
            {
                "name": "t",
                "topology": {"hosts": hosts, "link_rate": "10gbit"},
                "workloads": {"websearch": {"utilization": "3.125%"}},
            },
            "s.yaml",
        ).workloads.websearch
        assert w.d.arrival_rate == pytest.approx(0.03125 * 10e9 / (mean * 8))  # per host
        assert w.d.arrival_rate == pytest.approx(22.8, abs=0.2)  # the thesis' 23 flows/s
    w = scenario(websearch={"arrival_rate": 23}).workloads.websearch
    assert w.d.utilization == pytest.approx(23 * mean * 8 / 100e6 * 100)
    assert w.d.tc_class == "high"


def test_a_resolved_scenario_can_be_changed_and_re_resolved():
    s = scenario(
        horovod={"model_size": "1MB", "compute_to_network_ratio": 4},
        websearch={"utilization": "12.5%"},
    )
    data = yaml.safe_load(dump_scenario(s))
    assert data["workloads"]["horovod"]["derived"]["compute_time"] == "480ms"  # shown
    data["topology"]["link_rate"] = "1gbit"  # a user edits the run folder's scenario.yaml
    data["topology"]["hosts"] = 8
    again = load_scenario_data(data, "edited.yaml")
    h, w = again.workloads.horovod, again.workloads.websearch
    assert h.d.compute_time == pytest.approx(4 * 2 * (7 / 8) * 1e6 * 8 / 1e9)
    assert w.d.arrival_rate == pytest.approx(10 * s.workloads.websearch.d.arrival_rate)
    assert load_scenario_data(yaml.safe_load(dump_scenario(again)), "x") == again  # stable


def test_overrides_replace_the_partner_input():
    s = scenario(horovod={"compute_time": "1s"}, websearch={"arrival_rate": 2, "tc_class": "low"})
    o = with_overrides(
        s,
        {
            "workloads.horovod.compute_to_network_ratio": 8,
            "workloads.websearch.utilization": "25%",
            "workloads.websearch.dscp": "EF",
            "seed": 7,
        },
    )
    h, w = o.workloads.horovod, o.workloads.websearch
    assert (h.compute_time, h.compute_to_network_ratio) == (None, 8)
    assert (w.arrival_rate, w.utilization, w.tc_class, w.dscp) == (None, 25, None, 46)
    assert w.d.tc_class == "high" and o.seed == 7
    with pytest.raises(
        ScenarioError, match=r"topology\.hosts\.x: topology\.hosts is not a mapping"
    ):
        with_overrides(s, {"topology.hosts.x": 1})


@pytest.mark.parametrize("where", ["horovod", "websearch"])
def test_old_per_workload_windows_say_where_they_moved(where):
    with pytest.raises(ScenarioError, match=rf"workloads.{where}.warmup: moved.*measure.warmup"):
        scenario(**{where: {"warmup": "1s", "arrival_rate": 1}})


def test_the_window_must_leave_something_to_measure():
    with pytest.raises(ScenarioError, match="measure: warmup \\+ cooldown \\(4s\\) leave nothing"):
        load_scenario_data({"name": "t", "duration": "4s", "topology": {"hosts": 2}}, "s")


def test_layers_for_synthetic_job():
    h = scenario(horovod={"model_size": "1MB", "compute_time": "600ms"}).workloads.horovod
    layers = layers_for(h)
    assert models.total_bytes(layers) == pytest.approx(1e6, rel=1e-3)
    assert models.total_compute(layers) == pytest.approx(0.6)


@pytest.mark.parametrize(
    ("wl", "expected"),
    [
        ({"websearch": {}}, "workloads.websearch.arrival_rate: set arrival_rate"),
        (
            {"websearch": {"utilization": "10%", "arrival_rate": 99}},
            "give arrival_rate or utilization",
        ),
        ({"horovod": {"compute_time": "1s", "compute_to_network_ratio": 2}}, "not both"),
        ({"horovod": {"hosts": ["h1", "h9"]}}, "workloads.horovod.hosts[1]: 'h9' is not a host"),
        ({"horovod": {"hosts": ["h1"]}}, "workloads.horovod.hosts: needs at least two"),
        ({"horovod": {"tc_class": "gold"}}, "workloads.horovod.tc_class: 'gold' is not a class"),
        (
            {"websearch": {"arrival_rate": 1, "ack_class": "gold"}},
            "workloads.websearch.ack_class: 'gold' is not a class of tc profile",
        ),
        ({"horovod": {"profile": "nope.txt"}}, "workloads.horovod.profile: no such file"),
        (
            {"websearch": {"sizes": "cat", "arrival_rate": 1}},
            "workloads.websearch.sizes: 'cat' is neither",
        ),
    ],
)
def test_workload_errors(wl, expected):
    with pytest.raises(ScenarioError) as e:
        scenario(**wl)
    assert expected in str(e.value)


def test_ack_class_marks_the_fetching_side_only():
    """websearch's ack_class: the flows keep their class's DSCP, the fetching side's packets
    (request and ACKs) carry the other class's; unset, both are the flow's."""
    base = {"name": "a", "topology": {"hosts": 2}, "tc_profile": "thesis-3band"}
    web = {"utilization": "5%", "tc_class": "high"}
    s = load_scenario_data(
        {**base, "workloads": {"websearch": {**web, "ack_class": "middle"}}}, "a"
    )
    assert (s.workloads.websearch.d.dscp, s.workloads.websearch.d.ack_dscp) == (46, 0)
    s = load_scenario_data({**base, "workloads": {"websearch": web}}, "a")
    assert s.workloads.websearch.d.ack_dscp == 46


def test_a_derived_block_given_as_input_is_recomputed():
    w = scenario(websearch={"arrival_rate": 2, "derived": {"arrival_rate": 9}}).workloads.websearch
    assert w.d.arrival_rate == 2


@pytest.mark.parametrize("name", ["thesis-mini", "thesis-mini-same"])
def test_thesis_mini_examples(name):
    s = load_scenario(ROOT / "examples" / f"{name}.yaml")
    h, w = s.workloads.horovod, s.workloads.websearch
    assert s.topology.hosts == 4 and s.topology.link_rate == 100_000_000 and s.duration == 60
    assert h.compute_to_network_ratio == 4 and w.utilization == 12.5
    assert (h.d.tc_class, w.d.tc_class) == (
        ("low", "high") if name == "thesis-mini" else ("high", "high")
    )
