"""The anchor for benchmarks/gpu.py: NCCL's all-reduce between two processes on this machine,
without testbed (no namespaces, no shaping), over loopback sockets with the settings testbed
gives NCCL (NCCL_NET=Socket, P2P and SHM off, a host id per rank so two ranks may share one
GPU). What it prints is the most NCCL's socket transport moves here; a shaped link can carry
no more. Variants: NCCL's default socket threads, and 4 threads × 4 sockets.

Run: `python3 benchmarks/gpu_anchor.py` on a machine with an NVIDIA GPU; one JSON line per
variant: bus rate in Gbit/s (ring all-reduce: each rank sends 2 (n − 1) / n of the tensor).
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZE = 100_000_000  # bytes, as benchmarks/gpu.py's bulk all-reduce
REPEAT = 8


def worker(rank: int, n: int, port: int, extra: dict[str, str], out: mp.Queue) -> None:
    os.environ.update({
        "NCCL_NET": "Socket", "NCCL_SOCKET_IFNAME": "=lo", "NCCL_IB_DISABLE": "1",
        "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_HOSTID": f"anchor-{rank}",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), **extra,
    })  # fmt: skip
    gpu = rank % torch.cuda.device_count()
    torch.cuda.set_device(gpu)
    dist.init_process_group("nccl", rank=rank, world_size=n, device_id=torch.device("cuda", gpu))
    x = torch.ones(SIZE // 4, device="cuda")
    dist.all_reduce(x)  # connects
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(REPEAT):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / REPEAT
    if rank == 0:
        out.put(dt)
    dist.destroy_process_group()


def measure(n: int, port: int, extra: dict[str, str]) -> float:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    ps = [ctx.Process(target=worker, args=(r, n, port, extra, out)) for r in range(n)]
    for p in ps:
        p.start()
    dt = out.get(timeout=120)
    for p in ps:
        p.join(30)
    return dt


def main() -> int:
    if not torch.cuda.is_available():
        print("benchmarks/gpu_anchor.py: no CUDA device; nothing measured")
        return 0
    for i, (name, extra) in enumerate([
        ("default sockets", {}),
        ("4 threads x 4 sockets", {"NCCL_SOCKET_NTHREADS": "4", "NCCL_NSOCKS_PERTHREAD": "4"}),
    ]):  # fmt: skip
        n = 2
        dt = measure(n, 29500 + i, extra)
        gbit = 2 * (n - 1) / n * SIZE * 8 / dt / 1e9
        print(json.dumps({"variant": name, "ranks": n, "gpus": torch.cuda.device_count(),
                          "all_reduce_s": round(dt, 4), "bus_gbit_s": round(gbit, 2)}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
