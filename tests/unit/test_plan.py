"""The tc plan is pure data: check it object by object, for each shipped profile."""

import pytest

from testbed.core.profile import TcProfile, load_profile_data
from testbed.network.shaping.plan import (
    ByteFifo,
    CloneRedirect,
    Clsact,
    DscpFilter,
    Fifo,
    Htb,
    HtbClass,
    LinkSpec,
    Netem,
    Redirect,
    SharedLimitIn,
    SharedLimitOut,
    burst_bytes,
    packet_bytes,
    plan_interface,
    segments_per_packet,
)
from testbed.network.shaping.stats import frames_queued
from testbed.scenario.topology import LinkEnd

END = LinkEnd("h1", "up", "tb-abcdef-h1", "eth0")


def profile(name):
    return TcProfile.model_validate(load_profile_data(name, None))


def of(plan, kind):
    return [o for o in plan.objects if isinstance(o, kind)]


def test_fifo_plan():
    p = plan_interface(END, LinkSpec(100_000_000), profile("fifo"), netem_available=False)
    assert of(p, Htb) == [Htb("1:", 0x10)]
    cap, be = of(p, HtbClass)
    assert (cap.handle, cap.parent, cap.rate_bps, cap.ceil_bps) == ("1:1", "1:", 10**8, 10**8)
    assert (be.handle, be.parent, be.ceil_bps, be.rate_bps) == ("1:10", "1:1", 10**8, 10**8)
    assert of(p, Fifo) == [Fifo("10:", "1:10", 1000)]
    assert of(p, DscpFilter) == []  # one class: nothing to classify
    assert p.classes == {"be": "1:10"}
    # parents are created before children
    order = [getattr(o, "handle", None) for o in p.objects]
    assert order.index("1:") < order.index("1:1") < order.index("1:10") < order.index("10:")


def test_thesis_2band_plan():
    p = plan_interface(END, LinkSpec(10**10), profile("thesis-2band"), netem_available=False)
    htb = of(p, Htb)[0]
    assert htb.default_minor == 0x10  # unmatched → high
    _, high, low = of(p, HtbClass)
    assert (high.handle, high.prio, low.handle, low.prio) == ("1:10", 0, "1:11", 1)
    assert high.ceil_bps == low.ceil_bps == 10**10  # either may use the whole link...
    assert low.rate_bps == 10**8  # ...but the low band is only guaranteed 1%
    assert of(p, Fifo) == [Fifo("10:", "1:10", 1000), Fifo("11:", "1:11", 1000)]
    filters = {f.dscp: f for f in of(p, DscpFilter)}
    assert filters[46].target == "1:10" and filters[46].u32_key == "0xb8/0xfc+1"
    assert filters[8].target == "1:11" and filters[8].u32_key == "0x20/0xfc+1"


def test_a_queue_on_an_ifb_is_fed_by_its_ports_egress():
    """A host's uplink: the classes on the ifb (eth0-up), and on eth0 a clsact hook whose
    filter redirects every packet to the ifb; a queue on its own interface is fed by none."""
    end = LinkEnd("h1", "up", "tb-abcdef-h1", "eth0-up", 102, port="eth0", port_index=100)
    p = plan_interface(end, LinkSpec(10**8), profile("thesis-2band"), False)
    assert p.feed == (Clsact(), Redirect(102))
    assert p.objects == plan_interface(END, LinkSpec(10**8), profile("thesis-2band"), False).objects
    assert plan_interface(END, LinkSpec(10**8), profile("fifo"), False).feed == ()


def test_exact_gso_feeds_the_uplink_queue_by_a_clone_at_the_ports_ingress():
    """link_mode exact-gso: the same classes on an ifb in the switch, fed by a clone of what
    arrives at the host's port (shaping/uplink.py), not by a redirect of what leaves it."""
    end = LinkEnd("h1", "up", "tb-abcdef-sw", "h1-up", 2001, port="h1", port_index=1001,
                  port_ingress=True)  # fmt: skip
    p = plan_interface(end, LinkSpec(10**10), profile("thesis-2band"), False)
    assert p.feed == (Clsact(), CloneRedirect(2001))
    assert (
        p.objects == plan_interface(END, LinkSpec(10**10), profile("thesis-2band"), False).objects
    )


def test_a_shared_limit_counts_in_at_the_root_and_out_at_the_far_end():
    """thesis-3band-shared: a BPF filter first on the root (before the DSCP filters) drops an
    arrival when the bands hold 1000 together; the far end counts packets out on its clsact
    ingress, adding a clsact where the far interface has none of its own (a switch port) and
    not where it has (a host's eth0, fed to its ifb). The bands' own FIFOs hold 64 more, so
    they never drop first."""
    up = LinkEnd("h1", "up", "tb-abcdef-h1", "eth0-up", 102, port="eth0", port_index=100,
                 far_netns="tb-abcdef-sw", far_ifname="p1", far_index=7)  # fmt: skip
    p = plan_interface(up, LinkSpec(10**8), profile("thesis-3band-shared"), False)
    assert p.objects[1] == SharedLimitIn("1:", 1, 1000, "tb-abcdef-h1/eth0-up")
    assert {f.prio for f in of(p, DscpFilter)} == {10}  # after the limit's prio 1
    assert of(p, Fifo) == [Fifo(f"{m}:", f"1:{m}", 1064) for m in (10, 11, 12)]
    assert p.far == (Clsact(), SharedLimitOut("tb-abcdef-h1/eth0-up"))
    down = LinkEnd("h1", "down", "tb-abcdef-sw", "p1", 7, far_netns="tb-abcdef-h1",
                   far_ifname="eth0", far_index=100, far_clsact=True)  # fmt: skip
    p = plan_interface(down, LinkSpec(10**8), profile("thesis-3band-shared"), False)
    assert p.far == (SharedLimitOut("tb-abcdef-sw/p1"),)
    assert plan_interface(down, LinkSpec(10**8), profile("thesis-3band"), False).far == ()


def test_a_hosts_own_port_keeps_its_own_limit_per_class_where_switch_ports_share():
    """thesis-ns3, the thesis' simulator's ports: a server's port has three 100-packet bands
    (no shared limit, nothing counted at the far end); the switch's port towards it shares
    1000 (as thesis-3band-shared); a fabric link's uplink is a switch's port, so it shares."""
    up = LinkEnd("h1", "up", "tb-abcdef-h1", "eth0-up", 102, port="eth0", port_index=100,
                 far_netns="tb-abcdef-sw", far_ifname="p1", far_index=7)  # fmt: skip
    p = plan_interface(up, LinkSpec(10**8), profile("thesis-ns3"), False)
    assert of(p, Fifo) == [Fifo(f"{m}:", f"1:{m}", 100) for m in (10, 11, 12)]
    assert (of(p, SharedLimitIn), p.far, p.shared_limit) == ([], (), None)
    down = LinkEnd("h1", "down", "tb-abcdef-sw", "p1", 7, far_netns="tb-abcdef-h1",
                   far_ifname="eth0", far_index=100, far_clsact=True)  # fmt: skip
    p = plan_interface(down, LinkSpec(10**8), profile("thesis-ns3"), False)
    assert p.shared_limit == 1000 and p.far == (SharedLimitOut("tb-abcdef-sw/p1"),)
    assert of(p, Fifo) == [Fifo(f"{m}:", f"1:{m}", 1064) for m in (10, 11, 12)]
    assert [c.rate_bps for c in of(p, HtbClass)[1:]] == [10**6] * 3  # testbed's 1 % floor
    # pfifo_fast's bands have no floor: thesis-ns3-strict, the plan's smallest rate (8 kbit/s)
    strict = plan_interface(down, LinkSpec(10**8), profile("thesis-ns3-strict"), False)
    assert [c.rate_bps for c in of(strict, HtbClass)[1:]] == [8_000, 8_000, 8_000]
    assert of(strict, Fifo) == of(p, Fifo) and strict.shared_limit == p.shared_limit
    fabric = LinkEnd("leaf1-spine1", "up", "tb-abcdef-leaf1", "s1", 9, tier="fabric",
                     far_netns="tb-abcdef-spine1", far_ifname="l1", far_index=4)  # fmt: skip
    assert (
        plan_interface(fabric, LinkSpec(10**8), profile("thesis-ns3"), False).shared_limit == 1000
    )
    # without a shared limit, the host's port alone takes host_limit
    data = {**load_profile_data("thesis-3band", None), "host_limit": 50}
    p = plan_interface(up, LinkSpec(10**8), TcProfile.model_validate(data), False)
    assert {f.limit for f in of(p, Fifo)} == {50}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"shared_limit": 2}, "shared_limit: 2 is below the 3 classes"),
        ({"classes": [{"name": "high", "dscp": ["EF"], "limit": 100},
                      {"name": "middle", "dscp": ["BE"]}, {"name": "low", "dscp": ["CS1"]}]},
         "'high' takes no limit of its own"),
    ],
)  # fmt: skip
def test_a_shared_limit_the_port_cannot_keep_is_refused(change, message):
    data = {**load_profile_data("thesis-3band-shared", None), **change}
    with pytest.raises(ValueError, match=message):
        TcProfile.model_validate(data)


def test_queue_limit_overrides_profile():
    p = plan_interface(END, LinkSpec(10**8, queue_limit=50), profile("thesis-2band"), False)
    assert {f.limit for f in of(p, Fifo)} == {50}


def test_netem_leaves_when_available():
    spec = LinkSpec(10**9, delay_s=10e-6, jitter_s=2e-6, loss_pct=0.1)
    p = plan_interface(END, spec, profile("thesis-2band"), netem_available=True)
    assert of(p, Fifo) == []
    nets = of(p, Netem)
    assert [n.parent for n in nets] == ["1:10", "1:11"]
    assert (nets[0].delay_us, nets[0].jitter_us, nets[0].loss_pct, nets[0].limit) == (
        10,
        2,
        0.1,
        1000,
    )
    assert p.notes == ()


def test_missing_netem_is_a_visible_note():
    p = plan_interface(END, LinkSpec(10**9, delay_s=1e-3), profile("fifo"), netem_available=False)
    assert of(p, Netem) == [] and len(of(p, Fifo)) == 1
    assert "no sch_netem" in p.notes[0] and "modprobe sch_netem" in p.notes[0]


# Every bucket holds 100 µs of the link (plan.py's docstring: BURST_SECONDS), so
# burst = rate / 8 bit·byte⁻¹ × 100e-6 s, and the DRR quantum is 1 ms of the link, at least one
# 1514-byte frame and at most 200 000 bytes. By hand:
#   10 Mbit/s:  1.25e6 B/s × 1e-4 s =     125 B   quantum 1.25e6 × 1e-3 = 1 250 → 1 514 (a frame)
#  100 Mbit/s:  12.5e6 B/s × 1e-4 s =   1 250 B   quantum                         12 500
#    1 Gbit/s:  125e6 B/s  × 1e-4 s =  12 500 B   quantum                        125 000
#   10 Gbit/s:  1.25e9 B/s × 1e-4 s = 125 000 B   quantum 1 250 000 → 200 000 (kernel cap)
#   40 Gbit/s:  5e9 B/s    × 1e-4 s = 500 000 B   quantum 5 000 000 → 200 000
# Broken looks like: a burst in bits rather than bytes (8×), 1 ms instead of 100 µs (10×), one
# bucket left at the kernel default, or an uncapped quantum at 10 Gbit/s.
@pytest.mark.parametrize(
    ("rate", "burst", "quantum"),
    [
        (10**7, 125, 1514),
        (10**8, 1250, 12_500),
        (10**9, 12_500, 125_000),
        (10**10, 125_000, 200_000),
        (4 * 10**10, 500_000, 200_000),
    ],
)
def test_burst_and_quantum_scale_with_rate(rate, burst, quantum):
    p = plan_interface(END, LinkSpec(rate), profile("thesis-2band"), False)
    classes = of(p, HtbClass)
    assert len(classes) == 3  # the cap and both bands
    for c in classes:
        assert (c.burst, c.cburst, c.quantum) == (burst, burst, quantum), c.handle
    assert burst_bytes(rate) == burst


def test_burst_below_one_byte_rounds_up_to_one():
    # 8 kbit/s: 1000 B/s × 1e-4 s = 0.1 B; the kernel needs at least one byte of bucket
    assert burst_bytes(8_000) == 1
    # 60 kbit/s: 7500 B/s × 1e-4 s = 0.75 B → rounds to 1; 100 kbit/s: 12 500 × 1e-4 = 1.25 → 1
    assert burst_bytes(60_000) == burst_bytes(100_000) == 1
    assert burst_bytes(400_000) == 5  # 50 000 B/s × 1e-4 s = 5 B


def test_the_quantum_holds_a_whole_frame_of_the_links_mtu():
    """At 10 Mbit/s 1 ms of the rate is 1250 bytes, less than a frame: the quantum is one
    frame, 1514 bytes, or 9014 with jumbo frames (the kernel warns below a frame)."""
    for mtu, frame in ((1500, 1514), (9000, 9014)):
        p = plan_interface(END, LinkSpec(10**7, mtu=mtu), profile("thesis-2band"), False)
        assert {c.quantum for c in of(p, HtbClass)} == {frame}
    p = plan_interface(END, LinkSpec(10**9, mtu=9000), profile("thesis-2band"), False)
    assert {c.quantum for c in of(p, HtbClass)} == {125_000}  # 1 ms at 1 Gbit/s


def test_jumbo_frames_on_a_slow_link_are_called_out():
    """A 9014-byte frame takes 7.2 ms at 10 Mbit/s (small flows then beat the wire); 1514
    bytes at 10 Mbit/s take 1.2 ms and 9014 at 100 Mbit/s 0.72 ms, which measured fine."""
    slow = plan_interface(END, LinkSpec(10**7, mtu=9000), profile("fifo"), False)
    assert any("topology.mtu" in n and "7.2 ms" in n for n in slow.notes), slow.notes
    for rate, mtu in ((10**7, 1500), (10**8, 9000)):
        assert not plan_interface(END, LinkSpec(rate, mtu=mtu), profile("fifo"), False).notes


def test_a_fast_link_queues_the_same_bytes_with_limits_in_bytes():
    """link_mode: fast: the same classes, each leaf a bfifo holding the profile's packets ×
    the frame (1000 × 1514 B), so a queue holds as many bytes before it drops."""
    exact = plan_interface(END, LinkSpec(10**10), profile("thesis-2band"), False)
    fast = plan_interface(END, LinkSpec(10**10, fast=True), profile("thesis-2band"), False)
    assert of(fast, HtbClass) == of(exact, HtbClass)
    assert of(fast, DscpFilter) == of(exact, DscpFilter)
    assert of(fast, Fifo) == []
    assert of(fast, ByteFifo) == [
        ByteFifo("10:", "1:10", 1_514_000),
        ByteFifo("11:", "1:11", 1_514_000),
    ]
    jumbo = plan_interface(
        END, LinkSpec(10**10, mtu=9000, queue_limit=50, fast=True), profile("fifo"), False
    )
    assert of(jumbo, ByteFifo) == [ByteFifo("10:", "1:10", 50 * 9014)]


@pytest.mark.parametrize(
    ("rate", "mtu", "segments"),
    [
        (10**10, 1500, 43),  # 64 KB: 65536 // 1514
        (10**9, 1500, 43),  # 1.25 ms at 1 Gbit/s is 156 KB: 64 KB still bounds
        (10**8, 1500, 10),  # 1.25 ms at 100 Mbit/s: 15,625 B
        (10**7, 1500, 1),  # 1,562 B: one frame, as in exact mode
        (10**10, 9000, 7),  # 65536 // 9014
    ],
)
def test_a_fast_links_packets_stay_within_64KB_and_what_the_link_sends_in_1_25ms(
    rate, mtu, segments
):
    assert segments_per_packet(rate, mtu) == segments
    assert packet_bytes(rate, mtu, fast=True) == segments * (mtu + 14)
    assert packet_bytes(rate, mtu) == mtu + 14


def test_a_fast_queue_counts_frames_by_its_bytes():
    fast = plan_interface(END, LinkSpec(10**10, fast=True), profile("fifo"), False)
    exact = plan_interface(END, LinkSpec(10**10), profile("fifo"), False)
    c = {"qlen": 3, "backlog": 3 * 43 * 1514 + 1}  # three 64 KB packets and a byte
    assert frames_queued(fast, c) == 130
    assert frames_queued(exact, c) == 3
