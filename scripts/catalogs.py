#!/usr/bin/env python3
"""Write the vendors' fault catalogs (detectors/catalogs/) anew from the vendors' own files.

    python scripts/catalogs.py xid Xid-Catalog.xlsx      # NVIDIA's workbook -> nvidia_xid.csv, nvidia_xid_decode.csv
    python scripts/catalogs.py ascend faultCode.json     # MindCluster's table -> ascend_fault_codes.csv
    python scripts/catalogs.py afid error_map.c          # AMD's AFID list (amdsmi) -> amd_afid.csv
    ... --check                                         # write nothing; exit 1 when the packaged file differs

NVIDIA's workbook is the download of docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html; its sheets are
found by their header rows (the catalog's "Mnemonic", the decode sheet's "Error Status"), not by name. MindCluster's
table is ascend-device-plugin's build/faultCode.json in Ascend/mind-cluster. AMD's AMD Field ID (AFID) list is the
table amd-smi decodes CPER records with, ROCm/amdsmi's src/aca-decode/error_map.c (its rows are read, not its code).
Facts only: the files keep each vendor's
codes, words and buckets; what raswarden makes of them stays in xid.csv and detectors/vendor_events.py. After a
regeneration, the tests fail for every new code raswarden has no judgement of (tests/detectors/test_xid_catalog.py,
tests/detectors/test_vendor_events.py).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import hashlib
import io
import json
import re
import sys
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

CATALOGS = Path(__file__).resolve().parent.parent / "detectors" / "catalogs"
_NS = {"m": "http://schemas.openxmlformats.org/spreadsheetml/2006/main",
       "r": "http://schemas.openxmlformats.org/officeDocument/2006/relationships"}
_ARCH = ("a100", "h100", "b100", "gb200")
# MindCluster's handling levels, least to most severe (a code listed at two takes the more severe)
ASCEND_LEVELS = ("NotHandleFault", "SubHealthFault", "RestartRequest", "RestartBusiness", "FreeRestartNPU",
                 "PreSeparateNPU", "RestartNPU", "SeparateNPU")


class SourceError(Exception):
    """The vendor's file is not what this script reads (the message says what is missing and where)."""


# -- the workbook --------------------------------------------------------------------------------------------------
def _column(ref: str) -> int:
    """"C12" -> 2."""
    n = 0
    for ch in re.match(r"[A-Z]+", ref).group(0):
        n = n * 26 + ord(ch) - 64
    return n - 1


def read_workbook(path: Path) -> dict[str, list[list[str]]]:
    """Every sheet of an .xlsx as rows of cell texts (standard library only: the workbook is a zip of XML)."""
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise SourceError(f"{path}: not an .xlsx workbook ({exc})") from exc
    with zf:
        shared = []
        if "xl/sharedStrings.xml" in zf.namelist():
            for si in ET.fromstring(zf.read("xl/sharedStrings.xml")).findall("m:si", _NS):
                shared.append("".join(t.text or "" for t in si.iter(f"{{{_NS['m']}}}t")))
        rels = {r.get("Id"): r.get("Target") for r in ET.fromstring(zf.read("xl/_rels/workbook.xml.rels"))}
        sheets = {}
        for sheet in ET.fromstring(zf.read("xl/workbook.xml")).find("m:sheets", _NS):
            target = rels[sheet.get(f"{{{_NS['r']}}}id")].lstrip("/")
            target = target if target.startswith("xl/") else f"xl/{target}"
            rows = []
            for row in ET.fromstring(zf.read(target)).iterfind("m:sheetData/m:row", _NS):
                cells: list[str] = []
                for c in row.findall("m:c", _NS):
                    col = _column(c.get("r")) if c.get("r") else len(cells)
                    cells.extend([""] * (col - len(cells)))
                    if c.get("t") == "inlineStr":
                        text = "".join(t.text or "" for t in c.iter(f"{{{_NS['m']}}}t"))
                    else:
                        v = c.find("m:v", _NS)
                        text = "" if v is None or v.text is None else v.text
                        text = shared[int(text)] if c.get("t") == "s" and text else text
                    cells.append(text)
                rows.append(cells)
            sheets[sheet.get("name")] = rows
        return sheets


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def _one_line(text: str) -> str:
    return re.sub(r"\s*\n\s*", "; ", text.strip()).replace(" /; ", " / ")


def _find(header: list[str], *words: str, required: bool = True) -> int | None:
    """The column whose header holds every word (case and white space folded)."""
    for i, h in enumerate(header):
        if all(w in _norm(h) for w in words):
            return i
    if required:
        raise SourceError(f"no column with {' '.join(words)!r} in the header {header}")
    return None


def _sheet_with(sheets: dict[str, list[list[str]]], word: str) -> tuple[str, int, list[list[str]]]:
    for name, rows in sheets.items():
        for k, row in enumerate(rows[:10]):
            if any(word in _norm(c) for c in row):
                return name, k, rows
    raise SourceError(f"no sheet has a {word!r} column")


def _cell(row: list[str], i: int | None) -> str:
    return row[i].strip() if i is not None and i < len(row) else ""


def _code(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:
        return None


def xid_rows(sheets: dict[str, list[list[str]]]) -> tuple[list[list[str]], list[list[str]]]:
    """The catalog's rows and the decode sheet's, as nvidia_xid.csv and nvidia_xid_decode.csv hold them."""
    name, k, rows = _sheet_with(sheets, "mnemonic")
    h = rows[k]
    code, mnemonic, description = _find(h, "code"), _find(h, "mnemonic"), _find(h, "description")
    immediate, investigatory = _find(h, "immediate"), _find(h, "investigatory")
    linkage = _find(h, "154", required=False)
    applies = [_find(h, "applies", arch) for arch in _ARCH]
    catalog = []
    for n, row in enumerate(rows[k + 1:], start=k + 2):
        c = _code(_cell(row, code))
        if c is None:
            if any(cell.strip() for cell in row):
                print(f"catalogs: sheet {name!r} row {n}: no Xid number, skipped", file=sys.stderr)
            continue
        catalog.append([str(c), _one_line(_cell(row, mnemonic)), _one_line(_cell(row, description)),
                        *["yes" if _cell(row, i).upper() == "YES" else "no" for i in applies],
                        _one_line(_cell(row, immediate)), _one_line(_cell(row, investigatory)),
                        _one_line(_cell(row, linkage))])
    name, k, rows = _sheet_with(sheets, "error status")
    h = rows[k]
    xid, unit, status = _find(h, "xid"), _find(h, "subcode"), _find(h, "error status")
    v1, v2 = _find(h, "(v1", "intrinfo decode"), _find(h, "(v2", "intrinfo decode")
    action = _find(h, "resolution bucket", "recovery")
    a2v1, a2v2 = _find(h, "(v1", "action 2", required=False), _find(h, "(v2", "action 2", required=False)
    action2 = next((i for i, c in enumerate(h) if _norm(c) == "action 2"), None)
    investigatory, severity = _find(h, "investigatory"), _find(h, "severity")
    hw_sw, local = _find(h, "hw/sw"), _find(h, "local/remote", required=False)
    decode = []
    for n, row in enumerate(rows[k + 1:], start=k + 2):
        c = _code(_cell(row, xid))
        if c is None:
            continue
        statuses = " ".join(s.strip() for s in re.split(r"[/,]", _cell(row, status)) if s.strip())
        patterns = [re.sub(r"[\u2010-\u2015\u2212]", "-", _cell(row, i)) for i in (v1, v2, a2v1, a2v2)]
        for p in patterns:
            if p and len(p) != 32:
                raise SourceError(f"sheet {name!r} row {n}: IntrInfo pattern {p!r} is not 32 bits")
        decode.append([str(c), _one_line(_cell(row, unit)), patterns[0], patterns[1], statuses,
                       _cell(row, action), patterns[2], patterns[3], _cell(row, action2), _cell(row, investigatory),
                       _cell(row, severity), _cell(row, hw_sw), _one_line(_cell(row, local))])
    return catalog, decode


# -- MindCluster's table ----------------------------------------------------------------------------------------------
def ascend_rows(table: dict) -> list[list[str]]:
    """MindCluster's faultCode.json as code,level rows (a code at two levels takes the more severe)."""
    level: dict[str, str] = {}
    for key, codes in table.items():
        name = key.removesuffix("Codes")
        if name not in ASCEND_LEVELS:
            raise SourceError(f"unknown handling level {key!r} (known: {', '.join(ASCEND_LEVELS)})")
        for code in codes:
            code = str(code).strip().upper()
            if not re.fullmatch(r"[0-9A-F]{1,9}", code):
                raise SourceError(f"{key}: {code!r} is not a hexadecimal fault code")
            old = level.get(code)
            if old is None or ASCEND_LEVELS.index(name) > ASCEND_LEVELS.index(old):
                level[code] = name
    return [[code, level[code]] for code in sorted(level, key=lambda c: int(c, 16))]


# -- AMD's AFID list -------------------------------------------------------------------------------------------------
_AFID_ROW = re.compile(r'\{\s*(\d+)\s*,\s*"([^"]*)"\s*,\s*"([^"]*)"\s*,\s*"([^"]*)"\s*,\s*"([^"]*)"\s*\}')
_AFID_VERSION = re.compile(r'#define\s+AFID_VERSION\s+"([^"]+)"')
AFID_SEVERITIES = ("Fail-to-init", "Fatal", "Uncorrected, Non-fatal", "Corrected", "ALL")


def afid_rows(text: str) -> tuple[str, list[list[str]]]:
    """amdsmi's AFID table (``{id, "category", "type", "source", "severity"}`` rows) as afid,category,type,source,
    severity rows, and the list's version (its AFID_VERSION; "" when the text has none)."""
    rows: dict[int, list[str]] = {}
    for m in _AFID_ROW.finditer(text):
        afid, *fields = m.groups()
        fields = [f.strip() for f in fields]
        if fields[3] not in AFID_SEVERITIES:
            raise SourceError(f"AFID {afid}: unknown severity {fields[3]!r} (known: {', '.join(AFID_SEVERITIES)})")
        if int(afid) in rows:
            raise SourceError(f"AFID {afid} listed twice")
        rows[int(afid)] = [afid, *fields]
    if not rows:
        raise SourceError("no AFID rows ({id, \"category\", \"type\", \"source\", \"severity\"}) in the file")
    version = _AFID_VERSION.search(text)
    return (version.group(1) if version else ""), [rows[k] for k in sorted(rows)]


# -- writing ----------------------------------------------------------------------------------------------------------
def header_of(path: Path) -> list[str]:
    """The comment lines a packaged catalog starts with (its provenance), kept over a regeneration."""
    if not path.exists():
        return []
    return [line for line in path.read_text(encoding="utf-8").splitlines()
            if line.startswith("#") and not line.startswith("# regenerated ")]


def render(path: Path, columns: list[str], rows: list[list[str]], provenance: str) -> str:
    out = io.StringIO()
    for line in header_of(path):
        out.write(line + "\n")
    if provenance:
        out.write(f"# {provenance}\n")
    w = csv.writer(out, lineterminator="\n")
    w.writerow(columns)
    w.writerows(rows)
    return out.getvalue()


def data_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("#")]


def emit(path: Path, text: str, check: bool) -> bool:
    """Write (or, with ``check``, compare) one catalog; True when the packaged data rows are the same."""
    same = path.exists() and data_rows(path.read_text(encoding="utf-8")) == data_rows(text)
    if check:
        if not same:
            old = set(data_rows(path.read_text(encoding="utf-8"))) if path.exists() else set()
            new = [r for r in data_rows(text) if r not in old]
            print(f"catalogs: {path.name} differs from the source: {len(new)} rows new or changed, e.g. "
                  f"{new[:3]}", file=sys.stderr)
        return same
    if not same:
        path.write_text(text, encoding="utf-8")
        print(f"catalogs: wrote {path}")
    return same


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("catalog", choices=("xid", "ascend", "afid"))
    ap.add_argument("source", type=Path, help="the vendor's file (Xid-Catalog.xlsx, faultCode.json, error_map.c)")
    ap.add_argument("--out", type=Path, default=CATALOGS, help="the catalogs' directory (default: the package's)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 when a packaged file differs")
    args = ap.parse_args(argv)
    try:
        digest = hashlib.sha256(args.source.read_bytes()).hexdigest()
    except OSError as exc:
        print(f"catalogs: cannot read {args.source}: {exc.strerror}", file=sys.stderr)
        return 2
    stamp = f"{dt.date.today().isoformat()} from {args.source.name} (sha256 {digest[:16]})"
    try:
        if args.catalog == "xid":
            catalog, decode = xid_rows(read_workbook(args.source))
            texts = {
                "nvidia_xid.csv": render(args.out / "nvidia_xid.csv", [
                    "code", "mnemonic", "description", *_ARCH, "immediate", "investigatory", "xid154_linkage"],
                    catalog, "" if args.check else f"regenerated {stamp}"),
                "nvidia_xid_decode.csv": render(args.out / "nvidia_xid_decode.csv", [
                    "xid", "unit", "intrinfo_v1", "intrinfo_v2", "error_status", "action", "action2_v1", "action2_v2",
                    "action2", "investigatory", "severity", "hw_sw", "local_remote"],
                    decode, "" if args.check else f"regenerated {stamp}"),
            }
        elif args.catalog == "afid":
            version, rows = afid_rows(args.source.read_text(encoding="utf-8", errors="replace"))
            said = f"regenerated {stamp}, AFID list version {version or 'not given'}"
            columns = ["afid", "category", "type", "source", "severity"]
            texts = {"amd_afid.csv": render(args.out / "amd_afid.csv", columns, rows, "" if args.check else said)}
        else:
            try:
                table = json.loads(args.source.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as exc:
                raise SourceError(f"{args.source}: not JSON ({exc})") from exc
            texts = {"ascend_fault_codes.csv": render(args.out / "ascend_fault_codes.csv", ["code", "level"],
                                                      ascend_rows(table), "" if args.check else f"regenerated {stamp}")}
    except SourceError as exc:
        print(f"catalogs: {exc}", file=sys.stderr)
        return 2
    same = [emit(args.out / name, text, args.check) for name, text in texts.items()]
    return 0 if all(same) or not args.check else 1


if __name__ == "__main__":
    sys.exit(main())
