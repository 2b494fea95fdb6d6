import numpy as np
import pytest

from daemon.ingest.naming import SeriesMapper, parse_labels, split_series
from daemon.topology import Topology, normalize_pci
from tests.conftest import REAL


def test_labels_with_escapes_commas_and_braces():
    labels = parse_labels(r'a="x,y",b="say \"hi\"",c="back\\slash",d="new\nline",e="}{"')
    assert labels == {"a": "x,y", "b": 'say "hi"', "c": "back\\slash", "d": "new\nline", "e": "}{"}


@pytest.mark.parametrize("bad", ['a="x', 'a=x', '="x"', 'a="x" b="y"', 'a="x",,'])
def test_malformed_labels_raise(bad):
    with pytest.raises(ValueError):
        parse_labels(bad)


def test_split_series():
    assert split_series('up{job="n"}') == ("up", {"job": "n"})
    assert split_series("up") == ("up", {})


@pytest.mark.parametrize("text,want", [
    ("00000000:3B:00.0", "0000:3b:00"), ("0000:3b:00", "0000:3b:00"), ("0000:3b:00.1", "0000:3b:00"),
    ("PCI:0000:3B:00", "0000:3b:00"), ("3b:00.0", "0000:3b:00"), ("zz:00.0", None), ("1", None),
])
def test_pci_forms(text, want):
    assert normalize_pci(text) == want


def test_dcgm_series_maps_to_accelerator_and_learns_its_pci():
    m = SeriesMapper()
    labels = {"gpu": "3", "pci_bus_id": "00000000:3B:00.0", "Hostname": "sn01-b07", "instance": "10.0.0.7:9400"}
    sid = m.series_id("DCGM_FI_DEV_GPU_TEMP", labels, "f:1", "openmetrics")
    ent, met, mask = m.series_table()
    assert m.entities[ent[sid]] == "sn01-b07/gpu3" and m.metrics[met[sid]] == "gpu_temp_c"
    transform = m.transforms[mask[sid]]  # a plausible range, and DCGM's blank dropped first
    assert transform.kind == "range" and transform.blank == 2.0**47
    assert m.accelerator_at("sn01-b07", "0000:3b:00") == "sn01-b07/gpu3"


def test_address_without_alias_is_reported_not_invented():
    m = SeriesMapper()
    sid = m.series_id("node_infiniband_link_downed_total", {"instance": "10.1.2.3:9100", "device": "mlx5_0",
                                                            "port": "1"}, "f:9", "openmetrics")
    assert sid == -1
    assert m.unmapped_hosts["10.1.2.3"] == 1
    assert "has no alias" in m.rejects.messages[0] and m.rejects.messages[0].startswith("f:9")


def test_address_with_alias_maps_to_node():
    topo = Topology.from_dict({"racks": [{"name": "r1", "nodes": [{"name": "sn01-b01", "aliases": ["10.1.2.3"]}]}]})
    m = SeriesMapper(topology=topo)
    sid = m.series_id("node_infiniband_link_downed_total", {"instance": "10.1.2.3:9100", "device": "mlx5_0",
                                                            "port": "1"}, "f:9", "openmetrics")
    assert m.entities[m.series_table()[0][sid]] == "sn01-b01/mlx5_0:1"


def test_unknown_metric_is_skipped_and_counted():
    m = SeriesMapper()
    assert m.series_id("go_gc_duration_seconds", {"instance": "x:1"}, "f:1", "openmetrics") == -1
    assert m.unmapped_metrics["go_gc_duration_seconds"] == 1
    assert m.rejects.total == 0


def test_value_transforms():
    import numpy as np

    from daemon.ingest.naming import Transform

    x = np.array([0x60, 0x20, 0x1, np.nan])
    assert list(Transform.parse("mask:0x60").apply(x)[:3]) == [1.0, 1.0, 0.0]
    assert list(Transform.parse("map:1=4,0=1").apply(np.array([1.0, 0.0, -1.0]))[:2]) == [4.0, 1.0]
    assert np.isnan(Transform.parse("map:1=4,0=1").apply(np.array([-1.0])))[0]
    kept = Transform.parse("invalid:-1,4294967295").apply(np.array([7.0, -1.0, 4294967295.0]))
    assert kept[0] == 7.0 and np.isnan(kept[1:]).all()
    assert Transform.parse("scale:0.001").apply(np.array([5000.0]))[0] == 5.0
    assert list(Transform.parse("nonzero").apply(np.array([0.0, 3.5]))) == [0.0, 1.0]
    assert Transform.parse("") is None
    for bad in ("log:2", "map:1", "mask:zz"):
        with pytest.raises(ValueError):
            Transform.parse(bad)


def test_topology_names_npus_by_their_kind():
    topo = Topology.from_dict({"racks": [{"name": "r1", "nodes": [{"name": "a1", "accelerators": [
        {"index": 3, "kind": "npu", "pci_bus_id": "0000:c1:00.0"}]}]}]})
    assert topo.pci_accelerator[("a1", "0000:c1:00")] == "a1/npu3"
    with pytest.raises(ValueError, match="kind"):
        Topology.from_dict({"racks": [{"name": "r1", "nodes": [{"name": "a1", "accelerators": [
            {"index": 0, "kind": "tpu"}]}]}]})


def _quoted_k8s_series() -> list[dict[str, str]]:
    path = REAL / "quoted" / "dcgm-exporter-k8s-hostname.prom"
    return [split_series(line.rsplit(" ", 1)[0])[1] for line in path.read_text().splitlines()
            if line and not line.startswith("#")]


def test_a_kubernetes_exporter_pods_name_is_no_host_and_the_relabeled_node_is():
    """dcgm-exporter in Kubernetes without NODE_NAME reports its pod's name as Hostname (real lines quoted in
    NVIDIA/dcgm-exporter PR 129): the node comes from a relabeling (``node``, or ``instance`` set to the node's name),
    never from the pod, which would be a new node at each restart of the pod; a host's own name stays the node."""
    pod, named, vm = _quoted_k8s_series()
    m = SeriesMapper()
    assert m.node_for(named) == "ip-172-31-54-152" and m.node_for(vm) == "computeinstance-e00c1p6dpy98xytphp"
    assert m.node_for({**pod, "instance": "ip-172-31-54-152"}) == "ip-172-31-54-152"
    assert m.node_for({**pod, "node": "ip-172-31-54-152", "instance": "10.244.3.17:9400"}) == "ip-172-31-54-152"
    # a pod address without an alias: reported with what to do, not turned into a node
    topo = Topology.from_dict({"racks": [{"name": "r1", "nodes": [{"name": "ip-172-31-54-152"}]}]})
    m = SeriesMapper(topology=topo)
    assert m.series_id("DCGM_FI_DEV_GPU_TEMP", {**pod, "instance": "10.244.3.17:9400"}, "f:1", "openmetrics") == -1
    (message,) = m.rejects.messages
    assert "'10.244.3.17:9400' has no alias" in message and "'nvidia-dcgm-exporter-cwbcm' is the exporter's " \
        "Kubernetes pod" in message and m.unmapped_hosts == {"10.244.3.17": 1}
    assert "nvidia-dcgm-exporter-cwbcm" not in m.entities


def test_dcgm_exporters_1x_names_from_a_kubernetes_pod():
    """dcgm-exporter's 1.x names (dcgm_sm_clock, ...) as a real Kubernetes deployment served them (NVIDIA/dcgm-exporter
    issue 188: Hostname is the exporter's pod), the node named by Prometheus' instance; --use-old-namespace's
    lowercase uuid is the GPU's identity too."""
    from daemon.ingest.formats import ReadContext
    from daemon.ingest.formats.openmetrics import parse_scrape

    text = (REAL / "quoted" / "dcgm-exporter-188.prom").read_text()
    ctx = ReadContext(target_labels={"instance": "gpu-node-9:9400"})
    s = parse_scrape(text.encode(), ctx, {}, "scrape", 1.8e9).samples
    got = dict(zip(s["metric"].astype(str), s["value"]))
    assert set(s["entity"].astype(str)) == {"gpu-node-9/gpu0"} and ctx.rejects.total == 0
    assert got == {"sm_clock_mhz": 585, "mem_clock_mhz": 5000, "gpu_temp_c": 54, "power_w": 30.982,
                   "energy_mj_total": 55491669881, "pcie_replay_total": 0, "gpu_util_pct": 0}
    assert ctx.mapper.take_identities(2e9) == [("gpu-node-9/gpu0", "GPU-c1f38265-5e7c-0a81-14a0-240a35ea8160", 1.8e9)]
    m = SeriesMapper()
    sid = m.series_id("dcgm_gpu_temp", {"gpu": "1", "uuid": "GPU-77", "Hostname": "sn01-b02"}, "f:1", "openmetrics")
    m.stamp_identities(np.array([sid]), np.array([5.0]))
    assert m.take_identities(10) == [("sn01-b02/gpu1", "GPU-77", 5.0)]


def test_a_hostname_a_relabeling_set_beside_the_pods_names_the_node():
    """NVIDIA/dcgm-exporter issue 529's ServiceMonitor relabels the pod's node name into ``hostname``."""
    m = SeriesMapper()
    assert m.node_for({"Hostname": "nvidia-dcgm-exporter-tvmlp", "hostname": "ip-10-0-6-97.ec2.internal"}) == \
        "ip-10-0-6-97.ec2.internal"


def test_the_candidate_the_topology_knows_names_the_node():
    """A host name the topology does not know (the machine's own, ``gpu-node-7``) gives way to an address it knows
    as an alias of one of its nodes; without a topology the exporter's host label names the node as before."""
    labels = {"Hostname": "gpu-node-7", "instance": "10.0.1.7:9400"}
    topo = Topology.from_dict({"racks": [{"name": "r1", "nodes": [{"name": "sn01-b07", "aliases": ["10.0.1.7"]}]}]})
    assert SeriesMapper(topology=topo).node_for(labels) == "sn01-b07"
    assert SeriesMapper().node_for(labels) == "gpu-node-7"
    assert SeriesMapper(topology=topo).node_for({"Hostname": "sn01-b07", "instance": "10.9.9.9:9400"}) == "sn01-b07"


def test_mig_instances_fold_onto_their_gpu_and_count_once():
    """dcgm-exporter with MIG serves every device field once per GPU instance, the same value (real lines of
    NVIDIA/dcgm-exporter issues 317 and 713 and pull request 736): the instances are series of their physical GPU,
    the part that fails and is replaced; a counter seen through four instances counts its increase once and its
    repeats at one time are no reset."""
    from daemon.ingest.formats import ReadContext
    from daemon.ingest.formats.openmetrics import parse_scrape
    from detectors.counters import CounterTracker

    text = (REAL / "quoted" / "dcgm-exporter-mig.prom").read_text()
    ctx = ReadContext(target_labels={"instance": "node-x:9400"})
    s = parse_scrape(text.encode(), ctx, {}, "scrape", 1.8e9).samples
    host = "yg-data-k8s-gpu-a30-node-test-test0003.mt"
    got = s.groupby(["entity", "metric"])["value"].agg(["count", "min", "max"])
    assert got.loc[(f"{host}/gpu0", "hbm_temp_c")].tolist() == [4, 35, 35]
    assert got.loc[(f"{host}/gpu1", "xid_last")].tolist() == [2, 0, 0]
    assert got.loc[("metal-gpu-08/gpu0", "sm_clock_mhz")].tolist() == [1, 1410, 1410]
    # a MIG GPU and a whole one on a node whose exporter's hostname is its pod: the node is Prometheus' instance
    assert {e for e in s["entity"] if e.startswith("node-x/")} == {"node-x/gpu0", "node-x/gpu1", "node-x/gpu2"}
    assert ctx.rejects.total == 0
    # the corrected-ECC counter on issue 317's label set, one line per instance, two scrapes 30 s apart
    labels = [line.split("{", 1)[1].rsplit("}", 1)[0] for line in text.splitlines()
              if line.startswith("DCGM_FI_DEV_XID_ERRORS") and 'gpu="0"' in line]

    def scrape(value: int) -> bytes:
        return "".join(f"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{lb}}} {value}\n" for lb in labels).encode()

    counters = CounterTracker()
    cache: dict[str, int] = {}
    counters.update(parse_scrape(scrape(10), ctx, cache, "scrape", 1.8e9).samples)
    inc = counters.update(parse_scrape(scrape(13), ctx, cache, "scrape", 1.8e9 + 30).samples)
    assert len(labels) == 4 and inc.to_frame()[["entity", "increase", "resets", "dt"]].values.tolist() == [
        [f"{host}/gpu0", 3.0, 0, 30.0]]


def test_a_series_own_instance_renamed_by_prometheus_names_its_node():
    """Prometheus scraping a Pushgateway (or federating) without ``honor_labels`` renames a series' own ``instance``
    to ``exported_instance`` and sets ``instance`` to the gateway's address: the node is the series' own."""
    m = SeriesMapper()
    labels = {"device": "mlx5_0", "port": "1", "exported_instance": "gpu-node-7:9100", "instance": "pushgw:9091",
              "exported_job": "node", "job": "pushgateway"}
    assert m.node_for(labels) == "gpu-node-7"
    assert m.node_for({k: v for k, v in labels.items() if k != "exported_instance"}) == "pushgw"


def test_nvlink_5s_counters_of_a_gb200_tray():
    """NVLink 5 (Blackwell) has counters of its own (DCGM fields 1200-1219), one series per GPU as dcgm-exporter 4.x
    serves them on a GB200 tray (real lines of NVIDIA/dcgm-exporter issue 581): its successful link recoveries are
    ``nvlink_recovery_total`` as the older GPUs' DL recoveries; a field raswarden does not judge (tx discards) is
    skipped and counted, not an error."""
    from daemon.ingest.formats import ReadContext
    from daemon.ingest.formats.openmetrics import parse_scrape

    text = (REAL / "quoted" / "dcgm-exporter-581-gb200.prom").read_text()
    ctx = ReadContext()
    s = parse_scrape(text.encode(), ctx, {}, "scrape", 1.8e9).samples
    assert sorted(zip(s["entity"].astype(str), s["metric"].astype(str))) == [
        (f"3f546054f69d/gpu{i}", "nvlink_recovery_total") for i in range(4)]
    assert ctx.rejects.total == 0 and ctx.mapper.unmapped_metrics["DCGM_FI_DEV_NVLINK_COUNT_TX_DISCARDS"] == 1
    m = SeriesMapper()
    for field, canonical in (("DCGM_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS", "nvlink_recovery_failed_total"),
                             ("DCGM_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS", "nvlink_effective_error_total"),
                             ("DCGM_FI_DEV_NVLINK_COUNT_LOCAL_LINK_INTEGRITY_ERRORS", "nvlink_link_integrity_total"),
                             ("DCGM_FI_DEV_C2C_LINK_ERROR_INTR", "c2c_crc_error_total"),
                             ("DCGM_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS", "pcie_correctable_total"),
                             ("DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY", "fabric_health"),
                             ("DCGM_FI_DEV_MEMORY_UNREPAIRABLE_FLAG", "memory_unrepairable")):
        assert [r.canonical for r in m.rules[field]] == [canonical], field
    assert "DCGM_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS" not in m.rules  # (1211 + 1212: read as those two)


def test_nvlink_5_s_effective_ber_is_read_packed_or_decoded():
    """NVML packs a BER as a mantissa (bits 8-11) and an exponent (bits 0-7), the rate the mantissa times ten to the
    minus exponent (NVML_NVLINK_ERROR_COUNTER_BER_GET; DCGM field 1217); 1218 is the same decoded. NVML's floor,
    15 and 255 (1.5e-254), is no error at all; a value that is no packed BER is not a reading."""
    from daemon.ingest.formats import ReadContext
    from daemon.ingest.formats.openmetrics import parse_scrape

    labels = '{gpu="%d",UUID="GPU-%d",pci_bus_id="00000008:01:00.0",device="nvidia%d",modelName="NVIDIA GB200",' \
             'Hostname="t1"}'
    packed = [(2 << 8) | 12, (15 << 8) | 255, (11 << 8) | 13, -5]
    text = "".join(f"DCGM_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER{labels % (i, i, i)} {v}\n" for i, v in enumerate(packed))
    text += f"DCGM_FI_DEV_NVLINK_COUNT_EFFECTIVE_BER_FLOAT{labels % (9, 9, 9)} 3.5e-13\n"
    ctx = ReadContext()
    s = parse_scrape(text.encode(), ctx, {}, "scrape", 1.8e9).samples
    got = dict(zip(s["entity"].astype(str), s["value"]))
    assert set(s["metric"].astype(str)) == {"nvlink_effective_ber"}
    assert got["t1/gpu0"] == pytest.approx(2e-12) and got["t1/gpu1"] == pytest.approx(1.5e-254)
    assert got["t1/gpu2"] == pytest.approx(1.1e-12) and got["t1/gpu9"] == pytest.approx(3.5e-13)
    assert "t1/gpu3" not in got and ctx.mapper.values_not_read["not a packed bit error rate (NVML's BER)"] == 1
