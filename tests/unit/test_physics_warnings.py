"""Flows that beat the wire are said out loud, with the count and the worst ratio."""

from testbed.orchestrator import _physics_warnings


def test_flows_faster_than_their_link_make_a_warning():
    warnings: list[str] = []
    _physics_warnings(
        {"websearch": {"flows_over_link_rate": 29, "max_flow_rate_over_link": 1.208}}, warnings
    )
    (w,) = warnings
    assert "29 web-search flow(s)" in w and "1.21x" in w


def test_no_warning_when_every_flow_kept_to_its_link():
    warnings: list[str] = []
    _physics_warnings(
        {"websearch": {"flows_over_link_rate": 0, "max_flow_rate_over_link": 0.97}}, warnings
    )
    _physics_warnings({"linkcheck": {}}, warnings)
    assert warnings == []
