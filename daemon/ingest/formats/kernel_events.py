"""Hardware RAS facts in kernel log messages: NVIDIA Xid and NVSwitch SXid, amdgpu RAS, PCIe AER, EDAC, MCE,
mlx5 link.

:func:`parse_kernel_message` takes one message (without the syslog/journald envelope) and returns a
:class:`KernelEvent` or None. Everything that is not hardware RAS (OOM kills, segfaults, NCCL
chatter, the driver's dump lines that follow an Xid) returns None.

Line formats follow what the drivers print, e.g. (NVIDIA, "Xid Errors", docs.nvidia.com/deploy/xid-errors):
``NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.``; the kernel's AER driver
(drivers/pci/pcie/aer.c): ``nvidia 0000:3b:00.0: AER: PCIe Bus Error: severity=Corrected, type=Physical
Layer, (Receiver ID)``; EDAC (drivers/edac/edac_mc.c): ``EDAC MC0: 1 CE memory read error on ...``;
MCE (arch/x86/kernel/cpu/mce): ``mce: [Hardware Error]: CPU 3: Machine Check: 0 Bank 5: ...``;
mlx5 (en_main.c ``mlx5e_update_carrier``): ``mlx5_core 0000:0c:00.0 ibp12s0: Link down``; amdgpu RAS
(amdgpu_ras.c ``amdgpu_ras_error_print_error_data``, the RAS core's ``aca_report_ecc_info``):
``amdgpu 0000:05:00.0: amdgpu: socket: 0, die: 0, 3 new correctable hardware errors detected in umc block``
(older kernels: ``3 correctable hardware errors detected in umc block, no user action is needed.``; the
cumulative ``... detected in total in ...`` lines repeat counts and are not events), the fatal-error
interrupt's ``uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!`` (as amdgpu_ras.c prints it; either
case is read) and amdgpu_device.c's ``GPU reset begin!`` and ``GPU reset(2) failed`` (``succeeded!`` ends a reset
already reported); GPU page faults (``[gfxhub] page fault``, gmc_v9_0.c) and ring timeouts (``ring gfx_0.0.0
timeout``, amdgpu_job.c), the job's faults as a rule.

Also: the RDMA core's port state changes (drivers/infiniband/core/cache.c ``ib_cache_update``:
``mlx5_core 0000:ab:00.0 mlx5_5: Port: 1 Link INIT``), which name the InfiniBand device and port themselves;
the AER severities of current kernels (``severity=Correctable``, ``Uncorrectable (Non-Fatal)``); the NVIDIA
driver's message for a GPU lost without an Xid, printed over three lines (``NVRM: The NVIDIA GPU 0000:b3:00.0``
/ ``NVRM: (PCI ID: 10de:26b5) installed in this system has`` / ``NVRM: fallen off the bus and is not responding
to commands.``), read as Xid 79 once the lines are joined (:class:`MessageJoiner`); the NVLink 5 Xids' own
severity word (``149, NETIR_LINK_EVT Fatal XC0 ...``); and the kernel's boot banner (``Linux version ...``), a
``boot`` event that tells the pipeline the node restarted. mlx5's health poller finding the adapter's firmware
silent or fatal (``mlx5_core 0000:41:00.0: poll_health:852:(pid 0): device's health compromised - reached miss
count``), a link down of that function's port; a GPU the NVIDIA driver could not initialize (``NVRM: GPU
0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)``), a ``gpu_init`` event of that GPU; its own line for a lost
GPU (``NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.``), Xid 79; a device below an erring PCIe port whose driver
cannot recover (``nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)``), an uncorrected AER of it.
mlx5's port module events: a cable unplugged or disabled is a link down of that function's port, plugged a port on
its way up, a module error (``Port module event[error]: module 0, Cable error, High Temperature``) and the adapter's
temperature warning (``temp_warn:170:(pid 0): High temperature on sensors with bit set 0 1``) a sub-healthy
port. The x86
thermal throttling interrupt's ``mce: CPU3: Package temperature above threshold, cpu clock throttled (total events =
72)``, a ``thermal`` event of the node (the CPU in ``code``), and its ``temperature/speed normal``; a thermal zone
past its critical trip (``thermal thermal_zone4: critical temperature reached (128 C), shutting down``), a
``thermal`` event of severity ``critical`` (the zone in ``code``): the kernel powers the node off. Firmware-first
errors (APEI GHES records over many lines: memory, processor and PCIe errors the platform saw) are read by
:class:`CperRecords`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from daemon.topology import normalize_pci, normalize_pci_function


@dataclass(frozen=True)
class KernelEvent:
    """One RAS fact from a kernel message; ``pci`` is the canonical PCI id when the line names one."""

    kind: str
    code: int | None
    severity: str
    message: str
    pci: str | None = None
    device: str | None = None  # e.g. the netdev of a link event
    source: str | None = None  # who says it, where not the log itself: :data:`DRIVER_SOURCE`


# "NVRM: Xid (PCI:0000:3b:00): 79, ..."; older drivers print the address without "PCI:" ("NVRM: Xid (0000:03:00): 14,
# Channel 00000001")
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+)(?:, (.*))?$")
_SXID = re.compile(r"nvidia-nvswitch\d+: SXid \(PCI:([0-9A-Fa-f:.]+)\): (\d+), (Fatal|Non-fatal)[^,]*(?:, (.*))?$")
_AER = re.compile(
    r"(?:^|\s)([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]): (?:AER: )?PCIe Bus Error: "
    r"severity=(Corrected|Correctable|Uncorrected \(Non-Fatal\)|Uncorrected \(Fatal\)|Uncorrectable \(Non-Fatal\)|"
    r"Uncorrectable \(Fatal\)), type=([^,]+)"
)
_EDAC = re.compile(r"EDAC (?:\S+ )?MC(\d+): (\d+) (CE|UE) (.*)$")
# The kernel's handling of a poisoned host memory page (mm/memory-failure.c, ``action_result``: "Memory failure: %#lx:
# recovery action for %s: %s", "MCE %#lx: ..." before 4.7): contained (Recovered, Delayed) is the deferred error
# rasdaemon's memory_failure_event records, not contained (Failed, Ignored) an uncorrected one, as that table's rows
# are read.
_MEMORY_FAILURE = re.compile(r"(?:Memory failure: |MCE )(0x[0-9a-f]+): recovery action for (.+?): (Recovered|Delayed|"
                             r"Failed|Ignored)\s*$")
_MCE = re.compile(r"\[Hardware Error\]: (?:CPU (\d+): Machine Check(?: Exception)?: (\S+) Bank (\d+): ([0-9a-f]+)"
                  r"|(Machine check events logged))")
_MCE_FATAL = re.compile(r"Kernel panic - not syncing: (?:Fatal )?[Mm]achine check")
_AMDGPU_PCI = re.compile(r"amdgpu ([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]):")
_AMDGPU_RAS = re.compile(r"(?:socket: \d+, die: \d+,? )?(\d+) (new )?(correctable|uncorrectable|deferred|poison) "
                         r"hardware errors detected in (total in )?(\w+) block")
_AMDGPU_RESET = re.compile(r"GPU reset(?:\((\d+)\))? (begin!|succeeded!|failed)")
_AMDGPU_FATAL = re.compile(r"[Uu]ncorrectable hardware error\((\w+)\) detected")
# A reset that could not bring the GPU back (amdgpu_job.c, ``amdgpu_job_timedout``: "GPU Recovery Failed: %d", where
# the reset's own "GPU reset(N) failed" is not always printed), and the GPU gone from PCI, its configuration space
# reading all ones (amdgpu_device.c's health check before a reset: "device lost from bus!"): amdgpu's Xid 79.
_AMDGPU_RECOVERY_FAILED = re.compile(r"GPU Recovery Failed: (-?\d+)")
_AMDGPU_LOST = "device lost from bus!"
# The bad-page table in the GPU's EEPROM over the driver's threshold (amdgpu_ras_eeprom.c and the RAS core's
# ras_eeprom.c: "RAS records:%d exceed threshold:%d[, GPU will not be initialized. Replace this GPU or increase the
# threshold]"), and the warning before it ("RAS records:%u exceeds 90%% of threshold:%d")
_AMDGPU_BAD_PAGES = re.compile(r"RAS records:\s*(\d+) exceeds? (90% of )?threshold:\s*(-?\d+)")
_AMDGPU_APP = re.compile(r"\[(\w+)\] (?:no-retry )?page fault|ring (\S+) timeout")
_LINK = re.compile(r"mlx5_core ([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) (\S+): Link (down|up)\b")
# Ethernet/RoCE drivers' link messages, "<driver> <PCI> <netdev>: NIC Link is Down" (bnxt_en, ice, i40e, ixgbe, igb,
# e1000e; igb repeats "igb: <netdev>" before it; ice says "up") and sfc's "<netdev>: link down"
_NIC_LINK = re.compile(r"(?:^|\s)\S+ ([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) (\S+): (?:\S+: \S+ )?"
                       r"(?:NIC Link is (Down|[Uu]p)|link (down|up))\b")
# mlx5 (en/port.c ``mlx5_pcie_event``): the adapter's slot gives it less power than it needs; it throttles or stops.
_MLX5_POWER = re.compile(r"mlx5_core ([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]):.*?"
                         r"Detected insufficient power on the PCIe slot(?: \((\d+)W\))?")
# The NVIDIA driver could not bring a GPU up (nv.c, ``rm_init_adapter``): it is unusable until it initializes.
_RM_INIT = re.compile(r"NVRM: GPU ([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]): RmInitAdapter failed! "
                      r"\(([^)]*)\)")
# mlx5's health poller (drivers/net/ethernet/mellanox/mlx5/core/health.c, ``poll_health``): the adapter's firmware
# stopped answering, or reported a fatal error; every port of the function is down until it recovers.
_MLX5_HEALTH = re.compile(r"mlx5_core ([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]):(?: \w+:\d+:\(pid \d+\):)? "
                          r"(device's health compromised - reached miss count|Fatal error \d+ detected)")
# mlx5's health buffer (health.c, ``print_health_info``, kernels from 5.17): "Health issue observed, <syndrome>,
# severity(N) <LEVEL>:" with the firmware's own severity (a kernel log level: 3 ERROR or worse is the adapter failing
# a function; WARNING and below, e.g. its high temperature, are said by its own lines), and "PCI slot is unavailable"
# when the adapter no longer answers on PCI (its firmware version reads all ones): gone, its ports with it.
_MLX5_HEALTH_ISSUE = re.compile(r"mlx5_core ([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]):(?: \w+:\d+:\(pid \d+\):)? "
                                r"(?:Health issue observed, (.+?), severity\((\d)\)|(PCI slot is unavailable))")
# mlx5's port module events (events.c, ``port_module``): the transceiver or cable of the function's port, e.g.
# "Port module event: module 1, Cable unplugged" and "Port module event[error]: module 0, Cable error, High
# Temperature" (the error form printed with the function:line:(pid) prefix on most kernels).
_MLX5_MODULE = re.compile(r"mlx5_core ([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]):(?: \w+:\d+:\(pid \d+\):)? "
                          r"Port module event(\[error\])?: module (\d+), Cable (plugged|unplugged|error|disabled)"
                          r"(?:, (.+?))?\s*$")
_MODULE_SEVERITY = {"plugged": "notice", "unplugged": "error", "disabled": "error"}  # error: "warning", below
# mlx5 (events.c, ``temp_warn``): the adapter crossed its warning temperature (ConnectX-7: 97 °C; it shuts itself down
# at its critical one): "temp_warn:170:(pid 0): High temperature on sensors with bit set 0 1".
_MLX5_HOT = re.compile(r"mlx5_core ([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]):(?: \w+:\d+:\(pid \d+\):)? "
                       r"High temperature on sensors with bit set")
# The x86 thermal throttling interrupt (arch/x86/kernel/cpu/mce/therm_throt.c): a CPU core or package over its
# throttling temperature, "mce: CPU3: Package temperature above threshold, cpu clock throttled (total events = 72)"
# ("mce: " since 5.x), and back, "CPU3: Package temperature/speed normal".
_CPU_THROTTLE = re.compile(r"(?:^|\s)CPU(\d+): (Core|Package) temperature above threshold, cpu clock throttled"
                           r"(?: \(total events = (\d+)\))?", re.IGNORECASE)
_CPU_NORMAL = re.compile(r"(?:^|\s)CPU(\d+): (Core|Package) temperature/speed normal")
# The kernel powering the node off for heat, a thermal zone past its critical trip (drivers/thermal/thermal_core.c):
# dev_emerg(&tz->device, "%s: critical temperature reached, shutting down\n", tz->type) since 5.12, "critical
# temperature reached (%d C), shutting down" before it; and the old ACPI thermal driver's "Critical temperature
# reached (%ld C), shutting down." (drivers/acpi/thermal.c), which names no zone.
_ZONE_CRITICAL = re.compile(r"(?:^|\s)(?:thermal thermal_zone(\d+): (?:(\S+): )?)?[Cc]ritical temperature reached"
                            r"(?: \((-?\d+) C\))?, shutting down")
# drivers/infiniband/core/cache.c: ibdev_info(device, "Port: %d Link %s\n", port, ib_port_state_to_str(state))
_IB_PORT = re.compile(r"(?:^|\s)([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) (\S+): Port: (\d+) Link "
                      r"(NOP|DOWN|INIT|ARMED|ACTIVE_DEFER|ACTIVE)\b")
_IB_STATE_SEVERITY = {"DOWN": "error", "ACTIVE": "info", "ACTIVE_DEFER": "info"}  # INIT, ARMED, NOP: coming up
_OFF_BUS = re.compile(r"NVRM: The NVIDIA GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)")
# The driver's own line beside its Xid 79 (osinit.c ``osHandleGpuLost``: NV_DEV_PRINTF's "NVRM: GPU %04x:%02x:%02x.%x: "
# prefix, then "GPU has fallen off the bus."), and older drivers' "NVRM: GPU at 0000:01:00.0 has fallen off the bus."
_OFF_BUS_DEV = re.compile(r"NVRM: GPU (?:at )?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]):? (?:GPU )?has "
                          r"fallen off the bus")
# The NVIDIA driver's own status in its assertion lines (``nvAssertOkFailedNoLog``): "NVRM: nvAssertOkFailedNoLog:
# Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2874"
# (its GSP firmware stopped: every new channel fails until the GPU is reset) and "... GPU lost from the bus
# [NV_ERR_GPU_IS_LOST] (0x0000000F) ...". They name no GPU (at most the driver's own instance, "NVRM: GPU0
# nvAssert..."): the node's.
_NV_STATUS = re.compile(r"NVRM: (?:GPU\d+ )?nvAssert\w*: Assertion failed: .*?"
                        r"\[(NV_ERR_RESET_REQUIRED|NV_ERR_GPU_IS_LOST)\]")
# The kernel's AER recovery (drivers/pci/pcie/err.c, ``report_error_detected``) reaching a device whose driver has no
# error handlers, the NVIDIA driver among them: "nvidia 0000:03:00.0: AER: can't recover (no error_detected
# callback)", older kernels' "device has no AER-aware driver". An uncorrectable error on the device's PCIe path that its
# driver cannot take part in recovering; the error itself is logged by the port above it, which names no GPU.
_AER_UNRECOVERED = re.compile(r"(?:^|\s)(\S+) ([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]): "
                              r"(?:AER: can't recover \(no error_detected callback\)|device has no AER-aware driver)")
_OFF_BUS_TEXT = "fallen off the bus"
DRIVER_SOURCE = "kernel:driver"
"""The source of an Xid 79 read from the driver's own words for a lost GPU (not its Xid line): the same fact as the
Xid line the driver prints beside it, from another source, so merged with it as a gauge's report of an Xid is
(:meth:`daemon.judgement.resolve.EventResolver.merge_xids`)."""
# The NVLink 5 Xids (144-150) print their own severity after the unit: "149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 ..."
_XID_SEVERITY = re.compile(r"^\S+ (Fatal|Non-?[Ff]atal)\b")
SELF_RATED_XIDS = frozenset(range(144, 151))
_BOOT = re.compile(r"^Linux version (\S+)")


def parse_kernel_message(message: str) -> KernelEvent | None:
    """Return the RAS event a kernel message reports, or None when it reports none."""
    if "NVRM: Xid" in message:
        m = _XID.search(message)
        if not m:
            return None
        code, text = int(m.group(2)), (m.group(3) or "").strip()
        severity = "error"
        if code in SELF_RATED_XIDS:
            rated = _XID_SEVERITY.match(text)
            if rated:
                severity = "fatal" if rated.group(1) == "Fatal" else "nonfatal"
        return KernelEvent("xid", code, severity, text, normalize_pci(m.group(1)))
    if "RmInitAdapter failed!" in message:
        m = _RM_INIT.search(message)
        if m:
            return KernelEvent("gpu_init", None, "error", f"RmInitAdapter failed ({m.group(2)}): the driver could "
                               "not initialize the GPU", normalize_pci(m.group(1)))
    if _OFF_BUS_TEXT in message and "NVRM: The NVIDIA GPU" in message:
        m = _OFF_BUS.search(message)
        if not m:
            return None
        return KernelEvent("xid", 79, "error", "GPU has fallen off the bus and is not responding to commands "
                           "(the driver's message)", normalize_pci(m.group(1)), source=DRIVER_SOURCE)
    if _OFF_BUS_TEXT in message and "NVRM: GPU " in message:
        m = _OFF_BUS_DEV.search(message)
        if m:
            return KernelEvent("xid", 79, "error", "GPU has fallen off the bus (the driver's message)",
                               normalize_pci(m.group(1)), source=DRIVER_SOURCE)
    if "NV_ERR_" in message:
        m = _NV_STATUS.search(message)
        if m:
            lost = m.group(1) == "NV_ERR_GPU_IS_LOST"
            return KernelEvent("gpu_state", None, "lost" if lost else "reset_required",
                               "the NVIDIA driver: " + ("a GPU lost from the bus" if lost else "a GPU needs a reset "
                                                        "(its firmware stopped; new work fails on it)")
                               + f" [{m.group(1)}], no GPU named")
    if "can't recover" in message or "AER-aware" in message:
        m = _AER_UNRECOVERED.search(message)
        if m:
            return KernelEvent("aer", None, "uncorrected", f"uncorrectable error on its PCIe path, not recovered: its "
                               f"driver ({m.group(1)}) has no error recovery", normalize_pci_function(m.group(2)))
    if "SXid" in message:
        m = _SXID.search(message)
        if not m:
            return None
        severity = "fatal" if m.group(3) == "Fatal" else "error"
        return KernelEvent("sxid", int(m.group(2)), severity, (m.group(4) or "").strip(), normalize_pci(m.group(1)))
    if "PCIe Bus Error" in message:
        m = _AER.search(message)
        if not m:
            return None
        sev = m.group(2)
        severity = ("corrected" if sev in ("Corrected", "Correctable")
                    else "fatal" if "(Fatal)" in sev else "uncorrected")
        return KernelEvent("aer", None, severity, f"{sev}, type={m.group(3)}", normalize_pci_function(m.group(1)))
    if "recovery action for" in message:
        m = _MEMORY_FAILURE.search(message)
        if m:
            contained = m.group(3) in ("Recovered", "Delayed")
            return KernelEvent("edac", 1, "deferred" if contained else "uncorrected",
                               f"memory failure at page {m.group(1)} ({m.group(2)}): {m.group(3)}")
    if "EDAC" in message:
        m = _EDAC.search(message)
        if not m:
            return None
        severity = "corrected" if m.group(3) == "CE" else "uncorrected"
        return KernelEvent("edac", int(m.group(2)), severity, f"MC{m.group(1)} {m.group(3)} {m.group(4)}".strip())
    if "Hardware Error" in message:
        m = _MCE.search(message)
        if not m:
            return None
        if m.group(5):
            return KernelEvent("mce", None, "corrected", "Machine check events logged")
        exception = "Exception" in message
        return KernelEvent(
            "mce", int(m.group(3)), "fatal" if exception else "corrected",
            f"CPU {m.group(1)} bank {m.group(3)} status 0x{m.group(4)}",
        )
    if _MCE_FATAL.search(message):
        return KernelEvent("mce", None, "fatal", message.strip())
    if "amdgpu" in message:
        return _amdgpu(message)
    if "Port: " in message and " Link " in message:
        m = _IB_PORT.search(message)
        if m:
            state = m.group(4)
            return KernelEvent("link", None, _IB_STATE_SEVERITY.get(state, "notice"),
                               f"{m.group(2)} port {m.group(3)} link {state}", normalize_pci_function(m.group(1)),
                               f"{m.group(2)}:{m.group(3)}")
    if message.startswith("Linux version "):
        m = _BOOT.match(message)
        return KernelEvent("boot", None, "info", f"kernel booted: Linux {m.group(1)}" if m else "kernel booted")
    if "mlx5_core" in message and "insufficient power" in message:
        m = _MLX5_POWER.search(message)
        if m:
            watts = f" ({m.group(2)} W)" if m.group(2) else ""
            return KernelEvent("link", None, "warning", f"mlx5 adapter: insufficient power on its PCIe slot{watts}",
                               normalize_pci_function(m.group(1)))
    if "mlx5_core" in message and ("health compromised" in message or "Fatal error" in message):
        m = _MLX5_HEALTH.search(message)
        if m:
            return KernelEvent("link", None, "error", f"mlx5 adapter {m.group(2)}: its firmware stopped, its ports "
                               "are down", normalize_pci_function(m.group(1)))
    if "mlx5_core" in message and ("Health issue observed" in message or "PCI slot is unavailable" in message):
        m = _MLX5_HEALTH_ISSUE.search(message)
        if m and m.group(4):
            return KernelEvent("link", None, "error", "mlx5 adapter no longer answers on PCI (slot unavailable): its "
                               "ports are down", normalize_pci_function(m.group(1)))
        if m and int(m.group(3)) <= 3:
            return KernelEvent("link", None, "warning", f"mlx5 adapter's firmware reports {m.group(2)} (severity "
                               f"{m.group(3)})", normalize_pci_function(m.group(1)))
    if "temperature above threshold" in message or "temperature/speed normal" in message:
        m = _CPU_THROTTLE.search(message)
        if m:
            total = f" (total events = {m.group(3)})" if m.group(3) else ""
            return KernelEvent("thermal", int(m.group(1)), "warning", f"CPU{m.group(1)} {m.group(2).lower()} "
                               f"temperature above its threshold, clock throttled{total}")
        m = _CPU_NORMAL.search(message)
        if m:
            return KernelEvent("thermal", int(m.group(1)), "info", f"CPU{m.group(1)} {m.group(2).lower()} "
                               "temperature and speed normal")
    if "ritical temperature reached" in message:
        m = _ZONE_CRITICAL.search(message)
        if m:
            zone = f"thermal zone {m.group(1)}" + (f" ({m.group(2)})" if m.group(2) else "") if m.group(1) else \
                "the ACPI thermal zone"
            degrees = f" at {m.group(3)} °C" if m.group(3) else ""
            return KernelEvent("thermal", int(m.group(1)) if m.group(1) else None, "critical",
                               f"{zone} past its critical temperature{degrees}: the kernel shuts the node down")
    if "mlx5_core" in message and "Port module event" in message:
        m = _MLX5_MODULE.search(message)
        if m:
            module, status = m.group(3), m.group(4)
            if status == "error":
                return KernelEvent("link", None, "warning", f"mlx5 port module {module}: cable or transceiver error, "
                                   f"{m.group(5) or 'unknown error'}", normalize_pci_function(m.group(1)))
            return KernelEvent("link", None, _MODULE_SEVERITY[status], f"mlx5 port module {module}: cable {status}",
                               normalize_pci_function(m.group(1)))
    if "mlx5_core" in message and "High temperature on sensors" in message:
        m = _MLX5_HOT.search(message)
        if m:
            return KernelEvent("link", None, "warning", "mlx5 adapter over its warning temperature (it shuts down at "
                               "its critical one)", normalize_pci_function(m.group(1)))
    if "NIC Link is " in message or ": link down" in message or ": link up" in message:
        m = _NIC_LINK.search(message)
        if m:
            state = (m.group(3) or m.group(4)).lower()
            return KernelEvent("link", None, "error" if state == "down" else "info", f"{m.group(2)} link {state}",
                               normalize_pci_function(m.group(1)), m.group(2))
    if "mlx5_core" in message and "Link" in message:
        m = _LINK.search(message)
        if not m:
            return None
        state = m.group(3)
        return KernelEvent(
            "link", None, "error" if state == "down" else "info", f"{m.group(2)} link {state}",
            normalize_pci_function(m.group(1)), m.group(2),
        )
    return None


def _amdgpu(message: str) -> KernelEvent | None:
    """An amdgpu RAS line: errors by block (the count in ``code``), a fatal error interrupt, a GPU reset."""
    where = _AMDGPU_PCI.search(message)
    pci = normalize_pci(where.group(1)) if where else None
    m = _AMDGPU_BAD_PAGES.search(message)
    if m:  # (its count is bad-page records, not errors: an event of its own)
        if m.group(2):
            return KernelEvent("amdgpu", int(m.group(1)), "bad_pages_near",
                               f"{m.group(1)} bad-page records, over 90% of the driver's threshold of {m.group(3)}",
                               pci)
        return KernelEvent("amdgpu", int(m.group(1)), "bad_pages",
                           f"{m.group(1)} bad-page records over the driver's threshold of {m.group(3)}: replace the "
                           "GPU", pci)
    m = _AMDGPU_RAS.search(message)
    if m:
        if m.group(4):  # "in total": a cumulative count already reported by the "new" line
            return None
        kind = m.group(3)
        severity = {"correctable": "corrected", "uncorrectable": "uncorrected"}.get(kind, "deferred")
        return KernelEvent("amdgpu", int(m.group(1)), severity,
                           f"{m.group(5).lower()} block: {m.group(1)} {kind} hardware errors", pci)
    m = _AMDGPU_FATAL.search(message)
    if m:
        return KernelEvent("amdgpu", None, "fatal", f"uncorrectable hardware error {m.group(1)}", pci)
    if _AMDGPU_LOST in message:
        return KernelEvent("amdgpu", None, "lost", "the GPU no longer answers on PCI (device lost from bus)", pci)
    m = _AMDGPU_RECOVERY_FAILED.search(message)
    if m:
        return KernelEvent("amdgpu", None, "fatal", f"GPU recovery failed (error {m.group(1)}): the reset did not "
                           "bring the GPU back", pci)
    if "Fatal error during GPU init" in message and pci:  # (amdgpu_device.c: the driver could not bring it up)
        return KernelEvent("gpu_init", None, "error", "amdgpu: fatal error during GPU init: the driver could not "
                           "initialize the GPU", pci)
    m = _AMDGPU_APP.search(message)
    if m:  # the job's fault, usually: judged by repetition on one GPU, like application Xids
        what = f"{m.group(1)} page fault" if m.group(1) else f"ring {m.group(2)} timeout"
        return KernelEvent("amdgpu", None, "application", what, pci)
    m = _AMDGPU_RESET.search(message)
    if m:
        outcome = m.group(2).rstrip("!")
        if outcome == "succeeded":  # the reset was already reported when it began
            return None
        return KernelEvent("amdgpu", None, "fatal" if outcome == "failed" else "info", f"GPU reset {outcome}", pci)
    return None


_CPER_LINE = re.compile(r"^\{(\d+)\}\[Hardware Error\]:\s*(.*?)\s*$")
_CPER_ERROR = re.compile(r"^Error \d+, type: (\w+)")
_CPER_DEVICE = re.compile(r"^device_id: ([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])$")
# A CPER record's severity (``event severity``, or one error's ``type``) in the words of the native lines.
_CPER_SEVERITY = {"corrected": "corrected", "recoverable": "uncorrected", "fatal": "fatal"}


class CperRecords:
    """Firmware-first hardware errors: the records the kernel prints for APEI's Generic Hardware Error Source
    (drivers/acpi/apei/ghes.c through drivers/firmware/efi/cper.c), where the platform, not the kernel's own EDAC or
    AER driver, saw the error (most servers' memory errors, and PCIe errors under firmware-first AER). One record is
    many lines, ``{N}[Hardware Error]: ...`` with N numbering the record, e.g.::

        {35}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 4
        {35}[Hardware Error]: event severity: corrected
        {35}[Hardware Error]:  Error 0, type: corrected
        {35}[Hardware Error]:   section_type: memory error
        {1}[Hardware Error]:   section_type: PCIe error
        {1}[Hardware Error]:   device_id: 0000:5e:00.0

    Each error section of a record is one event: a memory error an ``edac`` event of the node, a processor error an
    ``mce`` event, a PCIe error an ``aer`` event of the device its ``device_id`` names (the line after the section
    type; other drivers' lines may come between). Its severity is the error's own ``type`` (else the record's):
    corrected, recoverable (uncorrected) or fatal; informational records are not events.
    """

    def __init__(self) -> None:
        self._records: dict[tuple[str, str], dict[str, str]] = {}

    @staticmethod
    def matches(message: str) -> bool:
        return message.startswith("{") and "[Hardware Error]:" in message

    def feed(self, host: str, message: str) -> KernelEvent | None:
        """The event this line of ``host`` completes, if any."""
        m = _CPER_LINE.match(message)
        if not m:
            return None
        key, text = (host, m.group(1)), m.group(2)
        if text.startswith("Hardware error from APEI"):
            self._records[key] = {}
            return None
        rec = self._records.setdefault(key, {})
        if text.startswith("event severity:"):
            rec["record"] = text.split(":", 1)[1].strip()
        elif (e := _CPER_ERROR.match(text)) is not None:
            rec["error"] = e.group(1)
            rec.pop("pcie", None)
        elif text.startswith("fru_text:"):
            rec["fru"] = text.split(":", 1)[1].strip()
        elif text.startswith("section_type:"):
            section = text.split(":", 1)[1].strip().lower()
            word = rec.get("error") or rec.get("record") or ""
            severity = _CPER_SEVERITY.get(word)
            if severity is None:
                return None
            where = f" ({rec['fru']})" if rec.get("fru") else ""
            if section == "memory error":
                return KernelEvent("edac", 1, "uncorrected" if severity == "fatal" else severity,
                                   f"firmware-first {word} memory error{where} (APEI)")
            if section.endswith("processor error"):
                return KernelEvent("mce", None, severity, f"firmware-first {word} {section}{where} (APEI)")
            if section == "pcie error":
                rec["pcie"] = severity
        elif "pcie" in rec and (d := _CPER_DEVICE.match(text)) is not None:
            severity = rec.pop("pcie")
            return KernelEvent("aer", None, severity, f"firmware-first {rec.get('error') or rec.get('record')} PCIe "
                               "error (APEI)", normalize_pci_function(d.group(1)))
        return None


class MessageJoiner:
    """Rejoin a driver message that a text log split over several records, one host at a time.

    The NVIDIA driver prints a GPU lost without an Xid as one message of three lines; journald keeps it whole,
    but syslog and dmesg give each line its own record (dmesg prints the later ones indented, without a time).
    :meth:`feed` returns the text to parse: the record itself, or, on the record that completes such a message,
    the whole message.
    """

    def __init__(self, window_s: float = 5.0):
        self.window_s = window_s
        self._pending: dict[str, tuple[float, str]] = {}

    def feed(self, host: str, ts: float, message: str) -> str:
        """The text to parse for this record of ``host`` at ``ts``."""
        if message.startswith("NVRM: The NVIDIA GPU ") and _OFF_BUS_TEXT not in message:
            self._pending[host] = (ts, message)
            return message
        pending = self._pending.get(host)
        if pending is None or not message.startswith("NVRM:"):
            return message
        if ts - pending[0] > self.window_s:
            del self._pending[host]
            return message
        joined = pending[1] + "\n" + message
        if _OFF_BUS_TEXT in message:
            del self._pending[host]
            return joined
        self._pending[host] = (pending[0], joined)
        return message
