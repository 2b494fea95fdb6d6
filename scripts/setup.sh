#!/usr/bin/env bash
# Set up raswarden for development on Debian/Ubuntu: Python venv in .venv with the package (editable)
# and its dev tools. Idempotent: a second run only reinstalls when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
  echo "setup: need root for: $*" >&2; return 1; fi; }

PY=${PYTHON:-python3}
if ! command -v "$PY" >/dev/null || ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "setup: installing python3 and venv from the Debian packages" >&2
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends python3 python3-venv python3-pip >/dev/null
fi
"$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || {
  echo "setup: raswarden needs Python 3.11 or newer ($PY is $("$PY" -V))" >&2; exit 1; }

[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.raswarden-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev]'
  echo "$want" > "$stamp"
fi
