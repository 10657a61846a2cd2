"""netns against docker: what containers cost to set up and tear down, what the node image
costs to build, and whether a run measures the same on both runtimes.

  setup_s        build (namespaces or containers, veths, addresses, offloads) + shaping of
                 every link in both directions, for 8 and 32 hosts
  teardown_s     the runtime's own teardown from the state file
  image_build_s  cold: from nothing (debootstrap, wheels on the host, docker build), only
                 with --cold (it deletes testbed's images and Docker's build cache first);
                 warm: nothing changed (the content hash finds the image)
  image_mb       size of the node image
  iteration_ratio_docker_over_netns
                 the Horovod job of examples/thesis-mini-docker.yaml alone (no web-search
                 load) against the same in examples/thesis-mini.yaml: median over --repeats
                 runs of 30 s of each run's mean iteration time, docker over netns. This is what
                 the runtime itself costs the training.
  iteration_ratio_with_load
                 the two examples as they are (web-search load in the high band), one run of
                 --duration each. Single runs vary by ±25 % on either runtime (which large
                 flows overlap which iterations), so this figure carries that noise.
  goodput_ratio_docker_100mbit
                 one bulk TCP flow between two containers on a 100 Mbit/s link, goodput / cap

Run as root with dockerd running: `.venv/bin/python benchmarks/runtime.py [--cold] [--quick]`;
the JSON line is the last line. --quick: 2 hosts, one run of each kind, 2 s runs with a 0.5 s
warm-up and Prometheus off, to check in seconds (once the node image exists) that it runs; its
figures mean little.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from testbed.core.state import RunState
from testbed.network.images import build_images, ensure_node_image
from testbed.network.runtime import registry as runtimes
from testbed.network.runtime.engine import client
from testbed.network.shaping.apply import apply_plans
from testbed.network.shaping.plan import LinkSpec, plan_links
from testbed.run.orchestrator import run
from testbed.scenario.resolve import load_scenario_data
from testbed.scenario.schema import apply_overrides
from testbed.scenario.topology import new_run_id, single_tor

ROOT = Path(__file__).resolve().parents[1]
# overrides of every run (--quick: a short warm-up, Prometheus off)
OVERRIDES: dict[str, Any] = {}


def setup_teardown(runtime: str, hosts: int, image: str, tmp: Path) -> tuple[float, float]:
    s = load_scenario_data(
        {"name": "bench", "runtime": runtime, "topology": {"hosts": hosts},
         "tc_profile": "thesis-2band"}, "bench"
    )  # fmt: skip
    run_id = new_run_id()
    plan = single_tor(s, run_id)
    st = RunState(run_id=run_id, scenario="bench", out_dir=str(tmp), runtime=runtime)
    st.save()
    t0 = time.monotonic()
    prepared = image if runtime == "docker" else None
    rt = runtimes.get(runtime).create(plan, st, s, tmp, prepared, {})
    try:
        rt.build()
        t = s.topology
        spec = LinkSpec(t.link_rate, t.delay, t.jitter, t.loss, t.queue_limit, t.mtu)
        plans = plan_links(plan.link_ends(), spec, s.tc_profile, False)
        st.record(*({"kind": "qdisc", "netns": p.end.netns, "ifname": p.end.ifname,
                     "handle": "1:"} for p in plans))  # fmt: skip
        apply_plans(plans, rt.netlink)
        setup = time.monotonic() - t0
    finally:
        rt.close()
        t1 = time.monotonic()
        problems = runtimes.teardown(st)
        down = time.monotonic() - t1
        st.remove()
    if problems:
        raise SystemExit(f"teardown problems: {problems}")
    return setup, down


def mean_iteration(path: Path, duration: str, out: Path, load: bool = True) -> float:
    data = yaml.safe_load(path.read_text())
    data["duration"] = duration
    if not load:
        del data["workloads"]["websearch"]
    s = load_scenario_data(apply_overrides(data, OVERRIDES), str(path.parent))
    summary = run(s, out=out).summary
    return float(summary["horovod"]["iteration_time_s"]["mean"])


def goodput_ratio(out: Path, duration: str = "10s") -> float:
    rate = 100_000_000
    data = {"name": "gp", "runtime": "docker", "duration": duration,
            "measure": {"warmup": "1s", "cooldown": "0s"},
            "topology": {"hosts": 2, "link_rate": rate},
            "workloads": {"linkcheck": {"pattern": "single", "short": False}}}  # fmt: skip
    s = load_scenario_data(apply_overrides(data, OVERRIDES), "bench")
    summary = run(s, out=out).summary
    (flow,) = [f for f in summary["linkcheck"]["bulk"] if f["src"] == "h1"]
    return float(flow["goodput_bps"]) / rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cold", action="store_true", help="also time a build from nothing")
    ap.add_argument("--duration", default="60s", help="of each thesis-mini run with load")
    ap.add_argument("--repeats", type=int, default=3, help="Horovod-alone runs per runtime")
    ap.add_argument("--sizes", default="8,32")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="2 hosts, 1 repeat, 2 s runs: checks in seconds that it runs (the node image "
        "built first if missing)",
    )
    args = ap.parse_args()
    alone_s, goodput_s = "30s", "10s"
    if args.quick:
        args.sizes, args.repeats, args.duration = "2", 1, "2s"
        alone_s = goodput_s = "2s"
        OVERRIDES.update({
            "measure.warmup": "0.5s", "measure.cooldown": "0s", "metrics.prometheus": "off",
            "topology.hosts": 2,
        })  # fmt: skip
    engine = client()
    result: dict[str, Any] = {"image_build_s": {"cold": None, "warm": None}}
    if args.cold:
        for img in engine.images.list(filters={"label": "testbed.image"}):
            engine.images.remove(img.id, force=True)
        engine.api.prune_builds()
        r = build_images(engine, progress=print)
        result["image_build_s"]["cold"] = round(r.seconds, 1)
    image = ensure_node_image(engine, progress=print)
    r = build_images(engine, progress=print)
    result["image_build_s"]["warm"] = round(r.seconds, 2)
    result["image_mb"] = round(r.size_mb)
    engine.close()

    sizes = [int(x) for x in args.sizes.split(",")]
    result["setup_s"] = {"netns": {}, "docker": {}}
    result["teardown_s"] = {"netns": {}, "docker": {}}
    with tempfile.TemporaryDirectory(prefix="tb-bench-") as tmp:
        for runtime in ("netns", "docker"):
            for n in sizes:
                up, down = setup_teardown(runtime, n, image, Path(tmp))
                result["setup_s"][runtime][str(n)] = round(up, 2)
                result["teardown_s"][runtime][str(n)] = round(down, 2)
                print(f"{runtime} {n} hosts: setup {up:.2f} s, teardown {down:.2f} s", flush=True)
        t = Path(tmp)
        examples = {"netns": ROOT / "examples" / "thesis-mini.yaml",
                    "docker": ROOT / "examples" / "thesis-mini-docker.yaml"}  # fmt: skip
        alone: dict[str, list[float]] = {"netns": [], "docker": []}
        for i in range(args.repeats):
            for runtime, path in examples.items():
                alone[runtime].append(
                    mean_iteration(path, alone_s, t / f"{runtime}{i}", load=False)
                )
                print(f"Horovod alone, {runtime}: mean iteration {alone[runtime][-1]:.3f} s",
                      flush=True)  # fmt: skip
        med = {k: statistics.median(v) for k, v in alone.items()}
        result["iteration_s_alone"] = {k: [round(x, 3) for x in v] for k, v in alone.items()}
        result["iteration_ratio_docker_over_netns"] = round(med["docker"] / med["netns"], 3)
        loaded = {k: mean_iteration(p, args.duration, t / f"{k}-load") for k, p in examples.items()}
        print(
            f"with load: netns {loaded['netns']:.3f} s, docker {loaded['docker']:.3f} s", flush=True
        )
        result["iteration_ratio_with_load"] = round(loaded["docker"] / loaded["netns"], 3)
        result["goodput_ratio_docker_100mbit"] = round(goodput_ratio(t / "g", goodput_s), 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
