#!/usr/bin/env bash
# The GPU checks on a lent GPU machine (the `device` tool). This development
# machine has no GPU, so the GPU path is verified only where one is lent; this script makes
# such a lease short: one call for torch-ddp, one for Horovod.
#
#   bash scripts/gpu-device.sh prepare   HERE: fills .gpu-carry/ (git-ignored) with what the
#                                        device image lacks (it cannot reach a package index)
#   then, with the device tool:
#     run  command: bash scripts/gpu-device.sh check ddp       carry: [".gpu-carry"]
#     run  command: bash scripts/gpu-device.sh check horovod   carry: [".gpu-carry"]
#   (`check all` does both: about 8 minutes with the Horovod build, close to one call's 10.)
#
# The device image (/work/.library/device/KINDS.md): python3 is 3.12 with torch 2.11+cu130,
# NCCL (nvidia-nccl-cu13), torchvision, cmake, nvcc 13.0 and pytest; no Docker, no Prometheus,
# no pyroute2 or pydantic. `prepare` downloads this checkout's versions of what is missing as
# cp312 wheels, the Horovod sdist (built there with scripts/build-horovod.sh --gpu, since the
# GPU wheel built here is cp311) and a gzipped Prometheus. `check` writes check.log, the
# benchmark's JSON line and the runs' records (runs.tgz) under $OUT, which come back. On a
# machine whose nvidia-smi lists GPUs a check fails unless every selected GPU test ran and
# passed (no skips) and the benchmark printed its figures.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
carry="$here/.gpu-carry"
die() { echo "gpu-device.sh: $*" >&2; exit 2; }

prepare() {
  local py=${PYVER:-3.12} venv="$here/.venv/bin/python"
  [ -x "$venv" ] || die "no .venv: run bash install.sh first (its versions are the ones carried)"
  rm -rf "$carry" && mkdir -p "$carry/whl"
  # the same versions this checkout is tested with, for the device's Python
  local pins
  pins=$("$venv" - <<'EOF'
import importlib.metadata as m
names = ["pyroute2", "pydantic", "pydantic-core", "annotated-types", "typing-inspection",
         "typing-extensions", "docker", "cffi", "pycparser", "pytest-rerunfailures"]
print(" ".join(f"{n}=={m.version(n)}" for n in names))
EOF
) || die "could not read the versions installed in .venv"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$py" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$carry/whl" $pins || die "pip download failed"
  local sdist="${TESTBED_WHEEL_CACHE:-$HOME/.cache/testbed/wheels}/src/horovod-0.28.1.tar.gz"
  [ -f "$sdist" ] || python3 -m pip download -q --no-deps --no-binary=:all: -d "$carry" \
    horovod==0.28.1 || die "no Horovod sdist (run bash scripts/build-horovod.sh once)"
  [ -f "$sdist" ] && cp "$sdist" "$carry/"
  local prom
  prom=$(command -v prometheus) || die "no prometheus binary here (apt-get install prometheus)"
  gzip -c "$prom" > "$carry/prometheus.gz"
  du -sh "$carry"
  echo "carry .gpu-carry (the device call's tree may hold 64 MiB in all)"
}

setup_device() {
  echo "== machine"
  nvidia-smi -L || die "no nvidia-smi: this is not a GPU machine"
  uname -r
  python3 - <<'EOF'
import sys, torch
print(sys.executable, sys.version.split()[0], "torch", torch.__version__, "cuda",
      torch.version.cuda, "devices", torch.cuda.device_count(), "nccl",
      torch.cuda.nccl.version() if torch.cuda.is_available() else None)
EOF
  cat /proc/sys/net/ipv4/tcp_allowed_congestion_control
  for b in setpriv nsenter iptables; do printf '%s: %s\n' "$b" "$(command -v $b || echo MISSING)"; done
  # the training's DSCP rule: iptables with the kernel's owner match and DSCP target
  iptables -w -t mangle -S >/dev/null && echo "iptables mangle: ok" || echo "iptables mangle: FAILS"
  [ -d "$carry/whl" ] || die "no .gpu-carry/whl: run 'bash scripts/gpu-device.sh prepare' here and carry .gpu-carry"
  echo "== install (no index: the carried wheels, then testbed from this tree)"
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade "$carry"/whl/*.whl \
    || die "pip could not install the carried wheels"
  python3 -m pip install -q --no-index --no-deps --no-build-isolation "$here" \
    || die "pip could not install testbed"
  gunzip -c "$carry/prometheus.gz" > /usr/local/bin/prometheus && chmod +x /usr/local/bin/prometheus
  prometheus --version 2>&1 | head -1
}

records() {
  # summaries, NCCL settings and worker logs of every run the tests made: one file comes back
  (cd /tmp/gpu-pt 2>/dev/null && find . \( -name summary.json -o -name backend-env.json \
    -o -name 'worker-*.log' -o -name testbed.log \) -print0 \
    | tar --null -czf "$OUT/runs-$1.tgz" -T -) || true
}

# pytest's exit status is 0 when every test skipped; on a machine that lists GPUs a skipped GPU
# test is a check that did not happen. Every selected test must have run and passed.
gpu_tests() {  # gpu_tests NAME PYTEST-ARGS...
  local name=$1; shift
  python3 -m pytest -q -rA -p no:cacheprovider --basetemp=/tmp/gpu-pt \
    --junitxml="$OUT/pytest-$name.xml" tests/gpu "$@"
  local rc=$?
  python3 - "$OUT/pytest-$name.xml" <<'PY' || rc=1
import sys, xml.etree.ElementTree as ET
s = ET.parse(sys.argv[1]).getroot()
s = s if s.tag == "testsuite" else s.find("testsuite")
n, bad = int(s.get("tests")), {k: int(s.get(k)) for k in ("failures", "errors", "skipped")}
print(f"gpu tests: {n} collected, {bad}")
if n == 0 or any(bad.values()):
    sys.exit(f"gpu-device.sh: GPUs are listed, so every GPU test must run and pass: {n} tests, {bad}")
PY
  return $rc
}

check_ddp() {
  echo "== torch-ddp over NCCL: tests/gpu, then benchmarks/gpu.py"
  local rc=0
  gpu_tests ddp -k "not horovod" || rc=1
  records ddp
  python3 benchmarks/gpu.py | tee "$OUT/gpu-bench.txt"
  # the figures are the point: no JSON line (no GPU seen, a crash) fails the check
  tail -n1 "$OUT/gpu-bench.txt" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert {"nccl_wire_ratio","iteration_error"} <= set(d)' \
    || { echo "gpu-device.sh: benchmarks/gpu.py printed no figures" >&2; rc=1; }
  return $rc
}

check_horovod() {
  echo "== Horovod with NCCL: build the GPU wheel (cp312) from the carried sdist"
  local sdist whl
  sdist=$(ls "$carry"/horovod-0.28.1.tar.gz) || die "no Horovod sdist in .gpu-carry"
  python3 -m pip install -q --no-index --no-deps "$carry"/whl/cffi-*.whl "$carry"/whl/pycparser-*.whl
  whl=$(bash "$here/scripts/build-horovod.sh" --gpu --python "$(command -v python3)" --sdist "$sdist" \
    2> >(tee "$OUT/build-horovod.err" >&2) | tail -1) || die "the Horovod GPU build failed (build-horovod.err)"
  python3 -m pip install -q --no-index --no-deps --force-reinstall "$whl" || die "could not install $whl"
  python3 -c 'import horovod.torch as h, sys; print("horovod nccl_built", h.nccl_built()); sys.exit(not h.nccl_built())' \
    || die "the Horovod just built has no NCCL"
  local rc=0
  gpu_tests horovod -k horovod || rc=1
  records horovod
  return $rc
}

case "${1:-}" in
  prepare) prepare ;;
  check)
    cd "$here" || exit 2  # pytest finds tests/ and its helpers from the tree's root
    OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
    what=${2:-all}
    {
      setup_device || exit $?
      rc=0
      case "$what" in
        ddp) check_ddp || rc=$? ;;
        horovod) check_horovod || rc=$? ;;
        all) check_ddp || rc=$?; check_horovod || rc=$? ;;
        *) die "check what? ddp, horovod or all" ;;
      esac
      exit $rc
    } 2>&1 | tee "$OUT/check-$what.log"
    exit "${PIPESTATUS[0]}"
    ;;
  *) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
