"""TCP timers for every socket that the processes in one cgroup open: the delayed-ACK maximum,
the minimum RTO and the initial (SYN and SYN-ACK) RTO, set by a BPF_PROG_TYPE_SOCK_OPS
program attached to a cgroup v2 directory (BPF_CGROUP_SOCK_OPS). Whoever opens the socket
(Gloo, Horovod, a web server, in any network namespace), it gets the values: the kernel runs
the program for each TCP socket whose creator was in the cgroup (a passive socket counts as
its listener's), so the workloads need no change. Linux 6.18 offers no other way to set the
initial RTO; the minimum RTO has the per-namespace sysctl net.ipv4.tcp_rto_min_us as well.

The program, 11 to 29 raw instructions loaded as bpf.py does (which says why by hand):

- op BPF_SOCK_OPS_TIMEOUT_INIT (1): reply = the initial RTO, in jiffies (tcp_timeout_init()
  compares it with TCP_TIMEOUT_INIT = 1 * HZ); asked for a SYN (tcp_connect_init), a SYN-ACK
  (inet_reqsk_alloc: the listener's cgroup) and the SYN retry limit (tcp_timer.c);
- ops TCP_CONNECT_CB (3), ACTIVE_ESTABLISHED_CB (4), PASSIVE_ESTABLISHED_CB (5) and
  TCP_LISTEN_CB (11), where the socket is full and locked: bpf_setsockopt(SOL_TCP,
  TCP_BPF_DELACK_MAX / TCP_BPF_RTO_MIN, microseconds). The listener's values pass to the
  sockets it accepts, so the first RTT sample of an accepted socket uses them too.

The kernel rounds microseconds up to jiffies and refuses (-EINVAL, which the program cannot
report) a value outside [2 jiffies, HZ/5 = 200 ms]: `jiffies()` checks that before loading.
The delayed ACK is also kept below the minimum RTO less one jiffy (tcp_delack_max()).
A socket opened before its process joined the cgroup keeps the kernel's defaults.

`NamespaceTimers` is what a run uses: the same program behind a filter on the socket's network
namespace (bpf_get_netns_cookie, looked up in a hash map of the run's hosts' namespaces),
attached to the cgroup v2 root through a BPF link. Every process on the machine passes the
program, so no process has to join anything, whoever starts it (the netns runtime, the fork
server, a container), and only the hosts' sockets get the timers. A link, unlike an attachment
by BPF_PROG_ATTACH, is detached by the kernel when its last file descriptor closes: a run
killed with -9 leaves no program behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import gzip
import os
import platform
import socket
import struct
from pathlib import Path

from testbed.network.shaping.bpf import BpfError, bpf, insn, load_program

BPF_MAP_CREATE, BPF_MAP_UPDATE_ELEM = 0, 2
BPF_PROG_ATTACH, BPF_PROG_DETACH, BPF_PROG_QUERY, BPF_LINK_CREATE = 8, 9, 16, 28
BPF_MAP_TYPE_HASH = 1
BPF_PSEUDO_MAP_FD = 1
FUNC_MAP_LOOKUP_ELEM, FUNC_GET_NETNS_COOKIE = 1, 122
SO_NETNS_COOKIE = 71  # SOL_SOCKET; Linux ≥ 5.14
BPF_PROG_TYPE_SOCK_OPS = 13
BPF_CGROUP_SOCK_OPS = 3
BPF_F_ALLOW_MULTI = 2
SOL_TCP = 6
TCP_BPF_DELACK_MAX, TCP_BPF_RTO_MIN = 1003, 1004
FUNC_SETSOCKOPT = 49
OP_TIMEOUT_INIT = 1
OPS_FULL_SOCKET = (3, 4, 5, 11)  # connect, active/passive established, listen
REPLY_OFFSET = 4  # struct bpf_sock_ops: __u32 op; union { args[4]; reply; ... }


def kernel_hz() -> int:
    """CONFIG_HZ of the running kernel (jiffies per second), from its configuration."""
    for path in (Path("/proc/config.gz"), Path(f"/boot/config-{platform.release()}")):
        try:
            raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        except OSError:
            continue
        for line in raw.decode(errors="replace").splitlines():
            if line.startswith("CONFIG_HZ="):
                return int(line.split("=", 1)[1])
    raise RuntimeError("CONFIG_HZ not found in /proc/config.gz or /boot/config-*")


def jiffies(us: int, hz: int, *, limit_us: int | None = 200_000) -> int:
    """`us` microseconds in jiffies, rounded up as the kernel's usecs_to_jiffies(): for a
    timer option 2 jiffies (TCP_TIMEOUT_MIN) to `limit_us` (TCP_DELACK_MAX = TCP_RTO_MIN =
    HZ/5); with limit_us None (the initial RTO) 1 jiffy to TCP_RTO_MAX (120 s)."""
    j = -(-us * hz // 1_000_000)
    low, top = (1, 120 * hz) if limit_us is None else (2, limit_us * hz // 1_000_000)
    if not low <= j <= top:
        raise ValueError(f"{us} us is {j} jiffies at HZ={hz}: the kernel takes {low} to {top}")
    return j


def program(
    delack_max_us: int | None,
    rto_min_us: int | None,
    rto_init_jiffies: int | None,
    netns_map_fd: int | None = None,
) -> bytes:
    """The sock_ops program; a value left None keeps the kernel's default. With a map, only
    the sockets of the network namespaces whose cookies it holds (NamespaceTimers)."""
    sets: list[bytes] = []
    for opt, val in ((TCP_BPF_DELACK_MAX, delack_max_us), (TCP_BPF_RTO_MIN, rto_min_us)):
        if val is not None:
            sets += [
                insn(0x62, dst=10, off=-4, imm=val),  # *(u32 *)(r10 - 4) = val
                insn(0xBF, dst=1, src=6),  # r1 = ctx
                insn(0xB7, dst=2, imm=SOL_TCP),  # r2 = SOL_TCP
                insn(0xB7, dst=3, imm=opt),  # r3 = optname
                insn(0xBF, dst=4, src=10),  # r4 = r10
                insn(0x07, dst=4, imm=-4),  # r4 += -4
                insn(0xB7, dst=5, imm=4),  # r5 = sizeof(int)
                insn(0x85, imm=FUNC_SETSOCKOPT),  # bpf_setsockopt(...), result ignored
            ]
    init: list[bytes] = []
    if rto_init_jiffies is not None:
        init = [
            insn(0xB7, dst=1, imm=rto_init_jiffies),  # r1 = jiffies
            insn(0x63, dst=6, src=1, off=REPLY_OFFSET),  # ctx->reply = r1
        ]
    code = [insn(0xBF, dst=6, src=1)]  # r6 = ctx
    if netns_map_fd is not None:
        # past the filter: op, its test, the ops' tests, goto, sets, goto, init; then out
        code += _only_in(netns_map_fd, 2 + len(OPS_FULL_SOCKET) + 1 + len(sets) + 1 + len(init))
    start = len(code)
    head = start + 2 + len(OPS_FULL_SOCKET) + 1
    at_set = head
    at_init = at_set + len(sets) + 1
    at_out = at_init + len(init)
    code += [
        insn(0x61, dst=2, src=6, off=0),  # r2 = ctx->op
        insn(0x15, dst=2, imm=OP_TIMEOUT_INIT, off=at_init - start - 2),  # if op == 1: init
    ]
    for op in OPS_FULL_SOCKET:
        code.append(insn(0x15, dst=2, imm=op, off=at_set - len(code) - 1))  # goto set
    code.append(insn(0x05, off=at_out - len(code) - 1))  # goto out
    code += sets
    code.append(insn(0x05, off=at_out - len(code) - 1))  # goto out
    code += init
    code += [insn(0xB7, dst=0, imm=1), insn(0x95)]  # out: return 1 (allow)
    return b"".join(code)


def _only_in(map_fd: int, skip: int) -> list[bytes]:
    """Jump over the `skip` instructions after these (to `return 1`) unless the socket's
    network namespace is in the map: its cookie on the stack, bpf_map_lookup_elem(map, &it)."""
    return [
        insn(0xBF, dst=1, src=6),  # r1 = ctx
        insn(0x85, imm=FUNC_GET_NETNS_COOKIE),  # r0 = bpf_get_netns_cookie(ctx)
        insn(0x7B, dst=10, src=0, off=-8),  # *(u64 *)(r10 - 8) = r0
        insn(0x18, dst=1, src=BPF_PSEUDO_MAP_FD, imm=map_fd) + insn(0),  # r1 = map (2 slots)
        insn(0xBF, dst=2, src=10),  # r2 = r10
        insn(0x07, dst=2, imm=-8),  # r2 += -8
        insn(0x85, imm=FUNC_MAP_LOOKUP_ELEM),  # r0 = &value or NULL
        insn(0x15, dst=0, imm=0, off=skip),  # if r0 == NULL goto out (return 1)
    ]


def load(insns: bytes, name: str = "tb_tcp_timers") -> int:
    """A sock_ops program's fd; the verifier's log in the error when the kernel refuses it."""
    return load_program(insns, name, BPF_PROG_TYPE_SOCK_OPS)


def _attach_cmd(cmd: int, cgroup: Path, prog_fd: int) -> None:
    cg = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
    try:
        flags = BPF_F_ALLOW_MULTI if cmd == BPF_PROG_ATTACH else 0
        attr = struct.pack("<IIIII", cg, prog_fd, BPF_CGROUP_SOCK_OPS, flags, 0)
        bpf(cmd, attr.ljust(32, b"\0"))
    finally:
        os.close(cg)


def cgroup2_root() -> Path:
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or .../unified when hybrid)."""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if fields[2] == "cgroup2":
            return Path(fields[1])
    raise RuntimeError("no cgroup2 hierarchy is mounted")


def join(cgroup: Path, pid: int = 0) -> None:
    """Move process `pid` (0: the caller, as in a subprocess preexec_fn) into `cgroup`."""
    (cgroup / "cgroup.procs").write_text(str(pid))


class TcpTimers:
    """A cgroup whose processes' TCP sockets get the given timers. `open()` creates the
    directory when missing, loads and attaches the program; `close()` detaches it and, if
    `open()` created the directory, moves what is left in it to the parent and removes it.
    Microseconds for all three; rto_init_us is rounded up to whole jiffies (kernel_hz())."""

    def __init__(
        self,
        cgroup: Path,
        *,
        delack_max_us: int | None = None,
        rto_min_us: int | None = None,
        rto_init_us: int | None = None,
    ) -> None:
        self.cgroup = Path(cgroup)
        self.hz = kernel_hz()
        for us in (delack_max_us, rto_min_us):
            if us is not None:
                jiffies(us, self.hz)
        self.rto_init_jiffies = (
            None if rto_init_us is None else jiffies(rto_init_us, self.hz, limit_us=None)
        )
        self.insns = program(delack_max_us, rto_min_us, self.rto_init_jiffies)
        self._fd: int | None = None
        self._created = False

    def open(self) -> TcpTimers:
        if not self.cgroup.is_dir():
            self.cgroup.mkdir()
            self._created = True
        try:
            self._fd = load(self.insns)
            _attach_cmd(BPF_PROG_ATTACH, self.cgroup, self._fd)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        if self._fd is not None:
            try:
                _attach_cmd(BPF_PROG_DETACH, self.cgroup, self._fd)
            except BpfError as e:  # gone with the cgroup already, or never attached
                if e.errno not in (errno.ENOENT, errno.EBADF):
                    raise
            finally:
                os.close(self._fd)
                self._fd = None
        if self._created and self.cgroup.is_dir():
            for pid in (self.cgroup / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):  # exited meanwhile
                    join(self.cgroup.parent, int(pid))
            self.cgroup.rmdir()
            self._created = False

    def __enter__(self) -> TcpTimers:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


def attached(cgroup: Path | None = None) -> int:
    """How many sock_ops programs run for the cgroup (default: the cgroup v2 root), its own
    attachments and links (BPF_PROG_QUERY): what `nothing left behind` checks."""
    cg = os.open(cgroup or cgroup2_root(), os.O_RDONLY | os.O_DIRECTORY)
    try:
        query = struct.pack("<IIIIQI", cg, BPF_CGROUP_SOCK_OPS, 0, 0, 0, 0)
        attr = ctypes.create_string_buffer(query, 64)
        bpf(BPF_PROG_QUERY, attr)
        return int(struct.unpack_from("<I", attr, 24)[0])  # prog_cnt
    finally:
        os.close(cg)


def netns_cookie(sock: socket.socket) -> int:
    """The cookie of the network namespace a socket (of any family) was opened in."""
    return int.from_bytes(sock.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8), "little")


class NamespaceTimers:
    """The timers for the TCP sockets of the network namespaces `add`ed, whoever opens them:
    a hash map of their cookies, the program behind its filter, and a BPF link on the cgroup
    v2 root that lives as long as this object's file descriptors (close(), or the process's
    end, however it ends). Microseconds, as TcpTimers."""

    def __init__(
        self,
        *,
        delack_max_us: int | None = None,
        rto_min_us: int | None = None,
        rto_init_us: int | None = None,
    ) -> None:
        self.hz = kernel_hz()
        for us in (delack_max_us, rto_min_us):
            if us is not None:
                jiffies(us, self.hz)
        init = None if rto_init_us is None else jiffies(rto_init_us, self.hz, limit_us=None)
        self.values = (delack_max_us, rto_min_us, init)
        self._fds: list[int] = []
        self._map: int | None = None

    def open(self, cgroup: Path | None = None) -> NamespaceTimers:
        try:
            attr = struct.pack("<IIIII", BPF_MAP_TYPE_HASH, 8, 1, 4096, 0).ljust(72, b"\0")
            self._map = bpf(BPF_MAP_CREATE, attr)
            self._fds.append(self._map)
            prog = load(program(*self.values, netns_map_fd=self._map))
            self._fds.append(prog)
            cg = os.open(cgroup or cgroup2_root(), os.O_RDONLY | os.O_DIRECTORY)
            try:
                link = struct.pack("<IIII", prog, cg, BPF_CGROUP_SOCK_OPS, 0).ljust(64, b"\0")
                self._fds.append(bpf(BPF_LINK_CREATE, link))
            finally:
                os.close(cg)
        except BaseException:
            self.close()
            raise
        return self

    def add(self, cookie: int) -> None:
        """The sockets of this network namespace get the timers from now on."""
        assert self._map is not None, "open() first"
        key = ctypes.create_string_buffer(cookie.to_bytes(8, "little"), 8)
        value = ctypes.create_string_buffer(b"\1", 1)
        attr = struct.pack(
            "<IIQQQ", self._map, 0, ctypes.addressof(key), ctypes.addressof(value), 0
        )
        bpf(BPF_MAP_UPDATE_ELEM, attr.ljust(32, b"\0"))

    def close(self) -> None:
        """The link first (the program stops running), then the program and the map."""
        while self._fds:
            os.close(self._fds.pop())
        self._map = None
