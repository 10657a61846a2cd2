"""Tiny tc classifier programs, written as raw BPF instructions and loaded through the bpf()
syscall, for what no tc action built into this kernel does: a packet limit shared by a port's
classes (shared_limit.py) and a clone handed to the uplink queue (uplink.py).

By hand because nothing here builds BPF: no compiler for it is installed (llc without clang),
pyroute2 attaches a program by its fd but does not build one, and bcc is not a dependency.
The kernel's verifier checks every program at load; its log comes back in the error.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

SYS_BPF = {"x86_64": 321, "aarch64": 280}.get(platform.machine(), 321)
BPF_MAP_CREATE, BPF_MAP_LOOKUP_ELEM, BPF_PROG_LOAD = 0, 1, 5
BPF_MAP_TYPE_ARRAY = 2
BPF_PROG_TYPE_SCHED_CLS = 3
BPF_PSEUDO_MAP_FD = 1
TC_ACT_UNSPEC, TC_ACT_SHOT = -1, 2

_libc = ctypes.CDLL(None, use_errno=True)


class BpfError(OSError):
    """The kernel refused a map or a program (the verifier's log, when it gave one)."""


def insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    """One instruction: opcode, registers, offset, immediate (struct bpf_insn)."""
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def bpf(cmd: int, attr: bytes | ctypes.Array[ctypes.c_char]) -> int:
    """The bpf() syscall; `attr` as bytes, or a buffer the kernel's answer is written into."""
    buf = attr if isinstance(attr, ctypes.Array) else ctypes.create_string_buffer(attr, len(attr))
    fd = _libc.syscall(SYS_BPF, cmd, buf, len(buf))
    if fd < 0:
        err = ctypes.get_errno()
        raise BpfError(err, os.strerror(err))
    return int(fd)


def load_program(insns: bytes, name: str, prog_type: int = BPF_PROG_TYPE_SCHED_CLS) -> int:
    """A program (a tc classifier unless `prog_type` says otherwise); its verifier log in the
    error when the kernel refuses it."""
    code = ctypes.create_string_buffer(insns, len(insns))
    lic = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(65536)
    attr = struct.pack(
        "<IIQQIIQII16s",
        prog_type,
        len(insns) // 8,
        ctypes.addressof(code),
        ctypes.addressof(lic),
        1,  # log_level
        len(log),
        ctypes.addressof(log),
        0,
        0,
        name.encode()[:15],
    ).ljust(128, b"\0")
    try:
        return bpf(BPF_PROG_LOAD, attr)
    except BpfError as e:
        raise BpfError(e.errno, f"{e.strerror}: {log.value.decode(errors='replace')}") from None
