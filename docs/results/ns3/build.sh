#!/usr/bin/env bash
# Builds the thesis' ns-3 program
# (hgao10/ns3: basic-sim + basic-apps + scratch/main_pfabric_flows_horovod) against
# Debian 12's packaged ns-3.37 (libns3-dev 3.37-2) with plain g++ + pkg-config.
#
# Usage:  build.sh <hgao10-ns3 checkout> [out dir]      (env: JOBS=2, CXXOPT=-O2)
#   The checkout is only read. A checkout can be made from the git mirror with:
#     git -C /work/.mirror/hgao10+ns3/repo archive HEAD simulator | tar -x -C <dir>
#   (the mirror lacks the 60 MB ns-3.30.1.zip blob; this build does not need it).
# Prerequisite (not done here):
#   apt-get install -y --no-install-recommends libns3-dev libgsl-dev
#   (libns3-dev's .pc files name libgsl.so, which only libgsl-dev installs)
# Built so on 2026-12-01: 4 minutes on 2 cores (25 translation units at -O2, then the link).
set -euo pipefail

CHECKOUT=${1:?usage: build.sh <hgao10-ns3 checkout> [out dir]}
OUT=${2:-$PWD/ns3port-build}
JOBS=${JOBS:-2}
CXXOPT=${CXXOPT:--O2}
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$CHECKOUT/simulator/src
MAIN=$CHECKOUT/simulator/scratch/main_pfabric_flows_horovod/main_pfabric_flows_horovod.cc

# ---- 0. prerequisites ------------------------------------------------------
# Debian names the .pc files ns3-<module>.pc (the shipped /usr/bin/ns3++ wrapper asks for
# libns3-<module> and is broken - do not use it).
PCMODS="ns3-core ns3-network ns3-internet ns3-point-to-point ns3-traffic-control ns3-applications ns3-flow-monitor ns3-stats"
pkg-config --exists $PCMODS || { echo "libns3-dev 3.37 not installed (apt-get install libns3-dev)"; exit 1; }
[ "$(pkg-config --modversion ns3-core)" = "3.37" ] || echo "WARNING: ns-3 $(pkg-config --modversion ns3-core), port.py written for 3.37"
[ -f "$MAIN" ] && [ -d "$SRC/basic-sim" ] && [ -d "$SRC/basic-apps" ] || { echo "not an hgao10/ns3 checkout: $CHECKOUT"; exit 1; }

# ---- 1. copy the needed sources (never touch the checkout) -----------------
rm -rf "$OUT/src" "$OUT/include" "$OUT/obj"; mkdir -p "$OUT/src" "$OUT/include/ns3" "$OUT/obj"
BASIC_SIM_CC="model/basic-simulation.cc model/exp-util.cc model/tcp-optimizer.cc model/topology-ptop.cc
  model/arbiter.cc model/arbiter-ptop.cc model/arbiter-ecmp.cc helper/arbiter-ecmp-helper.cc
  model/ipv4-arbiter-routing.cc helper/ipv4-arbiter-routing-helper.cc
  helper/ptop-utilization-tracker-helper.cc model/ptop-utilization-tracker.cc"      # = basic-sim/wscript
# basic-apps/wscript minus pingmesh/udp-rtt/PPBP (not used by main_pfabric_flows_horovod)
BASIC_APPS_CC="model/flow-send-application.cc model/flow-sink.cc model/schedule-reader.cc
  helper/flow-send-helper.cc helper/flow-sink-helper.cc model/flow-scheduler.cc
  model/horovod-worker.cc model/horovod-scheduler.cc helper/horovod-worker-helper.cc
  model/fusion-partition.cc model/ringallreduce-syncer.cc model/horovod-worker-config-reader.cc"
for m in basic-sim basic-apps; do
  mkdir -p "$OUT/src/$m"
  (cd "$SRC/$m" && tar -cf - model helper) | tar -xf - -C "$OUT/src/$m"
done
cp "$MAIN" "$OUT/src/"

# ---- 2. port to ns-3.37 (port.py: each edit says what and why) -------------------
python3 "$HERE/port.py" "$OUT/src"

# ---- 3. stage headers as ns3/<name>.h (what waf did in build/ns3/) ------------
find "$OUT/src/basic-sim" "$OUT/src/basic-apps" -name '*.h' -exec cp {} "$OUT/include/ns3/" \;
# (copies, not symlinks: "ringallreduce-syncer.h", "horovod-worker.h" etc. are also included
#  with quotes relative to the staged header's directory, so all .h must sit side by side)

# ---- 4. compile --------------------------------------------------------------
# pkg-config output of this package contains a stray "-I/usr;" token - strip the ';'.
NS3_CFLAGS=$(pkg-config --cflags $PCMODS | tr -d ';')
NS3_LIBS=$(pkg-config --libs $PCMODS | tr -d ';')
# NS3_ASSERT_ENABLE / NS3_LOG_ENABLE deliberately NOT defined: Debian built ns-3 as
# CMake "release" (ns3Targets-release.cmake) = asserts and logs off, like the thesis'
# optimized waf build (a debug build of the thesis code aborts in PfifoFast CheckConfig).
CXXFLAGS="-std=c++17 $CXXOPT -DNDEBUG -I$OUT/include $NS3_CFLAGS -Wno-deprecated-declarations"
export CXXFLAGS OUT
SOURCES=""
for f in $BASIC_SIM_CC; do SOURCES="$SOURCES $OUT/src/basic-sim/$f"; done
for f in $BASIC_APPS_CC; do SOURCES="$SOURCES $OUT/src/basic-apps/$f"; done
SOURCES="$SOURCES $OUT/src/main_pfabric_flows_horovod.cc"
printf '%s\n' $SOURCES | xargs -P "$JOBS" -I{} sh -c \
  'o="$OUT/obj/$(basename "{}" .cc).o"; echo "CXX {}"; g++ $CXXFLAGS -c "{}" -o "$o"'

# ---- 5. link ------------------------------------------------------------------
g++ -o "$OUT/main_pfabric_flows_horovod" "$OUT"/obj/*.o $NS3_LIBS
echo "built $OUT/main_pfabric_flows_horovod"

# ---- 6. smoke check (cheap, no simulation) -------------------------------------
# The program prints its usage and exits 0 without --run_dir.
"$OUT/main_pfabric_flows_horovod" | head -2 || true
# A run: docs/results/ns3/run_cell.py writes a run folder with the thesis' own generator and
# runs this binary on it (5 to 9 minutes of wall time per simulated second, on one core).
