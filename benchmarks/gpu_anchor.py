"""The anchor for benchmarks/gpu.py: NCCL's all-reduce between two processes on this machine,
without testbed (no namespaces, no shaping), over loopback sockets with the settings testbed
gives NCCL (NCCL_NET=Socket, P2P and SHM off, a host id per rank so two ranks may share one
GPU). What it prints is the most NCCL's socket transport moves here; a shaped link can carry
no more. Variants: NCCL's default socket threads, and 4 threads × 4 sockets.

Run: `python3 benchmarks/gpu_anchor.py [--quick]` on a machine with an NVIDIA GPU; one JSON
line per variant: bus rate in Gbit/s (ring all-reduce: each rank sends 2 (n − 1) / n of the
tensor). Without a CUDA device it says so and exits 0. --quick: a 10 MB tensor, 2 all-reduces,
to check in seconds that it runs; its figures mean little.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZE = 100_000_000  # bytes, as benchmarks/gpu.py's bulk all-reduce
REPEAT = 8


def worker(
    rank: int, n: int, port: int, extra: dict[str, str], out: mp.Queue, size: int, repeat: int
) -> None:
    os.environ.update({
        "NCCL_NET": "Socket", "NCCL_SOCKET_IFNAME": "=lo", "NCCL_IB_DISABLE": "1",
        "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_HOSTID": f"anchor-{rank}",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), **extra,
    })  # fmt: skip
    gpu = rank % torch.cuda.device_count()
    torch.cuda.set_device(gpu)
    dist.init_process_group("nccl", rank=rank, world_size=n, device_id=torch.device("cuda", gpu))
    x = torch.ones(size // 4, device="cuda")
    dist.all_reduce(x)  # connects
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(repeat):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / repeat
    if rank == 0:
        out.put(dt)
    dist.destroy_process_group()


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
    args = ap.parse_args()
    size, repeat = (10_000_000, 2) if args.quick else (SIZE, REPEAT)
    if not torch.cuda.is_available():
        print("benchmarks/gpu_anchor.py: no CUDA device; nothing measured")
        return 0
    for i, (name, extra) in enumerate([
        ("default sockets", {}),
        ("4 threads x 4 sockets", {"NCCL_SOCKET_NTHREADS": "4", "NCCL_NSOCKS_PERTHREAD": "4"}),
    ]):  # fmt: skip
        n = 2
        dt = measure(n, 29500 + i, extra, size, repeat)
        gbit = 2 * (n - 1) / n * size * 8 / dt / 1e9
        print(json.dumps({"variant": name, "ranks": n, "gpus": torch.cuda.device_count(),
                          "all_reduce_s": round(dt, 4), "bus_gbit_s": round(gbit, 2)}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
