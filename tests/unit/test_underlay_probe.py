"""The one HTB class an emulated machines' network is held to (machines.underlay_rate);
admission's probe itself runs in tests/integration/test_cut_network.py."""

from testbed.network.shaping.plan import Htb, HtbClass, capped


def test_an_emulated_machines_link_is_one_htb_class_at_the_rate():
    """40 Mbit/s: one class, rate and ceil 40 Mbit/s, every packet in it (default minor 1)."""
    root, cap = capped(40_000_000)
    assert isinstance(root, Htb) and root.handle == "1:" and root.default_minor == 1
    assert isinstance(cap, HtbClass) and (cap.handle, cap.parent) == ("1:1", "1:")
    assert cap.rate_bps == cap.ceil_bps == 40_000_000


def test_a_refused_probe_reads_as_no_rate_though_iperf3_exits_0():
    """iperf3 3.12 -J exits 0 where nothing listens (CI, 2026-12-08: the probe's client beat its
    server and `up` died on a KeyError): the report holds an error and no receiver's sum, which
    the probe must read as no rate (and try again), never as a number or a crash."""
    import socket
    import subprocess

    from testbed.network.runtime.underlay_probe import _json, _received
    from tests.needs import need_binary

    need_binary("iperf3", "admission probes the machines' network with it")
    with socket.socket() as s:  # a port nothing listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        r = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-J", "-t", "1"],
                           capture_output=True, text=True, timeout=20)  # fmt: skip
    report = _json(r.stdout)
    assert report is not None and "error" in report
    assert _received(report) is None
    assert _received({"end": {"sum_received": {"bits_per_second": 3.5e7}}}) == 3.5e7
