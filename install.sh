#!/usr/bin/env bash
# Install everything testbed needs on a Debian/Ubuntu machine, as root: system packages,
# a virtual environment in .venv, and the package itself. Idempotent; the second run only
# checks (a few seconds) unless pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")"

if [ "$(id -u)" -ne 0 ]; then
  echo "install.sh: run as root (sudo bash install.sh): testbed creates namespaces and qdiscs" >&2
  exit 1
fi

PYTHON=${PYTHON:-python3}
# binary → Debian package that provides it
declare -A NEED=([ip]=iproute2 [nsenter]=util-linux [unshare]=util-linux [ping]=iputils-ping
  [iptables]=iptables [cmake]=cmake [g++]=g++ [make]=make [prometheus]=prometheus [promtool]=prometheus
  [iperf3]=iperf3)  # iperf3: for your own measurements in a held run (testbed exec)
missing=()
for bin in "${!NEED[@]}"; do
  command -v "$bin" >/dev/null 2>&1 || missing+=("${NEED[$bin]}")
done
command -v "$PYTHON" >/dev/null 2>&1 || missing+=(python3)
if ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then missing+=(python3-venv); fi
# Horovod compiles a C++ extension against the interpreter's headers.
if ! "$PYTHON" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null; then
  missing+=(python3-dev)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing system packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $(printf '%s\n' "${missing[@]}" | sort -u) >/dev/null
fi

# headless Chromium opens the HTML report in the browser test (tests/integration/test_html.py);
# optional: where Debian has no chromium package that test is skipped (and counted)
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  echo "== installing chromium (the HTML report's browser test)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null 2>&1 || true
  apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 ||
    echo "install.sh: chromium not installed: the HTML report's browser test will be skipped" >&2
fi

# --- Docker engine for `runtime: docker`. A machine whose engine answers is used as it is;
# otherwise Debian's docker.io is installed when missing and dockerd started. debootstrap makes
# the node image's base (`testbed images build`; no images are built here).
docker_pkgs=()
command -v debootstrap >/dev/null 2>&1 || docker_pkgs+=(debootstrap)
# the registry a swarm sweep serves its runner image from (testbed sweep --swarm)
command -v docker-registry >/dev/null 2>&1 || docker_pkgs+=(docker-registry)
if ! docker info >/dev/null 2>&1 && ! { command -v dockerd && command -v docker; } >/dev/null 2>&1; then
  docker_pkgs+=(docker.io)
fi
if [ ${#docker_pkgs[@]} -gt 0 ]; then
  echo "== installing ${docker_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${docker_pkgs[@]}" >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  mkdir -p /var/log/testbed
  if [ -d /run/systemd/system ]; then
    echo "== starting docker (systemctl)"
    systemctl start docker || true
  elif ! pgrep -x dockerd >/dev/null 2>&1; then
    echo "== starting dockerd (log: /var/log/testbed/dockerd.log)"
    # in its own session: a Ctrl-C here or the end of this shell leaves it running
    setsid nohup dockerd >>/var/log/testbed/dockerd.log 2>&1 </dev/null &
  fi
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
  if ! docker info >/dev/null 2>&1; then
    # netns runs need no engine: say why docker runs will not work, and go on
    echo "install.sh: warning: the Docker engine does not answer on ${DOCKER_HOST:-/var/run/docker.sock}" \
      "after 30 s, so runtime: docker will not work (netns runs are unaffected);" \
      "see /var/log/testbed/dockerd.log (or journalctl -u docker)" >&2
    tail -n 5 /var/log/testbed/dockerd.log >&2 2>/dev/null || true
  fi
fi

stamp=.venv/.testbed-install
want=$(cat pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "== installing testbed and its Python dependencies into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
  echo "$want" >"$stamp"
fi
# --- training stack: torch (CPU wheel) and Horovod 0.28.1 with Gloo, built once and cached ---
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
HOROVOD_VERSION=0.28.1
if ! .venv/bin/python -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
  echo "== installing torch $TORCH_VERSION"
  .venv/bin/python -m pip install -q --disable-pip-version-check "torch==$TORCH_VERSION"
fi
if ! .venv/bin/python -c "import horovod.torch, sys; sys.exit(horovod.__version__ != '$HOROVOD_VERSION')" 2>/dev/null; then
  .venv/bin/python -m pip install -q --disable-pip-version-check cloudpickle psutil pyyaml packaging cffi numpy
  wheel=$(bash scripts/build-horovod.sh | tail -n1)
  echo "== installing $(basename "$wheel")"
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps "$wheel"
fi
# a Horovod that installed but does not import (a torch it was not built against, a missing
# library) would otherwise show up only as failed training runs
if ! err=$(.venv/bin/python -c "import horovod.torch" 2>&1); then
  echo "install.sh: Horovod is installed but 'import horovod.torch' fails:" >&2
  echo "$err" | tail -n 3 >&2
  echo "install.sh: remove ~/.cache/testbed/wheels/torch-$TORCH_VERSION-* and run install.sh again to rebuild it" >&2
  exit 1
fi

# --- the CPUs' receive backlogs: at the kernel's 1000 packets a CPU that falls behind drops
# what a shaped queue releases to it, losses no scenario asked for (testbed/core/hostcpu.py). A
# global setting (a namespace cannot change it): raised here, never lowered, and kept across
# reboots; `testbed up` warns where it is lower.
backlog=10000
if [ "$(cat /proc/sys/net/core/netdev_max_backlog)" -lt "$backlog" ]; then
  echo "== net.core.netdev_max_backlog $(cat /proc/sys/net/core/netdev_max_backlog) -> $backlog (/etc/sysctl.d/60-testbed.conf)"
  sysctl -qw net.core.netdev_max_backlog=$backlog
  mkdir -p /etc/sysctl.d
  printf '# testbed: see testbed/core/hostcpu.py\nnet.core.netdev_max_backlog = %s\n' "$backlog" > /etc/sysctl.d/60-testbed.conf
fi

# testbed is installed editable, so pip compiled none of its modules: compile them now, or
# every command pays about 0.1 s for it wherever bytecode is not written (PYTHONDONTWRITEBYTECODE)
.venv/bin/python -m compileall -q testbed >/dev/null

echo "== testbed $(.venv/bin/testbed --version | awk '{print $NF}') ready: .venv/bin/testbed"
