#!/usr/bin/env bash
# A throwaway PostgreSQL server on loopback for the tests: install | up | down | url.
# State lives in $PG_LAB_DIR (default /tmp/raswarden-pglab); the server runs as the 'postgres' user.
set -euo pipefail
DIR=${PG_LAB_DIR:-/tmp/raswarden-pglab}
PORT=${PG_LAB_PORT:-15432}
url() { echo "postgresql+psycopg://postgres@127.0.0.1:${PORT}/postgres"; }
bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

case "${1:-}" in
  install)
    if [ -z "$(bindir)" ]; then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
    fi ;;
  up)
    BIN=$(bindir); [ -n "$BIN" ] || { echo "pg-lab: PostgreSQL is not installed (run: $0 install)" >&2; exit 1; }
    "$0" down >/dev/null 2>&1 || true
    rm -rf "$DIR"; mkdir -p "$DIR"; chown postgres "$DIR"
    runuser -u postgres -- "$BIN/initdb" -D "$DIR/data" -A trust -U postgres >/dev/null
    runuser -u postgres -- "$BIN/pg_ctl" -D "$DIR/data" -o "-k $DIR -c listen_addresses=127.0.0.1 -p $PORT" \
      -l "$DIR/log" -w -t 30 start >/dev/null
    url ;;
  down)
    BIN=$(bindir)
    if [ -n "$BIN" ] && [ -f "$DIR/data/postmaster.pid" ]; then
      runuser -u postgres -- "$BIN/pg_ctl" -D "$DIR/data" -m fast -w -t 30 stop >/dev/null
    fi ;;
  url) url ;;
  *) echo "usage: $0 install|up|down|url" >&2; exit 2 ;;
esac
