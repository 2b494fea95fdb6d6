#!/usr/bin/env bash
# Set up raswarden and run the whole test suite, with the real components the tests need
# (PostgreSQL on loopback). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

pg_started=0
if [ "$(id -u)" = 0 ]; then
  ./scripts/pg-lab.sh install
  RASWARDEN_TEST_PG_URL=$(./scripts/pg-lab.sh up)
  export RASWARDEN_TEST_PG_URL
  pg_started=1
else
  echo "test: not root, so PostgreSQL is not started; its tests skip (and fail under CI=true)" >&2
fi
cleanup() { [ "$pg_started" = 1 ] && ./scripts/pg-lab.sh down || true; }
trap cleanup EXIT

set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
exit $rc
