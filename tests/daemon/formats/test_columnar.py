from daemon.formats import ColumnarReader, ColumnarWriter, OpenMetricsReader, sniff
from daemon.formats.kernellog import JournalJsonReader
from tests.daemon.formats.conftest import read_all


def test_parquet_and_csv_round_trip(tmp_path, ctx, trace_dir):
    src = list(OpenMetricsReader().read(trace_dir / "node-exporter.prom.gz", ctx))
    src += list(JournalJsonReader().read(trace_dir / "kernel.journal.json", ctx))
    n_samples = sum(len(b.samples) for b in src)
    n_events = sum(len(b.events) for b in src)
    for fmt in ("parquet", "csv"):
        out = tmp_path / fmt
        w = ColumnarWriter(out, fmt)
        for b in src:
            w.write(b)
        w.close()
        s_path = out / f"samples.{fmt}"
        assert isinstance(sniff(s_path), ColumnarReader)
        back = read_all(ColumnarReader(), s_path, ctx).samples
        ev = read_all(ColumnarReader(), out / f"events.{fmt}", ctx).events
        assert len(back) == n_samples and len(ev) == n_events
        assert back["value"].sum() == sum(b.samples["value"].sum() for b in src)
        assert set(ev["kind"]) == {"xid", "aer", "link", "boot"}  # boot: the reboot of sn01-b01


def test_bad_csv_rows_are_rejected_by_line(tmp_path, ctx):
    p = tmp_path / "s.csv"
    p.write_text("ts,entity,metric,value\n1772409630,sn01-b01/gpu0,gpu_temp_c,41\n"
                 "oops,sn01-b01/gpu0,gpu_temp_c,41\n1772409690,sn01-b01/gpu0,gpu_temp_c,NaN\n"
                 "1772409720,,gpu_temp_c,40\n1772409750,sn01-b01/gpu0,gpu_temp_c,43\n")
    s = read_all(ColumnarReader(), p, ctx).samples
    assert list(s["value"]) == [41.0, 43.0]
    assert ctx.rejects.total == 3 and ctx.rejects.messages[0].startswith(f"{p}:line 3")


def test_truncated_parquet_is_refused(tmp_path, ctx):
    p = tmp_path / "s.parquet"
    p.write_bytes(b"PAR1" + b"\x00" * 20)
    assert list(ColumnarReader().read(p, ctx)) == []
    assert "not a readable Parquet file" in ctx.rejects.messages[0]
