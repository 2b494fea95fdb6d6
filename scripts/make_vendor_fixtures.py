#!/usr/bin/env python3
"""Write the small per-vendor exporter and kernel-log samples in fixtures/exporters/ (see fixtures/README.md).

Deterministic and authored, not captured: metric and label names are the exporters' own (AMD
device-metrics-exporter with its packaged ``amd_`` prefix; Ascend npu-exporter's label set as its own test
exposition shows it), values are plausible for an MI300X and an Ascend 910B under training load. Each file
holds two scrapes 30 s apart with millisecond timestamps, as ``raswarden replay`` reads concatenated
scrapes. The malformed files carry one defect per line, for the readers' error paths.

Usage: python scripts/make_vendor_fixtures.py [OUT_DIR]
"""

from __future__ import annotations

import sys
from pathlib import Path

T = (1772409630000, 1772409660000)  # 2026-03-02T00:00:30Z and 30 s later, in ms

AMD_LABELS = ('card_model="AMD Instinct MI300X",gpu_compute_partition_type="spx",gpu_id="{g}",'
              'gpu_memory_partition_type="nps1",gpu_partition_id="0",hostname="sn02-b01",serial_number="PCB05{g}123"')
# name -> (help, [[gpu0 scrape0, scrape1], [gpu1 scrape0, scrape1]]); gpu1 is the one going bad
AMD = {
    "amd_gpu_junction_temperature": ("Current junction/hotspot temperature in Celsius", [[62, 63], [64, 71]]),
    "amd_gpu_edge_temperature": ("Current edge temperature in Celsius", [[0, 0], [0, 0]]),
    "amd_gpu_memory_temperature": ("Current memory temperature in Celsius", [[55, 55], [57, 58]]),
    "amd_gpu_power_usage": ("GPU Power usage in Watts", [[612, 618], [640, 645]]),
    "amd_gpu_package_power": ("Current socket power in Watts", [[612, 618], [640, 645]]),
    "amd_gpu_energy_consumed": ("Accumulated energy consumed by the GPU in uJ",
                                [[8.1234e13, 8.1252e13], [7.9e13, 7.9019e13]]),
    "amd_gpu_gfx_activity": ("Graphics engine usage in Percentage (0-100)", [[97, 98], [96, 97]]),
    "amd_gpu_umc_activity": ("Memory engine usage in Percentage (0-100)", [[41, 40], [39, 42]]),
    "amd_gpu_used_vram": ("Used VRAM memory of the GPU (in MB)", [[183265, 183265], [180001, 180001]]),
    "amd_gpu_free_vram": ("Free VRAM memory of the GPU (in MB)", [[13343, 13343], [16607, 16607]]),
    "amd_gpu_total_vram": ("Total VRAM memory of the GPU (in MB)", [[196608, 196608], [196608, 196608]]),
    "amd_pcie_replay_count": ("Total number of PCIe replays", [[0, 0], [12, 19]]),
    "amd_pcie_recovery_count": ("Total number of PCIe recoveries", [[0, 0], [0, 0]]),
    "amd_gpu_ecc_correct_total": ("Total Correctable error count", [[0, 0], [214, 229]]),
    "amd_gpu_ecc_uncorrect_total": ("Total Uncorrectable error count", [[0, 0], [0, 0]]),
    "amd_gpu_ecc_correct_umc": ("Correctable error count in UMC block", [[0, 0], [214, 229]]),
    "amd_gpu_ecc_uncorrect_umc": ("Uncorrectable error count in UMC block", [[0, 0], [0, 0]]),
    "amd_gpu_ecc_correct_xgmi_wafl": ("Correctable error count in XGMI WAFL block", [[0, 0], [0, 0]]),
    "amd_gpu_violation_socket_thermal_residency_accumulated": ("Socket thermal accumulated violation counter",
                                                               [[0, 0], [0, 0]]),
}
# (clock_index, clock_type, MHz of gpu0 / gpu1): gpu1's first XCD runs slow
AMD_CLOCKS = ((0, "GPU_CLOCK_TYPE_SYSTEM", 2100, 1420), (1, "GPU_CLOCK_TYPE_SYSTEM", 2098, 2098),
              (8, "GPU_CLOCK_TYPE_MEMORY", 1300, 1300), (9, "GPU_CLOCK_TYPE_VIDEO", 1000, 1000))

NPU_LABELS = ('container_name="",id="{i}",model_name="Ascend910B3",namespace="",pcie_bus_info="0000:{bus}:00.0",'
              'pod_name="",vdie_id="",instance="sn03-b01:8082",job="npu"')
NPU_BUS = ("c1", "c2")
# npu1 goes bad: HBM correctable errors, a failed temperature read (-1), unhealthy, a SeparateNPU fault code
# (0x80E18402), HCCS lane 1 unreadable (0xFFFFFFFF), its RoCE port down with FCS errors.
NPU = {
    "npu_chip_info_temperature": ("the npu temperature", [[58, 59], [61, -1]]),
    "npu_chip_info_hbm_temperature": ("the npu hbm temperature", [[52, 52], [54, 55]]),
    "npu_chip_info_power": ("the npu power", [[301.5, 305.2], [310.8, 312.0]]),
    "npu_chip_info_aicore_current_freq": ("the npu ai core current frequency, unit is 'MHz'", [[1800, 1800],
                                                                                            [1800, 1800]]),
    "npu_chip_info_utilization": ("the ai core utilization", [[95, 96], [94, 95]]),
    "npu_chip_info_hbm_used_memory": ("the npu hbm used memory", [[58000, 58000], [57000, 57000]]),
    "npu_chip_info_hbm_total_memory": ("the npu hbm total memory", [[65536, 65536], [65536, 65536]]),
    "npu_chip_info_health_status": ("the npu health status", [[1, 1], [1, 0]]),
    "npu_chip_info_hbm_ecc_single_bit_error_cnt": ("HBM Single Bit Error Count", [[0, 0], [3, 9]]),
    "npu_chip_info_hbm_ecc_double_bit_error_cnt": ("HBM Double Bit Error Count", [[0, 0], [0, 0]]),
    "npu_chip_info_error_code": ("the npu error code", [[0, 0], [0, 0x80E18402]]),
    "npu_chip_info_hccs_statistic_info_crc_err_cnt_1": ("crc error count for hccs 1", [[0, 0], [0xFFFFFFFF] * 2]),
    "npu_chip_info_link_status": ("the npu link status", [[1, 1], [1, 0]]),
    "npu_chip_link_up_num": ("the npu interface receive link-up num", [[1, 1], [1, 1]]),
    "npu_chip_info_rx_fcs_num": ("the npu network fcs receive number", [[0, 0], [5, 40]]),
}

NPU_MALFORMED = """\
# lines 2 and 8 are good, every other sample line has one defect (rejected with its line number); the file ends mid-line
npu_chip_info_temperature{id="0",model_name="Ascend910B3",instance="sn03-b01:8082"} 58 1772409630000
npu_chip_info_temperature{id="0",model_name="Ascend910B3",instance="sn03-b01:8082"} NaN 1772409660000
npu_chip_info_power{id="0",model_name="Ascend910B3",instance="sn03-b01:8082" 301 1772409660000
npu_chip_info_power{model_name="Ascend910B3",instance="sn03-b01:8082"} 301 1772409660000
npu_chip_info_hbm_temperature{id="0",model_name="Ascend910B3",instance="10.3.0.1:8082"} 52 1772409660000
npu_chip_info_utilization{id="0",model_name="Ascend910B3",instance="sn03-b01:8082"} 9x5 1772409660000
npu_chip_info_health_status{id="0",model_name="Ascend910B3",instance="sn03-b01:8082"} 1 1772409660000
npu_chip_info_power{id="0",model_name="Asc"""

# dmesg --time-format iso, as kept per host (<host>.dmesg); amdgpu RAS, a reset and the noise around them.
AMDGPU_DMESG = """\
2026-03-02T00:10:00,000000+00:00 amdgpu 0000:05:00.0: amdgpu: socket: 0, die: 0, 3 new correctable hardware \
errors detected in umc block
2026-03-02T00:10:00,000100+00:00 amdgpu 0000:05:00.0: amdgpu: socket: 0, die: 0, 217 correctable hardware \
errors detected in total in umc block
2026-03-02T00:11:00,000000+00:00 amdgpu 0000:05:00.0: amdgpu: 2 correctable hardware errors detected in umc \
block, no user action is needed.
2026-03-02T00:20:00,000000+00:00 amdgpu 0000:05:00.0: amdgpu: {7} socket: 0, die: 0, 1 new deferred hardware \
errors detected in umc block
2026-03-02T00:30:00,000000+00:00 amdgpu 0000:26:00.0: amdgpu: socket: 1, die: 0, 1 new uncorrectable hardware \
errors detected in xgmi_wafl block
2026-03-02T00:30:00,500000+00:00 amdgpu 0000:26:00.0: amdgpu: Uncorrectable hardware \
error(ERREVENT_ATHUB_INTERRUPT) detected!
2026-03-02T00:30:01,000000+00:00 amdgpu 0000:26:00.0: amdgpu: GPU reset begin!
2026-03-02T00:30:09,000000+00:00 amdgpu 0000:26:00.0: amdgpu: GPU reset(1) succeeded!
2026-03-02T00:40:00,000000+00:00 amdgpu 0000:05:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled seq=1, emitted seq=2
2026-03-02T00:41:00,000000+00:00 amdgpu 0000:05:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:24 vmid:8)
2026-03-02T00:42:00,000000+00:00 Out of memory: Killed process 4242 (python)
"""


# npu-smi info, as the 910B driver prints it (two rows per NPU); npu1 turns unhealthy in the second snapshot.
NPU_SMI = """\
+------------------------------------------------------------------------------------------------+
| npu-smi 24.1.rc2                 Version: 24.1.rc2                                             |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B3               | OK            | 301.5       58                0    / 0             |
| 0                         | 0000:C1:00.0  | 95          0    / 0          58000/ 65536         |
+===========================+===============+====================================================+
| 1     910B3               | {health:<14}| 310.8       {temp:<18}0    / 0             |
| 0                         | 0000:C2:00.0  | 94          0    / 0          57000/ 65536         |
+===========================+===============+====================================================+
+---------------------------+---------------+----------------------------------------------------+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| 0       0                 | 2461803       | python3                  | 54312                   |
| 1       0                 | 2461804       | python3                  | 53290                   |
+===========================+===============+====================================================+
"""


def amd_smi(k: int) -> dict:
    """``amd-smi metric --json`` (ROCm 7 form) for sn02-b01's two MI300X at scrape ``k``."""
    gpus = []
    for g in (0, 1):
        def v(name, unit=None, g=g):
            x = AMD[name][1][g][k]
            return {"value": x, "unit": unit} if unit else x
        gpus.append({
            "gpu": g,
            "usage": {"gfx_activity": v("amd_gpu_gfx_activity", "%"), "umc_activity": v("amd_gpu_umc_activity", "%")},
            "power": {"socket_power": v("amd_gpu_package_power", "W"), "gfx_voltage": "N/A"},
            "temperature": {"edge": "N/A", "hotspot": v("amd_gpu_junction_temperature", "C"),
                            "mem": v("amd_gpu_memory_temperature", "C")},
            "pcie": {"width": 16, "replay_count": v("amd_pcie_replay_count"), "l0_to_recovery_count": 0,
                     "nak_received_count": "N/A"},
            "ecc": {"total_correctable_count": v("amd_gpu_ecc_correct_total"),
                    "total_uncorrectable_count": v("amd_gpu_ecc_uncorrect_total"), "total_deferred_count": 0},
            "ecc_blocks": {"UMC": {"correctable_count": v("amd_gpu_ecc_correct_umc"), "uncorrectable_count": 0,
                                   "deferred_count": 0}},
            "energy": {"total_energy_consumption": {"value": AMD["amd_gpu_energy_consumed"][1][g][k] / 1e6,
                                                    "unit": "J"}},
            "mem_usage": {"used_vram": v("amd_gpu_used_vram", "MB"), "free_vram": v("amd_gpu_free_vram", "MB")},
        })
    return {"gpu_data": gpus}


def snapshots() -> str:
    """Envelopes of both tools' snapshots (scripts/capture-smi.sh writes them), then malformed records."""
    import json

    out = []
    for k, ts in enumerate(T):
        out.append(json.dumps({"ts": ts / 1000, "host": "sn02-b01", "tool": "amd-smi", "output": amd_smi(k)}))
        text = NPU_SMI.format(health="OK" if k == 0 else "Alarm", temp="61" if k == 0 else "NA")
        out.append(json.dumps({"ts": ts / 1000, "host": "sn03-b01", "tool": "npu-smi", "output": text}))
    # The same GPUs through the older rocm-smi (ROCm 6 keys "card:N"; one value in a one-element list).
    rocm = {f"card:{g}": {"Temperature (Sensor junction) (C)": [f"{AMD['amd_gpu_junction_temperature'][1][g][1]}.0"],
                          "Temperature (Sensor memory) (C)": f"{AMD['amd_gpu_memory_temperature'][1][g][1]}.0",
                          "Current Socket Graphics Package Power (W)": f"{AMD['amd_gpu_package_power'][1][g][1]}.0",
                          "GPU use (%)": str(AMD["amd_gpu_gfx_activity"][1][g][1]),
                          "VRAM Total Used Memory (B)": str(AMD["amd_gpu_used_vram"][1][g][1] * 2**20),
                          "PCIe Replay Count": str(AMD["amd_pcie_replay_count"][1][g][1]),
                          "sclk clock speed:": f"({AMD_CLOCKS[0][2 + g]}Mhz)", "Card Series": "AMD Instinct MI300X",
                          "Temperature (Sensor edge) (C)": "N/A"} for g in (0, 1)}
    rocm["system"] = {"Driver version": "6.8.5"}
    out.append(json.dumps({"ts": T[1] / 1000 + 5, "host": "sn02-b01", "tool": "rocm-smi", "output": rocm}))
    out += [
        '{"ts": 1772409690, "host": "sn02-b01", "tool": "amd-smi", "output": {"gpu_data": [{"gpu": 0, ',
        json.dumps({"ts": "yesterday", "host": "sn02-b01", "tool": "amd-smi", "output": []}),
        json.dumps({"ts": 1772409690, "host": "10.3.0.9", "tool": "npu-smi", "output": NPU_SMI}),
        json.dumps({"ts": 1772409690, "host": "sn02-b01", "tool": "nvidia-smi", "output": {}}),
        json.dumps({"ts": 1772409690, "host": "sn02-b01", "tool": "amd-smi",
                    "output": {"gpu_data": [{"gpu": 0, "power": {"socket_power": {"value": "high", "unit": "W"}}},
                                            {"power": {"socket_power": 5}}]}}),
        json.dumps({"ts": 1772409690, "host": "sn03-b01", "tool": "npu-smi", "output": "npu-smi: command failed"}),
    ]
    return "\n".join(out) + "\n"


def exposition(series: dict, labels: str, ids: tuple, label_args) -> list[str]:
    lines = []
    for name, (help_text, values) in series.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for k, ts in enumerate(T):
            for i in ids:
                value = values[i][k]
                text = str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else repr(float(value))
                lines.append(f"{name}{{{labels.format(**label_args(i))}}} {text} {ts}")
    return lines


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    amd = exposition(AMD, AMD_LABELS, (0, 1), lambda g: {"g": g})
    amd += ["# HELP amd_gpu_clock List of current GPU clock frequencies in MHz", "# TYPE amd_gpu_clock gauge"]
    for ts in T:
        for g in (0, 1):
            for idx, kind, *mhz in AMD_CLOCKS:
                amd.append(f'amd_gpu_clock{{{AMD_LABELS.format(g=g)},clock_index="{idx}",clock_type="{kind}"}} '
                           f"{mhz[g]} {ts}")
    amd += ["# HELP amd_gpu_nodes_total Number of GPUs in the node", "# TYPE amd_gpu_nodes_total gauge"]
    amd += [f'amd_gpu_nodes_total{{hostname="sn02-b01"}} 2 {ts}' for ts in T]
    (out / "amd-device-metrics-exporter.prom").write_text("\n".join(amd) + "\n")
    npu = exposition(NPU, NPU_LABELS, (0, 1), lambda i: {"i": i, "bus": NPU_BUS[i]})
    npu += ["# HELP machine_npu_nums Amount of npu installed on the machine.", "# TYPE machine_npu_nums gauge",
            f'machine_npu_nums{{instance="sn03-b01:8082",job="npu"}} 2 {T[0]}']
    (out / "npu-exporter.prom").write_text("\n".join(npu) + "\n")
    (out / "npu-exporter-malformed.prom").write_text(NPU_MALFORMED)
    (out / "sn02-b01.dmesg").write_text(AMDGPU_DMESG)
    (out / "smi-snapshots.jsonl").write_text(snapshots())


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "fixtures" / "exporters")
