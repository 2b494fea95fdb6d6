"""The tick's own logic: a link judged from both ends; the topology's racks handed to the detectors."""

import pandas as pd

from daemon.ingest.batch import Batch
from daemon.ingest.naming import SeriesMapper
from daemon.judgement.pipeline import Pipeline, PipelineConfig
from daemon.topology import Topology
from detectors.schema import empty_events

TOPOLOGY = {"racks": [{"name": "r01", "nodes": [
    {"name": f"n{i}", "ports": [{"device": "mlx5_0", "port": 1, "switchport": f"leaf01/{i}"}]} for i in range(1, 4)]}]}


def batch(ts: float, rows: list[tuple[str, str, float]]) -> Batch:
    cats_e = sorted({r[0] for r in rows})
    cats_m = sorted({r[1] for r in rows})
    return Batch(samples=pd.DataFrame({
        "ts": [ts] * len(rows),
        "entity": pd.Categorical([r[0] for r in rows], categories=cats_e),
        "metric": pd.Categorical([r[1] for r in rows], categories=cats_m),
        "value": [r[2] for r in rows]}), events=empty_events())


def test_errors_seen_only_at_the_switch_end_flag_the_node_port():
    p = Pipeline(SeriesMapper(topology=Topology.from_dict(TOPOLOGY)))
    flagged = []
    for k in range(60):  # 30 min; the switch end of n2's cable counts 600 symbol errors an hour
        rows = []
        for i in range(1, 4):
            rows += [(f"n{i}/mlx5_0:1", "symbol_error_total", 0.0), (f"n{i}/mlx5_0:1", "port_state", 4.0),
                     (f"leaf01/{i}", "symbol_error_total", 5.0 * k if i == 2 else 0.0)]
        flagged += [f for f in p.tick(30.0 * (k + 1), batch(30.0 * (k + 1), rows)).findings
                    if f.state in ("subhealthy", "failed")]
    ports = [f for f in flagged if f.kind == "port"]
    assert ports and {f.entity for f in ports} == {"n2/mlx5_0:1"}
    assert ports[0].reasons[0].startswith("switch end leaf01/2: ")
    assert "leaf01" not in p.node_seen and not any(f.entity.startswith("leaf01") for f in flagged)


def test_rules_only_runs_the_rules_and_nothing_learned():
    from detectors.rules import RuleDetector

    p = Pipeline(SeriesMapper(topology=Topology.from_dict(TOPOLOGY)), PipelineConfig(rules_only=True))
    assert [type(d) for d in p.detectors] == [RuleDetector] and p.features is None
    assert not p.rules.baseline
    p.use_model(None)
    assert [type(d) for d in p.detectors] == [RuleDetector]
    assert len(Pipeline(SeriesMapper(topology=Topology.from_dict(TOPOLOGY))).detectors) > 1


def test_the_topologys_racks_reach_the_rules_a_warm_slot_in_its_racks_coolant_swing_is_a_watch():
    """Four racks of two 4-GPU nodes; r02's coolant warms 7 °C and its warm-slot GPU reaches the slowdown limit.
    With the racks from the topology it is r02's coolant (a watch); the same GPU heating on its own in a still rack
    is sub-healthy. Without the racks the fleet's median would not have moved (one rack of four)."""
    topology = {"racks": [{"name": f"r0{r}", "nodes": [{"name": f"n{r}{b}"} for b in range(2)]} for r in range(1, 5)]}
    gpus = [f"n{r}{b}/gpu{g}" for r in range(1, 5) for b in range(2) for g in range(4)]
    warm = "n20/gpu3"

    def run(swing_rack: str, own_c: float) -> set[str]:
        p = Pipeline(SeriesMapper(topology=Topology.from_dict(topology)), PipelineConfig(rules_only=True))
        states: set[str] = set()
        for k in range(1, 361):  # 2.5 h steady, then 20 min of warming and 10 min at the top (findings: changes)
            t = 30.0 * k
            rise = 7.0 * min(max(k - 300, 0), 40) / 40
            rows = []
            for i, g in enumerate(gpus):
                temp = 68.0 + (i % 5) + (12.5 if g == warm else 0.0) + ((k + i) % 3) * 0.3
                temp += rise if g.startswith(f"n{swing_rack[-1]}") else 0.0
                temp += own_c * min(max(k - 300, 0), 40) / 40 if g == warm else 0.0
                rows += [(g, "gpu_temp_c", temp), (g, "power_w", 600.0 + 5 * (i % 7)), (g, "gpu_util_pct", 95.0)]
            states |= {f.state for f in p.tick(t, batch(t, rows)).findings if f.entity == warm}
        return states

    assert run("r02", 0.0) == {"suspect"}
    assert run("r03", 7.0) == {"subhealthy"}


def test_an_xid_counted_by_the_exporter_fails_its_gpu():
    """An Xid 79 seen only in dcgm-exporter's per-Xid count (DCGM_EXP_XID_ERRORS_COUNT): the GPU fell off the bus."""
    p = Pipeline(SeriesMapper())
    failed = []
    for k in range(4):
        rows = [("n1/gpu0", "gpu_temp_c", 60.0), ("n1/gpu1", "gpu_temp_c", 61.0)]
        if k >= 2:
            rows.append(("n1/gpu1", "xid_count_79", 1.0))
        failed += [f.entity for f in p.tick(30.0 * (k + 1), batch(30.0 * (k + 1), rows)).findings
                   if f.state == "failed"]
    assert failed[:1] == ["n1/gpu1"] and "n1/gpu0" not in failed


def test_an_amd_field_id_of_a_scraped_gpu_fails_it():
    """AMD device-metrics-exporter's gpu_afid_errors as a scrape gives it (the GPU's last RAS event: AFID 20, HBM
    on-die ECC, fatal; labels severity and afid_index as pkg/amdgpu/gpuagent/gpuagent_gpu_metrics.go sets them)
    through the name table to the rules: the GPU fails, its peer does not; the AFID held on the gauge scrape after
    scrape is one event."""
    from daemon.ingest.formats.openmetrics import parse_scrape
    from daemon.ingest.formats.reader import ReadContext

    ctx = ReadContext(mapper=SeriesMapper())
    p = Pipeline(ctx.mapper)
    states = []
    for k in range(4):
        now = 30.0 * (k + 1)
        text = "".join(f'amd_gpu_{m}{{gpu_id="{g}",hostname="n2",card_model="AMD Instinct MI300X"{extra}}} {v}\n'
                       for g in ("0", "1") for m, extra, v in (
                           ("junction_temperature", "", 60),
                           ("afid_errors", ',severity="fatal",afid_index="0"', 20 if g == "1" and k >= 1 else 0)))
        b = parse_scrape(text.encode(), ctx, {}, "scrape", now)
        states += [(f.entity, f.state, f.reasons[0]) for f in p.tick(now, b).findings]
    assert ctx.rejects.total == 0
    failed = [s for s in states if s[1] == "failed" and s[0] == "n2/gpu1"]
    assert failed and failed[0][2].startswith("AMD Field ID 20: HBM Errors, On-die ECC (AMD: Fatal; repair: reset)")
    assert not [s for s in states if s[0] == "n2/gpu0" and s[1] != "healthy"]


def test_a_code_no_catalog_knows_is_counted_on_metrics():
    from daemon import metrics
    from detectors.schema import events_frame

    p = Pipeline(SeriesMapper(topology=Topology.from_dict(TOPOLOGY)), PipelineConfig(rules_only=True))
    counter = metrics.FAULT_CODES_UNJUDGED.labels("xid", "999")
    before = counter._value.get()
    events = events_frame([(25.0, "n1/gpu0", "xid", 999, "error", "pid=1, a code of a newer driver", "kernel", None,
                            None)])
    p.tick(30.0, Batch(samples=batch(30.0, [("n1/gpu0", "gpu_temp_c", 40.0)]).samples, events=events))
    assert counter._value.get() == before + 1


def test_a_host_the_topology_does_not_place_is_a_watch_not_a_failure():
    """Issue 54: an Xid 79 from a journal host name not in topology.yaml opened a failed incident on that host."""
    from detectors.schema import events_frame

    p = Pipeline(SeriesMapper(topology=Topology.from_dict(TOPOLOGY)), PipelineConfig(rules_only=True))
    line = "pid=0, GPU has fallen off the bus."
    events = events_frame([(25.0, "sn99-b01", "xid", 79, "error", line, "kernel", "0000:18:00", None),
                           (25.0, "n1", "xid", 79, "error", line, "kernel", "0000:18:00", None)])
    found = p.tick(30.0, Batch(samples=batch(30.0, [("n1/gpu0", "gpu_temp_c", 40.0)]).samples, events=events))
    states = {f.entity: f.state for f in found.findings}
    assert states["sn99-b01"] == "suspect" and "does not place" in next(
        f for f in found.findings if f.entity == "sn99-b01").reasons[0]
    assert states["n1"] == "failed"  # a placed host's Xid 79 fails as ever
    assert not [i for i in p.incidents.open.values() if i.entity == "sn99-b01"]


def test_one_reading_a_gauge_gives_what_the_grouping_gives_to_the_bit():
    """A tick with one reading of each gauge series skips the grouping (issue 56); one with a series read twice
    groups. Edge values included, both must give the same last, max and mean."""
    import numpy as np

    rng = np.random.default_rng(3)
    values = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf, 41.5, -2.0])
    names = [f"n1/gpu{i}" for i in range(8)] + ["n2/gpu0"]
    for _ in range(50):
        order = rng.permutation(8)
        one = pd.DataFrame({"ts": np.full(8, 30.0), "value": rng.choice(values, 8),
                            "entity": pd.Categorical([names[i] for i in order], categories=names),
                            "metric": pd.Categorical(["gpu_temp_c"] * 8)})
        extra = pd.DataFrame({"ts": [10.0, 20.0], "value": [40.0, 42.0],
                              "entity": pd.Categorical(["n2/gpu0"] * 2, categories=names),
                              "metric": pd.Categorical(["gpu_temp_c"] * 2)})
        with np.errstate(invalid="ignore"):  # (NaN and inf among the readings: the edge values are meant)
            _, fast, _ = Pipeline()._split(one)
            _, grouped, _ = Pipeline()._split(pd.concat([extra, one], ignore_index=True))
        keep = np.asarray(grouped["entity"], dtype=object) != "n2/gpu0"
        for column in ("last", "max", "mean"):
            assert fast[column].tobytes() == grouped[column][keep].tobytes(), column
        assert fast["entity"].tolist() == grouped[keep]["entity"].tolist()


def test_a_kept_split_is_the_split_of_the_rows_given():
    """Issue 56: the split of a tick's rows is kept while a tick names the same series in the same order as the last,
    handed out as the same read-only name columns; rows of the same length in another order, or other series, are
    split afresh. A pipeline fed ticks that repeat, reorder and rename against one that keeps nothing."""
    import numpy as np

    rng = np.random.default_rng(7)
    entities = [f"n1/gpu{i}" for i in range(4)] + ["n1/mlx5_0:1"]
    metrics = ["gpu_temp_c", "ecc_sbe_total", "xid_last", "symbol_error_total"]
    rows = [(e, m) for e in entities for m in metrics]
    layouts = [rng.permutation(len(rows))[:12] for _ in range(3)]
    keeping = Pipeline()
    kept = 0
    for tick in range(60):
        order = layouts[rng.integers(3)] if tick % 7 else rng.permutation(len(rows))[:12]
        one = pd.DataFrame({"ts": np.full(12, 30.0 * tick), "value": rng.normal(40, 5, 12),
                            "entity": pd.Categorical([rows[i][0] for i in order], categories=entities),
                            "metric": pd.Categorical([rows[i][1] for i in order], categories=metrics)})
        before = keeping._layout_memo
        got, want = keeping._split(one), Pipeline()._split(one)
        kept += before is not None and keeping._layout_memo is before
        for a, b in zip(got, want):
            assert a.columns == b.columns
            for column in a.columns:
                assert np.asarray(a[column]).tolist() == np.asarray(b[column]).tolist(), column
    assert 0 < kept < 60
    again = keeping._split(one)
    assert again[1]["entity"] is keeping._split(one)[1]["entity"] and not again[1]["entity"].codes.flags.writeable


def test_pipelines_judging_side_by_side_observe_the_sampling_once_a_tick(monkeypatch):
    """Issue 56: an evaluation's raswarden and baseline tick the same batches; the sampling cadence and the gauge hold
    are functions of the batches alone, so the pipelines sharing an ingest hold one of each and observe a tick once,
    and each judges as it does alone (to the finding). A pipeline whose cadence learns otherwise (another staleness
    floor) keeps its own."""
    from daemon.judgement.health import HealthConfig
    from daemon.judgement.pipeline import SharedIngest
    from detectors.cadence import Cadence

    def pipelines(share: bool) -> list[Pipeline]:
        ps = [Pipeline(SeriesMapper(topology=Topology.from_dict(TOPOLOGY)), PipelineConfig(baseline=b))
              for b in (False, True)]
        if share:
            ingest = SharedIngest()
            for p in ps:
                p.share(ingest)
        return ps

    def ticks():
        for k in range(40):  # n2's GPU runs hot, its port counts errors; every node's exporter scrapes with jitter
            ts = 30.0 * (k + 1)
            rows = []
            for i in range(1, 4):
                hot = 95.0 if i == 2 and k > 10 else 60.0
                rows += [(f"n{i}/gpu0", "gpu_temp_c", hot + k % 3), (f"n{i}/gpu0", "power_w", 300.0 + i),
                         (f"n{i}/mlx5_0:1", "symbol_error_total", 40.0 * k if i == 2 else 0.0),
                         (f"n{i}/mlx5_0:1", "port_state", 4.0)]
            yield ts, batch(ts - (k % 4), rows)

    observed = []
    real = Cadence.observe_rows

    def counting(self, rows, last_ts):
        observed.append(id(self))
        return real(self, rows, last_ts)

    monkeypatch.setattr(Cadence, "observe_rows", counting)
    shared, alone = pipelines(True), pipelines(False)
    found = {"shared": [[], []], "alone": [[], []]}
    for ts, b in ticks():
        for name, ps in (("shared", shared), ("alone", alone)):
            for p, sink in zip(ps, found[name]):
                sink += [f.as_dict() for f in p.tick(ts, b).findings]
    assert shared[1].cadence is shared[0].cadence and shared[1].hold is shared[0].hold
    assert observed.count(id(shared[0].cadence)) == 40  # once a tick for both
    assert observed.count(id(alone[0].cadence)) == observed.count(id(alone[1].cadence)) == 40
    assert found["shared"] == found["alone"] and found["shared"][0] != found["shared"][1]
    assert any(f["state"] != "healthy" for f in found["shared"][0])

    other = Pipeline(SeriesMapper(topology=Topology.from_dict(TOPOLOGY)),
                     PipelineConfig(health=HealthConfig(stale_after_s=600.0)))
    ingest = SharedIngest()
    first = pipelines(False)[0]
    first.share(ingest)
    other.share(ingest)
    assert other.cadence is not first.cadence and not other._shares_cadence


def test_the_windows_told_to_health_as_arrays_are_those_told_one_by_one(monkeypatch):
    """Issue 56: jittered scrapes move hundreds of learned staleness windows a tick; health is given them as arrays
    (each entity its own, each node its longest entity's, a node's own series counted as the node's) once it has a row
    for each. Every tick, the windows and node windows are those the one-by-one telling gives."""
    import numpy as np

    rng = np.random.default_rng(5)

    def run(one_by_one: bool):
        p = Pipeline(SeriesMapper(topology=Topology.from_dict(TOPOLOGY)))
        if one_by_one:
            monkeypatch.setattr(p, "_tell_windows", lambda rows, window: False)
        return p

    fast, slow = run(False), run(True)
    last = {}
    states = []
    for k in range(120):
        ts = 30.0 * (k + 1)
        rows = []
        for i in range(1, 4):
            every = (30.0, 60.0, 300.0)[i - 1]  # a node's GPU and port every 30 s, 1 min or 5 min, its own series
            for e, m in ((f"n{i}/gpu0", "gpu_temp_c"), (f"n{i}/mlx5_0:1", "port_state"), (f"n{i}", "node_load1"),
                         (f"leaf01/{i}", "symbol_error_total")):
                if ts - last.get(e, -1e9) >= every - 1.0 and rng.random() > 0.05:
                    last[e] = ts
                    rows.append((e, m, 1.0))
        if not rows:
            continue
        stamp = ts - rng.uniform(0.0, 4.0)
        for p in (fast, slow):
            p.tick(ts, batch(stamp, rows))
        states.append([(dict(zip(p.health.freshness.names, p.health.freshness.window.tolist())), dict(p.node_window))
                       for p in (fast, slow)])
    assert fast._window_places is not None and len(fast._window_places.nodes) >= 3  # the arrays were used
    for (a_win, a_node), (b_win, b_node) in states:
        assert a_node == b_node
        assert a_win.keys() == b_win.keys()
        assert all(a_win[e] == b_win[e] or (np.isnan(a_win[e]) and np.isnan(b_win[e])) for e in a_win)
    assert len({tuple(sorted(s[0][1].items())) for s in states}) > 3  # the node windows moved
