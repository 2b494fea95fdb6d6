#!/usr/bin/env bash
# Set up raswarden and replay the bundled supernode trace through the whole pipeline.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec .venv/bin/raswarden replay fixtures/traces/sn01-mini --findings findings.jsonl "$@"
