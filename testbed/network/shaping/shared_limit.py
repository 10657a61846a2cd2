"""A port whose classes share one packet limit (tc profile `shared_limit`), as ns-3's
PfifoFastQueueDisc, the thesis' port, drops an arriving packet when its bands together hold
the limit. Linux has no qdisc that does this here (pfifo_fast keeps a limit per band since
4.16; prio, ets and skbprio are not built into this kernel; HTB's leaves keep their own), so
it is built from two small BPF programs around the port's HTB and one counter:

- in: a cls_bpf filter (direct action), first on the queue's root: an arriving packet is
  dropped (TC_ACT_SHOT, counted as the root qdisc's drop) when the counter is at the limit,
  else counted in and passed on to the class filters (TC_ACT_UNSPEC);
- out: a cls_bpf filter on the clsact ingress of the link's far end, where every packet the
  queue sends arrives next (a veth pair), counts it out.

So the counter is what the port's classes hold, the packet on the wire included, and the
leaves' own limits are set above the shared one (plan.py) so that they never drop first. The
comparison is signed: a packet counted out that was queued before the filters existed can
only make the count low for a moment, never block the port.

Written by hand, as raw instructions loaded by bpf.py (which says why): 15 and 11
instructions, checked by the kernel's verifier at load. Program and map live as long as a
filter holds them: deleting the qdiscs (or the namespace) frees them, nothing is pinned.
"""

from __future__ import annotations

import ctypes
import os
import struct

from testbed.network.shaping.bpf import (
    BPF_MAP_CREATE,
    BPF_MAP_LOOKUP_ELEM,
    BPF_MAP_TYPE_ARRAY,
    BPF_PSEUDO_MAP_FD,
    TC_ACT_SHOT,
    TC_ACT_UNSPEC,
    bpf,
    load_program,
)
from testbed.network.shaping.bpf import insn as _insn

FUNC_MAP_LOOKUP_ELEM = 1


def _lookup(map_fd: int) -> list[bytes]:
    """r0 = &counter (or 0): key 0 on the stack, bpf_map_lookup_elem(map, &key)."""
    return [
        _insn(0x62, dst=10, off=-4, imm=0),  # *(u32 *)(r10 - 4) = 0
        _insn(0xBF, dst=2, src=10),  # r2 = r10
        _insn(0x07, dst=2, imm=-4),  # r2 += -4
        _insn(0x18, dst=1, src=BPF_PSEUDO_MAP_FD, imm=map_fd),  # r1 = map (ld_imm64 ...
        _insn(0x00),  # ... its upper half)
        _insn(0x85, imm=FUNC_MAP_LOOKUP_ELEM),  # call
    ]


def count_in_program(map_fd: int, limit: int) -> bytes:
    return b"".join(
        [
            *_lookup(map_fd),
            _insn(0x15, dst=0, off=4),  # if r0 == 0 goto pass
            _insn(0x79, dst=1, src=0),  # r1 = *(u64 *)r0
            _insn(0x75, dst=1, off=4, imm=limit),  # if (s64)r1 >= limit goto drop
            _insn(0xB7, dst=1, imm=1),  # r1 = 1
            _insn(0xDB, dst=0, src=1),  # lock *(u64 *)r0 += r1
            _insn(0xB7, dst=0, imm=TC_ACT_UNSPEC),  # pass: r0 = TC_ACT_UNSPEC
            _insn(0x95),  # exit
            _insn(0xB7, dst=0, imm=TC_ACT_SHOT),  # drop: r0 = TC_ACT_SHOT
            _insn(0x95),  # exit
        ]
    )


def count_out_program(map_fd: int) -> bytes:
    return b"".join(
        [
            *_lookup(map_fd),
            _insn(0x15, dst=0, off=2),  # if r0 == 0 goto pass
            _insn(0xB7, dst=1, imm=-1),  # r1 = -1
            _insn(0xDB, dst=0, src=1),  # lock *(u64 *)r0 += r1
            _insn(0xB7, dst=0, imm=TC_ACT_UNSPEC),  # pass: r0 = TC_ACT_UNSPEC
            _insn(0x95),  # exit
        ]
    )


def create_counter() -> int:
    """A one-element array map of one u64: the packets a port holds."""
    attr = struct.pack("<IIIII", BPF_MAP_TYPE_ARRAY, 4, 8, 1, 0).ljust(72, b"\0")
    return bpf(BPF_MAP_CREATE, attr)


def read_counter(map_fd: int) -> int:
    """The counter's value (signed: see the module's docstring)."""
    key = ctypes.c_uint32(0)
    value = ctypes.c_int64(0)
    attr = struct.pack(
        "<IIQQQ", map_fd, 0, ctypes.addressof(key), ctypes.addressof(value), 0
    ).ljust(32, b"\0")
    bpf(BPF_MAP_LOOKUP_ELEM, attr)
    return int(value.value)


class Counters:
    """The maps and programs of a run's shared-limit ports, by key. The programs' fds may be
    closed as soon as the filters holding them exist (close_programs); the maps' stay open
    for `held` until close()."""

    def __init__(self) -> None:
        self._programs: list[int] = []
        self._maps: dict[str, int] = {}

    def _map(self, key: str) -> int:
        if key not in self._maps:
            self._maps[key] = create_counter()
        return self._maps[key]

    def count_in(self, key: str, limit: int) -> int:
        fd = load_program(count_in_program(self._map(key), limit), "tb_shared_in")
        self._programs.append(fd)
        return fd

    def count_out(self, key: str) -> int:
        fd = load_program(count_out_program(self._map(key)), "tb_shared_out")
        self._programs.append(fd)
        return fd

    def held(self) -> dict[str, int]:
        """What each port's counter says it holds: 0 once its queue is empty and the link
        idle, unless packets were counted in and never out (or the reverse)."""
        return {key: read_counter(fd) for key, fd in self._maps.items()}

    def close_programs(self) -> None:
        for fd in self._programs:
            os.close(fd)
        self._programs.clear()

    def close(self) -> None:
        self.close_programs()
        for fd in self._maps.values():
            os.close(fd)
        self._maps.clear()
