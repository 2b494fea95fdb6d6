#!/usr/bin/env python3
"""Write daemon/ingest/formats/locale_dates.csv anew from this machine's C library: the month and weekday names
that journalctl's short output ("%b %d %H:%M:%S") and dmesg -T ("%a %b %e %H:%M:%S %Y") print under each locale.

    python scripts/locale_dates.py            # needs the locales (Debian: apt-get install locales-all)
    python scripts/locale_dates.py --check    # write nothing; exit 1 when the packaged file differs

journalctl and dmesg call the C library's strftime after setlocale(LC_ALL, ""), so a host whose LANG is zh_CN.UTF-8
saves "12月 05 17:59:27 host kernel: ..." and a German one "Dez 05 ...". The names are glibc's locale data (facts,
as strftime prints them), taken for the locales of the fleets' hosts and operators this project knows of; add one
to LOCALES and run again.
"""

from __future__ import annotations

import argparse
import csv
import io
import locale
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "daemon" / "ingest" / "formats" / "locale_dates.csv"
LOCALES = ("C.UTF-8", "zh_CN.UTF-8", "zh_TW.UTF-8", "zh_HK.UTF-8", "ja_JP.UTF-8", "ko_KR.UTF-8", "de_DE.UTF-8",
           "fr_FR.UTF-8", "es_ES.UTF-8", "it_IT.UTF-8", "pt_BR.UTF-8", "ru_RU.UTF-8", "pl_PL.UTF-8", "nl_NL.UTF-8",
           "sv_SE.UTF-8", "tr_TR.UTF-8", "uk_UA.UTF-8", "cs_CZ.UTF-8", "da_DK.UTF-8", "nb_NO.UTF-8", "fi_FI.UTF-8",
           "vi_VN.UTF-8", "id_ID.UTF-8")


def names(loc: str) -> tuple[list[str], list[str]]:
    """The month names (January first) and weekday names (Monday first) strftime gives under ``loc``."""
    before = locale.setlocale(locale.LC_TIME)
    locale.setlocale(locale.LC_TIME, loc)
    try:
        months = [time.strftime("%b", (2026, m, 5, 0, 0, 0, 0, 1, 0)) for m in range(1, 13)]
        # 2026-01-05 is a Monday
        days = [time.strftime("%a", (2026, 1, 5 + d, 0, 0, 0, d, 5 + d, 0)) for d in range(7)]
    finally:
        locale.setlocale(locale.LC_TIME, before)
    return months, days


def table() -> str:
    out = io.StringIO()
    out.write(f"# The month and weekday names strftime prints (%b, %a) under each locale: glibc's locale data as "
              f"{platform.libc_ver()[0]} {platform.libc_ver()[1]} gives it\n"
              "# (Debian's locales-all). Written by scripts/locale_dates.py; the names as printed, leading spaces "
              "and all (ja_JP's ' 1月').\n")
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["locale", "kind", "number", "name"])
    for loc in LOCALES:
        months, days = names(loc)
        w.writerows([loc, "month", i, name] for i, name in enumerate(months, 1))
        w.writerows([loc, "weekday", i, name] for i, name in enumerate(days, 1))
    return out.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the packaged file differs")
    args = ap.parse_args()
    try:
        text = table()
    except locale.Error as exc:
        sys.exit(f"locale_dates: a locale is not installed ({exc}): apt-get install locales-all")
    if args.check:
        same = OUT.read_text(encoding="utf-8").split("\n", 2)[2] == text.split("\n", 2)[2]
        print("locale_dates.csv: " + ("as the C library gives it" if same else "differs from the C library"))
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
