"""Kernel lines saved on hosts whose language is not English: journalctl's short output and dmesg -T print the month
and weekday as the C library's strftime does under the host's locale."""

import calendar
import datetime as dt
import locale
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daemon.ingest.formats import ReadContext, TextLogReader, sniff
from daemon.ingest.formats.locale_dates import _ROWS, MONTHS
from tests.conftest import require
from tests.daemon.ingest.formats.conftest import read_all

ROOT = Path(__file__).resolve().parents[4]
LOCALES = sorted({r["locale"] for r in _ROWS})
WHEN = dt.datetime(2026, 12, 5, 17, 59, 27)  # a Saturday
XID = "NVRM: Xid (PCI:0000:01:00): 79, pid=1122, GPU has fallen off the bus."


def _installed(loc: str) -> bool:
    before = locale.setlocale(locale.LC_TIME)
    try:
        locale.setlocale(locale.LC_TIME, loc)
    except locale.Error:
        return False
    finally:
        locale.setlocale(locale.LC_TIME, before)
    return True


def _strftime(loc: str, fmt: str, when: dt.datetime) -> str:
    before = locale.setlocale(locale.LC_TIME)
    locale.setlocale(locale.LC_TIME, loc)
    try:
        return time.strftime(fmt, when.timetuple())
    finally:
        locale.setlocale(locale.LC_TIME, before)


def _read(tmp_path: Path, name: str, lines: list[str]):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert isinstance(sniff(p), TextLogReader), f"{name} not taken for a kernel log"
    ctx = ReadContext()
    ctx.span = (WHEN.replace(tzinfo=dt.UTC).timestamp() - 86400, WHEN.replace(tzinfo=dt.UTC).timestamp() + 86400)
    return read_all(TextLogReader(), p, ctx), ctx


def test_the_packaged_names_are_the_c_librarys():
    require(all(_installed(loc) for loc in LOCALES), "the C library's locales (apt-get install locales-all)")
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "locale_dates.py"), "--check"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_no_month_name_means_two_months():
    meanings: dict[str, set[int]] = {}
    for r in _ROWS:
        if r["kind"] == "month":
            meanings.setdefault(r["name"].strip(), set()).add(int(r["number"]))
    assert {name for name, numbers in meanings.items() if len(numbers) > 1} == set()
    assert len(MONTHS) == len(meanings)


@pytest.mark.parametrize("loc", LOCALES)
def test_journalctl_and_dmesg_t_lines_of_every_locale_are_read(tmp_path, loc):
    """The lines as journalctl (``%b %d %H:%M:%S``) and dmesg -T (``%a %b %e %H:%M:%S %Y``) print them under the
    locale, made by the C library's own strftime: each Xid 79 read at its time, in every month."""
    require(_installed(loc), f"the C library's {loc} locale (apt-get install locales-all)")
    for month in range(1, 13):
        when = WHEN.replace(month=month, day=min(WHEN.day, calendar.monthrange(2026, month)[1]))
        syslog = f"{_strftime(loc, '%b %d %H:%M:%S', when)} gpu01 kernel: {XID}"
        dmesg = f"[{_strftime(loc, '%a %b %e %H:%M:%S %Y', when)}] {XID}"
        for name, line in ((f"gpu01-{month}.log", syslog), (f"gpu01-{month}.dmesg", dmesg)):
            batch, ctx = _read(tmp_path, name, [line])
            assert list(batch.events["code"]) == [79] and ctx.rejects.total == 0, (loc, line, ctx.rejects.messages)
            read = dt.datetime.fromtimestamp(batch.events["ts"].iloc[0], dt.UTC)
            # (a syslog line's year is the one nearest the trace's span: only its month, day and time are its own)
            assert read.replace(year=2026) == when.replace(tzinfo=dt.UTC), (loc, line, read)


@pytest.mark.parametrize("line, month", [
    ("12月 05 17:59:27 gpu01 kernel: " + XID, 12),  # zh_CN
    (" 1月 05 17:59:27 gpu01 kernel: " + XID, 1),  # ja_JP, padded
    ("Okt 06 17:59:27 balrog kernel: " + XID, 10),  # de_DE
    ("déc. 05 17:59:27 gpu01 kernel: " + XID, 12),  # fr_FR
])
def test_month_names_of_other_languages_in_syslog_lines(tmp_path, line, month):
    ctx = ReadContext()
    year = (dt.datetime(2026, 1, 1, tzinfo=dt.UTC), dt.datetime(2026, 12, 31, tzinfo=dt.UTC))
    ctx.span = (year[0].timestamp(), year[1].timestamp())
    p = tmp_path / "node.log"
    p.write_text(line + "\n", encoding="utf-8")
    batch = read_all(TextLogReader(), p, ctx)
    assert list(batch.events["code"]) == [79] and ctx.rejects.total == 0
    assert dt.datetime.fromtimestamp(batch.events["ts"].iloc[0], dt.UTC).month == month


def test_dmesg_t_in_chinese(tmp_path):
    batch, ctx = _read(tmp_path, "gpu01.dmesg", ["[六 12月  5 17:59:27 2026] " + XID])
    assert list(batch.events["ts"]) == [WHEN.replace(tzinfo=dt.UTC).timestamp()] and ctx.rejects.total == 0


def test_a_month_in_no_language_read_is_named_with_what_to_do(tmp_path):
    """A host in a language not among the table's (Thai: glibc's th_TH prints December as ธ.ค.): the file is skipped,
    or its line rejected, saying the month word is not read and how to record the journal instead."""
    from daemon.ingest.formats import describe_unread

    thai = "ธ.ค. 05 17:59:27 gpu01 kernel: " + XID
    p = tmp_path / "gpu01.log"
    p.write_text(thai + "\n", encoding="utf-8")
    assert sniff(p) is None
    why = describe_unread(p)
    assert "'ธ.ค.'" in why and "short-iso" in why and "xid 79" in why
    p.write_text("Dec 05 17:59:27 gpu01 kernel: " + XID + "\n" + thai + "\n", encoding="utf-8")
    _, ctx = _read(tmp_path, "gpu01.log", p.read_text(encoding="utf-8").splitlines())
    assert ctx.rejects.total == 1 and "'ธ.ค.'" in ctx.rejects.messages[0] and "short-iso" in ctx.rejects.messages[0]
