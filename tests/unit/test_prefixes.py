"""Prefix choice before a run: defaults step aside for networks in use, explicit ones refuse."""

import ipaddress

import pytest

from testbed.core.errors import ScenarioError
from testbed.network import preflight
from testbed.scenario.resolve import load_scenario_data, with_overrides

N = ipaddress.IPv4Network


def scenario(**topology):
    return load_scenario_data({"name": "p", "topology": {"hosts": 3, **topology}}, "test")


@pytest.fixture
def routes(monkeypatch):
    """The root namespace's routes, as the test says they are."""
    table: list[tuple[N, str]] = []
    monkeypatch.setattr(preflight, "host_routes", lambda: table)
    monkeypatch.setattr(preflight, "all_states", lambda: [])
    return table


def test_free_defaults_are_kept(routes):
    routes.append((N("192.168.1.0/24"), "route 192.168.1.0/24 dev eth0"))
    s = preflight.check_prefixes(scenario())
    assert (s.topology.prefix, s.topology.management_prefix) == (
        N("10.10.0.0/24"),
        N("10.11.0.0/24"),
    )


def test_taken_defaults_move_to_the_next_free_pair(routes):
    # Another run holds 10.10.0 and 10.11.0; a third network sits on 10.11.1.
    routes += [
        (N("10.10.0.0/24"), "address 10.10.0.254/24 on tbaaaaaa"),
        (N("10.11.0.0/24"), "address 10.11.0.1/24 on tbaaaaab"),
        (N("10.11.1.0/24"), "route 10.11.1.0/24 dev eth1"),
    ]
    s = preflight.check_prefixes(scenario())
    assert s.topology.prefix == N("10.10.1.0/24")
    assert s.topology.management_prefix == N("10.11.2.0/24")
    # The moved prefixes are recorded as if written, so a rerun of scenario.yaml uses them.
    assert {"prefix", "management_prefix"} <= s.topology.model_fields_set


def test_a_wide_host_route_pushes_past_it(routes):
    routes.append((N("10.0.0.0/12"), "route 10.0.0.0/12 dev vpn0"))
    s = preflight.check_prefixes(scenario())
    assert s.topology.prefix == N("10.16.0.0/24")
    assert s.topology.management_prefix == N("10.16.1.0/24")


def test_an_explicit_prefix_in_use_is_refused_by_name(routes):
    routes.append((N("172.20.0.0/16"), "route 172.20.0.0/16 dev docker0"))
    with pytest.raises(
        ScenarioError, match=r"^topology.prefix: 172.20.5.0/24 overlaps the host's route"
    ):
        preflight.check_prefixes(scenario(prefix="172.20.5.0/24"))


def test_overrides_keep_defaults_movable():
    s = with_overrides(scenario(), {"topology.link_rate": "1gbit"})
    assert "prefix" not in s.topology.model_fields_set
    s = with_overrides(scenario(prefix="10.50.0.0/24"), {"topology.link_rate": "1gbit"})
    assert "prefix" in s.topology.model_fields_set
