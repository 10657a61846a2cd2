"""What a point's task runs on its node (the service's command): `testbed up` of the point's
scenario, as a user would run it, then its run folder back to the sweep.

    python -m testbed.results.swarm.point --scenario FILE --folder NAME --upload URL --token TOKEN

The task has a network namespace of its own, so the run's namespaces, links and processes
live and die with the task. Docker mounts /proc/sys read-only in a container; the run writes
its hosts' sysctls (per namespace, so only its own), so the task remounts it writable first
(it has the capabilities a run needs, and nothing of the node's is reachable from its
namespaces). SIGTERM (the sweep removing the service on Ctrl-C, a node draining) goes to
`testbed up`, which tears down as always; the folder is sent either way.

`--probe` instead prints this node's kernel capabilities as one JSON line (`testbed cluster`,
and the sweep's check that every node can run points)."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
from pathlib import Path

WORK = Path("/work")


def remount_proc_sys() -> bool:
    return subprocess.run(["mount", "-o", "remount,rw", "/proc/sys"], check=False).returncode == 0


APPARMOR = (
    "a writable /proc/sys and new namespaces in the task (AppArmor's docker-default profile "
    "denies mounts; on such a node run dockerd without AppArmor confinement of containers)"
)


def probe() -> int:
    from testbed.network.runtime.kernel_probe import HOW, REQUIRED, probe

    if not remount_proc_sys():
        print(json.dumps({"present": [], "missing": ["mount"], "how": {"mount": APPARMOR}}),
              flush=True)  # fmt: skip
        return 0
    try:
        caps = probe()
    except OSError as e:
        print(json.dumps({"present": [], "missing": ["netns"],
                          "how": {"netns": f"{APPARMOR}: {e}"}}), flush=True)  # fmt: skip
        return 0
    print(json.dumps({"present": sorted(caps.present), "missing": caps.missing_required(),
                      "how": {f: HOW[f] for f in REQUIRED if not caps.has(f)}}), flush=True)  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="testbed.results.swarm.point")
    ap.add_argument("--probe", action="store_true")
    ap.add_argument("--scenario", type=Path)
    ap.add_argument("--folder")
    ap.add_argument("--upload")
    ap.add_argument("--token")
    args = ap.parse_args(argv)
    if args.probe:
        return probe()
    from testbed.results.swarm.results import upload

    remount_proc_sys()
    out = WORK / args.folder
    WORK.mkdir(parents=True, exist_ok=True)
    child = subprocess.Popen(
        # no plots: a sweep's runs have none unless it is asked (--plots), as locally
        [
            sys.executable,
            "-m",
            "testbed.cli",
            "up",
            str(args.scenario),
            "--out",
            str(out),
            "--no-plots",
        ]
    )
    signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
    signal.signal(signal.SIGINT, lambda *_: child.send_signal(signal.SIGINT))
    rc = child.wait()
    if not out.is_dir() or not any(out.iterdir()):
        out.mkdir(parents=True, exist_ok=True)  # refused before anything existed: say so
        (out / "summary.json").write_text(
            json.dumps({"status": "failed", "error": f"testbed up exited {rc} before the run"})
        )
    upload(args.upload, args.token, out, rc)
    return rc


if __name__ == "__main__":
    sys.exit(main())
