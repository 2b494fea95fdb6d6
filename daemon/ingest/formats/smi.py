"""Vendor tool snapshots: ``amd-smi metric --json``, ``rocm-smi --json`` and ``npu-smi info`` outputs, one
snapshot per line.

Neither tool says which host or when, so each snapshot is kept in a JSON Lines envelope (what
``scripts/capture-smi.sh`` writes from a node's cron or a fleet tool)::

    {"ts": 1772409630, "host": "sn02-b01", "tool": "amd-smi", "output": {"gpu_data": [...]}}
    {"ts": 1772409630, "host": "sn03-b01", "tool": "npu-smi", "output": "+----...npu-smi info's table...\\n"}

* ``amd-smi metric --json`` (ROCm 6: a list of GPUs; ROCm 7: ``{"gpu_data": [...]}``): per GPU ``gpu`` and
  ``temperature.hotspot``/``mem``/``edge``, ``power.socket_power`` (or ``average_socket_power``),
  ``usage.gfx_activity``/``umc_activity``, ``ecc.total_correctable_count``/``total_uncorrectable_count``/
  ``total_deferred_count``, ``ecc_blocks.UMC``/``XGMI_WAFL``, ``pcie.replay_count``/
  ``l0_to_recovery_count``/``width`` (the link's current lanes), ``energy.total_energy_consumption`` (J),
  ``mem_usage.used_vram``/``free_vram`` (MB). A value is a number or ``{"value": ..., "unit": ...}``; ``"N/A"``
  means not supported here and is skipped.
* ``rocm-smi --showtemp --showpower --showuse --showmeminfo vram --showreplaycount --showclocks --json``
  (the older ROCm tool; cards keyed ``card0`` or, from ROCm 6, ``card:0``): junction, memory and edge
  temperatures, average or current socket power, GPU use, VRAM used (bytes), the PCIe replay count and the
  system clock (``"(1269Mhz)"``); values are strings, sometimes in a one-element list.
* ``npu-smi info``: the two rows per NPU of its table (``NPU Name | Health | Power(W) Temp(C) ...`` and
  ``Chip | Bus-Id | AICore(%) Memory-Usage(MB) HBM-Usage(MB)``) give power, temperature, AI core
  utilisation, HBM use and total and health (``OK`` is 1, anything else 0); the Bus-Id maps kernel lines
  to the NPU.

Canonical names and entities are the exporters' (``docs/names.md``): ``{node}/gpu{gpu}``, ``{node}/npu{id}``.
A malformed record or value is rejected with its file, line and field; the rest of the file is read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from daemon.ingest.batch import Batch
from daemon.ingest.formats.reader import ReadContext, iter_lines
from daemon.ingest.formats.openmetrics import samples_frame
from daemon.topology import normalize_pci

FORMAT = "smi"

# amd-smi metric --json: (path in the GPU's dict, canonical metric, scale)
AMD_FIELDS = (
    (("temperature", "hotspot"), "gpu_temp_c", 1.0),
    (("temperature", "mem"), "hbm_temp_c", 1.0),
    (("temperature", "edge"), "gpu_edge_temp_c", 1.0),
    (("power", "socket_power"), "power_w", 1.0),
    (("power", "average_socket_power"), "power_w", 1.0),
    (("usage", "gfx_activity"), "gpu_util_pct", 1.0),
    (("usage", "umc_activity"), "mem_copy_util_pct", 1.0),
    (("ecc", "total_correctable_count"), "ecc_sbe_total", 1.0),
    (("ecc", "total_uncorrectable_count"), "ecc_dbe_total", 1.0),
    (("ecc", "total_deferred_count"), "ecc_deferred_total", 1.0),
    (("ecc_blocks", "UMC", "correctable_count"), "ecc_umc_ce_total", 1.0),
    (("ecc_blocks", "UMC", "uncorrectable_count"), "ecc_umc_ue_total", 1.0),
    (("ecc_blocks", "XGMI_WAFL", "correctable_count"), "xgmi_ce_total", 1.0),
    (("ecc_blocks", "XGMI_WAFL", "uncorrectable_count"), "xgmi_ue_total", 1.0),
    (("pcie", "replay_count"), "pcie_replay_total", 1.0),
    (("pcie", "l0_to_recovery_count"), "pcie_recovery_total", 1.0),
    (("pcie", "width"), "pcie_link_width", 1.0),
    (("energy", "total_energy_consumption"), "energy_mj_total", 1000.0),
    (("mem_usage", "used_vram"), "fb_used_mib", 1.0),
    (("mem_usage", "free_vram"), "fb_free_mib", 1.0),
)
# rocm-smi --json: key -> (canonical metric, scale)
ROCM_FIELDS = {
    "Temperature (Sensor junction) (C)": ("gpu_temp_c", 1.0),
    "Temperature (Sensor memory) (C)": ("hbm_temp_c", 1.0),
    "Temperature (Sensor edge) (C)": ("gpu_edge_temp_c", 1.0),
    "Average Graphics Package Power (W)": ("power_w", 1.0),
    "Current Socket Graphics Package Power (W)": ("power_w", 1.0),
    "GPU use (%)": ("gpu_util_pct", 1.0),
    "VRAM Total Used Memory (B)": ("fb_used_mib", 1.0 / 2**20),
    "PCIe Replay Count": ("pcie_replay_total", 1.0),
    "sclk clock speed:": ("sm_clock_mhz", 1.0),
}
_CARD = re.compile(r"^card:?(\d+)$")
_MHZ = re.compile(r"^\(?(\d+(?:\.\d+)?)\s*Mhz\)?$", re.IGNORECASE)
_NUM = r"(NA|-?\d+(?:\.\d+)?)"
_NPU_ROW1 = re.compile(rf"^\|\s*(\d+)\s+(\S+)\s*\|\s*(\S+)\s*\|\s*{_NUM}\s+{_NUM}\s")
_NPU_ROW2 = re.compile(rf"^\|\s*(\d+)\s*\|\s*([0-9A-Fa-f]{{4}}:[0-9A-Fa-f]{{2}}:[0-9A-Fa-f]{{2}}\.[0-7])\s*\|\s*{_NUM}"
                       r"\s+\d+\s*/\s*\d+\s+(\d+)\s*/\s*(\d+)")


def _number(value, where: str, ctx: ReadContext) -> float | None:
    """A finite number from a tool's value (a number or its text), or None with the value rejected at ``where``."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        ctx.rejects.reject(FORMAT, where, f"not a number: {value!r}")
        return None
    if not np.isfinite(number):
        ctx.rejects.reject(FORMAT, where, "value is NaN or infinite")
        return None
    return number


class SmiReader:
    """Reads capture envelopes of amd-smi and npu-smi snapshots (see the module docstring)."""

    format = FORMAT

    def read(self, path: Path, ctx: ReadContext) -> Iterator[Batch]:
        rows: list[tuple[int, float, float]] = []  # (series id, ts, value)
        for first, lines in iter_lines(path, ctx.read_bytes, ctx.rejects, FORMAT):
            for k, line in enumerate(lines):
                if line.strip():
                    self._record(line, f"{path}:{first + k}", ctx, rows)
            if len(rows) >= ctx.chunk_rows:
                yield self._batch(rows, ctx)
                rows = []
        if rows:
            yield self._batch(rows, ctx)

    @staticmethod
    def _batch(rows: list[tuple[int, float, float]], ctx: ReadContext) -> Batch:
        arr = np.array(rows, dtype=np.float64)
        order = np.argsort(arr[:, 1], kind="stable")
        arr = arr[order]
        return Batch(samples=samples_frame(ctx.mapper, arr[:, 0].astype(np.int64), arr[:, 1], arr[:, 2], FORMAT))

    def _record(self, line: str, position: str, ctx: ReadContext, rows: list) -> None:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            ctx.rejects.reject(FORMAT, position, f"not a JSON record: {exc.msg}")
            return
        if not isinstance(rec, dict) or not {"ts", "host", "tool", "output"} <= rec.keys():
            ctx.rejects.reject(FORMAT, position, "a snapshot needs ts, host, tool and output")
            return
        ts = rec["ts"]
        if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not np.isfinite(ts):
            ctx.rejects.reject(FORMAT, position, f"ts is not a number of seconds: {ts!r}")
            return
        node = ctx.mapper.topology.resolve_host(str(rec["host"]))
        if node is None:
            ctx.rejects.reject(FORMAT, position, f"host {rec['host']!r} is an address with no alias in the topology")
            return
        if rec["tool"] == "amd-smi":
            self._amd(rec["output"], float(ts), node, position, ctx, rows)
        elif rec["tool"] == "rocm-smi":
            self._rocm(rec["output"], float(ts), node, position, ctx, rows)
        elif rec["tool"] == "npu-smi":
            self._npu(rec["output"], float(ts), node, position, ctx, rows)
        else:
            ctx.rejects.reject(FORMAT, position, f"unknown tool {rec['tool']!r} (amd-smi, rocm-smi, npu-smi)")

    @staticmethod
    def _amd(output, ts: float, node: str, position: str, ctx: ReadContext, rows: list) -> None:
        gpus = output.get("gpu_data") if isinstance(output, dict) else output
        if not isinstance(gpus, list):
            ctx.rejects.reject(FORMAT, position, "amd-smi output is neither a list of GPUs nor {gpu_data: [...]}")
            return
        for i, gpu in enumerate(gpus):
            where = f"{position} gpu_data[{i}]"
            if not isinstance(gpu, dict) or not isinstance(gpu.get("gpu"), int):
                ctx.rejects.reject(FORMAT, where, "a GPU entry needs its integer 'gpu' index")
                continue
            entity = f"{node}/gpu{gpu['gpu']}"
            seen: set[str] = set()
            for keys, metric, scale in AMD_FIELDS:
                value = gpu
                for key in keys:
                    value = value.get(key) if isinstance(value, dict) else None
                if isinstance(value, dict):
                    value = value.get("value")
                if value is None or value == "N/A" or metric in seen:
                    continue
                number = _number(value, f"{where}.{'.'.join(keys)}", ctx)
                if number is None:
                    continue
                seen.add(metric)
                rows.append((ctx.mapper.canonical_series(entity, metric), ts, number * scale))

    @staticmethod
    def _rocm(output, ts: float, node: str, position: str, ctx: ReadContext, rows: list) -> None:
        if not isinstance(output, dict):
            ctx.rejects.reject(FORMAT, position, "rocm-smi output is not a JSON object of cards")
            return
        for card, fields in output.items():
            m = _CARD.match(card)
            if m is None:  # "system": the driver version and processes, not a card
                continue
            if not isinstance(fields, dict):
                ctx.rejects.reject(FORMAT, f"{position} {card}", "a card's fields are not an object")
                continue
            entity = f"{node}/gpu{m.group(1)}"
            seen: set[str] = set()
            for key, (metric, scale) in ROCM_FIELDS.items():
                value = fields.get(key)
                if isinstance(value, list) and len(value) == 1:
                    value = value[0]
                if value is None or metric in seen or str(value).strip().upper() in ("N/A", "NA", ""):
                    continue
                mhz = _MHZ.match(str(value).strip())
                number = _number(mhz.group(1) if mhz else value, f"{position} {card}.{key}", ctx)
                if number is None:
                    continue
                seen.add(metric)
                rows.append((ctx.mapper.canonical_series(entity, metric), ts, number * scale))

    @staticmethod
    def _npu(output, ts: float, node: str, position: str, ctx: ReadContext, rows: list) -> None:
        if not isinstance(output, str):
            ctx.rejects.reject(FORMAT, position, "npu-smi output must be the text of 'npu-smi info'")
            return
        current = None  # (entity, NPU id) of the first row just read
        found = 0
        for j, text in enumerate(output.splitlines()):
            m = _NPU_ROW1.match(text)
            if m:
                npu, _, health, power, temp = m.groups()
                entity = f"{node}/npu{npu}"
                current = entity
                found += 1
                rows.append((ctx.mapper.canonical_series(entity, "accelerator_health"), ts,
                             1.0 if health == "OK" else 0.0))
                for value, metric in ((power, "power_w"), (temp, "gpu_temp_c")):
                    if value != "NA":
                        rows.append((ctx.mapper.canonical_series(entity, metric), ts, float(value)))
                continue
            m = _NPU_ROW2.match(text)
            if m and current is not None:
                chip, bus, aicore, hbm_used, hbm_total = m.groups()
                if chip != "0":
                    ctx.rejects.reject(FORMAT, f"{position} output line {j + 1}",
                                       f"chip {chip} of a multi-chip card: only chip 0 is read")
                    continue
                pci = normalize_pci(bus)
                if pci:
                    ctx.mapper.pci_accelerator[(node, pci)] = current
                if aicore != "NA":
                    rows.append((ctx.mapper.canonical_series(current, "gpu_util_pct"), ts, float(aicore)))
                rows.append((ctx.mapper.canonical_series(current, "fb_used_mib"), ts, float(hbm_used)))
                rows.append((ctx.mapper.canonical_series(current, "fb_total_mib"), ts, float(hbm_total)))
                current = None
        if not found:
            ctx.rejects.reject(FORMAT, position, "no NPU rows in the npu-smi output")
