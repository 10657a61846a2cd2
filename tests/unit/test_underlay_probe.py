"""The one HTB class an emulated machines' network is held to (machines.underlay_rate);
admission's probe itself runs in tests/integration/test_cut_network.py."""

from testbed.network.shaping.plan import Htb, HtbClass, capped


def test_an_emulated_machines_link_is_one_htb_class_at_the_rate():
    """40 Mbit/s: one class, rate and ceil 40 Mbit/s, every packet in it (default minor 1)."""
    root, cap = capped(40_000_000)
    assert isinstance(root, Htb) and root.handle == "1:" and root.default_minor == 1
    assert isinstance(cap, HtbClass) and (cap.handle, cap.parent) == ("1:1", "1:")
    assert cap.rate_bps == cap.ceil_bps == 40_000_000
