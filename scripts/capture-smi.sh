#!/bin/sh
# Append one snapshot of a vendor tool to a JSON Lines file that `raswarden replay` reads
# (daemon/ingest/formats/smi.py): {"ts": <epoch s>, "host": <hostname>, "tool": ..., "output": ...}.
# Run it on a node from cron or a fleet tool, e.g. every minute:
#   * * * * * /opt/raswarden/scripts/capture-smi.sh amd-smi /var/log/raswarden/smi.jsonl
# amd-smi: the JSON of `amd-smi metric --json`; rocm-smi (older ROCm): its --json of temperatures, power, use,
# VRAM, PCIe replays and clocks; npu-smi: the text of `npu-smi info`.
set -eu
tool="${1:?usage: capture-smi.sh amd-smi|rocm-smi|npu-smi OUT.jsonl}"
out="${2:?usage: capture-smi.sh amd-smi|rocm-smi|npu-smi OUT.jsonl}"
case "$tool" in
  amd-smi) output="$(amd-smi metric --json)" ;;
  rocm-smi) output="$(rocm-smi --showtemp --showpower --showuse --showmeminfo vram --showreplaycount \
              --showclocks --json)" ;;
  npu-smi) output="$(npu-smi info)" ;;
  *) echo "capture-smi.sh: unknown tool $tool (amd-smi, rocm-smi, npu-smi)" >&2; exit 2 ;;
esac
TOOL="$tool" OUTPUT="$output" python3 -c '
import json, os, socket, time
tool, text = os.environ["TOOL"], os.environ["OUTPUT"]
print(json.dumps({"ts": round(time.time(), 3), "host": socket.gethostname(), "tool": tool,
                  "output": text if tool == "npu-smi" else json.loads(text)}))' >> "$out"
