# Shell helpers the labs share (sourced by scripts/kube-lab.sh and scripts/bmc-lab.sh).

stop_pid() {  # stop_pid FILE: TERM, then KILL after 10 s
  [ -f "$1" ] || return 0
  local pid; pid=$(cat "$1")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$1"
}

built_after() {  # built_after BINARY FILE...: the binary exists and is newer than every FILE (nothing to rebuild)
  local binary=$1; shift
  [ -x "$binary" ] || return 1
  for f in "$@"; do [ "$binary" -nt "$f" ] || return 1; done
}
