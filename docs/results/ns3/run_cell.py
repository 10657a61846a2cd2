"""Build one run folder of the thesis' grid with the thesis' own generator, run its simulator
on it, and print what the thesis measured: iteration time (the gap between consecutive
BP_Start of the last layer, as its horovod_worker_plot_class.py) and flow completion times by
size (small <= 100 KB, large >= 10 MB, flows started 2 s after the start and 2 s before the
last start, as its plot_pfabric_FCT.py).

    run_cell.py --checkout CHECKOUT --networkload NETWORKLOAD --binary BIN \
        --ratio 2 --utilization 0.125 --priority low --run-idx 0 --out DIR [--sim-s 12] \
        [--tcp thesis|ns-3.37]

Every value of the folder comes from the generator
(runs/pfabric_flows_horovod/generate_traffic_and_run_pfabric_horovod.py, "GT"), imported from
the checkout and called as its grid (GT:383-424) and individual_pfabric_run (GT:118-207) call
it. Two things are not in the checkout and are written here, named as such:
- horovod.properties: its template is in no commit; the keys are those horovod-scheduler.cc
  reads, the values those the generator's seds put in (GT:167-175).
- the priority: the grid hard-codes 0x10 (GT:397); the thesis' "low" runs are 0x08.
The generator needs `exputil` and `sh` (for its own shell steps, not used here) and a module
deleted from the repository (GT:4): empty stand-ins are registered for the import.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

PRIORITY = {"same": "0x10", "high": "0x10", "low": "0x08"}  # thesis 5.3: ToS 0x10 / 0x08
# The thesis' TCP: ns-3.30.1's defaults (tcp-l4-protocol.cc:84-86), which ns-3.37 changed (PRR
# in 3.32, CUBIC in 3.34). Set as defaults on the command line, which main parses before it
# builds the nodes: their TcpL4Protocol reads both when it is created (port.py, edit 2).
# "ns-3.37" runs the packaged defaults, as the runs of 2026-12-01 did.
TCP = {
    "thesis": ["--ns3::TcpL4Protocol::SocketType=ns3::TcpNewReno",
               "--ns3::TcpL4Protocol::RecoveryType=ns3::TcpClassicRecovery"],
    "ns-3.37": [],
}  # fmt: skip
MASTER_SEED = 123456789876  # GT:213 (expand_number_of_runs: master_seed + run index)


def load_generator(checkout: Path, networkload: Path) -> types.ModuleType:
    here = checkout / "runs" / "pfabric_flows_horovod"
    sys.path[:0] = [str(here), str(networkload)]
    for name in ("exputil", "sh", "pfabric_horovod_run"):
        stub = types.ModuleType(name)
        stub.LocalShell = object  # type: ignore[attr-defined]
        sys.modules.setdefault(name, stub)
    cwd = os.getcwd()
    os.chdir(here)  # GT reads its templates' paths from the working directory
    try:
        import generate_traffic_and_run_pfabric_horovod as gt
    finally:
        os.chdir(cwd)
    return gt


def write_folder(gt: types.ModuleType, args: argparse.Namespace, run: Path) -> dict:
    link_mbits, workers, layers, model = 10000.0, 8, 50, 100 * 10**6  # GT:391-395
    sim_ns = int(args.sim_s * 1e9)  # GT:396 simulation_ns = 12 s
    it_ms = gt.calculate_iteration_time_for_hrvd(link_mbits, workers, model, args.ratio)
    hv = gt.HorovodConfig(workers, layers, model, 2 * 10**6, it_ms)  # __post_init__: fusion
    rate = round(gt.calculate_flow_rate_based_on_link_utilization(link_mbits, args.utilization))
    seed = MASTER_SEED + args.run_idx
    run.mkdir(parents=True)
    template = (Path(gt.config_dir) / "config_ns3.properties").read_text()
    for key, value in {
        "[ARRIVAL-RATE]": rate,
        "[UTILIZATION-INTERVAL]": 100000000,
        "[SIMULATION-TIME-NS]": sim_ns,
        "[LINK-DATARATE-MBITS]": link_mbits,
        "[PRIORITY-HEX]": PRIORITY[args.priority],
        "[RUN-HOROVOD]": "true",
    }.items():  # fmt: skip  (GT:157-163)
        template = template.replace(key, str(value))
    (run / "config_ns3.properties").write_text(template)
    gt.generate_leaf_tor_topology(workers + 1, str(run / "topology_single.properties"))
    model_mb = hv.model_size_in_byte / 10**6
    files = {
        "layer_size_file": f"layer_weight_model_size_{model_mb}MB.csv",
        "fp_compute_time_file": f"fp_compute_iter_time_{hv.iteration_time_ms}_ms.csv",
        "bp_compute_time_file": f"bp_compute_iter_time_{hv.iteration_time_ms}_ms.csv",
    }  # GT:173-175
    gt.write_to_csv(hv.layer_size, str(run / files["layer_size_file"]))
    gt.write_to_csv(hv.fp_compute_time, str(run / files["fp_compute_time_file"]))
    gt.write_to_csv(hv.bp_compute_time, str(run / files["bp_compute_time_file"]))
    props = {"num_workers": workers, "num_layers": layers,
             "fusion_buffer_size": hv.fusion_buffer_size, **files}  # fmt: skip
    (run / "horovod.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    if rate:
        gt.generate_pfabric_flows(
            str(run / f"schedule_{rate}.csv"), list(range(workers)), rate, sim_ns, link_mbits, seed
        )  # fmt: skip  (GT:196-202)
    else:  # --utilization 0: the job alone (not a cell of the thesis; its generator needs a rate)
        (run / "schedule_0.csv").write_text("")
    return {"ratio": args.ratio, "utilization": args.utilization, "priority": args.priority,
            "sim_s": args.sim_s, "run_idx": args.run_idx, "iteration_ms": it_ms,
            "flows_per_s": rate, "seed": seed, "fusion": hv.fusion_buffer_size,
            "model_bytes": sum(hv.layer_size.values())}  # fmt: skip


def iterations(logs: Path, workers: int, layers: int) -> list[float]:
    """Seconds between consecutive BP_Start of the last layer, every worker."""
    out = []
    for w in range(workers):
        starts = []
        path = logs / f"HorovodWorker_{w}_layer_{layers}_port_1024_progress.txt"
        for line in path.read_text().splitlines()[1:]:
            f = line.split(",")
            if len(f) >= 4 and int(f[1]) == layers - 1 and f[2] == "BP_Start":
                starts.append(int(f[3].split()[0]))
        out += [(b - a) / 1e9 for a, b in itertools.pairwise(starts)]
    return out


def flows(logs: Path) -> dict[str, list[float]]:
    rows = [line.split(",") for line in (logs / "flows.csv").read_text().splitlines() if line]
    last = int(rows[-1][4])
    out: dict[str, list[float]] = {"small": [], "mid": [], "large": [], "unfinished": []}
    for r in rows:
        start, size = int(r[4]), int(r[3])
        if not 2e9 < start < last - 2e9:
            continue
        if r[8] != "YES":
            out["unfinished"].append(size)
            continue
        kind = "small" if size / 1000 <= 100 else "large" if size / 1000 >= 10000 else "mid"
        out[kind].append(int(r[6]) / 1e9)
    return out


def p99(v: list[float]) -> float:
    """numpy.percentile(v, 99) (linear), as the thesis' generate_flow_stats."""
    return statistics.quantiles(v, n=100, method="inclusive")[98] if len(v) > 1 else v[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkout", type=Path, required=True)
    p.add_argument("--networkload", type=Path, required=True)
    p.add_argument("--binary", type=Path, required=True)
    p.add_argument("--ratio", type=float, required=True, help="R: 16, 8, 4, 2 (GT:384)")
    p.add_argument("--utilization", type=float, required=True, help="0.03125 … 0.25 (GT:387)")
    p.add_argument("--priority", choices=sorted(PRIORITY), required=True)
    p.add_argument("--run-idx", type=int, default=0, help="0, 1, 2 (GT:227 num_runs = 3)")
    p.add_argument("--sim-s", type=float, default=12.0)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tcp", choices=sorted(TCP), default="thesis",
                   help="thesis: NewReno + classic recovery (default); ns-3.37: CUBIC + PRR")  # fmt: skip
    a = p.parse_args()
    gt = load_generator(a.checkout.resolve(), a.networkload.resolve())
    run = a.out.resolve()
    facts = write_folder(gt, a, run)
    print("folder", run, facts, flush=True)
    t0 = time.monotonic()
    with open(run / "simulation.log", "w") as log:
        subprocess.run([str(a.binary.resolve()), f"--run_dir={run}", *TCP[a.tcp]], stdout=log,
                       stderr=subprocess.STDOUT, check=True)  # fmt: skip
    wall = time.monotonic() - t0
    it = iterations(run / "logs_ns3", 8, 50)
    fl = flows(run / "logs_ns3") if facts["flows_per_s"] else {"unfinished": []}
    result = {**facts, "tcp": a.tcp, "wall_s": round(wall, 1), "iterations": len(it),
              "iteration_mean_s": statistics.mean(it), "iteration_median_s": statistics.median(it),
              "unfinished": len(fl["unfinished"]),
              "iterations_s": [round(x, 9) for x in it]}  # fmt: skip
    print(f"wall {wall:.0f} s; iterations {len(it)}: mean {statistics.mean(it) * 1e3:.1f} ms, "
          f"median {statistics.median(it) * 1e3:.1f} ms, max {max(it) * 1e3:.1f} ms")  # fmt: skip
    for kind in ("small", "mid", "large"):
        v = fl.get(kind)
        if v:
            result[f"fct_{kind}"] = {"n": len(v), "mean_s": statistics.mean(v),
                                     "median_s": statistics.median(v), "p99_s": p99(v)}  # fmt: skip
            print(f"{kind}: {len(v)} flows, mean {statistics.mean(v) * 1e6:.0f} µs, median "
                  f"{statistics.median(v) * 1e6:.0f} µs, p99 {p99(v) * 1e6:.0f} µs")  # fmt: skip
    print(f"unfinished in the window: {len(fl['unfinished'])}")
    (run / "result.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
