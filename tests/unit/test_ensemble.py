"""The ensemble kind's limits, computed by hand from seed 004's patterns, and its refusals."""

from __future__ import annotations

import pytest

from testbed.core.errors import ScenarioError
from testbed.scenario.resolve import load_scenario_data
from testbed.workloads.ensemble.controller import (
    bytes_per_image,
    counted_span,
    link_load,
    over_limit,
    round_bytes_in,
    window_rate,
)

BLOCK = 8 * 150_528  # bytes of a preprocessed block: batch 8, 224·224·3 images
RAW = 8 * 110_000  # bytes of a raw block


def ensemble(topology=None, **cfg):
    return ensemble_cfg(topology, **cfg).d


def ensemble_cfg(topology=None, **cfg):
    s = load_scenario_data(
        {
            "name": "e",
            "topology": topology or {"hosts": 5, "link_rate": "100mbit"},
            "workloads": {"ensemble": {"kind": "ensemble", "batch": 8, **cfg}},
        },
        "e.yaml",
    )
    return s.workloads.ensemble


@pytest.mark.parametrize(
    ("cfg", "busiest", "link_bytes", "images", "pre_limit"),
    [
        # every model sends its block to the 3 others: 3 blocks on each uplink; 4 blocks/round
        ({"pattern": "all-shared", "models": 4, "preprocess_rate": 50}, "h1 up", 3 * BLOCK, 32, 200),
        # 2 preprocessors send to the 3 others each
        ({"pattern": "multi-broadcast", "models": 4, "preprocessors": 2, "preprocess_rate": 50},
         "h1 up", 3 * BLOCK, 16, 100),
        # h2 all-gathers with h1 (1 block), then forwards both blocks to h3 and h4 (4)
        ({"pattern": "single-broadcast", "models": 4, "preprocessors": 2, "preprocess_rate": 50},
         "h2 up", 5 * BLOCK, 16, 100),
        # each model reads its own raw block from h5; nothing else moves
        ({"pattern": "duplicated", "models": 4, "storage": "h5", "preprocess_rate": 50},
         "h5 up", 4 * RAW, 8, 50),
    ],
)  # fmt: skip
def test_limits_of_each_pattern_by_hand(cfg, busiest, link_bytes, images, pre_limit):
    d = ensemble(**cfg)
    assert d.busiest_link == busiest
    assert d.images_per_round == images
    assert d.network_limit == pytest.approx(images / (link_bytes * 8 / 100e6))
    assert d.preprocess_limit == pytest.approx(pre_limit)


def test_with_every_model_preprocessing_the_broadcasts_move_what_all_shared_moves():
    a = ensemble(pattern="all-shared", models=3)
    for pattern in ("single-broadcast", "multi-broadcast"):
        b = ensemble(pattern=pattern, models=3, preprocessors=3)
        assert (b.network_limit, b.round_bytes) == (a.network_limit, a.round_bytes), pattern


def test_storage_reads_load_the_storage_uplink():
    # all-shared over h1..h4 reading from h5: h5 sends 4 raw blocks a round (3.52 MB), but a
    # model's downlink takes its raw block and the 3 others' blocks (4.49 MB): that binds
    d = ensemble(pattern="all-shared", storage="h5")
    assert d.models == ["h1", "h2", "h3", "h4"] and d.round_bytes["raw"] == 4 * RAW
    assert d.busiest_link == "h1 down" and d.round_bytes["preprocessed"] == 12 * BLOCK
    assert d.network_limit == pytest.approx(32 / ((3 * BLOCK + RAW) * 8 / 100e6))


def test_oversubscribed_fabric_sets_the_limit():
    # 2 leaves of 2 hosts, one spine at 50 Mbit/s: leaf1's link up carries h1's and h2's blocks
    # to h3 and h4 (4 blocks at 50 Mbit/s), slower than any host uplink (3 blocks at 100)
    topo = {"kind": "leaf-spine", "leaves": 2, "spines": 1, "hosts_per_leaf": 2,
            "link_rate": "100mbit", "fabric_rate": "50mbit"}  # fmt: skip
    d = ensemble(topo, pattern="all-shared")
    assert d.busiest_link in ("leaf1 up", "leaf1 down", "leaf2 up", "leaf2 down")
    assert d.network_limit == pytest.approx(32 / (4 * BLOCK * 8 / 50e6))


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"pattern": "duplicated"}, "workloads.ensemble.storage: duplicated pipelines read"),
        ({"pattern": "single-broadcast"}, "workloads.ensemble.preprocessors: single-broadcast: set p"),
        ({"pattern": "single-broadcast", "models": 4, "preprocessors": 5},
         "5 of 4 models; single-broadcast takes at most 4"),
        ({"pattern": "all-shared", "preprocessors": 2}, "every model preprocesses (p = n = 5)"),
        ({"storage": "h9"}, "workloads.ensemble.storage: 'h9' is not a host"),
        ({"storage": "h1", "hosts": ["h1", "h2"]}, "h1 is also a model"),
        ({"models": 5, "storage": "h1"}, "5 models need 5 hosts besides storage; there are 4"),
        ({"pattern": "all-sharing"}, "workloads.ensemble.pattern"),
    ],
)  # fmt: skip
def test_bad_ensembles_are_one_line_naming_the_field(cfg, message):
    with pytest.raises(ScenarioError) as e:
        ensemble(**cfg)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_independent_pipelines_are_capped_together_not_each():
    """The CI run that found it: duplicated, h2's stream starved (fewer than two rounds, no
    rate), the other three at 35.7 images/s, 1.26x their 28.4 share of h5's 113.6. Physics
    holds (107.2 together); the same rates in shared rounds would be 1.26x too fast."""
    share = 8 / (4 * 880_000 * 8 / 100e6)
    rates = [35.7, 35.7, 35.7]
    assert over_limit("duplicated", rates, 2000, share, 4 * share) == pytest.approx(
        3 * 35.7 / (4 * share)
    )
    assert over_limit("all-shared", rates, 2000, share, 4 * share) == pytest.approx(35.7 / share)
    # preprocessing still caps each pipeline on its own
    assert over_limit("duplicated", [45.0, 10.0], 40.0, share, 4 * share) == pytest.approx(45 / 40)
    assert over_limit("duplicated", [], 40.0, share, 4 * share) is None


def test_a_round_brings_each_model_the_blocks_of_its_pattern_by_hand():
    """With an 11-byte header on every block: single-broadcast p = 2 over 4 models brings h1
    h2's block, h2 h1's, and h3 and h4 both blocks from the leader; all-shared with storage
    brings each model its raw block and the 3 others' blocks."""
    c = ensemble_cfg(pattern="single-broadcast", models=4, preprocessors=2)
    one = BLOCK + 11
    assert round_bytes_in(c) == {"h1": one, "h2": one, "h3": 2 * one, "h4": 2 * one}
    c = ensemble_cfg(pattern="all-shared", models=4, storage="h5")
    assert round_bytes_in(c) == dict.fromkeys(["h1", "h2", "h3", "h4"], RAW + 11 + 3 * one)


def test_a_models_rate_is_its_rounds_capped_by_the_bytes_it_received_between_the_edges():
    """5 rounds completed in 2 s, 32 images a round: 80 images/s, unless its streams received
    fewer rounds' bytes in those 2 s (3: 48 images/s, the earlier rounds' bytes were buffered
    before the window); a model whose rounds cross no link counts its rounds; no second read,
    no rate."""
    at = {
        "start": {"t": 10.0, "received": {"h2": 100, "h3": 50}, "rounds": 4},
        "stop": {"t": 12.0, "received": {"h2": 100 + 2000, "h3": 50 + 1000, "h4": 0}, "rounds": 9},
    }
    assert window_rate(at, 1000, 32) == pytest.approx(3 * 32 / 2)
    assert window_rate(at, 500, 32) == pytest.approx(5 * 32 / 2)  # 6 rounds' bytes arrived
    assert window_rate(at, 0, 32) == pytest.approx(5 * 32 / 2)
    assert window_rate({"start": at["start"]}, 1000, 32) is None


def test_the_pattern_load_on_its_busiest_link_by_hand():
    """h2 sent h1 10 MB and h3 5 MB in a 2 s window, h3 sent h1 1 MB: h2's uplink was busy
    15 MB · 8 / 100 Mbit/s = 1.2 s of the 2, the busiest; h1's downlink 0.88 s."""
    topo = ensemble_topology()
    at = {
        "h1": {"start": {"t": 10.0, "received": {"h2": 1000}},
               "stop": {"t": 12.0, "received": {"h2": 10_001_000, "h3": 1_000_000}}},
        "h3": {"start": {"t": 10.0, "received": {}}, "stop": {"t": 12.0, "received": {"h2": 5_000_000}}},
        "h4": {"start": {"t": 10.0, "received": {}}},  # no second read: nothing
    }  # fmt: skip
    assert link_load(topo, at, 2.0) == {"max": pytest.approx(0.6), "link": "h2 up"}
    assert link_load(topo, {}, 2.0) == {"max": None, "link": None}


def test_counters_read_late_are_over_their_own_time_not_the_windows():
    """2026-12-07, ensemble-peak-half's 1 Gbit/s single-broadcast n = 8: the machine stood still
    at the window's start, every node read its counters 14 s late, 11.9 s of a 26 s window.
    Over the 26 s the busiest link read 0.43 loaded and 87.6 kB were sent per image of 150.5;
    over the nodes' own 11.9 s, 0.95 and 150.2 kB. Here: the bytes above read 1 s apart in a
    2 s window keep h2's uplink 1.2 s busy of 1, and 2 rounds of 4 images each, 3 B a round
    sent, are 3 / 4 B an image."""
    topo = ensemble_topology()

    def read(t, received, preprocessed, rounds):
        return {"t": t, "received": received, "rounds": rounds,
                "sent": {"raw": 0, "preprocessed": preprocessed}}  # fmt: skip

    at = {
        "h1": {"start": read(11.0, {"h2": 1000}, 0, 1),
               "stop": read(12.0, {"h2": 10_001_000, "h3": 1_000_000}, 2, 2)},
        "h3": {"start": read(11.0, {}, 0, 0), "stop": read(12.0, {"h2": 5_000_000}, 4, 1)},
    }  # fmt: skip
    assert counted_span(at) == pytest.approx(1.0)
    assert link_load(topo, at, 2.0)["max"] == pytest.approx(1.2)
    assert bytes_per_image(at, ["h1", "h3"], 4) == pytest.approx(6 / 8)
    assert counted_span({"h4": {"start": {"t": 1.0}}}) is None


def ensemble_topology():
    return load_scenario_data(
        {"name": "e", "topology": {"hosts": 5, "link_rate": "100mbit"}}, "e.yaml"
    ).topology
