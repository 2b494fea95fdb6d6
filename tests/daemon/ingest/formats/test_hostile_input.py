"""Property-based hostile input for every reader: no crash, every good record before and after still read."""

import json
import sqlite3

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.ingest.formats import (ColumnarReader, JournalExportReader, JournalJsonReader, NvidiaSmiCsvReader,
                                   QueryRangeReader, RasdaemonReader, ReadContext, TextLogReader, VmExportReader)
from daemon.ingest.formats.kernel_events import parse_kernel_message
from daemon.ingest.naming import SeriesMapper
from tests.daemon.ingest.formats.conftest import read_all
from tests.daemon.ingest.formats.test_rasdaemon_sqlite import SCHEMA

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
junk_line = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\n\r"), max_size=120)
XID = "NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus."


def interleave(good: list[str], junk: list[str], where: list[int]) -> list[str]:
    out = list(good)
    for j, w in zip(junk, where):
        out.insert(min(w, len(out)), j)
    return out


@SETTINGS
@given(st.text(max_size=300))
def test_kernel_message_parser_never_raises(text):
    parse_kernel_message(text)
    parse_kernel_message("NVRM: Xid (PCI:" + text)
    parse_kernel_message("nvidia 0000:3b:00.0: AER: PCIe Bus Error: severity=" + text)


@SETTINGS
@given(junk=st.lists(junk_line, max_size=15), where=st.lists(st.integers(0, 12), max_size=15))
def test_journald_junk(tmp_path_factory, junk, where):
    good = [json.dumps({"__REALTIME_TIMESTAMP": str(1772409630_000000 + i * 10**6), "_HOSTNAME": "sn01-b01",
                        "_TRANSPORT": "kernel", "MESSAGE": XID}) for i in range(10)]
    junk = [j for j in junk if "Xid" not in j]
    p = tmp_path_factory.mktemp("j") / "k.json"
    p.write_text("\n".join(interleave(good, junk, where)) + "\n")
    ev = read_all(JournalJsonReader(), p, ReadContext(mapper=SeriesMapper())).events
    assert {1772409630.0 + i for i in range(10)} <= set(ev["ts"])


@SETTINGS
@given(junk=st.lists(junk_line, max_size=15), where=st.lists(st.integers(1, 12), max_size=15))
def test_syslog_junk(tmp_path_factory, junk, where):
    good = [f"2026-03-02T00:00:{i:02d}+00:00 sn01-b01 kernel: {XID}" for i in range(10)]
    junk = [j for j in junk if "Xid" not in j]
    p = tmp_path_factory.mktemp("s") / "kern.log"
    p.write_text("\n".join(interleave(good, junk, where)) + "\n")
    ev = read_all(TextLogReader(), p, ReadContext(mapper=SeriesMapper())).events
    assert {1772409600.0 + i for i in range(10)} <= set(ev["ts"])


scalar = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
          | st.text(max_size=8))
json_value = st.recursive(scalar,
                          lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
                          max_leaves=8)


@SETTINGS
@given(bad=st.lists(json_value, max_size=5))
def test_query_range_junk_series(tmp_path_factory, bad):
    good = {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "Hostname": "sn01-b01"},
            "values": [[1772409630 + 30 * i, str(40 + i)] for i in range(5)]}
    doc = {"status": "success", "data": {"resultType": "matrix", "result": [*bad, good, *bad]}}
    p = tmp_path_factory.mktemp("q") / "q.json"
    p.write_text(json.dumps(doc))
    s = read_all(QueryRangeReader(), p, ReadContext(mapper=SeriesMapper())).samples
    assert {1772409630.0 + 30 * i for i in range(5)} <= set(s["ts"])


@SETTINGS
@given(bad=st.lists(json_value | st.dictionaries(st.sampled_from(["metric", "values", "timestamps"]), json_value,
                                                 max_size=3), max_size=5))
def test_vm_export_junk_lines(tmp_path_factory, bad):
    good = {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "Hostname": "sn01-b01"},
            "values": [40 + i for i in range(5)], "timestamps": [(1772409630 + 30 * i) * 1000 for i in range(5)]}
    p = tmp_path_factory.mktemp("vm") / "export.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in [*bad, good, *bad]))
    s = read_all(VmExportReader(), p, ReadContext(mapper=SeriesMapper())).samples
    assert {1772409630.0 + 30 * i for i in range(5)} <= set(s["ts"])


@SETTINGS
@given(junk=st.lists(st.binary(max_size=40), max_size=6))
def test_journal_export_junk_between_entries(tmp_path_factory, junk):
    entry = ("__CURSOR=s=1\n__REALTIME_TIMESTAMP={t}000000\n_HOSTNAME=sn01-b01\n_TRANSPORT=kernel\n"
             f"MESSAGE={XID}\n\n")
    good = [entry.format(t=1772409600 + i).encode() for i in range(3)]
    body = b"".join(g + b"\n".join(j.replace(b"\n", b"") for j in junk[:k]) + (b"\n\n" if junk[:k] else b"")
                    for k, g in enumerate(good))
    p = tmp_path_factory.mktemp("ex") / "node.export"
    p.write_bytes(body)
    ev = read_all(JournalExportReader(), p, ReadContext(mapper=SeriesMapper())).events
    assert 1772409600.0 in set(ev["ts"]) and set(ev["ts"]) <= {1772409600.0 + i for i in range(3)}


@SETTINGS
@given(junk=st.lists(st.text(max_size=60).map(lambda t: t.replace("\n", " ").replace("\r", " ")), max_size=6),
       where=st.lists(st.integers(0, 3), max_size=6))
def test_nvidia_smi_csv_junk_lines(tmp_path_factory, junk, where):
    header = "timestamp, index, uuid, temperature.gpu, power.draw [W]"
    good = [f"2026/03/02 00:00:{30 + i}.000, 0, GPU-a, {40 + i}, 300.5 W" for i in range(3)]
    lines = interleave(good, [j for j in junk if not j.lstrip().startswith(("timestamp", "index"))], where)
    p = tmp_path_factory.mktemp("nv") / "sn01-b01.nvidia-smi.csv"
    p.write_text("\n".join([header, *lines]) + "\n")
    s = read_all(NvidiaSmiCsvReader(), p, ReadContext(mapper=SeriesMapper())).samples
    temps = s[s["metric"] == "gpu_temp_c"]
    assert {1772409630.0 + i for i in range(3)} <= set(temps["ts"])


@SETTINGS
@given(rows=st.lists(st.tuples(st.one_of(st.text(max_size=30), st.integers(-2**63, 2**63 - 1), st.none()),
                               st.one_of(st.text(max_size=12), st.none()),
                               st.one_of(st.integers(-5, 5), st.none())), max_size=8))
def test_rasdaemon_junk_rows(tmp_path_factory, rows):
    db = tmp_path_factory.mktemp("r") / "sn01-b01.db"
    conn = sqlite3.connect(db)
    conn.executescript(SCHEMA)
    conn.execute("INSERT INTO mc_event (timestamp, err_count, err_type, err_msg, label) VALUES "
                 "('2026-03-02 00:01:00 +0000', 1, 'Uncorrected', 'read error', 'DIMM_A1')")
    for ts, err_type, count in rows:
        conn.execute("INSERT INTO mc_event (timestamp, err_count, err_type) VALUES (?, ?, ?)", (ts, count, err_type))
        conn.execute("INSERT INTO aer_event (timestamp, dev_name, err_type) VALUES (?, ?, ?)", (ts, err_type, err_type))
    conn.execute("INSERT INTO mc_event (timestamp, err_count, err_type, err_msg, label) VALUES "
                 "('2026-03-02 00:09:00 +0000', 2, 'Corrected', 'read error', 'DIMM_A1')")
    conn.commit()
    conn.close()
    ev = read_all(RasdaemonReader(), db, ReadContext(mapper=SeriesMapper())).events
    assert {1772409660.0, 1772410140.0} <= set(ev["ts"])


@SETTINGS
@given(junk=st.lists(junk_line.filter(lambda s: "," not in s and '"' not in s), max_size=10),
       where=st.lists(st.integers(1, 8), max_size=10))
def test_csv_junk(tmp_path_factory, junk, where):
    good = [f"{1772409630 + 30 * i},sn01-b01/gpu0,gpu_temp_c,{40 + i}" for i in range(8)]
    p = tmp_path_factory.mktemp("c") / "s.csv"
    p.write_text("ts,entity,metric,value\n" + "\n".join(interleave(good, junk, where)) + "\n")
    s = read_all(ColumnarReader(), p, ReadContext(mapper=SeriesMapper())).samples
    assert {1772409630.0 + 30 * i for i in range(8)} <= set(s["ts"])


def test_compressed_logs_and_one_cut_short(tmp_path):
    """logrotate's gzip, xz or bzip2 (``compresscmd``) read as the plain file; a file cut short in a copy is read up
    to the cut, the cut and the line cut with it rejected with their places, nothing raised, and a file cut before
    any of its data is skipped saying so (a real kern.log, NVIDIA/gpu-operator#1146, many times over)."""
    import bz2
    import gzip
    import lzma

    from daemon.ingest.formats import TextLogReader, describe_unread, sniff
    from tests.conftest import REAL

    plain = (REAL / "quoted" / "gpu-operator-1146.kern.log").read_bytes() * 300
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "kern.log").write_bytes(plain)
    ctx = ReadContext()
    whole = read_all(TextLogReader(), tmp_path / "plain" / "kern.log", ctx).events
    assert len(whole) == 600
    import zstandard

    zstd = zstandard.ZstdCompressor()
    # zstd: as `zstd` writes it, and two frames one after the other (`zstd -c a b`, or a file appended to)
    for ext, pack in ((".gz", gzip.compress), (".xz", lzma.compress), (".bz2", bz2.compress), (".zst", zstd.compress),
                      (".zst", lambda b: zstd.compress(b[:1000]) + zstd.compress(b[1000:]))):
        packed = tmp_path / f"kern.log{ext}"
        packed.write_bytes(pack(plain))
        assert isinstance(sniff(packed), TextLogReader)
        got = read_all(TextLogReader(), packed, ReadContext()).events
        assert got["ts"].tolist() == whole["ts"].tolist()
    # zstd decodes a block (up to 128 KiB of data) whole or not at all: its file is ten times the size, for a cut
    # at two thirds to leave whole blocks before it
    for ext, pack, times in ((".gz", gzip.compress, 1), (".zst", zstd.compress, 10)):
        data = pack(plain * times)
        cut = tmp_path / f"cut{ext}" / f"kern.log{ext}"
        cut.parent.mkdir()
        cut.write_bytes(data[: len(data) * 2 // 3])
        ctx = ReadContext()
        got = read_all(TextLogReader(), cut, ctx).events
        assert 0 < len(got) < 600 * times and got["ts"].tolist() == (whole["ts"].tolist() * times)[: len(got)]
        reasons = [m.split(": ", 1)[1] for m in ctx.rejects.messages]
        assert "compressed data ends or breaks (a file cut short?): read up to there" in reasons[0], ext
        assert any(r.startswith("a line cut short with its compressed file") for r in reasons), ext
    broken = bytearray(zstd.compress(plain))
    broken[len(broken) // 2] ^= 0xFF  # a bad block: zstd's checksum or its decoder says so
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "kern.log.zst").write_bytes(bytes(broken))
    ctx = ReadContext()
    got = read_all(TextLogReader(), tmp_path / "bad" / "kern.log.zst", ctx).events
    assert len(got) < 600 and "compressed data ends or breaks" in " ".join(ctx.rejects.messages)
    early = tmp_path / "early.kern.log.xz"
    early.write_bytes(lzma.compress(plain)[:200])
    assert sniff(early) is None and describe_unread(early).startswith("a compressed file cut short before any of its")
