"""Month and weekday names as the hosts' locales print them, for the stamps that spell them out.

journalctl's short output (``%b %d %H:%M:%S``) and ``dmesg -T`` (``%a %b %e %H:%M:%S %Y``) print the month and
weekday in the host's language: ``12月 05 17:59:27 gpu01 kernel: ...`` under zh_CN, ``Okt 06 17:59:27 balrog
kernel: ...`` under de_DE (a line quoted on GitHub). The names are glibc's, packaged in ``locale_dates.csv``
(``scripts/locale_dates.py`` writes it); a name that means two months among its locales would be left out (none
does).
"""

from __future__ import annotations

import csv
import re
from importlib import resources


def _rows() -> list[dict[str, str]]:
    text = resources.files("daemon.ingest.formats").joinpath("locale_dates.csv").read_text(encoding="utf-8")
    return list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))


def _alternation(names) -> str:
    """A regex group's alternatives for ``names``, longest first (so ``10月`` is not read as ``1月``)."""
    return "|".join(re.escape(n) for n in sorted(set(names), key=lambda n: (-len(n), n)))


def _months(rows: list[dict[str, str]]) -> dict[str, int]:
    """Each month name (without its padding) to its number, but a name two locales give two months."""
    meanings: dict[str, set[int]] = {}
    for r in rows:
        if r["kind"] == "month":
            meanings.setdefault(r["name"].strip(), set()).add(int(r["number"]))
    return {name: next(iter(numbers)) for name, numbers in meanings.items() if len(numbers) == 1}


_ROWS = _rows()
#: each month name, as printed without its padding, to its number (January 1)
MONTHS: dict[str, int] = _months(_ROWS)
#: each weekday name, as printed without its padding
WEEKDAYS: frozenset[str] = frozenset(r["name"].strip() for r in _ROWS if r["kind"] == "weekday")
#: a regex of any month name (no group of its own)
MONTH_PATTERN = _alternation(MONTHS)
#: a regex of any weekday name (no group of its own)
WEEKDAY_PATTERN = _alternation(WEEKDAYS)
