#!/usr/bin/env python3
"""Write the bundled trace fixtures/traces/sn01-mini (deterministic; see fixtures/README.md).

Four H100 blades of one rack, 3 hours at 30 s: dcgm-exporter series (stock counter set plus the ECC
volatile totals) as a promtool dump, node_exporter InfiniBand series as concatenated Prometheus
scrapes, the kernel log as a journald JSON export, and one rasdaemon database. Three hard faults
and six confounders are injected; labels.jsonl lists every one. Levels follow AcmeTrace (A100 DCGM at
15 s; github.com/InternLM/AcmeTrace, docs/fleet-stats.md): busy GPUs 60-70 C at 380-450 W, idle ones 30-38 C at ~65 W.

Usage: python scripts/make_fixture_trace.py [OUT_DIR]
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import sys
import uuid
from pathlib import Path

import numpy as np

SEED = 20260302
T0 = 1772409600  # 2026-03-02T00:00:00Z
STEP = 30
STEPS = 360  # 3 h
NODES = [f"sn01-b0{i}" for i in range(1, 5)]
IPS = {n: f"10.0.1.{10 + i}" for i, n in enumerate(NODES, start=1)}
GPU_PCI = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
PORTS = [("mlx5_0", "0c", "ibp12s0"), ("mlx5_1", "2c", "ibp44s0"), ("mlx5_2", "8c", "ibp140s0"),
         ("mlx5_3", "ac", "ibp172s0")]
MODEL = "NVIDIA H100 80GB HBM3"
DRIVER = "550.90.07"

MIN = 60


def t(minutes: float) -> int:
    return T0 + int(minutes * MIN)


# Fault and confounder plan (minutes from the start).
HBM = ("sn01-b02", 5)                 # SBE climbing from 40, Xid 63 at 75, DBE + Xid 48 at 110
OFFBUS = ("sn01-b03", 2)              # PCIe replays and AER from 60, Xid 79 at 130, metrics vanish
LINK = ("sn01-b04", "mlx5_1")         # symbol errors from 30, recoveries from 100, link down at 150
APP_XID_NODE = "sn01-b01"             # crashing job: Xid 13/31/43 on gpu0-3 at 50 and 80
REBOOT = ("sn01-b01", 140, 146)       # exporters gone 140..146, counters reset after
GAP = ("sn01-b04", 100, 104)          # dcgm-exporter gap only
ONE_SBE = ("sn01-b01", 6, 30)         # a single correctable ECC error
HALF_NODE = "sn01-b04"                # job uses gpu0-3 only
WARM_SLOT = None


def main(out: Path) -> None:
    rng = np.random.default_rng(SEED)
    out.mkdir(parents=True, exist_ok=True)
    times = T0 + STEP * np.arange(1, STEPS + 1)
    minutes = (times - T0) / MIN
    uuids = {(n, g): f"GPU-{uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | int(rng.integers(0, 2**63)))}"
             for n in NODES for g in range(8)}

    def down(node: str, ts: np.ndarray) -> np.ndarray:
        """True where a node's exporters are down (reboot)."""
        m = np.zeros(len(ts), dtype=bool)
        if node == REBOOT[0]:
            m |= (ts > t(REBOOT[1])) & (ts <= t(REBOOT[2]))
        return m

    # ---------------- dcgm-exporter: one series after another (promtool dump order) ----------------
    dcgm_lines: list[str] = []
    help_type = {
        "DCGM_FI_DEV_SM_CLOCK": ("gauge", "SM clock frequency (in MHz)."),
        "DCGM_FI_DEV_MEMORY_TEMP": ("gauge", "Memory temperature (in C)."),
        "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C)."),
        "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("counter", "Total number of PCIe retries."),
        "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
        "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB)."),
        "DCGM_FI_DEV_XID_ERRORS": ("gauge", "Value of the last XID error encountered."),
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("counter", "Total number of single-bit volatile ECC errors."),
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("counter", "Total number of double-bit volatile ECC errors."),
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("counter", "Number of remapped rows for correctable errors"),
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("counter", "Number of remapped rows for uncorrectable errors"),
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("gauge", "Whether remapping of rows has failed"),
    }
    series: dict[str, list[tuple[str, np.ndarray, np.ndarray]]] = {m: [] for m in help_type}
    journal: list[dict] = []

    def kmsg(ts: float, node: str, message: str, ident: str = "kernel", transport: str = "kernel") -> None:
        journal.append({"ts": ts, "node": node, "msg": message, "ident": ident, "transport": transport})

    for node in NODES:
        gone = down(node, times)
        gap = (times > t(GAP[1])) & (times <= t(GAP[2])) if node == GAP[0] else np.zeros(STEPS, bool)
        for g in range(8):
            busy = np.ones(STEPS, dtype=bool)
            if node == HALF_NODE and g >= 4:
                busy[:] = False
            if node == APP_XID_NODE and g < 4:
                busy &= ~(((minutes > 50) & (minutes <= 55)) | ((minutes > 80) & (minutes <= 85)))
            if node == REBOOT[0]:
                busy &= ~((minutes > REBOOT[1] - 2) & (minutes <= REBOOT[2] + 4))
            util = np.where(busy, rng.uniform(88, 100, STEPS), 0.0)
            power = np.where(busy, rng.normal(415, 18, STEPS), rng.normal(66, 3, STEPS))
            slot = 1.5 * (g % 4)
            temp = np.where(busy, 55 + slot + (power - 380) * 0.06, 31 + slot * 0.5) + rng.normal(0, 0.8, STEPS)
            hbm = temp + np.where(busy, 9, 4) + rng.normal(0, 0.6, STEPS)
            clock = np.where(busy, 1980 - rng.integers(0, 3, STEPS) * 15, 345)
            fb = np.where(busy, 71000 + rng.integers(0, 2000, STEPS), 0)
            replay = np.zeros(STEPS)
            sbe = np.zeros(STEPS)
            dbe = np.zeros(STEPS)
            rr_c = np.zeros(STEPS)
            rr_u = np.zeros(STEPS)
            xid = np.zeros(STEPS)
            valid = ~gone & ~gap
            key = (node, g)
            pci = f"00000000:{GPU_PCI[g].upper()}:00.0"
            kpci = f"0000:{GPU_PCI[g]}:00"
            if key == HBM:
                ramp = np.clip((minutes - 40) / 70, 0, None)
                rate = np.where(minutes > 40, 2 + 60 * ramp ** 2, 0)  # errors per tick
                sbe = np.cumsum(rng.poisson(rate))
                rr_c = np.where(minutes > 75, 1, 0) + np.where(minutes > 95, 1, 0)
                dbe = np.where(minutes > 110, 1, 0)
                rr_u = np.where(minutes > 110, 1, 0)
                xid = np.where(minutes > 110, 48, np.where(minutes > 75, 63, 0))
                kmsg(t(75) + 7, node, f"NVRM: Xid (PCI:{kpci}): 63, pid='<unknown>', name=<unknown>, Row Remapper: "
                                      "New row (0x000000000001a2c0) marked for remapping, reset gpu to activate.")
                kmsg(t(95) + 3, node, f"NVRM: Xid (PCI:{kpci}): 63, pid='<unknown>', name=<unknown>, Row Remapper: "
                                      "New row (0x000000000001a2c8) marked for remapping, reset gpu to activate.")
                kmsg(t(110) + 12, node, f"NVRM: Xid (PCI:{kpci}): 48, pid=48211, name=python3, An uncorrectable "
                                        "double bit error (DBE) has been detected on GPU in the framebuffer at "
                                        "partition 6, subpartition 0.")
                kmsg(t(110) + 12, node, f"NVRM: GPU at PCI:{kpci}: {uuids[key]}")
                kmsg(t(110) + 12, node, "NVRM: GPU Board Serial Number: 1654523001234")
            if key == OFFBUS:
                ramp = np.clip((minutes - 60) / 70, 0, None)
                replay = np.cumsum(rng.poisson(np.where(minutes > 60, 3 + 90 * ramp ** 2, 0.02)))
                valid &= minutes <= 130
                for m in np.arange(62, 130, 4.0):
                    kmsg(t(m) + 5, node, f"nvidia 0000:{GPU_PCI[g]}:00.0: AER: PCIe Bus Error: severity=Corrected, "
                                         "type=Physical Layer, (Receiver ID)")
                    kmsg(t(m) + 5, node, f"nvidia 0000:{GPU_PCI[g]}:00.0:   device [10de:2330] error status/mask="
                                         "00000001/0000e000")
                kmsg(t(130) + 17, node, f"NVRM: Xid (PCI:{kpci}): 79, pid=0, GPU has fallen off the bus.")
                kmsg(t(130) + 17, node, f"NVRM: GPU {kpci}.0: GPU has fallen off the bus.")
                kmsg(t(130) + 17, node, "NVRM: A GPU crash dump has been created. If possible, please run")
            if key == (ONE_SBE[0], ONE_SBE[1]):
                sbe = np.where(minutes > ONE_SBE[2], 1, 0)
            if node == APP_XID_NODE and g < 4:
                for start, pid in ((50, 90311), (80, 91877)):
                    kmsg(t(start) + 2, node, f"NVRM: Xid (PCI:{kpci}): 13, pid={pid}, name=python3, Graphics SM "
                                             "Warp Exception on (GPC 1, TPC 3, SM 0): Out Of Range Address")
                    kmsg(t(start) + 2, node, f"NVRM: Xid (PCI:{kpci}): 31, pid={pid}, name=python3, Ch 00000018, "
                                             "intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_3 faulted @ "
                                             "0x7f3a_c8000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ")
                    kmsg(t(start) + 3, node, f"NVRM: Xid (PCI:{kpci}): 43, pid={pid}, name=python3, Ch 00000018")
                xid = np.where(((minutes > 50) & (minutes <= REBOOT[1])), 43, 0)
            if node == REBOOT[0]:  # counters reset by the reboot
                after = minutes > REBOOT[2]
                replay = np.where(after, 0, replay)
                sbe = np.where(after, 0, sbe)
            labels = (f'gpu="{g}",UUID="{uuids[key]}",pci_bus_id="{pci}",device="nvidia{g}",modelName="{MODEL}",'
                      f'Hostname="{node}",DCGM_FI_DRIVER_VERSION="{DRIVER}",instance="{IPS[node]}:9400",job="dcgm"')
            for name, values in (
                ("DCGM_FI_DEV_SM_CLOCK", clock), ("DCGM_FI_DEV_MEMORY_TEMP", np.round(hbm)),
                ("DCGM_FI_DEV_GPU_TEMP", np.round(temp)), ("DCGM_FI_DEV_POWER_USAGE", np.round(power, 3)),
                ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", replay), ("DCGM_FI_DEV_GPU_UTIL", np.round(util)),
                ("DCGM_FI_DEV_FB_USED", fb), ("DCGM_FI_DEV_XID_ERRORS", xid),
                ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", sbe), ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", dbe),
                ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", rr_c), ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", rr_u),
                ("DCGM_FI_DEV_ROW_REMAP_FAILURE", np.zeros(STEPS)),
            ):
                series[name].append((labels, times[valid], np.asarray(values, dtype=float)[valid]))
    for name, (typ, help_text) in help_type.items():
        dcgm_lines.append(f"# HELP {name} {help_text}")
        dcgm_lines.append(f"# TYPE {name} {typ}")
        for labels, ts, vals in series[name]:
            for ti, v in zip(ts, vals):
                dcgm_lines.append(f"{name}{{{labels}}} {v:g} {ti}")
    dcgm_lines.append("# EOF")
    with gzip.open(out / "dcgm-exporter.om.gz", "wt", compresslevel=9) as fh:
        fh.write("\n".join(dcgm_lines) + "\n")

    # ---------------- node_exporter: concatenated scrapes, Prometheus text, ms timestamps -----------
    port_state: dict[tuple[str, str], dict[str, np.ndarray]] = {}
    for node in NODES:
        for dev, pci, netdev in PORTS:
            c = {k: np.zeros(STEPS) for k in ("symbol", "recovery", "downed", "rcv_err", "xmit_disc")}
            c["rx"] = np.cumsum(rng.uniform(3.0e11, 3.6e11, STEPS) * STEP / 30)
            c["tx"] = np.cumsum(rng.uniform(3.0e11, 3.6e11, STEPS) * STEP / 30)
            c["xmit_disc"] = np.cumsum(rng.poisson(0.05, STEPS))
            c["state"] = np.full(STEPS, 4.0)
            c["phys"] = np.full(STEPS, 5.0)
            if (node, dev) == LINK:
                ramp = np.clip((minutes - 30) / 120, 0, None)
                c["symbol"] = np.cumsum(rng.poisson(np.where(minutes > 30, 1 + 25 * ramp ** 2, 0)))
                c["recovery"] = np.cumsum(rng.poisson(np.where(minutes > 100, 0.8, 0)))
                c["downed"] = np.where(minutes > 150, 1, 0).astype(float)
                c["state"] = np.where(minutes > 150, 1.0, 4.0)
                c["phys"] = np.where(minutes > 150, 2.0, 5.0)
                c["rx"] = np.where(minutes > 150, c["rx"][np.searchsorted(minutes, 150)], c["rx"])
                kmsg(t(150) + 9, node, f"mlx5_core 0000:{pci}:00.0 {netdev}: Link down")
            if node == REBOOT[0]:
                after = minutes > REBOOT[2]
                for k in ("rx", "tx", "xmit_disc"):
                    base = c[k][np.searchsorted(minutes, REBOOT[2], side="right")]
                    c[k] = np.where(after, c[k] - base + rng.uniform(1e9, 2e9), c[k])
            port_state[(node, dev)] = c
    node_lines: list[str] = []
    metrics = [
        ("node_infiniband_symbol_error_total", "counter", "symbol"),
        ("node_infiniband_link_error_recovery_total", "counter", "recovery"),
        ("node_infiniband_link_downed_total", "counter", "downed"),
        ("node_infiniband_port_errors_received_total", "counter", "rcv_err"),
        ("node_infiniband_port_discards_transmitted_total", "counter", "xmit_disc"),
        ("node_infiniband_port_data_received_bytes_total", "counter", "rx"),
        ("node_infiniband_port_data_transmitted_bytes_total", "counter", "tx"),
        ("node_infiniband_state_id", "gauge", "state"),
        ("node_infiniband_physical_state_id", "gauge", "phys"),
    ]
    for i, ts in enumerate(times):
        for node in NODES:
            if down(node, np.array([ts]))[0]:
                continue
            for name, typ, key in metrics:
                node_lines.append(f"# HELP {name} InfiniBand {key} (node_exporter infiniband collector).")
                node_lines.append(f"# TYPE {name} {typ}")
                for dev, _, _ in PORTS:
                    v = port_state[(node, dev)][key][i]
                    node_lines.append(f'{name}{{device="{dev}",instance="{IPS[node]}:9100",job="node",port="1"}} '
                                      f"{v:.17g} {ts * 1000}")
    with gzip.open(out / "node-exporter.prom.gz", "wt", compresslevel=9) as fh:
        fh.write("\n".join(node_lines) + "\n")

    # ---------------- kernel log: journald JSON export --------------------------------------------
    for node in NODES:  # everyday noise that must yield no event
        kmsg(t(12) + 41, node, "systemd[1]: Started Session 42 of user slurm.", "systemd", "journal")
    kmsg(t(33) + 1, "sn01-b03", "python3[77120]: segfault at 0 ip 00007f1c2a4b5e10 sp 00007ffd0d6e1a30 error 4 in "
                               "libc.so.6[7f1c2a400000+195000]")
    kmsg(t(47) + 9, "sn01-b02", "Out of memory: Killed process 66120 (python3) total-vm:512340112kB, "
                               "anon-rss:498113004kB, file-rss:0kB, shmem-rss:0kB, UID:1001 pgtables:981232kB "
                               "oom_score_adj:0")
    kmsg(t(48) + 2, "sn01-b02", "sn01-b02:66120:66344 [3] NCCL INFO Channel 02/32 : 3[3] -> 4[4] via P2P/IPC",
         "python3", "stdout")
    kmsg(t(REBOOT[2]) + 20, REBOOT[0], "Linux version 6.8.0-49-generic (buildd@lcy02-amd64-103) #49-Ubuntu SMP")
    for _dev, pci, netdev in PORTS:
        kmsg(t(REBOOT[2]) + 25, REBOOT[0], f"mlx5_core 0000:{pci}:00.0 {netdev}: Link up")
    journal.sort(key=lambda r: (r["ts"], r["node"], r["msg"]))
    with open(out / "kernel.journal.json", "w") as fh:
        for seq, rec in enumerate(journal):
            obj = {
                "__CURSOR": f"s=6f1b2c;i={seq + 1:x};b=0;m={seq:x};t={int(rec['ts'] * 1e6):x};x=0",
                "__REALTIME_TIMESTAMP": str(int(rec["ts"] * 1_000_000)),
                "__MONOTONIC_TIMESTAMP": str(int((rec["ts"] - T0 + 86400) * 1_000_000)),
                "_BOOT_ID": "3f1e0c2b9a8d4e5f8a7b6c5d4e3f2a1b",
                "_TRANSPORT": rec["transport"],
                "PRIORITY": "3" if "Xid" in rec["msg"] else "6",
                "SYSLOG_FACILITY": "0" if rec["transport"] == "kernel" else "3",
                "SYSLOG_IDENTIFIER": rec["ident"],
                "_HOSTNAME": rec["node"],
                "MESSAGE": rec["msg"],
            }
            fh.write(json.dumps(obj) + "\n")

    # ---------------- rasdaemon: one isolated corrected DIMM error on sn01-b02 ---------------------
    rasdir = out / "rasdaemon"
    rasdir.mkdir(exist_ok=True)
    db = rasdir / "sn01-b02.db"
    db.unlink(missing_ok=True)
    conn = sqlite3.connect(db)
    conn.executescript(
        "CREATE TABLE mc_event (id INTEGER PRIMARY KEY, timestamp TEXT, err_count INTEGER, err_type TEXT, "
        "err_msg TEXT, label TEXT, mc INTEGER, top_layer INTEGER, middle_layer INTEGER, lower_layer INTEGER, "
        "address INTEGER, grain INTEGER, syndrome INTEGER, driver_detail TEXT);"
        "CREATE TABLE aer_event (id INTEGER PRIMARY KEY, timestamp TEXT, dev_name TEXT, err_type TEXT, err_msg TEXT);"
        "CREATE TABLE extlog_event (id INTEGER PRIMARY KEY, timestamp TEXT, etype INTEGER, error_count INTEGER, "
        "severity INTEGER, address INTEGER, fru_id BLOB, fru_text TEXT, cper_data BLOB);"
        "CREATE TABLE mce_record (id INTEGER PRIMARY KEY, timestamp TEXT, mcgcap INTEGER, mcgstatus INTEGER, "
        "status INTEGER, addr INTEGER, misc INTEGER, ip INTEGER, tsc INTEGER, walltime INTEGER, cpu INTEGER, "
        "cpuid INTEGER, apicid INTEGER, socketid INTEGER, cs INTEGER, bank INTEGER, cpuvendor INTEGER, "
        "bank_name TEXT, error_msg TEXT, mcgstatus_msg TEXT, mcistatus_msg TEXT, mcastatus_msg TEXT, "
        "user_action TEXT, mc_location TEXT);"
    )
    conn.execute(
        "INSERT INTO mc_event (timestamp, err_count, err_type, err_msg, label, mc, top_layer, middle_layer, "
        "lower_layer, address, grain, syndrome, driver_detail) VALUES "
        "('2026-03-02 01:05:11 +0000', 1, 'Corrected', 'memory read error', 'CPU_SrcID#0_MC#0_Chan#1_DIMM#0', "
        "0, 1, 0, -1, 49283072, 32, 0, 'APEI location: node:0 card:1 module:0')"
    )
    conn.commit()
    conn.close()

    # ---------------- topology and labels ----------------------------------------------------------
    topo = ["racks:", "  - name: r01", "    supernode: sn01", "    cooling: cdu01", "    nodes:"]
    for node in NODES:
        topo += [f"      - name: {node}", f"        scheduler_name: node{node[-1]}",
                 f'        aliases: ["{IPS[node]}"]', "        accelerators:"]
        for g in range(8):
            topo.append(f'          - {{index: {g}, pci_bus_id: "00000000:{GPU_PCI[g].upper()}:00.0", '
                        f'uuid: "{uuids[(node, g)]}", model: "{MODEL}"}}')
        topo.append("        ports:")
        for i, (dev, pci, netdev) in enumerate(PORTS):
            topo.append(f'          - {{device: {dev}, port: 1, pci: "0000:{pci}:00.0", netdev: {netdev}, '
                        f"switchport: leaf0{i + 1}/{NODES.index(node) + 1}}}")
    (out / "topology.yaml").write_text("\n".join(topo) + "\n")
    labels = [
        {"entity": f"{HBM[0]}/gpu{HBM[1]}", "kind": "accelerator", "fault": "hbm_degradation",
         "onset": t(40), "failure": t(110) + 12},
        {"entity": f"{OFFBUS[0]}/gpu{OFFBUS[1]}", "kind": "accelerator", "fault": "gpu_off_bus",
         "onset": t(60), "failure": t(130) + 17},
        {"entity": f"{LINK[0]}/{LINK[1]}:1", "kind": "port", "fault": "link_degradation",
         "onset": t(30), "failure": t(150) + 9},
        {"entity": APP_XID_NODE, "kind": "node", "fault": "benign_application_xid", "onset": t(50), "failure": t(81)},
        {"entity": REBOOT[0], "kind": "node", "fault": "benign_reboot", "onset": t(REBOOT[1]),
         "failure": t(REBOOT[2] + 10)},
        {"entity": GAP[0], "kind": "node", "fault": "benign_exporter_gap", "onset": t(GAP[1]), "failure": t(GAP[2])},
        {"entity": f"{ONE_SBE[0]}/gpu{ONE_SBE[1]}", "kind": "accelerator", "fault": "benign_single_correctable_ecc",
         "onset": t(ONE_SBE[2]), "failure": t(ONE_SBE[2]) + STEP},
        {"entity": "sn01-b02", "kind": "node", "fault": "benign_single_edac_ce", "onset": t(65) + 11,
         "failure": t(65) + 11 + STEP},
        {"entity": HALF_NODE, "kind": "node", "fault": "benign_partial_node_job", "onset": T0,
         "failure": int(times[-1])},
    ]
    (out / "labels.jsonl").write_text("".join(json.dumps(x) + "\n" for x in labels))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "fixtures/traces/sn01-mini"))
