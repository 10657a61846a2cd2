#!/usr/bin/env bash
# The GPU checks on a lent GPU machine (the `device` tool). This development
# machine has no GPU, so the GPU path is verified only where one is lent; this script makes
# such a lease short: one call does everything.
#
#   bash scripts/gpu-device.sh prepare   HERE: fills .gpu-carry/ (git-ignored) with what the
#                                        device image lacks (it cannot reach a package index)
#   then, with the device tool (timeout_s 590; about 7 minutes, the machine's start on top):
#     run  command: bash scripts/gpu-device.sh check all      carry: [".gpu-carry"]
#   `check ddp`, `check horovod` (with the anchor beside its build), `check anchor`,
#   `check extras`, `check policies` (examples/gpu-real-policies.yaml: static against adaptive on
#   the real model, its compute measured alone there first), `check links` (benchmarks/linkrate.py
#   and NCCL through each link_mode) and
#   `check nccl-link` (benchmarks/nccl_link.py: NCCL's ranks alone through each path) run one
#   part each.
#
# The device image (/work/.library/device/KINDS.md): python3 is 3.12 with torch 2.11+cu130,
# NCCL (nvidia-nccl-cu13), torchvision, cmake, nvcc 13.0 and pytest; no Docker, no Prometheus,
# no pyroute2 or pydantic. `prepare` downloads this checkout's versions of what is missing as
# cp312 wheels, the Horovod sdist (built there with scripts/build-horovod.sh --gpu, since the
# GPU wheel built here is cp311), a gzipped Prometheus and this machine's iptables (used there
# only if the image has none that answers). `check all` builds Horovod in the background while
# the DDP tests run (the benchmark waits for the build, so its timings see an idle machine),
# then runs the Horovod test and the extras: examples/gpu-web-{same,low}.yaml (web search beside
# a GPU job, job in the same band and in the low band), examples/gpu-real.yaml (a minute of
# real training) and examples/gpu-schedule.yaml (the thesis' transfer schedule over NCCL).
# Everything comes back in $OUT: the logs, the benchmark's JSON line and records.tgz (pytest's
# XML, summaries, worker logs). On a machine whose nvidia-smi lists GPUs a check fails unless
# every selected GPU test ran and passed (no skips), the benchmark printed its figures and the
# extra runs ended ok.
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
  # iptables (the DSCP rule) as this machine has it: the multi binaries, their libraries and
  # extensions; setup_device installs it only where the image's iptables is missing or fails
  local lib=/lib/x86_64-linux-gnu ipt="$carry/iptables"
  mkdir -p "$ipt/bin" "$ipt/lib"
  cp /usr/sbin/xtables-nft-multi /usr/sbin/xtables-legacy-multi "$ipt/bin/" \
    || die "no /usr/sbin/xtables-*-multi here (apt-get install iptables)"
  for l in libip4tc.so.2 libip6tc.so.2 libmnl.so.0 libnetfilter_conntrack.so.3 \
           libnfnetlink.so.0 libnftnl.so.11 libxtables.so.12; do
    cp -L "$lib/$l" "$ipt/lib/" || die "no $lib/$l here"
  done
  cp -r "$lib/xtables" "$ipt/xtables"
  # iperf3 (benchmarks/linkrate.py) and the libraries it links, used where the image has none
  mkdir -p "$carry/iperf3/lib"
  cp /usr/bin/iperf3 "$carry/iperf3/" || die "no /usr/bin/iperf3 here (apt-get install iperf3)"
  for l in libiperf.so.0 libsctp.so.1 libcrypto.so.3; do
    cp -L "$lib/$l" "$carry/iperf3/lib/" || die "no $lib/$l here"
  done
  du -sh "$carry"
  echo "carry .gpu-carry (the device call's tree may hold 64 MiB in all)"
}

use_iptables() {
  if iptables -w -t mangle -S >/dev/null 2>&1; then
    echo "iptables mangle: ok (the image's)"
  else
    local ipt="$carry/iptables" m
    for m in nft legacy; do
      LD_LIBRARY_PATH="$ipt/lib" XTABLES_LIBDIR="$ipt/xtables" \
        bash -c "exec -a iptables '$ipt/bin/xtables-$m-multi' -w -t mangle -S" >/dev/null 2>&1 || continue
      printf '#!/usr/bin/env bash\nLD_LIBRARY_PATH=%q XTABLES_LIBDIR=%q exec -a iptables %q "$@"\n' \
        "$ipt/lib" "$ipt/xtables" "$ipt/bin/xtables-$m-multi" > /usr/local/bin/iptables
      chmod +x /usr/local/bin/iptables && hash -r
      echo "iptables mangle: ok (carried, $m backend)"
      break
    done
    iptables -w -t mangle -S >/dev/null || echo "iptables mangle: FAILS (the image's and the carried)"
  fi
}

use_iperf3() {
  if iperf3 --version >/dev/null 2>&1; then
    echo "iperf3: ok (the image's)"
  else
    printf '#!/usr/bin/env bash\nLD_LIBRARY_PATH=%q exec %q "$@"\n' \
      "$carry/iperf3/lib" "$carry/iperf3/iperf3" > /usr/local/bin/iperf3
    chmod +x /usr/local/bin/iperf3 && hash -r
    iperf3 --version | head -1 || echo "iperf3: FAILS (the carried one)"
  fi
}

setup_device() {
  echo "== machine"
  nvidia-smi -L || die "no nvidia-smi: this is not a GPU machine"
  nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv
  uname -r; nproc
  python3 - <<'EOF'
import sys, torch
print(sys.executable, sys.version.split()[0], "torch", torch.__version__, "cuda",
      torch.version.cuda, "devices", torch.cuda.device_count(), "nccl",
      torch.cuda.nccl.version() if torch.cuda.is_available() else None)
EOF
  cat /proc/sys/net/ipv4/tcp_allowed_congestion_control
  [ -d "$carry/whl" ] || die "no .gpu-carry/whl: run 'bash scripts/gpu-device.sh prepare' here and carry .gpu-carry"
  # the kernel's options testbed leans on, where the kernel shows its config
  { [ -r /proc/config.gz ] && zcat /proc/config.gz || cat "/boot/config-$(uname -r)" 2>/dev/null; } \
    | grep -E '^# CONFIG_|^CONFIG_' | grep -E 'CONFIG_(NET_NS|VETH|IFB|NET_SCH_(HTB|TBF|NETEM|PRIO|FQ)|NET_CLS_(U32|FLOWER|BPF)|NET_ACT_MIRRED|NETFILTER_XT_(MATCH_OWNER|TARGET_DSCP)|IP_NF_MANGLE|NF_TABLES|BRIDGE|VXLAN)[ =]' \
    || echo "kernel config: not readable"
  for b in setpriv nsenter iptables; do printf '%s: %s\n' "$b" "$(command -v $b || echo MISSING)"; done
  # the training's DSCP rule: iptables with the kernel's owner match and DSCP target
  use_iptables
  use_iperf3
  echo "== install (no index: the carried wheels, then testbed from this tree)"
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade "$carry"/whl/*.whl \
    || die "pip could not install the carried wheels"
  python3 -m pip install -q --no-index --no-deps --no-build-isolation "$here" \
    || die "pip could not install testbed"
  gunzip -c "$carry/prometheus.gz" > /usr/local/bin/prometheus && chmod +x /usr/local/bin/prometheus
  prometheus --version 2>&1 | head -1
}

REC=/tmp/gpu-rec  # what comes back packed in $OUT/records.tgz (the tool returns 8 files at most)

# Each step gets what is left of the call's budget (GPU_CHECK_BUDGET seconds from the start,
# default 540 of the device call's 590), so the records are packed before the call is killed.
left() { echo $(( DEADLINE - SECONDS )); }
step() {  # step SECONDS-AT-LEAST CMD...: run CMD under what is left, or say why not
  local need=$1; shift
  local t=$(( $(left) - 20 ))
  if [ "$t" -lt "$need" ]; then echo "gpu-device.sh: out of time (${t}s left): skipped $*" >&2; return 1; fi
  timeout -k 10 "$t" "$@"
}

pack() {
  # summaries, NCCL settings, worker logs and reports of every run the checks made; pytest's XML
  (cd / && find tmp/gpu-pt tmp/gpu-runs "${REC#/}" \( -name summary.json -o -name backend-env.json \
    -o -name 'worker-*.log' -o -name testbed.log -o -name '*.xml' -o -name '*.err' \
    -o -name '*.txt' \) -print0 2>/dev/null | tar --null -czf "$OUT/records.tgz" -T -) || true
}

# pytest's exit status is 0 when every test skipped; on a machine that lists GPUs a skipped GPU
# test is a check that did not happen. Every selected test must have run and passed.
gpu_tests() {  # gpu_tests NAME PYTEST-ARGS...
  local name=$1; shift
  mkdir -p /tmp/gpu-pt  # pytest makes --basetemp, not its parents
  step 60 python3 -m pytest -q -rA -p no:cacheprovider --basetemp="/tmp/gpu-pt/$name" \
    --junitxml="$REC/pytest-$name.xml" tests/gpu "$@"
  local rc=$?
  python3 - "$REC/pytest-$name.xml" <<'PY' || rc=1
import sys, xml.etree.ElementTree as ET
try:
    s = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError) as e:
    sys.exit(f"gpu-device.sh: pytest wrote no report ({e})")
s = s if s.tag == "testsuite" else s.find("testsuite")
n, bad = int(s.get("tests")), {k: int(s.get(k)) for k in ("failures", "errors", "skipped")}
print(f"gpu tests: {n} collected, {bad}")
if n == 0 or any(bad.values()):
    sys.exit(f"gpu-device.sh: GPUs are listed, so every GPU test must run and pass: {n} tests, {bad}")
PY
  return $rc
}

build_horovod() {  # prints the wheel's path on its last line
  local sdist
  sdist=$(ls "$carry"/horovod-0.28.1.tar.gz) || die "no Horovod sdist in .gpu-carry"
  python3 -m pip install -q --no-index --no-deps "$carry"/whl/cffi-*.whl "$carry"/whl/pycparser-*.whl
  # the cache in /tmp, so that the build's log comes back with the records
  TESTBED_WHEEL_CACHE=/tmp/hvd-cache bash "$here/scripts/build-horovod.sh" --gpu \
    --python "$(command -v python3)" --sdist "$sdist" 2>"$REC/build-horovod.err"
  local rc=$?
  cp /tmp/hvd-cache/torch-*/build.log "$REC/build-horovod.txt" 2>/dev/null
  return $rc
}

check_ddp_tests() {
  echo "== torch-ddp over NCCL: tests/gpu"
  gpu_tests ddp -k "not horovod"
}

check_bench() {
  echo "== benchmarks/gpu.py"
  step 60 python3 benchmarks/gpu.py | tee "$OUT/gpu-bench.txt"
  # the figures are the point: no JSON line (no GPU seen, a crash) fails the check
  tail -n1 "$OUT/gpu-bench.txt" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert {"nccl_wire_ratio","iteration_error"} <= set(d)' \
    || { echo "gpu-device.sh: benchmarks/gpu.py printed no figures" >&2; return 1; }
  # physics: the class counters never beat the cap; a bulk all-reduce should nearly fill it
  # (docs/results/gpu/README.md: 0.141 on an H100 VM, where the emulated path's packet rate held it)
  tail -n1 "$OUT/gpu-bench.txt" | python3 -c '
import json, sys
r = json.load(sys.stdin)["nccl_wire_ratio"]
if not 0.85 <= r <= 1.0:
    sys.exit(f"gpu-device.sh: the bulk all-reduce used {r} of the 10 Gbit/s cap (wanted 0.85 to 1)")'
}

check_links() {
  # issue 33: shaped links at the machine's speed, each link_mode beside the bare veth path,
  # then NCCL's bulk all-reduce through a shaped 10 Gbit/s link in each mode
  echo "== benchmarks/linkrate.py at 10 and 25 Gbit/s"
  step 60 python3 benchmarks/linkrate.py --rates 10,25 --rounds 1 --seconds 4 --no-checks \
    | tee "$OUT/linkrate.txt"
  echo "== the link budget testbed up measured here"
  cat /run/testbed/.link-budget 2>/dev/null | tee "$OUT/link-budget.json"
  echo "== benchmarks/gpu.py --short"
  step 60 python3 benchmarks/gpu.py --short | tee "$OUT/gpu-bench.txt"
  tail -n1 "$OUT/gpu-bench.txt" | python3 -c '
import json, sys
r = json.load(sys.stdin)["nccl_wire_ratio"]
if not 0.85 <= r <= 1.0:
    sys.exit(f"gpu-device.sh: the bulk all-reduce used {r} of the 10 Gbit/s cap (wanted 0.85 to 1)")'
}

check_nccl() {
  # NCCL's bulk all-reduce through a fast 10 Gbit/s link with its default sockets and more
  local n t
  for n in ${NCCL_VARIANTS:-1x1 2x4 4x4}; do
    for t in ${TCP_VARIANTS:-reno}; do
      echo "== benchmarks/gpu.py --short --bulk-only --nccl $n --tcp $t"
      step 40 python3 benchmarks/gpu.py --short --bulk-only --nccl "$n" --tcp "$t" ${GPU_BENCH_ARGS:-} | tee -a "$OUT/gpu-nccl.txt"
    done
  done
}

check_nccl_link() {
  # issue 33: the anchor's two NCCL ranks and nothing else (no training job) over loopback, a
  # bare veth pair and testbed's shaped links; then one flow and eight per link mode
  echo "== benchmarks/nccl_link.py"
  step 60 python3 benchmarks/nccl_link.py | tee "$OUT/nccl-link.txt"
  tail -n1 "$OUT/nccl-link.txt" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert "fast 10 default" in d and all(v is not None for v in d.values()), d' \
    || { echo "gpu-device.sh: benchmarks/nccl_link.py lacks figures (a pair failed?)" >&2; return 1; }
  echo "== benchmarks/linkrate.py at 10 Gbit/s"
  step 60 python3 benchmarks/linkrate.py --rates 10 --rounds 1 --seconds 4 --no-checks \
    | tee "$OUT/linkrate.txt"
  cat /run/testbed/.link-budget 2>/dev/null | tee "$OUT/link-budget.json"
}

check_anchor() {
  echo "== benchmarks/gpu_anchor.py: NCCL over loopback, no testbed"
  step 30 python3 benchmarks/gpu_anchor.py | tee "$OUT/gpu-anchor.txt"
}

build_in_background() {  # niced: what runs beside it keeps the CPUs
  ( renice -n 19 -p "$BASHPID" >/dev/null; build_horovod > /tmp/horovod-wheel ) &
  BUILD_PID=$!
}

wait_build() {
  echo "== waiting for the Horovod build ($(left)s of the budget left)"
  wait "$BUILD_PID" || echo "gpu-device.sh: the background Horovod build failed (build-horovod.err)" >&2
}

check_horovod() {  # check_horovod [WHEEL-FILE]: the wheel a background build left, else build now
  echo "== Horovod with NCCL: the GPU wheel (cp312) from the carried sdist"
  local whl=""
  [ -n "${1:-}" ] && [ -s "$1" ] && whl=$(tail -1 "$1")
  [ -n "$whl" ] || whl=$(build_horovod | tail -1)
  [ -f "$whl" ] || { echo "gpu-device.sh: the Horovod GPU build failed:" >&2; tail -20 "$REC/build-horovod.err" >&2; return 1; }
  python3 -m pip install -q --no-index --no-deps --force-reinstall "$whl" \
    || { echo "gpu-device.sh: could not install $whl" >&2; return 1; }
  python3 -c 'import horovod.torch as h, sys; print("horovod nccl_built", h.nccl_built()); sys.exit(not h.nccl_built())' \
    || { echo "gpu-device.sh: the Horovod just built has no NCCL" >&2; return 1; }
  gpu_tests horovod -k horovod
}

check_extras() {
  # web search beside a GPU job (same band, then low band), a minute of real training, then
  # the thesis' transfer schedule (issue 31) over NCCL
  echo "== extras: examples/gpu-web-same.yaml, gpu-web-low.yaml, gpu-real.yaml, gpu-schedule.yaml"
  local rc=0 x tb
  tb="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/testbed"
  for x in gpu-web-same gpu-web-low gpu-real gpu-schedule; do
    rm -rf "/tmp/gpu-runs/$x"
    step 60 "$tb" up "examples/$x.yaml" --out "/tmp/gpu-runs/$x" --no-plots > "$REC/$x.txt" 2>&1 || rc=1
    tail -n 25 "$REC/$x.txt"
  done
  "$tb" report /tmp/gpu-runs/gpu-web-same /tmp/gpu-runs/gpu-web-low --no-plots 2>&1 \
    | tee "$OUT/extras.txt" || rc=1
  for x in gpu-real gpu-schedule; do  # one report each: two runs would be compared
    "$tb" report "/tmp/gpu-runs/$x" --no-plots 2>&1 | tee -a "$OUT/extras.txt" || rc=1
  done
  return $rc
}

check_policies() {
  # examples/gpu-real-policies.yaml (issue 75): the real model on the GPUs, once alone to
  # measure its compute there, then static against adaptive, paired over 3 seeds with that
  # compute stated (adaptive's deadline is computed from it)
  echo "== policies: examples/gpu-real-policies.yaml, its compute alone, then the paired sweep"
  local rc=0 tb compute
  tb="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/testbed"
  rm -rf /tmp/gpu-runs/policies-measure /tmp/gpu-runs/policies
  # compute_time in mode real is the job's iteration alone on fast links (DDP's backward
  # waits for its buckets' reductions): the job without web search, on 10 Gbit/s fast links
  cat > /tmp/gpu-real-policies-alone.yaml <<EOS
name: gpu-real-policies-alone
base: $here/examples/gpu-real-policies.yaml
set: {workloads.websearch: null, topology.link_rate: 10gbit, topology.link_mode: fast}
seeds: [1]
EOS
  step 60 "$tb" sweep /tmp/gpu-real-policies-alone.yaml --out /tmp/gpu-runs/policies-measure \
    > "$REC/policies-measure.txt" 2>&1 || { tail -n 25 "$REC/policies-measure.txt"; return 1; }
  compute=$(python3 - /tmp/gpu-runs/policies-measure/runs/*/summary.json <<'EOP'
import json, sys
print(f"{json.load(open(sys.argv[1]))['horovod']['compute_s_mean'] * 1e3:.1f}ms")
EOP
) || return 1
  echo "measured compute (forward and backward) on this GPU: $compute"
  cat > /tmp/gpu-real-policies-sweep.yaml <<EOS
name: gpu-real-policies
base: $here/examples/gpu-real-policies.yaml
set: {workloads.horovod.compute_time: $compute}
paired:
  scheme:
    static: {workloads.horovod.policy: static}
    adaptive: {workloads.horovod.policy: {kind: adaptive, budget: 10%, to: high}}
seeds: [1, 2, 3]
compare: {axis: scheme, baseline: static}
aims:
  - horovod.iteration_time_s.mean change < 0% (adaptive)
  - websearch.fct_s.small.mean change <= 10% (adaptive)
EOS
  cp /tmp/gpu-real-policies-sweep.yaml "$REC/policies-sweep.txt"  # pack brings back *.txt
  step 240 "$tb" sweep /tmp/gpu-real-policies-sweep.yaml --out /tmp/gpu-runs/policies \
    > "$REC/policies.txt" 2>&1 || rc=1
  tail -n 40 "$REC/policies.txt"
  return $rc
}

check_all() {
  # the Horovod build (CPU only) runs beside the DDP tests and the anchor; the benchmark waits
  local rc=0
  build_in_background
  check_ddp_tests || rc=1
  check_anchor || rc=1
  wait_build
  check_bench || rc=1
  check_horovod /tmp/horovod-wheel || rc=1
  check_extras || rc=1
  return $rc
}

[ "${BASH_SOURCE[0]}" = "$0" ] || return 0  # sourced (to try its functions): define only
case "${1:-}" in
  prepare) prepare ;;
  check)
    cd "$here" || exit 2  # pytest finds tests/ and its helpers from the tree's root
    OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT" "$REC"
    what=${2:-all}
    DEADLINE=$(( SECONDS + ${GPU_CHECK_BUDGET:-540} ))
    {
      trap pack EXIT  # whatever ends the checks (a die included), the records come back
      setup_device || exit $?
      rc=0
      case "$what" in
        ddp) check_ddp_tests || rc=$?; check_bench || rc=$? ;;
        horovod) build_in_background; check_anchor || rc=$?; wait_build
                 check_horovod /tmp/horovod-wheel || rc=$? ;;
        anchor) check_anchor || rc=$? ;;
        extras) check_extras || rc=$? ;;
        policies) check_policies || rc=$? ;;
        links) check_links || rc=$? ;;
        nccl) check_nccl || rc=$? ;;
        nccl-link) check_nccl_link || rc=$? ;;
        all) check_all || rc=$? ;;
        *) die "check what? ddp, horovod, anchor, extras, policies, links, nccl, nccl-link or all" ;;
      esac
      echo "== check $what: rc $rc, ${SECONDS}s"
      exit $rc
    } 2>&1 | tee "$OUT/check-$what.log"
    exit "${PIPESTATUS[0]}"
    ;;
  *) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
