"""Fault injection: stop runs with every signal at every phase, then count what is left.

Each of --runs short runs (a linkcheck smoke and a scaled-down thesis-mini with Horovod,
web-search load and Prometheus, embedded or external; on netns and, when an engine answers, on
docker) is started as `testbed up` in its own process. The benchmark watches the run's state
file, and when the run reaches the phase drawn for it (probing, building, shaping, starting
workloads, running, collecting, tearing down) it sends the signal drawn for it (INT, TERM, HUP,
KILL). Then it waits for the run to end: the process's exit, or for KILL the run's state file
going away (its guardian tears down). If the state file is still there 20 s later, it runs
`testbed down` and counts that. Then it counts everything of the run that is left, from
outside, trusting nothing testbed reports:

  namespaces      /run/netns/tb-<id>-*
  links           root-namespace interfaces whose name carries the id
  processes       live processes whose command line names the run's folder or id, and any
                  fork server, guardian or Prometheus of the run
  containers      containers named tb-<id>-*, running or not
  state files     /run/testbed/<id>.*
  file_sd files   testbed-<id>.json in the external file_sd folder
  iptables        the root namespace's iptables-save, against the one taken before the run

It also runs two scenarios at once on different prefixes (both must complete) and two with the
same run id (one refused with exit 2, the other completes).

  max_stop_s    slowest stop: signal → process exit (KILL: → state file gone)

Run as root: `.venv/bin/python benchmarks/faults.py [--runs 56] [--seed 1] [--quick]`; the JSON
line is the last line. --quick: one run, netns only, 2 s runs (with the concurrent and the
same-id pairs), to check in seconds that it runs; its figures mean little.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STATE_DIR = Path(os.environ.get("TESTBED_STATE_DIR", "/run/testbed"))
PHASES = [
    "probing kernel",
    "building",
    "shaping",
    "starting workloads",
    "running",
    "collecting",
    "tearing down",
]
ORDER = ["starting", *PHASES]
SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL]
SMOKE_S = 4  # the smoke scenario's duration; --quick: 2

SMOKE = """\
name: fault-smoke
runtime: {runtime}
duration: {smoke_s}s
measure: {{warmup: 1s, cooldown: 0s}}
topology: {{hosts: 3, link_rate: 20mbit{prefixes}}}
tc_profile: thesis-2band
workloads:
  linkcheck: {{pattern: ring, short_interval: 200ms}}
metrics: {{prometheus: {metrics}}}
"""
MINI = """\
name: fault-mini
runtime: {runtime}
duration: 6s
measure: {{warmup: 1s, cooldown: 0s}}
topology: {{hosts: 3, link_rate: 50mbit{prefixes}}}
tc_profile: thesis-2band
workloads:
  horovod: {{model_size: 1MB, compute_time: 200ms, tc_class: low}}
  websearch: {{arrival_rate: 0.5, tc_class: high}}
metrics: {{prometheus: {metrics}}}
"""


def engine_answers() -> bool:
    try:
        import docker

        c = docker.from_env(timeout=5)
        c.ping()
        c.close()
        return True
    except Exception:
        return False


def iptables_rules() -> list[str]:
    r = subprocess.run(["iptables-save"], capture_output=True, text=True)
    return sorted(x for x in r.stdout.splitlines() if x and not x.startswith(("#", ":")))


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def live(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def leftovers(rid: str, run_dir: Path, sd: Path, rules: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    netns = Path("/run/netns")
    out["namespaces"] = sorted(p.name for p in netns.glob(f"tb-{rid}-*")) if netns.is_dir() else []
    out["links"] = sorted(n for n in os.listdir("/sys/class/net") if rid in n)
    procs = []
    for e in os.listdir("/proc"):
        if e.isdigit() and int(e) != os.getpid() and live(int(e)):
            c = cmdline(int(e))
            if str(run_dir) in c or rid in c:
                procs.append(f"{e}: {c[:120]}")
    out["processes"] = procs
    out["state_files"] = sorted(p.name for p in STATE_DIR.glob(f"{rid}.*"))
    out["file_sd"] = sorted(p.name for p in sd.glob(f"testbed-{rid}*"))
    out["iptables"] = sorted(set(iptables_rules()) ^ set(rules))
    if shutil.which("docker"):
        r = subprocess.run(
            ["docker", "ps", "-a", "--format", "{{.Names}}", "--filter", f"name=^tb-{rid}-"],
            capture_output=True,
            text=True,
        )
        out["containers"] = r.stdout.split()
    return {k: v for k, v in out.items() if v}


def up(scenario: Path, run_dir: Path, rid: str | None = None) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "testbed.cli", "up", str(scenario), "--out", str(run_dir)]
    if rid:
        cmd += ["--run-id", rid]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip


def phase_of(rid: str) -> str | None:
    try:
        return json.loads((STATE_DIR / f"{rid}.json").read_text())["phase"]
    except (OSError, ValueError, KeyError):
        return None


def one(i: int, rng: random.Random, tmp: Path, sd: Path, runtimes: list[str]) -> dict[str, Any]:
    # every runtime × both scenarios × three metrics modes, in turn
    runtime = runtimes[i % len(runtimes)]
    kind = ("smoke", "mini")[(i // len(runtimes)) % 2]
    metrics = ("embedded", f"external, file_sd_dir: {sd}", "off")[(i // (2 * len(runtimes))) % 3]
    target = rng.choice(PHASES)
    sig = rng.choice(SIGNALS)
    rid = f"fa{i:04x}"
    run_dir = tmp / f"run{i}"
    path = tmp / f"s{i}.yaml"
    text = (MINI if kind == "mini" else SMOKE).format(
        runtime=runtime, prefixes="", metrics=metrics, smoke_s=SMOKE_S
    )
    path.write_text(text)
    rules = iptables_rules()
    proc = up(path, run_dir, rid)
    hit, seen = None, "starting"
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline:
        ph = phase_of(rid)
        if ph in ORDER:
            seen = ph
        if ph is not None and ph in ORDER and ORDER.index(ph) >= ORDER.index(target):
            # the phase drawn, or the first one after it that we saw; a random moment inside
            # the long phases, at once in the short ones
            if ph in ("running", "starting workloads"):
                time.sleep(rng.uniform(0, 1.5))
            hit = phase_of(rid) or ph
            break
        time.sleep(0.002)
    t0 = time.monotonic()
    if proc.poll() is None:
        proc.send_signal(sig)
    else:
        hit = "ended before the signal"
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        err = "did not stop within 120 s\n" + err
    stop_s = time.monotonic() - t0
    if sig == signal.SIGKILL:  # the guardian's teardown is part of the stop
        while (STATE_DIR / f"{rid}.json").exists() and time.monotonic() - t0 < 20:
            time.sleep(0.02)
        stop_s = time.monotonic() - t0
    down = False
    if (STATE_DIR / f"{rid}.json").exists():
        time.sleep(1)
        down = True
        subprocess.run([sys.executable, "-m", "testbed.cli", "down"], cwd=ROOT,
                       capture_output=True, text=True, timeout=180)  # fmt: skip
    time.sleep(0.3)  # the guardian's own exit after a clean end
    left = leftovers(rid, run_dir, sd, rules)
    return {
        "i": i, "runtime": runtime, "scenario": kind, "metrics": metrics.split(",")[0],
        "signal": sig.name, "target": target, "hit": hit, "last_phase": seen,
        "rc": proc.returncode, "stop_s": round(stop_s, 2), "down_needed": down,
        "leftovers": left, "stderr": err.strip().splitlines()[-1:] if err else [],
    }  # fmt: skip


def concurrent(tmp: Path) -> bool:
    """Two runs at once on prefixes of their own: both complete."""
    procs = []
    for i, (data, mgmt) in enumerate((("10.60.0.0/24", "10.61.0.0/24"),
                                      ("10.62.0.0/24", "10.63.0.0/24"))):  # fmt: skip
        p = tmp / f"c{i}.yaml"
        prefixes = f", prefix: {data}, management_prefix: {mgmt}"
        p.write_text(
            SMOKE.format(runtime="netns", prefixes=prefixes, metrics="embedded", smoke_s=SMOKE_S)
        )
        procs.append(up(p, tmp / f"conc{i}"))
    for p in procs:
        p.communicate(timeout=180)
    ok = [p.returncode == 0 for p in procs]
    for i in range(2):
        s = json.loads((tmp / f"conc{i}" / "summary.json").read_text())
        ok.append(s["status"] == "ok" and s["linkcheck"]["short"]["completed"] > 0)
    return all(ok)


def same_id(tmp: Path) -> bool:
    """Two runs with one id at once: one is refused (exit 2, no run folder), the other
    completes."""
    procs = []
    for i in range(2):
        p = tmp / f"d{i}.yaml"
        p.write_text(SMOKE.format(runtime="netns", prefixes="", metrics="off", smoke_s=SMOKE_S))
        procs.append(up(p, tmp / f"same{i}", "5a3e1d"))
    outs = [p.communicate(timeout=180) for p in procs]
    codes = sorted(p.returncode for p in procs)
    if codes != [0, 2]:
        print(f"same id: exit codes {codes}: {[e[1][-300:] for e in outs]}", file=sys.stderr)
        return False
    winner = next(i for i, p in enumerate(procs) if p.returncode == 0)
    s = json.loads((tmp / f"same{winner}" / "summary.json").read_text())
    return s["status"] == "ok" and not (tmp / f"same{1 - winner}").exists()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, help="runs to stop (default: 56; 1 with --quick)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--netns-only", action="store_true")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="one run (unless --runs), netns only, 2 s smoke runs: checks in seconds that it runs",
    )
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("faults.py needs root")
    if args.runs is None:
        args.runs = 1 if args.quick else 56
    if args.quick:
        global SMOKE_S
        SMOKE_S = 2
    netns_only = args.netns_only or args.quick
    runtimes = ["netns"] if netns_only or not engine_answers() else ["netns", "docker"]
    if "docker" in runtimes:  # the node image first, so that no run's phase includes a build
        subprocess.run([sys.executable, "-m", "testbed.cli", "images", "build"], cwd=ROOT,
                       check=True, capture_output=True)  # fmt: skip
    rng = random.Random(args.seed)
    results = []
    with tempfile.TemporaryDirectory(prefix="tb-faults-") as d:
        tmp = Path(d)
        sd = tmp / "file_sd"
        sd.mkdir()
        t_start = time.monotonic()
        for i in range(args.runs):
            r = one(i, rng, tmp, sd, runtimes)
            results.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
        conc = concurrent(tmp)
        same = same_id(tmp)
        wall = time.monotonic() - t_start
    by_phase: dict[str, int] = {}
    for r in results:
        by_phase[str(r["hit"])] = by_phase.get(str(r["hit"]), 0) + 1
    print(f"phases hit: {by_phase}", file=sys.stderr)
    print(
        json.dumps(
            {
                "runs": len(results),
                "runtimes": runtimes,
                "leftovers": sum(1 for r in results if r["leftovers"]),
                "down_needed": sum(1 for r in results if r["down_needed"]),
                "max_stop_s": max(r["stop_s"] for r in results),
                "concurrent_ok": conc,
                "same_id_refused": same,
                "wall_s": round(wall, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
