#!/usr/bin/env bash
# Builds the Horovod 0.28.1 wheel testbed runs, once per torch (and CUDA) version, and prints
# its path on the last line. Horovod 0.28.1 (2023) is the last release: it asks for C++14 and
# CUDA C++11, while torch >= 2.1 headers and CUDA 13's CCCL need C++17 (the fix, upstream PR
# #3998, is merged but unreleased), so the sources are patched to C++17 before building.
#
#   scripts/build-horovod.sh                    CPU: Gloo + PyTorch, for .venv's torch
#   scripts/build-horovod.sh --gpu              GPU: NCCL for GPU tensors as well (needs a CUDA
#                                               build of torch, nvcc, and nvidia-nccl-cu*)
# options:
#   --python PY      the interpreter whose torch the wheel is for (default: .venv/bin/python)
#   --cuda-home DIR  the CUDA toolkit with nvcc (default: /usr/local/cuda-<torch's CUDA>, then
#                    /usr/local/cuda)
#   --cc-list LIST   GPU compute capabilities to build for, e.g. 90 (H100/H200) or 80,90
#                    (default: those of the GPUs nvidia-smi shows, else 90)
#   --sdist FILE     horovod-0.28.1.tar.gz to build from (default: the cached copy, else pip
#                    download; a machine without a package index needs the cached copy or this)
#
# Cache (TESTBED_WHEEL_CACHE overrides ~/.cache/testbed/wheels):
#   CPU  torch-<torch version>-<cpXY>/                     (testbed.network.images reads it from here)
#   GPU  torch-<torch version incl. +cuNNN>-<cpXY>-nccl-cc<LIST>/
#   src/horovod-0.28.1.tar.gz                               the source, kept for offline builds
set -euo pipefail

HOROVOD_VERSION=0.28.1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY="$here/.venv/bin/python"
gpu=0
cuda_home=""
cc_list=""
sdist=""
die() { echo "build-horovod.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --gpu) gpu=1 ;;
    --python) PY=${2:?--python needs a path}; shift ;;
    --cuda-home) cuda_home=${2:?--cuda-home needs a directory}; shift ;;
    --cc-list) cc_list=${2:?--cc-list needs e.g. 90 or 80,90}; shift ;;
    --sdist) sdist=${2:?--sdist needs a file}; shift ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
  shift
done
[ -x "$PY" ] || die "no interpreter at $PY: run bash install.sh, or pass --python"
read -r torch_version torch_cuda pyver < <("$PY" - <<'EOF' || true
import sys
try:
    import torch
except Exception as e:  # a CUDA torch whose libraries are missing fails here
    print("none none none")
    sys.stderr.write(f"build-horovod.sh: torch does not import in {sys.executable}: {e}\n")
    raise SystemExit(0)
print(torch.__version__, torch.version.cuda or "none", f"cp{sys.version_info[0]}{sys.version_info[1]}")
EOF
)
[ "${torch_version:-none}" != none ] || die "torch is not installed (or does not import) in $PY"
# --no-build-isolation (the build must see this torch): Horovod's build and runtime needs
"$PY" -c 'import setuptools, cloudpickle, psutil, yaml, packaging, cffi' 2>/dev/null \
  || die "Horovod's build needs: $PY -m pip install setuptools cloudpickle psutil pyyaml packaging cffi"
# bdist_wheel: in setuptools since 70.1, from the wheel package before
"$PY" -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec("setuptools.command.bdist_wheel") or u.find_spec("wheel")))' \
  || die "Horovod's build needs bdist_wheel: $PY -m pip install wheel (or setuptools >= 70.1)"
command -v cmake >/dev/null || "$PY" -c 'import cmake' 2>/dev/null \
  || die "Horovod's build needs cmake: apt-get install cmake (or $PY -m pip install cmake)"
root="${TESTBED_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/testbed/wheels}"

# CMAKE_POLICY_VERSION_MINIMUM: CMake 4 refuses the cmake_minimum_required(< 3.5) of Horovod's
# bundled third-party projects unless told which policies to assume; CMake 3 ignores it
env_vars=(HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1
          HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 "MAKEFLAGS=-j$(nproc)"
          CMAKE_POLICY_VERSION_MINIMUM=3.5)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ "$gpu" = 0 ]; then
  cache="$root/torch-${torch_version%%+*}-$pyver"
else
  [ "$torch_cuda" != none ] || die "torch $torch_version in $PY is CPU-only; a GPU wheel needs a CUDA build of torch (pip install torch==<version> from an index with CUDA wheels)"
  if [ -z "$cuda_home" ]; then
    for d in "/usr/local/cuda-$torch_cuda" /usr/local/cuda; do
      [ -x "$d/bin/nvcc" ] && { cuda_home=$d; break; }
    done
  fi
  [ -n "$cuda_home" ] && [ -x "$cuda_home/bin/nvcc" ] \
    || die "no nvcc in ${cuda_home:-/usr/local/cuda-$torch_cuda or /usr/local/cuda}: install the CUDA $torch_cuda toolkit, or pass --cuda-home"
  nvcc_version=$("$cuda_home/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
  [ "${nvcc_version%%.*}" = "${torch_cuda%%.*}" ] \
    || die "nvcc in $cuda_home is CUDA $nvcc_version, torch is built for CUDA $torch_cuda: use a matching toolkit (--cuda-home)"
  # NCCL: the headers and library torch itself loads (the nvidia-nccl-cu* wheel). It ships
  # only libnccl.so.2, and CMake's find_library wants libnccl.so: link it in a scratch folder.
  nccl_dir=$("$PY" -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null) || nccl_dir=""
  if [ -z "$nccl_dir" ] || [ ! -f "$nccl_dir/include/nccl.h" ]; then
    pin=$("$PY" -c 'from importlib.metadata import requires; print(next((r.split(";")[0].strip() for r in requires("torch") or [] if r.startswith("nvidia-nccl")), "nvidia-nccl-cu13"))')
    die "no NCCL headers in $PY's site-packages: $PY -m pip install '$pin'"
  fi
  mkdir -p "$work/nccl-lib"
  ln -s "$nccl_dir/lib/libnccl.so.2" "$work/nccl-lib/libnccl.so"
  if [ -z "$cc_list" ]; then
    cc_list=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d . | sort -u | paste -sd, || true)
    if [ -z "$cc_list" ]; then
      cc_list=90
      echo "== no GPU visible: building for compute capability 9.0 (H100/H200); --cc-list to change" >&2
    fi
  fi
  [[ "$cc_list" =~ ^[0-9]{2,3}(,[0-9]{2,3})*$ ]] || die "--cc-list wants compute capabilities like 90 or 80,90, got '$cc_list'"
  # CUDA_HOME: torch.utils.cpp_extension, which Horovod asks for the libraries (cudart), looks
  # there; it guesses /usr/local otherwise.
  env_vars+=(HOROVOD_GPU_OPERATIONS=NCCL "HOROVOD_CUDA_HOME=$cuda_home" "CUDA_HOME=$cuda_home"
             "HOROVOD_NCCL_INCLUDE=$nccl_dir/include" "HOROVOD_NCCL_LIB=$work/nccl-lib"
             HOROVOD_NCCL_LINK=SHARED "HOROVOD_BUILD_CUDA_CC_LIST=$cc_list")
  cache="$root/torch-$torch_version-$pyver-nccl-cc${cc_list//,/_}"
fi

wheel=$(ls "$cache"/horovod-$HOROVOD_VERSION-*.whl 2>/dev/null | head -n1 || true)
if [ -n "$wheel" ]; then
  echo "$wheel"
  exit 0
fi

mkdir -p "$root/src"
if [ -z "$sdist" ]; then
  sdist="$root/src/horovod-$HOROVOD_VERSION.tar.gz"
  if [ ! -f "$sdist" ]; then
    "$PY" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
      "horovod==$HOROVOD_VERSION" -d "$work" \
      || die "could not download horovod==$HOROVOD_VERSION's source; pass --sdist FILE"
    mv "$work/horovod-$HOROVOD_VERSION.tar.gz" "$sdist"
  fi
fi
[ -f "$sdist" ] || die "no such file: $sdist"
tar -xzf "$sdist" -C "$work"
src="$work/horovod-$HOROVOD_VERSION"
sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' \
  "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
sed -i 's/set(CMAKE_CUDA_STANDARD 11)/set(CMAKE_CUDA_STANDARD 17)/' \
  "$src/horovod/common/ops/cuda/CMakeLists.txt"
# GCC 13 no longer pulls <string> and <stdexcept> in through other headers (seen on the
# device's GCC 13.3: "'string' in namespace 'std' does not name a type" in group_table.h,
# "'logic_error' is not a member of 'std'" in common.h)
sed -i '0,/^#include/s//#include <string>\n#include/' "$src/horovod/common/group_table.h"
sed -i '0,/^#include/s//#include <stdexcept>\n#include/' "$src/horovod/common/common.h"

mkdir -p "$cache"
log="$cache/build.log"
what="Gloo, PyTorch $torch_version; no MPI"
[ "$gpu" = 1 ] && what="Gloo + NCCL, CUDA $nvcc_version for CC $cc_list, PyTorch $torch_version"
echo "== building Horovod $HOROVOD_VERSION ($what): several minutes on 2 cores (3.5 for one GPU architecture), once; log $log" >&2
env "${env_vars[@]}" "$PY" -m pip wheel -v --disable-pip-version-check --no-build-isolation \
  --no-deps -w "$cache" "$src" >"$log" 2>&1 \
  || { echo "build-horovod.sh: the Horovod build failed; the log is $log" >&2; tail -20 "$log" >&2; exit 1; }
wheel=$(ls "$cache"/horovod-$HOROVOD_VERSION-*.whl | head -n1)
if [ "$gpu" = 1 ]; then
  # A build that quietly fell back to CPU would link no NCCL: check the torch extension.
  "$PY" - "$wheel" <<'EOF' || { rm -f "$wheel"; exit 1; }
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    ext = [n for n in z.namelist() if n.startswith("horovod/torch/mpi_lib_v2") and n.endswith(".so")]
    data = z.read(ext[0]) if ext else b""
if b"libnccl.so" not in data or b"ncclAllReduce" not in data:
    sys.exit("build-horovod.sh: the wheel's torch extension does not link NCCL; see the build log")
EOF
fi
echo "$wheel"
