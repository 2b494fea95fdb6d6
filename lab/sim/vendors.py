"""Accelerator vendors in the simulator: ids, physics, what each exporter publishes, and each fault's signature.

The fault templates describe a fault in canonical metrics (which every vendor's exporter maps to, see
``daemon/ingest/names``) and in NVIDIA's kernel lines. A vendor profile re-expresses those lines the way its own
stack reports the same fact:

* **AMD** (Instinct, and Hygon DCUs on the same ROCm stack): the amdgpu driver's RAS lines. Uncorrectable
  memory errors (Xid 48, 64, 95) are ``... new uncorrectable hardware errors detected in umc block``, a
  remapped row or contained error (63, 94) a ``deferred`` one, an NVLink error (74) an uncorrectable error in
  the ``xgmi_wafl`` block, a GPU lost from the bus (79) the fatal ``ERREVENT_ATHUB_INTERRUPT`` and a failed
  reset; application faults (13, 31, 43) a GPU page fault, which is no RAS event. AER lines name the amdgpu
  driver.
* **GB200** (NVIDIA Grace-Blackwell, NVLink 5): NVIDIA's own lines, but NVLink 5 serves none of the DL CRC, replay
  and recovery counters DCGM's older NVLink fields read (unsupported there): its exporter publishes the link's
  errors left after FEC (DCGM field 1219, ``DCGM_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS``) where an H100's CRC flit
  errors stand, and its successful link recoveries (1211), which the simulator draws from a fault's errors (a
  recovery for a share of them, the share drawn per fleet: no public source gives it) and, for a healthy GPU, at
  the rate a real fleet bounds: a GB200 link that went down had counted 505 recoveries over five days where the
  5,759 healthy links swept with it counted none (marin-community/marin issue 9086). An NVLink error the H100
  reports as Xid 74 is one of NVLink 5's Xid 149 lines, which one the simulator cannot know: for half of the faulty
  GPUs (by a hash of the GPU, no random draw) the link going down, NETIR_LINK_EVT Fatal (the decode sheet's
  NETIR_LINK_DOWN row: Link Fatal, RESET_GPU, investigate the link's signal integrity), for the other half its error
  rate over the driver's threshold, NETIR_BER_EVENT Nonfatal (IGNORE, investigate the link's cables), which leaves
  the fault to the counters to find; the IntrInfo is the sheet's V1 pattern, the driver being R570.
* **Ascend**: no kernel lines. npu-exporter reports the NPU's active fault codes
  (``npu_chip_info_error_code``); each Xid becomes a code of the MindCluster handling level such a fault gets
  (a hard fault: SeparateNPU or RestartNPU; a remapped row: SubHealthFault; an application fault:
  RestartBusiness). The codes are real catalog codes of that level, not claimed to be the exact code
  the hardware would raise for that fault. AER lines name ``drv_pcie_host`` (the Ascend driver's PCIe host
  module) as the device's driver; the AER reader keys on the address, not the name.

Physics: board power and clocks per model from the vendors' data sheets (MI300X 750 W, 2,100 MHz;
Ascend 910B about 400 W at 1,800 MHz AI core clock; H100 SXM 700 W but drawing ~430 W under the
AcmeTrace-calibrated load of the NVIDIA profile).
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

# Canonical accelerator metrics each vendor's exporter publishes (besides what every one does).
_COMMON = frozenset({"gpu_temp_c", "hbm_temp_c", "power_w", "sm_clock_mhz", "gpu_util_pct", "fb_used_mib",
                     "ecc_sbe_total", "ecc_dbe_total"})


@dataclass(frozen=True)
class VendorProfile:
    """One vendor's accelerators as the simulator renders them."""

    name: str
    prefix: str  # accelerator id prefix: gpu | npu
    model: str
    port_device: str  # the node port's device, formatted with the port's index
    exporter: str
    p_idle: float
    p_peak: float
    clock_busy: float
    clock_idle: float
    fb_total_mib: float
    metrics: frozenset[str]  # canonical accelerator metrics published (stock and full profiles alike)
    renames: tuple[tuple[str, str], ...] = ()  # engine metric -> this vendor's canonical metric
    port_metrics: frozenset[str] | None = None  # None: node_exporter's InfiniBand set
    port_renames: tuple[tuple[str, str], ...] = ()
    sources: tuple[tuple[str, str], ...] = ()  # canonical metric -> the exporter field it is published as, where
    # the name table's first row for it is another generation's field
    driver: str = "550.90.07"  # the driver version its exporter and lines report

    def publishes(self, metric: str, profile: str, full_only: frozenset[str], never: frozenset[str]) -> bool:
        """Whether this vendor's exporter publishes the engine's accelerator metric in ``profile``."""
        if self.name == "nvidia":
            return (profile == "full" or metric not in full_only) and metric not in never
        return metric in self.metrics

    def publishes_port(self, metric: str) -> bool:
        return self.port_metrics is None or metric in self.port_metrics

    def canonical(self, metric: str) -> str:
        """The canonical name this vendor's series of an engine metric maps to (``daemon/ingest/names``)."""
        return dict(self.renames + self.port_renames).get(metric, metric)


NVIDIA = VendorProfile("nvidia", "gpu", "NVIDIA H100 80GB HBM3", "mlx5_{p}", "dcgm-exporter", 66.0, 430.0, 1980.0,
                       345.0, 81559.0, frozenset())
AMD = VendorProfile("amd", "gpu", "AMD Instinct MI300X", "mlx5_{p}", "amd-device-metrics-exporter", 140.0, 720.0,
                    2100.0, 500.0, 196608.0,
                    _COMMON | {"mem_clock_mhz", "mem_copy_util_pct", "fb_free_mib", "energy_mj_total",
                               "pcie_replay_total", "nvlink_crc_flit_total"},
                    (("nvlink_crc_flit_total", "xgmi_ce_total"),))
# An NPU's own RoCE port, as npu-exporter reports it: link status, link-ups (one per recovery from a down),
# FCS errors (the physical layer's, standing for InfiniBand's symbol errors) and RoCE receive errors.
# npu-exporter has no PCIe error counter (only bandwidth): the host kernel's per-device AER counter
# (sysfs aer_dev_correctable, read by raswarden's sysfs collector) stands for the replays.
ASCEND = VendorProfile("ascend", "npu", "Ascend910B3", "hccn{p}", "npu-exporter", 90.0, 390.0, 1800.0, 1800.0, 65536.0,
                       _COMMON | {"npu_error_code_0", "nvlink_crc_flit_total", "pcie_replay_total"},
                       (("nvlink_crc_flit_total", "hccs_crc_lane1_total"),
                        ("pcie_replay_total", "aer_correctable_total")),
                       frozenset({"port_state", "link_downed_total", "symbol_error_total", "rcv_errors_total"}),
                       (("symbol_error_total", "rcv_errors_total"), ("rcv_errors_total", "roce_rx_err_pkt_total")))
# GB200 (one GPU of a Grace-Blackwell superchip): 1,200 W board power; under the same AcmeTrace-calibrated load as
# the H100 profile (430 of 700 W) about 740 W; 189,471 MiB of HBM3e as nvidia-smi reports a GB200's (assumed from
# the 186 GB NVIDIA states). Its exporter publishes what an H100's does but NVLink 5's counters (module docstring).
GB200 = VendorProfile("gb200", "gpu", "NVIDIA GB200", "mlx5_{p}", "dcgm-exporter", 160.0, 740.0, 1965.0, 345.0,
                      189471.0,
                      _COMMON | {"mem_clock_mhz", "mem_copy_util_pct", "fb_free_mib", "energy_mj_total",
                                 "pcie_replay_total", "row_remap_correctable_total", "row_remap_uncorrectable_total",
                                 "row_remap_failure", "xid_last", "throttle_thermal", "nvlink_crc_flit_total",
                                 "nvlink_recovery_total"},
                      (("nvlink_crc_flit_total", "nvlink_effective_error_total"),),
                      sources=(("nvlink_recovery_total", "DCGM_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS"),),
                      driver="570.133.20")
VENDORS = {v.name: v for v in (NVIDIA, AMD, ASCEND, GB200)}

_XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+)(?:, (.*))?$")
_NV_GONE = re.compile(r"NVRM: GPU \S+: GPU has fallen off the bus")
_AER_DRIVER = re.compile(r"^nvidia ")

# Xid -> amdgpu lines for the same fact ({pci} is the full PCI address).
_UMC_UE = "amdgpu {pci}: amdgpu: socket: 0, die: 0, 1 new uncorrectable hardware errors detected in umc block"
_UMC_DE = "amdgpu {pci}: amdgpu: socket: 0, die: 0, 1 new deferred hardware errors detected in umc block"
AMD_LINES: dict[int, tuple[str, ...]] = {
    48: (_UMC_UE,), 64: (_UMC_UE,), 95: (_UMC_UE,), 63: (_UMC_DE,), 94: (_UMC_DE,),
    74: ("amdgpu {pci}: amdgpu: socket: 0, die: 0, 1 new uncorrectable hardware errors detected in xgmi_wafl "
         "block",),
    79: ("amdgpu {pci}: amdgpu: Uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!",
         "amdgpu {pci}: amdgpu: GPU reset(1) failed"),
    13: ("amdgpu {pci}: amdgpu: [gfxhub] page fault (src_id:0 ring:24 vmid:8 pasid:32769)",),
    31: ("amdgpu {pci}: amdgpu: [gfxhub] page fault (src_id:0 ring:24 vmid:8 pasid:32769)",),
    43: ("amdgpu {pci}: amdgpu: ring gfx_0.0.0 timeout, signaled seq=1042, emitted seq=1043",),
}
# NVLink 5's words for an NVLink error (Xid 74 on an H100), in the lines' shape (fixtures/real/quoted/gpud-*): the link
# going down (NETIR_LINK_DOWN's V1 IntrInfo, reason bits 000010: investigate the link's signal integrity) or its error
# rate over the driver's threshold (NETIR_BER_EVENT's, error status 1).
_NVLINK5_LINES = (
    "NVRM: Xid (PCI:{pci_xid}): 149, NETIR_LINK_EVT Fatal XC0 i0 Link {link:02d} (0x002001c6 0x00000000 0x00000000 "
    "0x00000000 0x00000000 0x00000000)",
    "NVRM: Xid (PCI:{pci_xid}): 149, NETIR_BER_EVENT Nonfatal XC0 i0 Link {link:02d} (0x00000226 0x00000001 "
    "0x00000000 0x00000000 0x00000000 0x00000000)")
_LINK = re.compile(r"[Ll]ink (\d+)")
# Xid -> an Ascend fault code of the MindCluster level the same fault gets (detectors/catalogs).
SEPARATE, RESTART_NPU, FREE_RESTART, SUB_HEALTH, RESTART_BUSINESS = (0x80E18402, 0x80E18008, 0x8C0E4E00,
                                                                     0x80E18405, 0x8C204E00)
ASCEND_CODES: dict[int, int] = {48: SEPARATE, 64: SEPARATE, 95: SEPARATE, 79: RESTART_NPU, 74: RESTART_NPU,
                                63: SUB_HEALTH, 94: SUB_HEALTH, 13: RESTART_BUSINESS, 31: RESTART_BUSINESS,
                                43: RESTART_BUSINESS}


def render_line(vendor: VendorProfile, line: str, part: str = "") -> list[str] | int | None:
    """An NVIDIA kernel line as ``vendor`` reports the same fact: kernel lines, an Ascend fault code, or None
    (nothing to report). ``part`` (the GPU's id) picks among a vendor's ways of saying it where the simulator cannot
    know which one the hardware takes (GB200's NVLink errors), the same way for the same GPU every time."""
    if vendor.name == "nvidia":
        return [line]
    m = _XID.search(line)
    if vendor.name == "gb200":  # NVIDIA's lines, but NVLink 5's for an NVLink error
        if not m or int(m.group(2)) != 74:
            return [line]
        link = _LINK.search(m.group(3) or "")
        said = _NVLINK5_LINES[zlib.crc32(part.encode()) % len(_NVLINK5_LINES)]
        return [line[:m.start()] + said.format(pci_xid=m.group(1), link=int(link.group(1)) if link else 0)]
    if m:
        code, text = int(m.group(2)), (m.group(3) or "").lower()
        if code == 154:  # the driver's recovery action: reboot (hard) or reset
            code = 79 if "reboot" in text else 63
        pci = m.group(1).lower()
        pci = pci if pci.count(":") == 2 and "." in pci else f"{pci}.0"
        if vendor.name == "ascend":
            return ASCEND_CODES.get(code)
        return [x.format(pci=pci) for x in AMD_LINES.get(code, ())] or None
    if _NV_GONE.search(line):
        return None
    if _AER_DRIVER.search(line):
        return [_AER_DRIVER.sub("amdgpu " if vendor.name == "amd" else "drv_pcie_host ", line)]
    return [line]
