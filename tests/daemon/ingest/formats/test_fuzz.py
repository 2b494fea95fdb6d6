"""Fuzzing every reader (issue 54): at least 1,000 mutated inputs each, no traceback, no hang, every reject with its
place, and, for the formats of one record per line, every record on a line left alone still read.

Two kinds of mutation, each drawn by hypothesis (from a fixed seed: CI runs the same inputs every time, and a
failure shrinks to a small case):

- **line mutations** of a file whose every line is one record with a time of its own: some lines get bytes flipped,
  inserted (random bytes or known poison: NUL, invalid UTF-8, a 20-digit number, nan, inf, a quote, a brace),
  deleted or cut; the times of the lines left alone must all be read;
- **byte mutations** of a whole file (real public fixtures, and the binary and single-document formats: Parquet,
  SQLite, a journal file, a Prometheus query_range document): flips, inserts, deletions and a cut anywhere; the
  reader must finish with what it can read and say what it could not.

``RASWARDEN_FUZZ_EXAMPLES`` sets the count per test (default 1,000: every reader gets at least that many, the
target of the issue; a reader's further real files a share of it),
``RASWARDEN_FUZZ_SEED`` the seed (default 54; another draws other inputs, to look further).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from daemon.ingest.formats import (ColumnarReader, FabricManagerReader, IpmiSelReader, JournalExportReader,
                                   JournalJsonReader, NvidiaSmiCsvReader, OpenMetricsReader, QueryRangeReader,
                                   RasMcCtlReader, RasdaemonReader, ReadContext, SmiReader, TextLogReader,
                                   VmExportReader)
from daemon.ingest.naming import SeriesMapper
from tests.conftest import REAL, ROOT
from tests.daemon.ingest.formats.conftest import read_all

EXAMPLES = int(os.environ.get("RASWARDEN_FUZZ_EXAMPLES", "1000"))
SEED = int(os.environ.get("RASWARDEN_FUZZ_SEED", "54"))


def fuzz(share: float = 1.0):
    """The fuzz settings (``share`` of EXAMPLES inputs) and one fixed seed: every checkout and CI draw the same inputs
    (``derandomize`` alone drew others in another directory), and a failure shrinks to a small case."""
    chosen = settings(max_examples=max(1, round(EXAMPLES * share)), deadline=None, database=None,
                      suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                             HealthCheck.data_too_large])
    return lambda test: seed(SEED)(chosen(test))


FUZZ = fuzz()
HANG_S = 30
"""One read of a file of a few dozen records taking this long is a hang."""

BASE = 1772409600  # 2026-03-02T00:00:00Z
XID = "NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus."
POISON = [b"\x00", b"\xff\xfe\xc0", b"99999999999999999999", b"nan", b"-inf", b"1e309", b'"', b"{", b"}", b"\\",
          b",", b"\t", b"\r", b"=", b":", b"[", b"]", b"\xe2\x80\xae", b"-1", b"0" * 400]


class Hang(Exception):
    pass


@contextmanager
def no_hang(seconds: float = HANG_S):
    """Raise :class:`Hang` in the test when the block takes longer than ``seconds``."""
    def alarm(*_):
        raise Hang(f"a read took over {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# -- mutations ------------------------------------------------------------------------------------
piece = st.binary(min_size=1, max_size=24) | st.sampled_from(POISON)
edit = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(1, 255)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), piece),
    st.tuples(st.just("delete"), st.integers(0, 10**6), st.integers(1, 40)),
    st.tuples(st.just("cut"), st.integers(0, 10**6), st.just(0)),
)


def apply(data: bytes, edits: list[tuple], newlines: bool = True) -> bytes:
    """``data`` with ``edits`` applied in turn (positions taken modulo its length); without ``newlines``, no edit
    brings in a line break."""
    out = bytearray(data)
    for kind, at, arg in edits:
        at = at % (len(out) + 1)
        if kind == "flip" and out:
            at = min(at, len(out) - 1)
            out[at] ^= arg
            if not newlines and out[at] == 0x0A:
                out[at] ^= arg
        elif kind == "insert":
            out[at:at] = arg if newlines else arg.replace(b"\n", b"")
        elif kind == "delete":
            del out[at:at + arg]
        elif kind == "cut":
            del out[at:]
    return bytes(out)


def check_rejects(ctx: ReadContext, path: Path) -> None:
    """Every reject and note names the file it is about (and, when it is about one record, where)."""
    for message in ctx.rejects.messages + ctx.rejects.notes:
        assert path.name in message.split(": ", 1)[0] or str(path) in message, message


def read(reader, path: Path) -> tuple[object, ReadContext]:
    ctx = ReadContext(mapper=SeriesMapper())
    with no_hang():
        batch = read_all(reader, path, ctx)
    check_rejects(ctx, path)
    return batch, ctx


# -- one record per line: a line left alone is read -----------------------------------------------
@dataclass
class LineFormat:
    """A file of ``header`` lines then ``lines`` records, the i-th stamped BASE + i seconds; ``times`` reads the
    stamps back from a batch."""

    name: str
    reader: Callable
    filename: str
    line: Callable[[int], str]
    header: tuple[str, ...] = ()
    times: Callable = lambda batch: set(batch.events["ts"]) if len(batch.events) else set()
    lines: int = 24


def _sample_times(batch) -> set:
    return set(batch.samples["ts"]) if len(batch.samples) else set()


def _stamp(i: int) -> str:
    return f"2026-03-02T00:{i // 60:02d}:{i % 60:02d}"


LINE_FORMATS = [
    LineFormat("syslog", TextLogReader, "kern.log", lambda i: f"{_stamp(i)}.000000+00:00 sn01-b01 kernel: {XID}"),
    LineFormat("dmesg-decode", TextLogReader, "sn01-b01.dmesg",
               lambda i: f"kern  :warn  : {_stamp(i)},000000+00:00 {XID}"),
    LineFormat("dmesg-T", TextLogReader, "sn01-b01.dmesg",
               lambda i: f"[Mon Mar  2 00:{i // 60:02d}:{i % 60:02d} 2026] {XID}"),
    LineFormat("journal-json", JournalJsonReader, "kernel.json", lambda i: json.dumps(
        {"__REALTIME_TIMESTAMP": str((BASE + i) * 10**6), "_HOSTNAME": "sn01-b01", "_TRANSPORT": "kernel",
         "MESSAGE": XID})),
    LineFormat("journal-json-seq", JournalJsonReader, "kernel.json", lambda i: "\x1e" + json.dumps(
        {"__REALTIME_TIMESTAMP": str((BASE + i) * 10**6), "_HOSTNAME": "sn01-b01", "_TRANSPORT": "kernel",
         "MESSAGE": XID})),
    LineFormat("journal-json-sse", JournalJsonReader, "kernel.json", lambda i: "data: " + json.dumps(
        {"__REALTIME_TIMESTAMP": str((BASE + i) * 10**6), "_HOSTNAME": "sn01-b01", "_TRANSPORT": "kernel",
         "MESSAGE": XID})),
    LineFormat("openmetrics", OpenMetricsReader, "dcgm.prom",
               lambda i: f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",Hostname="sn01-b01"}} {40 + i % 9} {(BASE + i) * 1000}',
               times=_sample_times),
    LineFormat("vm-export", VmExportReader, "export.jsonl", lambda i: json.dumps(
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "Hostname": "sn01-b01"},
         "values": [40 + i % 9], "timestamps": [(BASE + i) * 1000]}), times=_sample_times),
    LineFormat("nvidia-smi-csv", NvidiaSmiCsvReader, "sn01-b01.nvidia-smi.csv",
               lambda i: f"2026/03/02 00:{i // 60:02d}:{i % 60:02d}.000, 0, GPU-a, {40 + i % 9}, 300.5 W",
               header=("timestamp, index, uuid, temperature.gpu, power.draw [W]",),
               times=lambda b: set(b.samples[b.samples["metric"] == "gpu_temp_c"]["ts"]) if len(b.samples) else set()),
    LineFormat("ipmitool-sel", IpmiSelReader, "sn01-b01.sel",
               lambda i: f"{i + 1:4x} | 03/02/2026 | 00:{i // 60:02d}:{i % 60:02d} | Memory #0x88 | "
                         "Uncorrectable ECC | Asserted"),
    LineFormat("ipmi-sel-csv", IpmiSelReader, "sn01-b01.sel",
               lambda i: f"{i + 1},Mar-02-2026,00:{i // 60:02d}:{i % 60:02d},Sensor #136,Memory,Critical,"
                         "Uncorrectable memory error", header=("ID,Date,Time,Name,Type,State,Event",)),
    LineFormat("ras-mc-ctl", RasMcCtlReader, "sn01-b01.ras-mc-ctl",
               lambda i: f"{i + 1} 2026-03-02 00:{i // 60:02d}:{i % 60:02d} +0000 0000:3a:00.0 Uncorrected (Fatal) "
                         "error: Surprise Down Error", header=("No Memory errors.", "", "PCIe AER events:")),
    LineFormat("columnar-csv", ColumnarReader, "samples.csv",
               lambda i: f"{BASE + i},sn01-b01/gpu0,gpu_temp_c,{40 + i % 9}", header=("ts,entity,metric,value",),
               times=_sample_times),
]


@pytest.mark.parametrize("fmt", LINE_FORMATS, ids=lambda f: f.name)
def test_a_mutated_line_costs_only_itself(tmp_path, fmt):
    path = tmp_path / fmt.filename  # written anew for each input

    @FUZZ
    @given(mutated=st.dictionaries(st.integers(0, fmt.lines - 1), st.lists(edit, min_size=1, max_size=4),
                                   min_size=1, max_size=6))
    def run(mutated):
        lines = [fmt.line(i).encode() for i in range(fmt.lines)]
        body = [apply(ln, mutated[i], newlines=False) if i in mutated else ln for i, ln in enumerate(lines)]
        path.write_bytes(b"".join(h.encode() + b"\n" for h in fmt.header) + b"".join(b + b"\n" for b in body))
        batch, _ = read(fmt.reader(), path)
        kept = {float(BASE + i) for i in range(fmt.lines) if i not in mutated}
        assert kept <= fmt.times(batch), sorted(kept - fmt.times(batch))

    run()


def _export_entry(i: int) -> bytes:
    return (f"__CURSOR=s=1;i={i}\n__REALTIME_TIMESTAMP={(BASE + i) * 10**6}\n_HOSTNAME=sn01-b01\n"
            f"_TRANSPORT=kernel\nMESSAGE={XID}\n\n").encode()


@FUZZ
@given(mutated=st.dictionaries(st.integers(0, 5 * 12 - 1), st.lists(edit, min_size=1, max_size=3), min_size=1,
                               max_size=5))
def test_journal_export_a_mutated_field_costs_only_its_entry(tmp_path, mutated):
    """``journalctl -o export``: entries of five fields and an empty line; a mutated line costs its entry at most."""
    lines = [ln for i in range(12) for ln in _export_entry(i).split(b"\n")[:5]]
    body = b""
    for i, ln in enumerate(lines):
        body += (apply(ln, mutated[i], newlines=False) if i in mutated else ln) + b"\n"
        if i % 5 == 4:
            body += b"\n"
    path = tmp_path / "node.export"
    path.write_bytes(body)
    batch, _ = read(JournalExportReader(), path)
    kept = {float(BASE + e) for e in range(12) if not any(i // 5 == e for i in mutated)}
    got = set(batch.events["ts"]) if len(batch.events) else set()
    assert kept <= got, sorted(kept - got)


# -- whole files: no traceback, no hang, a place for every reject ---------------------------------
def _parquet(path: Path) -> Path:
    import pandas as pd

    from daemon.ingest.batch import Batch
    from daemon.ingest.formats import ColumnarWriter

    batch = Batch()
    batch.samples = pd.DataFrame({"ts": [float(BASE + 30 * i) for i in range(40)], "entity": "sn01-b01/gpu0",
                                  "metric": "gpu_temp_c", "value": [40.0 + i % 7 for i in range(40)]})
    writer = ColumnarWriter(path.parent)
    writer.write(batch)
    writer.close()
    return path.parent / "samples.parquet"


def _sqlite(path: Path) -> Path:
    from tests.daemon.ingest.formats.test_rasdaemon_sqlite import SCHEMA

    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    for i in range(20):
        conn.execute("INSERT INTO mc_event (timestamp, err_count, err_type, err_msg, label) VALUES (?, 1, "
                     "'Corrected', 'read error', 'DIMM_A1')", (f"2026-03-02 00:{i:02d}:00 +0000",))
        conn.execute("INSERT INTO aer_event (timestamp, dev_name, err_type, err_msg) VALUES (?, '0000:18:00.0', "
                     "'Corrected', 'Receiver Error')", (f"2026-03-02 00:{i:02d}:30 +0000",))
    conn.commit()
    conn.close()
    return path


def _query_range(path: Path) -> Path:
    path.write_text(json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": str(g), "Hostname": "sn01-b01"},
         "values": [[BASE + 30 * i, str(40 + i)] for i in range(10)]} for g in range(4)]}}))
    return path


def _copy(source: Path) -> Callable[[Path], Path]:
    def make(path: Path) -> Path:
        path.write_bytes(source.read_bytes())
        return path

    return make


# The last column: the share of EXAMPLES each file gets. Every reader gets at least EXAMPLES in all: the text log
# and exposition readers have their line tests above, so their further real files take 300 each.
WHOLE_FILES = [
    ("parquet", ColumnarReader, "samples.parquet", _parquet, 1.0),
    ("rasdaemon-sqlite", RasdaemonReader, "sn01-b01.db", _sqlite, 1.0),
    ("query-range", QueryRangeReader, "q.json", _query_range, 1.0),
    ("kmsg", TextLogReader, "sn01-b01.kmsg", _copy(REAL / "gpud" / "kmsg.1.log"), 0.3),
    ("dmesg-decode-real", TextLogReader, "gpu-node-01.dmesg",
     _copy(REAL / "gpud" / "gpu-node-01.dmesg-decode-iso.log"), 0.3),
    ("kern-log-real", TextLogReader, "kern.log", _copy(REAL / "quoted" / "gpu-operator-1146.kern.log"), 0.3),
    ("rfc5424-real", TextLogReader, "messages.log", _copy(REAL / "quoted" / "rfc5424-examples.log"), 0.3),
    ("fabric-manager-real", FabricManagerReader, "fabricmanager.log",
     _copy(REAL / "gpud" / "gpu-node-03.fabricmanager.log"), 1.0),
    ("dcgm-exporter-real", OpenMetricsReader, "dcgm.prom", _copy(REAL / "quoted" / "dcgm-exporter-188.prom"), 0.3),
    ("smi-snapshots", SmiReader, "smi.jsonl", _copy(ROOT / "fixtures" / "exporters" / "smi-snapshots.jsonl"), 1.0),
    ("nvidia-gpu-exporter-real", OpenMetricsReader, "h100.metrics",
     _copy(REAL / "nvidia_gpu_exporter" / "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__load.metrics"), 0.3),
]


@pytest.mark.parametrize("name, reader, filename, make, share", WHOLE_FILES, ids=[w[0] for w in WHOLE_FILES])
def test_a_mutated_file_is_read_as_far_as_it_can_be(tmp_path, name, reader, filename, make, share):
    (tmp_path / "seed").mkdir()
    original = make(tmp_path / "seed" / filename).read_bytes()
    assert len(original) > 100
    path = tmp_path / filename  # written anew for each input

    @fuzz(share)
    @given(edits=st.lists(edit, min_size=1, max_size=6))
    def run(edits):
        path.write_bytes(apply(original, edits))
        read(reader(), path)

    run()
