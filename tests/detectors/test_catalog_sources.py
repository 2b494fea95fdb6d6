"""The vendors' catalogs are regenerated from the vendors' own files (scripts/catalogs.py), and the packaged ones hold
every code of those files: MindCluster's faultCode.json (a copy in fixtures/vendor/) and NVIDIA's Xid workbook (built
here as an .xlsx with the workbook's own headers from the packaged rows, since the workbook is not in the repo)."""

import csv
import subprocess
import sys
import zipfile
from pathlib import Path
from xml.sax.saxutils import escape

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "catalogs.py"
CATALOGS = ROOT / "detectors" / "catalogs"
FAULT_CODES = ROOT / "fixtures" / "vendor" / "mindcluster-faultCode.json"
AFID_TABLE = ROOT / "fixtures" / "vendor" / "amdsmi-afid-error-map.txt"

# the workbook's header cells as NVIDIA writes them (line breaks and all)
CATALOG_HEADER = ["Type \n(XID)", "Code", "Mnemonic", "Description", "Applies to A100", "Applies to H100",
                  "Applies to B100", "Applies to GB200", "Resolution Bucket \n(Immediate Action)",
                  "Resolution Bucket \n(Investigatory Action)", "Xid 154 linkage", "Trigger Conditions"]
_USER = "(binary; \u201c-\u201d user decode)"
_GUIDE = "(for items with \u2018*\u2019 please see Customer User Guide tab)"
DECODE_HEADER = ["Xid", "Subcode V1(<R575)/V2(>=R575) V1(<R575): IntrInfo[9:5] V2(>=R575):IntrInfo[6:0]",
                 f"(V1(<R575)) IntrInfo decode for Data Center Recovery Action IntrInfo {_USER}",
                 f"(V2(>=R575)) IntrInfo decode for Data Center Recovery Action IntrInfo {_USER}",
                 "Error Status (hex)", "Resolution Bucket (Data Center Recovery Action)",
                 "(V1(<R575)) Decode for action 2", "(V2(>=R575)) Decode for action 2", "Action 2",
                 "Resolution Bucket (Investigatory Action)", f"Severity {_GUIDE}", "HW/SW", f"Local/Remote {_GUIDE}"]


def catalog_rows(name: str) -> list[dict[str, str]]:
    text = (CATALOGS / name).read_text(encoding="utf-8")
    return list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))


def sheet_xml(rows: list[list[str]]) -> str:
    out = []
    for r, row in enumerate(rows, start=1):
        cells = "".join(f'<c r="{chr(65 + c)}{r}" t="inlineStr"><is><t xml:space="preserve">{escape(v)}</t></is></c>'
                        for c, v in enumerate(row) if v != "")
        out.append(f'<row r="{r}">{cells}</row>')
    return ('<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"><sheetData>'
            + "".join(out) + "</sheetData></worksheet>")


def write_workbook(path: Path, catalog: list[list[str]], decode: list[list[str]]) -> None:
    """A minimal .xlsx (the zip of XML every spreadsheet program writes) with the catalog and decode sheets."""
    main = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("[Content_Types].xml", '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"/>')
        z.writestr("xl/workbook.xml", f'<workbook xmlns="{main}" xmlns:r="{rel}"><sheets>'
                   '<sheet name="XIDs" sheetId="1" r:id="rId1"/><sheet name="XID 144-150 Decode" sheetId="2" '
                   'r:id="rId2"/></sheets></workbook>')
        z.writestr("xl/_rels/workbook.xml.rels",
                   '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
                   '<Relationship Id="rId1" Target="worksheets/sheet1.xml"/>'
                   '<Relationship Id="rId2" Target="/xl/worksheets/sheet2.xml"/></Relationships>')
        z.writestr("xl/worksheets/sheet1.xml", sheet_xml([CATALOG_HEADER] + catalog))
        z.writestr("xl/worksheets/sheet2.xml", sheet_xml([DECODE_HEADER] + decode))


def workbook_from_package() -> tuple[list[list[str]], list[list[str]]]:
    yes = {"yes": "YES", "no": "NO"}
    catalog = [["XID", r["code"], r["mnemonic"], r["description"],
                *(yes[r[a]] for a in ("a100", "h100", "b100", "gb200")),
                r["immediate"], r["investigatory"], r["xid154_linkage"], "trigger text"]
               for r in catalog_rows("nvidia_xid.csv")]
    # the workbook's patterns as a spreadsheet may hold them: typographic dashes; statuses joined by "/"
    decode = [[r["xid"], r["unit"], r["intrinfo_v1"].replace("-", "\u2014"), r["intrinfo_v2"],
               r["error_status"].replace(" ", "/"), r["action"], r["action2_v1"], r["action2_v2"], r["action2"],
               r["investigatory"], r["severity"], r["hw_sw"], r["local_remote"]]
              for r in catalog_rows("nvidia_xid_decode.csv")]
    return catalog, decode


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_the_packaged_ascend_catalog_holds_every_code_of_mindclusters_table():
    done = run("ascend", str(FAULT_CODES), "--check")
    assert done.returncode == 0, done.stderr
    assert len(catalog_rows("ascend_fault_codes.csv")) == 802


def test_a_code_new_in_mindclusters_table_fails_the_check(tmp_path):
    table = tmp_path / "faultCode.json"
    new = FAULT_CODES.read_text().replace('"NotHandleFaultCodes":[', '"NotHandleFaultCodes":["8FFFFFFF",', 1)
    table.write_text(new)
    done = run("ascend", str(table), "--check")
    assert done.returncode == 1 and "8FFFFFFF,NotHandleFault" in done.stderr


def test_the_packaged_afid_list_holds_every_afid_of_amdsmis_table_and_a_new_one_fails_the_check(tmp_path):
    done = run("afid", str(AFID_TABLE), "--check")
    assert done.returncode == 0, done.stderr
    assert [r["afid"] for r in catalog_rows("amd_afid.csv")] == [str(n) for n in range(1, 35)]
    table = tmp_path / "error_map.c"
    table.write_text(AFID_TABLE.read_text().replace(
        '"ALL"}};', '"ALL"},\n    {35, "HBM Errors", "Row Remap", "CPER", "Corrected"}};'))
    done = run("afid", str(table), "--check")
    assert done.returncode == 1 and "35,HBM Errors,Row Remap,CPER,Corrected" in done.stderr
    table.write_text('{1, "Boot-Time Errors", "FW Load", "CPER", "Sometimes"}')
    done = run("afid", str(table), "--check")
    assert done.returncode == 2 and "AFID 1: unknown severity 'Sometimes'" in done.stderr


def test_the_xid_workbook_regenerates_the_packaged_catalogs(tmp_path):
    book = tmp_path / "Xid-Catalog.xlsx"
    write_workbook(book, *workbook_from_package())
    done = run("xid", str(book), "--check")
    assert done.returncode == 0, done.stderr
    out = tmp_path / "catalogs"
    out.mkdir()
    done = run("xid", str(book), "--out", str(out))
    assert done.returncode == 0, done.stderr
    written = (out / "nvidia_xid.csv").read_text().splitlines()
    assert written[0].startswith("# regenerated ") and "sha256" in written[0] and len(written) == 1 + 1 + 172


def test_a_code_new_in_the_workbook_fails_the_check(tmp_path):
    catalog, decode = workbook_from_package()
    catalog.append(["XID", "173", "NEW_FAULT", "A fault of a newer driver", "NO", "NO", "YES", "YES", "RESET_GPU",
                    "CONTACT_SUPPORT", "", ""])
    book = tmp_path / "Xid-Catalog.xlsx"
    write_workbook(book, catalog, decode)
    done = run("xid", str(book), "--check")
    assert done.returncode == 1 and "173,NEW_FAULT" in done.stderr


@pytest.mark.parametrize("content, said", [(b"not a zip", "not an .xlsx workbook"), (None, "cannot read")])
def test_a_bad_source_is_one_line_and_exit_2(tmp_path, content, said):
    path = tmp_path / "Xid-Catalog.xlsx"
    if content is not None:
        path.write_bytes(content)
    done = run("xid", str(path), "--check")
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr
