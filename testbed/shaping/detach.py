"""Hand a host's uplink queue a clone of each packet that belongs to no socket.

A packet TCP sends stays charged to its socket until it is freed, and a veth keeps that
charge across namespaces: queued on the host's eth0 as it is, every packet would count
against TCP Small Queues until the far host had it, and TSQ would hold each sender to about a
millisecond of its rate in all the queues of its path together (topology.Link has the
measurement). So a filter on eth0's clsact egress, before its qdiscs, hands a clone of the
packet (bpf_clone_redirect: a clone has no socket and no destructor) to eth0's own egress and
steals the original (TC_ACT_STOLEN: freed as sent, so its socket's bytes come back at once and
TCP is told it was sent, not dropped). The clone passes the same filter a second time: a mark
set on the packet before it is cloned says it already has (the mark does not leave the host:
a veth clears it as the packet crosses namespaces).

This replaces a redirect to an ifb, which held the queue and needed eth0 to hand TCP one
segment per packet (exact mode). Here eth0 takes TCP's whole batches, the clone is one per
batch, and exact mode cuts it into frames as it enters the queue (plan.Cutter): TCP runs once
per batch instead of once per frame, with no extra device and tasklet per frame.
"""

from __future__ import annotations

from testbed.shaping.bpf import (
    FUNC_CLONE_REDIRECT,
    SKB_MARK,
    TC_ACT_OK,
    TC_ACT_STOLEN,
    insn,
    load_program,
)

MARK = 0x7E57BED  # "testbed": nothing else in a host's namespace sets marks


def detach_program(ifindex: int) -> bytes:
    """Pass a marked packet on to the qdiscs; else mark it, clone it to `ifindex`'s egress
    (the interface the filter is on) and steal it."""
    return b"".join(
        [
            insn(0x61, dst=2, src=1, off=SKB_MARK),  # r2 = skb->mark
            insn(0x15, dst=2, off=7, imm=MARK),  # if r2 == MARK goto pass
            insn(0xB4, dst=2, imm=MARK),  # w2 = MARK
            insn(0x63, dst=1, src=2, off=SKB_MARK),  # skb->mark = w2
            insn(0xB7, dst=2, imm=ifindex),  # r2 = ifindex
            insn(0xB7, dst=3, imm=0),  # r3 = 0: to its egress
            insn(0x85, imm=FUNC_CLONE_REDIRECT),  # bpf_clone_redirect(skb, ifindex, 0)
            insn(0xB7, dst=0, imm=TC_ACT_STOLEN),  # r0 = TC_ACT_STOLEN
            insn(0x95),  # exit
            insn(0xB7, dst=0, imm=TC_ACT_OK),  # pass: r0 = TC_ACT_OK
            insn(0x95),  # exit
        ]
    )


def load(ifindex: int) -> int:
    """The program for interface `ifindex`, loaded (its fd; the caller closes it once a filter
    holds it)."""
    return load_program(detach_program(ifindex), "tb_detach")
