import pytest

from daemon.ingest.formats.kernel_events import parse_kernel_message as parse


@pytest.mark.parametrize("line,code,pci", [
    ("NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.", 79, "0000:3b:00"),
    ("NVRM: Xid (PCI:0000:3B:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error", 48,
     "0000:3b:00"),
    ("NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.",
     63, "0000:10:1c"),
    ("NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.", 79, "0000:2b:00"),
    ("NVRM: Xid (PCI:0000:06:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
     154, "0000:06:00"),
    ("[12345.678901] NVRM: Xid (PCI:0000:18:00): 13, pid=90311, name=python3, Graphics SM Warp Exception", 13,
     "0000:18:00"),
])
def test_xid_variants(line, code, pci):
    ev = parse(line)
    assert ev is not None and ev.kind == "xid" and ev.code == code and ev.pci == pci


def test_sxid_fatal_and_nonfatal():
    ev = parse("nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 24007, Fatal, Link 30 sourcetrack timeout error")
    assert (ev.kind, ev.code, ev.severity, ev.pci) == ("sxid", 24007, "fatal", "0000:07:00")
    ev = parse("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error")
    assert ev.severity == "error"


@pytest.mark.parametrize("line,severity", [
    ("nvidia 0000:3b:00.0: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)", "corrected"),
    ("pcieport 0000:00:01.0: AER: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, "
     "(Requester ID)", "uncorrected"),
    ("nvidia 0000:3b:00.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Inaccessible, (Unregistered "
     "Agent ID)", "fatal"),
    ("pcieport 0000:00:03.0: PCIe Bus Error: severity=Corrected, type=Data Link Layer, id=0018(Transmitter ID)",
     "corrected"),
])
def test_aer(line, severity):
    ev = parse(line)
    assert ev.kind == "aer" and ev.severity == severity and ev.pci is not None


def test_edac_mce_link():
    ev = parse("EDAC MC0: 1 CE memory read error on CPU_SrcID#0_MC#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x1)")
    assert (ev.kind, ev.code, ev.severity) == ("edac", 1, "corrected")
    assert parse("EDAC sbridge MC1: 2 UE memory scrubbing error on DIMM").severity == "uncorrected"
    assert parse("mce: [Hardware Error]: Machine check events logged").severity == "corrected"
    ev = parse("mce: [Hardware Error]: CPU 3: Machine Check Exception: 5 Bank 4: b200000000070005")
    assert (ev.kind, ev.code, ev.severity) == ("mce", 4, "fatal")
    assert parse("Kernel panic - not syncing: Fatal machine check").severity == "fatal"
    ev = parse("mlx5_core 0000:0c:00.0 ibp12s0: Link down")
    # the function is kept: the two ports of a dual-port NIC differ only in it
    assert (ev.kind, ev.severity, ev.pci, ev.device) == ("link", "error", "0000:0c:00.0", "ibp12s0")
    assert parse("mlx5_core 0000:0c:00.0 ibp12s0: Link up").severity == "info"


@pytest.mark.parametrize("line", [
    "Out of memory: Killed process 66120 (python3) total-vm:512340112kB",
    "python3[77120]: segfault at 0 ip 00007f1c2a4b5e10 sp 00007ffd0d6e1a30 error 4 in libc.so.6",
    "sn01-b02:66120:66344 [3] NCCL INFO Channel 02/32 : 3[3] -> 4[4] via P2P/IPC",
    "NVRM: GPU at PCI:0000:3b:00: GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",
    "NVRM: GPU Board Serial Number: 1654523001234",
    "NVRM: A GPU crash dump has been created. If possible, please run",
    "nvidia 0000:3b:00.0:   device [10de:2330] error status/mask=00000001/0000e000",
    "NVRM: Xid (PCI:broken",
    "[Hardware Error]: TSC 0 ADDR fef1a140 MISC 0 ",
    "",
])
def test_not_hardware_ras(line):
    assert parse(line) is None


@pytest.mark.parametrize("line,severity,count", [
    # the driver's printk formats (amdgpu_ras_eeprom.c before and after the RAS core moved it, ras_eeprom.c), with
    # MI300X's table threshold; not lines quoted from a host
    ("amdgpu 0000:05:00.0: amdgpu: RAS records:512 exceed threshold:512, GPU will not be initialized. Replace this "
     "GPU or increase the threshold", "bad_pages", 512),
    ("amdgpu 0000:05:00.0: amdgpu: RAS records:513 exceed threshold:512", "bad_pages", 513),
    ("amdgpu 0000:05:00.0: amdgpu: RAS records:461 exceeds 90% of threshold:512", "bad_pages_near", 461),
])
def test_amdgpu_bad_page_table_over_its_threshold(line, severity, count):
    ev = parse(line)
    assert (ev.kind, ev.severity, ev.code, ev.pci) == ("amdgpu", severity, count, "0000:05:00")
    assert "threshold of 512" in ev.message
