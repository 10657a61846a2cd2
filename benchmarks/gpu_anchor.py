"""The anchor for benchmarks/gpu.py: NCCL's all-reduce between two processes on this machine,
without testbed (no namespaces, no shaping), over loopback sockets with the settings testbed
gives NCCL (NCCL_NET=Socket, P2P and SHM off, a host id per rank so two ranks may share one
GPU). What it prints is the most NCCL's socket transport moves here; a shaped link can carry
no more. Variants: NCCL's default socket threads, and 4 threads × 4 sockets.

Run: `python3 benchmarks/gpu_anchor.py [--quick]` on a machine with an NVIDIA GPU; one JSON
line per variant: bus rate in Gbit/s (ring all-reduce: each rank sends 2 (n − 1) / n of the
tensor). Without a CUDA device it says so and exits 0. --quick: a 10 MB tensor, 2 all-reduces,
to check in seconds that it runs; its figures mean little.

One rank of it, in a process of its own (benchmarks/nccl_link.py starts one in each of two
namespaces, so the same all-reduce crosses a veth pair or a shaped link):
`python3 benchmarks/gpu_anchor.py --rank R --world 2 --master ADDR --ifname eth0 [--env K=V]`;
rank 0 prints the JSON line. `--backend gloo` runs it on CPU tensors (a check of the plumbing
on a machine without a GPU; not NCCL's figure).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZE = 100_000_000  # bytes, as benchmarks/gpu.py's bulk all-reduce
REPEAT = 8


def worker(
    rank: int,
    n: int,
    port: int,
    extra: dict[str, str],
    out: Any,
    size: int,
    repeat: int,
    master: str = "127.0.0.1",
    ifname: str = "=lo",
    backend: str = "nccl",
) -> None:
    os.environ.update({
        "NCCL_NET": "Socket", "NCCL_SOCKET_IFNAME": ifname, "NCCL_IB_DISABLE": "1",
        "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_HOSTID": f"anchor-{rank}",
        "GLOO_SOCKET_IFNAME": ifname.lstrip("="),
        "MASTER_ADDR": master, "MASTER_PORT": str(port), **extra,
    })  # fmt: skip
    if backend == "nccl":
        gpu = rank % torch.cuda.device_count()
        torch.cuda.set_device(gpu)
        device = torch.device("cuda", gpu)
        dist.init_process_group("nccl", rank=rank, world_size=n, device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group(backend, rank=rank, world_size=n)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    x = torch.ones(size // 4, device=device)
    dist.all_reduce(x)  # connects
    sync()
    dist.barrier()  # both ranks start the clock together
    t0 = time.perf_counter()
    for _ in range(repeat):
        dist.all_reduce(x)
    sync()
    dist.barrier()  # this rank's last bytes have arrived too, not only the other's
    dt = (time.perf_counter() - t0) / repeat
    if rank == 0:
        out.put(dt)
    dist.destroy_process_group()


def line(variant: str, n: int, size: int, dt: float) -> str:
    gbit = 2 * (n - 1) / n * size * 8 / dt / 1e9
    return json.dumps({"variant": variant, "ranks": n, "size": size, "all_reduce_s": round(dt, 4),
                       "bus_gbit_s": round(gbit, 3)})  # fmt: skip


def one_rank(args: argparse.Namespace, size: int, repeat: int) -> int:
    """This process is one rank; rank 0 prints the JSON line."""
    extra = dict(kv.split("=", 1) for kv in args.env)
    got: queue.SimpleQueue[float] = queue.SimpleQueue()
    worker(args.rank, args.world, args.port, extra, got, size, repeat, args.master,
           args.ifname, args.backend)  # fmt: skip
    if args.rank == 0:
        print(
            line(" ".join(args.env) or "default sockets", args.world, size, got.get()), flush=True
        )
    return 0


def measure(n: int, port: int, extra: dict[str, str], size: int, repeat: int) -> float:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    ps = [ctx.Process(target=worker, args=(r, n, port, extra, out, size, repeat)) for r in range(n)]
    for p in ps:
        p.start()
    dt = out.get(timeout=120)
    for p in ps:
        p.join(30)
    return dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="a 10 MB tensor, 2 all-reduces: checks in seconds that it runs",
    )
    ap.add_argument("--rank", type=int, help="be this one rank (with --world, --master)")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--master", default="127.0.0.1", help="rank 0's address")
    ap.add_argument("--ifname", default="=lo", help="NCCL_SOCKET_IFNAME")
    ap.add_argument("--port", type=int, default=29500)
    ap.add_argument("--env", action="append", default=[], metavar="K=V", help="NCCL settings")
    ap.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    ap.add_argument("--size", type=int, help="bytes per all-reduce (default 100 MB)")
    ap.add_argument("--repeat", type=int, help=f"all-reduces timed (default {REPEAT})")
    args = ap.parse_args()
    size, repeat = (10_000_000, 2) if args.quick else (SIZE, REPEAT)
    size, repeat = args.size or size, args.repeat or repeat
    if args.rank is not None:
        if args.backend == "nccl" and not torch.cuda.is_available():
            print("benchmarks/gpu_anchor.py: no CUDA device for an NCCL rank", file=sys.stderr)
            return 1
        return one_rank(args, size, repeat)
    if not torch.cuda.is_available():
        print("benchmarks/gpu_anchor.py: no CUDA device; nothing measured")
        return 0
    for i, (name, extra) in enumerate([
        ("default sockets", {}),
        ("4 threads x 4 sockets", {"NCCL_SOCKET_NTHREADS": "4", "NCCL_NSOCKS_PERTHREAD": "4"}),
    ]):  # fmt: skip
        n = 2
        dt = measure(n, 29500 + i, extra, size, repeat)
        print(line(name, n, size, dt))
    return 0


if __name__ == "__main__":
    sys.exit(main())
