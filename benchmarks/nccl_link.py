"""NCCL's bulk all-reduce through testbed's shaped links, beside the same all-reduce over
loopback and over a bare veth pair, in one run (issue 33).

benchmarks/gpu.py reads NCCL through a link inside a training job: on an H100 its bulk job
filled 0.69 of a fast 10 Gbit/s link, and about 45 ms of each iteration was not the network
(DDP's buckets, launches, the optimizer; docs/results/gpu/history.md). Here the ranks are
benchmarks/gpu_anchor.py's and nothing else: two processes, 100 MB all-reduced back to back
with the NCCL settings testbed gives its jobs (socket transport, P2P and SHM off), each rank
in a namespace of its own, started through `testbed exec` as a user would. With two ranks each
sends the whole tensor per all-reduce, so a rank's rate is what one direction of its link
carried: above the cap it would break physics, and TCP's payload ceiling at MTU 1500 is
1448/1514 = 0.956 of it.

  loopback            no namespaces: the most NCCL's socket transport moves here
  bare off / bare on  two namespaces joined by one veth pair, offloads off (as exact mode
                      turns them off) and on
  fast|exact RATE     `testbed up --hold` of 2 hosts on one switch, fifo, MTU 1500; the ratio
                      is the rank's rate over the link's cap
  segs N              with `--segments 43,16,8`: fast mode at the first rate with the hosts'
                      eth0 taking at most N TCP segments a packet (43 is what fast mode
                      sets at 10 Gbit/s): NCCL, and iperf3 one way and both ways at once
                      (goodput per direction over the cap), to see what the size of fast
                      mode's packets costs a link loaded in both directions

Run as root on a machine with an NVIDIA GPU: `python3 benchmarks/nccl_link.py [--quick]`; one
JSON line per measurement, then one with every figure. `--backend gloo` runs the same plumbing
on CPU tensors (a check on a machine without a GPU; its figures are Gloo's, not NCCL's; no
bare pairs: Gloo, told GLOO_SOCKET_IFNAME=v, bound to 127.0.0.1 in them here).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from linkrate import PORT, TESTBED, bare_pairs, held_run, in_ns, iperf_clients, sh

ANCHOR = str(Path(__file__).with_name("gpu_anchor.py"))
PORTS = itertools.count(29600)
VARIANTS = {  # NCCL settings tried through a fast 10 Gbit/s link (its defaults first)
    "default": [],
    "buffsize 16 MiB": ["NCCL_BUFFSIZE=16777216"],
    "2 threads x 2 sockets": ["NCCL_SOCKET_NTHREADS=2", "NCCL_NSOCKS_PERTHREAD=2"],
}


def pair(
    launch: list[list[str]], master: str, ifname: str, env: list[str], args: argparse.Namespace
) -> float | None:
    """Rank 0 with launch[0]'s prefix, rank 1 with launch[1]'s; the Gbit/s rank 0 moved."""
    port = str(next(PORTS))
    common = ["--world", "2", "--master", master, "--ifname", ifname, "--port", port,
              "--backend", args.backend, "--size", str(args.size), "--repeat", str(args.repeat)]  # fmt: skip
    common += [x for kv in env for x in ("--env", kv)]
    with contextlib.ExitStack() as files:
        logs = [[files.enter_context(tempfile.TemporaryFile("w+")) for _ in "oe"] for _ in launch]
        procs: list[subprocess.Popen[str]] = []
        try:
            for r, (prefix, (out, err)) in enumerate(zip(launch, logs, strict=True)):
                procs.append(subprocess.Popen(
                    [*prefix, sys.executable, ANCHOR, "--rank", str(r), *common],
                    stdout=out, stderr=err, text=True))  # fmt: skip
            deadline = time.monotonic() + args.timeout
            # until both end, one fails (the other would wait for it) or time is up
            while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
                if any(p.returncode for p in procs):
                    break
                time.sleep(0.2)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
        texts = []
        for f in logs:
            for x in f:
                x.seek(0)
            texts.append([x.read() for x in f])
    if any(p.returncode for p in procs):
        for r, (p, (_, err)) in enumerate(zip(procs, texts, strict=True)):
            print(f"nccl_link: rank {r} ended {p.returncode} (a kill: the other failed, or "
                  f"{args.timeout:g} s passed): {err[-1500:]}", file=sys.stderr)  # fmt: skip
        return None
    return float(json.loads(texts[0][0].strip().splitlines()[-1])["bus_gbit_s"])


SET_SEGMENTS = (  # run inside a host: its eth0's gso_max_segs (pyroute2: no `ip` needed)
    "import sys; from pyroute2 import IPRoute; r = IPRoute(); "
    "r.link('set', index=r.link_lookup(ifname='eth0')[0], gso_max_segs=int(sys.argv[1]))"
)


def segments_ablation(
    launch: list[list[str]], rate: float, args: argparse.Namespace, take: Any
) -> None:
    for prefix in launch:
        sh(*prefix, "iperf3", "-s", "-D", "-p", str(PORT))
    for n in [int(x) for x in args.segments.split(",")]:
        for prefix in launch:
            sh(*prefix, sys.executable, "-c", SET_SEGMENTS, str(n))
        one = [[*launch[0], "iperf3", "-c", "h2", "-p", str(PORT)]]
        both = [*one, [*launch[1], "iperf3", "-c", "h1", "-p", str(PORT)]]
        for name, clients in (("one way", one), ("both ways", both)):  # per direction
            take(f"iperf3 {name} segs {n}", iperf_clients(clients, 4.0) / len(clients), rate)
        take(f"fast {rate:g} segs {n}", pair(launch, "h1", "eth0", [], args), rate)


@contextlib.contextmanager
def in_testbed(rate: float, mode: str) -> Iterator[list[list[str]]]:
    with held_run(2, rate, mode) as rid:
        yield [[*TESTBED, "exec", "--run", rid, h, "--"] for h in ("h1", "h2")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10 MB, 2 all-reduces, fewer cases")
    ap.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    ap.add_argument("--rates", default="10,25", help="fast-mode link rates in Gbit/s")
    ap.add_argument("--segments", help="e.g. 43,16,8: the packet-size ablation (fast mode)")
    ap.add_argument(
        "--ablation-only", action="store_true", help="with --segments: nothing but the ablation"
    )
    ap.add_argument("--timeout", type=float, default=180, help="seconds a pair of ranks may take")
    args = ap.parse_args()
    args.size, args.repeat = (10_000_000, 2) if args.quick else (100_000_000, 16)
    if args.backend == "nccl" and not Path("/proc/driver/nvidia/gpus").exists():
        print("benchmarks/nccl_link.py: no NVIDIA GPU here (--backend gloo checks the plumbing)")
        return 0
    rates = [float(x) for x in args.rates.split(",")]
    fig: dict[str, Any] = {}

    def take(key: str, gbit: float | None, cap: float | None = None) -> None:
        rec: dict[str, Any] = {"case": key, "gbit": gbit}
        if gbit is not None and cap:
            rec["ratio"] = round(gbit / cap, 3)
            if gbit > cap * 1.001:
                rec["physics"] = f"{gbit} Gbit/s through a {cap:g} Gbit/s link"
        fig[key] = rec.get("ratio", gbit)
        print(json.dumps(rec), flush=True)

    only = args.ablation_only and args.segments
    lo = "=lo" if args.backend == "nccl" else "lo"
    if not only:
        take("loopback", pair([[], []], "127.0.0.1", lo, [], args))
    for offloads in (False, True) if args.backend == "nccl" and not only else ():  # Gloo: no "v"
        with bare_pairs(1, offloads) as [(a, b, addr)]:
            key = f"bare {'on' if offloads else 'off'}"
            take(key, pair([in_ns(b), in_ns(a)], addr, "v", [], args))
    for i, rate in enumerate(rates[:1] if only else rates):
        with in_testbed(rate, "fast") as launch:
            variants = VARIANTS.items() if i == 0 and not args.quick else [("default", [])]
            for name, env in [] if only else variants:
                take(f"fast {rate:g} {name}", pair(launch, "h1", "eth0", env, args), rate)
            if i == 0 and args.segments:
                segments_ablation(launch, rate, args, take)
    if not only:
        with in_testbed(rates[0], "exact") as launch:
            take(f"exact {rates[0]:g} default", pair(launch, "h1", "eth0", [], args), rates[0])
    print(json.dumps({"backend": args.backend, "size": args.size, **fig}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
