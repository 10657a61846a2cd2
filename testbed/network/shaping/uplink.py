"""The feed of a host's uplink queue in `topology.link_mode: exact-gso`: a cls_bpf program on
the clsact ingress of the host's switch port that hands a clone of every frame to the ifb
holding the uplink's queue (bpf_clone_redirect) and drops the frame itself.

Why a clone, and why there (docs/network.md, "Where the cycles go"): in exact mode a host's
eth0 takes one TCP segment per packet so that its uplink queue (an ifb in the host, fed from
eth0's egress) holds frames, and TCP then runs once per frame, which bounds the rate. Here eth0
keeps TCP's batches and cuts them into frames itself (segmentation offloads off), so the
queue is fed where frames exist: the switch port's ingress. But a packet keeps its socket
across a veth, and mirred at ingress hands on the packet itself, not a clone, so the queued
frames would stay charged to the sender's socket and TCP Small Queues would hold the queue to
about two of TCP's batches (measured: no queue ever filled). A clone belongs to no socket;
dropping the frame (TC_ACT_SHOT) frees the sender's charge at once, as the egress redirect of
exact mode does. The ifb sends each frame back into the port's ingress, past this filter,
where the bridge takes it on.

Five instructions: r1 (the packet) is the program's context already.
"""

from __future__ import annotations

from testbed.network.shaping.bpf import TC_ACT_SHOT, insn, load_program

FUNC_CLONE_REDIRECT = 13  # bpf_clone_redirect(skb, ifindex, flags)


def clone_program(ifindex: int) -> bytes:
    return b"".join(
        [
            insn(0xB7, dst=2, imm=ifindex),  # r2 = the ifb's index
            insn(0xB7, dst=3, imm=0),  # r3 = 0: to the ifb's egress (its queue)
            insn(0x85, imm=FUNC_CLONE_REDIRECT),  # call bpf_clone_redirect(r1, r2, r3)
            insn(0xB7, dst=0, imm=TC_ACT_SHOT),  # r0 = TC_ACT_SHOT: the frame itself goes
            insn(0x95),  # exit
        ]
    )


def load_clone(ifindex: int) -> int:
    """The program for the ifb `ifindex` (in the namespace of the port it is attached to)."""
    return load_program(clone_program(ifindex), "tb_uplink_clone")
