"""Every benchmark in benchmarks/ runs: its quick mode (`--quick`: the same code path at its
smallest size, seconds), as a whole process, exits 0 and prints what the benchmark prints (its
JSON line, with the figures it documents). The figures are not judged: a 2 s run on a busy
machine says little. The point is that a benchmark that no longer runs (an import that moved, a
summary key renamed) fails the suite instead of rotting unseen. The benchmarks that need a
Docker engine (runtime.py, swarm.py) are in tests/docker/test_benchmarks.py.

Each test also checks that the benchmark left nothing in its temporary folder (TMPDIR), and,
as every integration test does (conftest.py), no namespace, link, state file or process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from testbed.network.preflight import visible_gpus
from tests.integration.helpers import ROOT
from tests.needs import need, need_binary

# a quick mode takes seconds; this is the limit past which it is a hang, not a slow machine
TIMEOUT_S = 240


def quick(
    name: str, tmp_path: Path, *args: str, keeps_runs: bool = False, timeout: float = TIMEOUT_S
) -> str:
    """stdout of `benchmarks/NAME.py --quick ARGS`, which must exit 0 and leave its temporary
    folder empty (unless it `keeps_runs`, as gpu.py keeps its run folders on purpose)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = subprocess.run(
        [sys.executable, f"benchmarks/{name}.py", "--quick", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    assert r.returncode == 0, (
        f"benchmarks/{name}.py --quick exited {r.returncode}:\n{r.stdout[-2000:]}\n"
        f"{r.stderr[-4000:]}"
    )
    if not keeps_runs:
        left = sorted(p.name for p in tmp.iterdir())
        assert left == [], f"benchmarks/{name}.py left temporary files: {left}"
    return r.stdout


def last_json(out: str, *keys: str) -> dict[str, Any]:
    """The JSON object on the last line, with at least `keys`."""
    lines = out.strip().splitlines()
    assert lines, "printed nothing"
    doc = json.loads(lines[-1])
    assert isinstance(doc, dict), lines[-1]
    missing = [k for k in keys if k not in doc]
    assert not missing, f"no {missing} in {lines[-1]}"
    return doc


def test_shaping(tmp_path):
    doc = last_json(
        quick("shaping", tmp_path),
        "goodput_ratio", "cpu_busy", "cpu_steal", "goodput_ratio_jumbo", "small_flow_over_link",
        "priority_isolation", "fifo_isolation", "setup_s", "teardown_s", "up_in_process_s",
        "whole_process", "ratio_vs_mininet_64", "leafspine_setup_s", "leafspine_1000_s",
    )  # fmt: skip
    assert set(doc["whole_process"]) == {"8"}


def test_workloads(tmp_path):
    need("horovod.torch", "Horovod is installed by install.sh")
    last_json(
        quick("workloads", tmp_path),
        "compute_bound_overhead", "compute_bound_error", "network_bound_error",
        "arrival_rate_error", "flow_size_ks", "iterations", "ddp_compute_bound_overhead",
        "ddp_compute_bound_error", "ddp_network_bound_error",
    )  # fmt: skip


def test_overhead(tmp_path):
    need("horovod.torch", "Horovod is installed by install.sh")
    need_binary("prometheus", "install.sh installs it")
    last_json(
        quick("overhead", tmp_path),
        "scrape_targets", "exporter_cpu_share", "prometheus_cpu_share", "prometheus_rss_mb",
        "series",
    )  # fmt: skip


def test_grid(tmp_path):
    need("horovod.torch", "Horovod is installed by install.sh")
    doc = last_json(
        quick("grid", tmp_path),
        "runs", "wall_s", "overhead_share", "max_flow_rate_over_link", "censored_share",
        "arrival_rate_error",
    )  # fmt: skip
    assert doc["runs"] == 2


def test_faults(tmp_path):
    need_binary("prometheus", "install.sh installs it")
    doc = last_json(
        quick("faults", tmp_path),
        "runs", "runtimes", "leftovers", "down_needed", "max_stop_s", "concurrent_ok",
        "same_id_refused",
    )  # fmt: skip
    assert doc["runs"] == 1 and doc["runtimes"] == ["netns"]


def test_gpu(tmp_path):
    """Without a GPU it builds its scenarios and prediction, then says so and prints no JSON
    line (scripts/gpu-device.sh runs it for real on a GPU machine)."""
    gpus = visible_gpus()
    out = quick("gpu", tmp_path, keeps_runs=bool(gpus))
    if gpus:
        last_json(out, "nccl_wire_ratio", "nccl_class_share", "iteration_error", "gpus")
    else:
        assert out.strip().splitlines() == [
            "benchmarks/gpu.py: this machine shows no NVIDIA GPU (no /proc/driver/nvidia/gpus, "
            "no nvidia-smi); nothing measured"
        ]


def test_gpu_anchor(tmp_path):
    """NCCL over loopback without testbed: on a machine without CUDA it imports torch and
    torch.distributed, says so and exits 0."""
    torch = need("torch", "torch is installed by install.sh")
    out = quick("gpu_anchor", tmp_path)
    if torch.cuda.is_available():
        lines = out.strip().splitlines()
        assert len(lines) == 2, out
        for line in lines:
            last_json(line, "variant", "ranks", "all_reduce_s", "bus_gbit_s")
    else:
        assert out.strip() == "benchmarks/gpu_anchor.py: no CUDA device; nothing measured"


def test_nccl_link(tmp_path):
    """NCCL's ranks alone through each path (issue 33): without a GPU, the same plumbing with
    Gloo (rank processes through `testbed exec` in held runs of each link mode): every case
    measured, and no rank faster than its link."""
    need("torch", "torch is installed by install.sh")
    need_binary("nsenter", "apt-get install util-linux")
    out = quick("nccl_link", tmp_path, "--backend", "gloo", "--rates", "1", "--timeout", "60")
    doc = last_json(out, "loopback", "fast 1 default", "exact 1 default")
    assert doc["backend"] == "gloo" and doc["loopback"] > 0
    for case in ("fast 1 default", "exact 1 default"):
        assert 0 < doc[case] <= 1.0, (case, doc)


def test_schedules(tmp_path):
    """The job alone under each transfer schedule against the event model (issue 31)."""
    doc = last_json(quick("schedules", tmp_path), "errors", "max_error", "iterations")
    assert set(doc["errors"]) == {"fifo/barrier", "priority/no-barrier"}
    assert doc["iterations"] > 0


def test_linkrate(tmp_path):
    """Link rates at the machine's speed (issue 33): the bare veth path and each link mode at
    10 Gbit/s, one flow and eight; no flow beats its link in either mode."""
    modes = ("exact", "exact-gso", "fast")
    doc = last_json(quick("linkrate", tmp_path), "bare_off", "bare_on", *modes)
    for mode in modes:
        for n in ("one", "eight"):
            fig = doc[mode]["10gbit"][n]
            assert 0 < fig["over_cap"] <= 1448 / 1514 * 1.01, (mode, n, fig)
    assert doc["bare_off"]["one"] > 0 and doc["bare_on"]["one"] > 0


def test_tunnel(tmp_path):
    """A cut link against a local one (issue 76): both paths carry one flow and eight, offloads
    on and off, and the JSON line has the ratio."""
    doc = last_json(quick("tunnel", tmp_path), "local", "cut", "cut_over_local")
    for on in ("on", "off"):
        for n in ("one", "eight"):
            assert doc["local"][on][n] > 0 and doc["cut"][on][n] > 0, doc


def test_cut_up(tmp_path):
    """`up` of one fabric on 1, 2 and 3 emulated machines (issue 76): every run succeeds, the
    placements cut links (none on one machine), and the JSON line has the ratios."""
    doc = last_json(quick("cut_up", tmp_path), "up_s", "cut_links", "over_one")
    assert all(doc["up_s"][n] for n in ("1", "2", "3")), doc
    assert doc["cut_links"]["1"] == 0 and doc["cut_links"]["2"] > 0, doc
    assert doc["over_one"]["1"] == 1.0, doc
