"""The bpf() syscall, for the few tc programs testbed loads (shared_limit.py, detach.py).

Written by hand, as raw instructions: no compiler for BPF is installed here (llc without
clang), pyroute2 attaches a program but does not build one, and bcc is not a dependency. Each
program is a dozen instructions, spelled out beside its comments; the kernel's verifier checks
them at load. A program lives as long as a filter holds it: deleting the qdisc (or the
namespace) frees it, nothing is pinned.
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
# the helpers called, by number (include/uapi/linux/bpf.h)
FUNC_MAP_LOOKUP_ELEM = 1
FUNC_CLONE_REDIRECT = 13
# what a direct-action tc program returns
TC_ACT_UNSPEC, TC_ACT_OK, TC_ACT_SHOT, TC_ACT_STOLEN = -1, 0, 2, 4
SKB_MARK = 8  # offsetof(struct __sk_buff, mark)

_libc = ctypes.CDLL(None, use_errno=True)


class BpfError(OSError):
    """The kernel refused a map or a program (the verifier's log, when it gave one)."""


def insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    """One instruction: opcode, registers, offset, immediate (struct bpf_insn)."""
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def _bpf(cmd: int, attr: bytes) -> int:
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = _libc.syscall(SYS_BPF, cmd, buf, len(attr))
    if fd < 0:
        err = ctypes.get_errno()
        raise BpfError(err, os.strerror(err))
    return int(fd)


def create_counter() -> int:
    """A one-element array map of one u64."""
    attr = struct.pack("<IIIII", BPF_MAP_TYPE_ARRAY, 4, 8, 1, 0).ljust(72, b"\0")
    return _bpf(BPF_MAP_CREATE, attr)


def read_counter(map_fd: int) -> int:
    """The counter's value, signed."""
    key = ctypes.c_uint32(0)
    value = ctypes.c_int64(0)
    attr = struct.pack(
        "<IIQQQ", map_fd, 0, ctypes.addressof(key), ctypes.addressof(value), 0
    ).ljust(32, b"\0")
    _bpf(BPF_MAP_LOOKUP_ELEM, attr)
    return int(value.value)


def load_program(insns: bytes, name: str) -> int:
    """A tc classifier program; its verifier log in the error when the kernel refuses it."""
    code = ctypes.create_string_buffer(insns, len(insns))
    lic = ctypes.create_string_buffer(b"GPL")  # bpf_clone_redirect is for GPL programs only
    log = ctypes.create_string_buffer(65536)
    attr = struct.pack(
        "<IIQQIIQII16s",
        BPF_PROG_TYPE_SCHED_CLS,
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
        return _bpf(BPF_PROG_LOAD, attr)
    except BpfError as e:
        raise BpfError(e.errno, f"{e.strerror}: {log.value.decode(errors='replace')}") from None
