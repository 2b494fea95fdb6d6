from daemon.ingest.formats import ColumnarReader, ColumnarWriter, OpenMetricsReader, sniff
from daemon.ingest.formats.kernellog import JournalJsonReader
from tests.daemon.ingest.formats.conftest import read_all


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


def test_a_first_row_with_a_field_too_many_costs_only_itself(tmp_path, ctx):
    """Found by the fuzz suite: a first data row with one field more than the header made pandas take the first
    column for an index, and every later row lost its timestamp. Rows of the wrong width are rejected at their line."""
    rows = [f"{1772409630 + 30 * k},sn01-b01/gpu0,gpu_temp_c,{40 + k}" for k in range(6)]
    rows[0], rows[3] = "," + rows[0], rows[3] + ",7"
    p = tmp_path / "s.csv"
    p.write_text("ts,entity,metric,value\n" + "\n".join(rows[:5]) + "\n\n" + rows[5] + "\n")  # and a blank line
    s = read_all(ColumnarReader(), p, ctx).samples
    assert list(s["value"]) == [41.0, 42.0, 44.0, 45.0]
    assert [m.split(": ", 1) for m in ctx.rejects.messages] == [
        [f"{p}:line 2", "5 fields where the header has 4"], [f"{p}:line 5", "5 fields where the header has 4"]]


def test_rows_after_blank_lines_are_rejected_at_their_own_line(tmp_path, ctx):
    """Blank lines are skipped, and a bad row after them is named by its line in the file (pandas' own skipping
    put it one line short for each blank line before it)."""
    p = tmp_path / "s.csv"
    p.write_text("ts,entity,metric,value\n\n1772409630,sn01-b01/gpu0,gpu_temp_c,41\n\n  \n"
                 "oops,sn01-b01/gpu0,gpu_temp_c,41\n1772409690,sn01-b01/gpu0,gpu_temp_c,43,9\n"
                 "1772409720,sn01-b01/gpu0,gpu_temp_c,44\n")
    s = read_all(ColumnarReader(), p, ctx).samples
    assert list(s["value"]) == [41.0, 44.0]
    assert sorted(m.split(": ", 1)[0] for m in ctx.rejects.messages) == [f"{p}:line 6", f"{p}:line 7"]


def test_one_bad_byte_costs_its_row_not_the_file(tmp_path, ctx):
    """Issue 54, probe 6: a byte that is not UTF-8 on line 211 dropped the file's rest, the reject naming line 2."""
    rows = [f"{1772409630 + 30 * k},sn01-b01/gpu0,gpu_temp_c,{40 + k % 5}".encode() for k in range(300)]
    rows[209] = rows[209].replace(b"gpu_temp_c", b"gpu_te\xffmp_c")  # line 211 (the header is line 1)
    p = tmp_path / "s.csv"
    p.write_bytes(b"ts,entity,metric,value\n" + b"\n".join(rows) + b"\n")
    ctx.chunk_rows = 100  # the byte in the third chunk
    s = read_all(ColumnarReader(), p, ctx).samples
    assert len(s) == 299 and ctx.rejects.total == 1
    assert ctx.rejects.messages[0].startswith(f"{p}:line 211") and "not UTF-8" in ctx.rejects.messages[0]


def test_a_field_over_128_kib_costs_its_row(tmp_path, ctx):
    """Issue 54, probe 5: Python's csv module refused a field over 128 KiB and the replay aborted."""
    rows = [f"{1772409630 + 30 * k},sn01-b01/gpu0,gpu_temp_c,41" for k in range(10)]
    rows[4] = f"1772409750,sn01-b01/gpu0,{'x' * 200_000},41"
    p = tmp_path / "s.csv"
    p.write_text("ts,entity,metric,value\n" + "\n".join(rows) + "\n")
    s = read_all(ColumnarReader(), p, ctx).samples
    assert len(s) == 9 and ctx.rejects.total == 1 and ctx.rejects.messages[0].startswith(f"{p}:line 6")


def test_truncated_parquet_is_refused(tmp_path, ctx):
    p = tmp_path / "s.parquet"
    p.write_bytes(b"PAR1" + b"\x00" * 20)
    assert list(ColumnarReader().read(p, ctx)) == []
    assert "not a readable Parquet file" in ctx.rejects.messages[0]


def test_parquet_window_skips_row_groups_outside_it_and_keeps_row_numbers(tmp_path, ctx):
    """A part of a long trace reads only the row groups whose time statistics reach into its window; a bad row in
    a group read is still named by its row in the file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "samples.parquet"
    with pq.ParquetWriter(p, pa.schema([("ts", pa.float64()), ("entity", pa.string()), ("metric", pa.string()),
                                        ("value", pa.float64())])) as w:
        for g in range(4):  # four row groups of 10 rows: ts 1000g+0 .. 1000g+9
            value = [float("nan") if (g, i) == (2, 3) else float(i) for i in range(10)]
            w.write_table(pa.table({"ts": [1000.0 * g + i for i in range(10)], "entity": ["sn01-b01/gpu0"] * 10,
                                    "metric": ["gpu_temp_c"] * 10, "value": value}))
    ctx.window = (1500.0, 2500.0)  # groups 1 (max 1009 <= 1500: out), 2 (in), 3 (min 3000 > 2500: out)
    s = read_all(ColumnarReader(), p, ctx).samples
    assert sorted(set(s["ts"] // 1000)) == [2.0] and len(s) == 9
    assert ctx.rejects.total == 1 and ctx.rejects.messages[0].startswith(f"{p}:row 23")
    ctx.window = (5.0, 1005.0)  # groups 0 and 1
    assert len(read_all(ColumnarReader(), p, ctx).samples) == 20


def test_a_compressed_csv_is_read_and_a_stray_quote_costs_its_row(tmp_path, ctx):
    """logrotate's gzip and zstd as the plain file; a quote that opens a field on one line (a bad byte: '1' ^ 19 is
    '"') costs that row alone, at its line, not the rows after it nor the header."""
    import gzip

    import zstandard

    rows = [f"{1772409600 + i},sn01-b01/gpu0,gpu_temp_c,{40 + i}" for i in range(6)]
    rows[0] = '"' + rows[0][1:]
    text = ("ts,entity,metric,value\n" + "\n".join(rows) + "\n").encode()
    for name, pack in (("s.csv.gz", gzip.compress), ("s.csv.zst", zstandard.ZstdCompressor().compress),
                       ("s.csv", lambda b: b)):
        path = tmp_path / name
        path.write_bytes(pack(text))
        assert isinstance(sniff(path), ColumnarReader)
        got = read_all(ColumnarReader(), path, ctx).samples
        assert sorted(got["ts"]) == [1772409601.0 + i for i in range(5)], name
    assert any(m.startswith(f"{tmp_path / 's.csv'}:line 2: a byte that is not UTF-8, a stray quote")
               for m in ctx.rejects.messages), ctx.rejects.messages
