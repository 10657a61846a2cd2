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
declare -A NEED=([ip]=iproute2 [nsenter]=util-linux [ping]=iputils-ping)
missing=()
for bin in "${!NEED[@]}"; do
  command -v "$bin" >/dev/null 2>&1 || missing+=("${NEED[$bin]}")
done
command -v "$PYTHON" >/dev/null 2>&1 || missing+=(python3)
if ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then missing+=(python3-venv); fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing system packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $(printf '%s\n' "${missing[@]}" | sort -u) >/dev/null
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
echo "== testbed $(.venv/bin/testbed --version | awk '{print $NF}') ready: .venv/bin/testbed"
