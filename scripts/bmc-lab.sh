#!/usr/bin/env bash
# A GPU blade's BMC on loopback for the tests: build | up | down | dir.
#
# build: prometheus-community/ipmi_exporter compiled with the machine's Go from its Go module (scripts/bmc/go.mod pins
#        the release) into build/bmc (ignored by git); not rebuilt while the binary is newer than go.mod and go.sum.
#        Never a downloaded binary.
# up:    OpenIPMI's ipmi_sim (Debian package openipmi) as the BMC, its sensors and thresholds from lab/bmc.py, on
#        UDP 127.0.0.1:$BMC_LAB_PORT (IPMI 1.5 LAN) with its console on TCP $BMC_LAB_CONSOLE; ipmi_exporter on
#        127.0.0.1:$BMC_LAB_EXPORTER reading it through the real FreeIPMI (Debian package freeipmi-tools): scrape
#        /ipmi?target=127.0.0.1:$BMC_LAB_PORT. Prints the lab directory (its config and both logs).
# down:  stops both and removes the lab's state.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BMC_LAB_BUILD:-$ROOT/build/bmc}
DIR=${BMC_LAB_DIR:-/tmp/raswarden-bmclab}
PORT=${BMC_LAB_PORT:-29623}
CONSOLE=${BMC_LAB_CONSOLE:-29624}
EXPORTER=${BMC_LAB_EXPORTER:-29290}
PYTHON=${BMC_LAB_PYTHON:-$ROOT/.venv/bin/python}

. "$ROOT/scripts/lab-common.sh"

case "${1:-}" in
  build)
    command -v go >/dev/null || { echo "bmc-lab: no Go on this machine (the BMC tests need it)" >&2; exit 1; }
    cd "$ROOT/scripts/bmc"
    built_after "$BUILD/ipmi_exporter" go.mod go.sum && exit 0
    mkdir -p "$BUILD"
    go build -trimpath -o "$BUILD/ipmi_exporter" github.com/prometheus-community/ipmi_exporter
    ;;
  up)
    [ -x "$BUILD/ipmi_exporter" ] || { echo "bmc-lab: not built (run: $0 build)" >&2; exit 1; }
    command -v ipmi_sim >/dev/null || { echo "bmc-lab: no ipmi_sim (apt-get install openipmi)" >&2; exit 1; }
    PATH=$PATH:/usr/sbin
    command -v ipmimonitoring >/dev/null || { echo "bmc-lab: no FreeIPMI (apt-get install freeipmi-tools)" >&2; exit 1; }
    "$0" down >/dev/null 2>&1 || true
    for port in "$CONSOLE" "$EXPORTER"; do  # another lab's (or anything's): this one would read that one's BMC
      if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        echo "bmc-lab: port $port is taken (BMC_LAB_CONSOLE, BMC_LAB_EXPORTER choose others)" >&2
        exit 1
      fi
    done
    mkdir -p "$DIR/state"
    cd "$DIR"
    (cd "$ROOT" && "$PYTHON" -m lab.bmc write "$DIR" --port "$PORT" --console "$CONSOLE")
    ipmi_sim -c lan.conf -f bmc.emu -s "$DIR/state" -n > ipmi_sim.log 2>&1 &
    echo $! > ipmi_sim.pid
    # FreeIPMI keeps its SDR cache under $HOME: the lab's own, so a board of another run is never read from a cache
    HOME="$DIR" "$BUILD/ipmi_exporter" --config.file=ipmi_exporter.yml --web.listen-address="127.0.0.1:$EXPORTER" \
      > ipmi_exporter.log 2>&1 &
    echo $! > ipmi_exporter.pid
    for _ in $(seq 1 300); do  # the exporter answers, and the BMC through it (both ours: a port taken ends them)
      for p in ipmi_sim ipmi_exporter; do
        kill -0 "$(cat $p.pid)" 2>/dev/null || { echo "bmc-lab: $p exited:" >&2; tail -5 $p.log >&2; exit 1; }
      done
      if curl -fsS "http://127.0.0.1:$EXPORTER/ipmi?target=127.0.0.1:$PORT" 2>/dev/null \
          | grep -q '^ipmi_up{collector="ipmi"} 1'; then
        echo "$DIR"
        exit 0
      fi
      sleep 0.2
    done
    echo "bmc-lab: the exporter did not read the simulated BMC in 60 s" >&2
    tail -20 ipmi_sim.log ipmi_exporter.log >&2
    exit 1
    ;;
  down)
    stop_pid "$DIR/ipmi_exporter.pid"
    stop_pid "$DIR/ipmi_sim.pid"
    rm -rf "$DIR"
    ;;
  dir)
    echo "$DIR"
    ;;
  *)
    echo "usage: $0 build | up | down | dir" >&2
    exit 2
    ;;
esac
