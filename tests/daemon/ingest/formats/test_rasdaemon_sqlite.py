import sqlite3

from daemon.ingest.formats import RasdaemonReader, sniff
from daemon.ingest.formats.rasdaemon_sqlite import host_of_database
from tests.daemon.ingest.formats.conftest import read_all

SCHEMA = """
CREATE TABLE mc_event (id INTEGER PRIMARY KEY, timestamp TEXT, err_count INTEGER, err_type TEXT, err_msg TEXT, label TEXT, mc INTEGER, top_layer INTEGER, middle_layer INTEGER, lower_layer INTEGER, address INTEGER, grain INTEGER, syndrome INTEGER, driver_detail TEXT);
CREATE TABLE aer_event (id INTEGER PRIMARY KEY, timestamp TEXT, dev_name TEXT, err_type TEXT, err_msg TEXT);
CREATE TABLE extlog_event (id INTEGER PRIMARY KEY, timestamp TEXT, etype INTEGER, error_count INTEGER, severity INTEGER, address INTEGER, fru_id BLOB, fru_text TEXT, cper_data BLOB);
CREATE TABLE mce_record (id INTEGER PRIMARY KEY, timestamp TEXT, mcgcap INTEGER, mcgstatus INTEGER, status INTEGER, addr INTEGER, misc INTEGER, ip INTEGER, tsc INTEGER, walltime INTEGER, cpu INTEGER, cpuid INTEGER, apicid INTEGER, socketid INTEGER, cs INTEGER, bank INTEGER, cpuvendor INTEGER, bank_name TEXT, error_msg TEXT, mcgstatus_msg TEXT, mcistatus_msg TEXT, mcastatus_msg TEXT, user_action TEXT, mc_location TEXT);
"""


def make_db(path):
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    conn.execute("INSERT INTO mc_event (timestamp, err_count, err_type, err_msg, label) VALUES "
                 "('2026-03-02 00:01:00 +0000', 3, 'Corrected', 'memory read error', 'DIMM_A1')")
    conn.execute("INSERT INTO aer_event (timestamp, dev_name, err_type, err_msg) VALUES "
                 "('2026-03-02 00:02:00 +0000', '0000:3a:00.0', 'Uncorrected (Fatal)', 'Surprise Down Error')")
    conn.execute("INSERT INTO mce_record (timestamp, bank, error_msg, mcistatus_msg, mcgstatus_msg) VALUES "
                 "('2026-03-02 00:03:00 +0000', 5, 'Memory scrubbing error', 'Corrected_error', '')")
    conn.execute("INSERT INTO extlog_event (timestamp, etype, error_count, severity, fru_text) VALUES "
                 "('not a time', 2, 1, 1, 'DIMM_B2')")
    conn.commit()
    return conn


def insert(conn, table: str, columns: str, rows: list[tuple]) -> None:
    """Rows of ``table`` as rasdaemon writes them (``columns``: the ones given, the rest NULL)."""
    marks = ", ".join("?" * len(columns.split(",")))
    conn.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})", rows)
    conn.commit()


def test_reads_every_table_and_rejects_bad_rows(tmp_path, ctx):
    db = tmp_path / "sn01-b01.db"
    make_db(db).close()
    assert isinstance(sniff(db), RasdaemonReader)
    ev = read_all(RasdaemonReader(), db, ctx).events
    assert list(ev["kind"]) == ["edac", "aer", "mce"]
    assert list(ev["severity"]) == ["corrected", "fatal", "corrected"]
    assert ev["pci"].iloc[1] == "0000:3a:00" and set(ev["entity"]) == {"sn01-b01"}
    assert ctx.rejects.messages[0].startswith(f"{db}#extlog_event:1: bad row")


def test_incremental_by_id(tmp_path, ctx):
    db = tmp_path / "sn01-b01.db"
    conn = make_db(db)
    cursors: dict[str, int] = {}
    first = list(RasdaemonReader().read(db, ctx, cursors))
    assert sum(len(b.events) for b in first) == 3 and cursors["mc_event"] == 1
    conn.execute("INSERT INTO mc_event (timestamp, err_count, err_type, err_msg, label) VALUES "
                 "('2026-03-02 00:09:00 +0000', 1, 'Uncorrected', 'memory read error', 'DIMM_A1')")
    conn.commit()
    again = list(RasdaemonReader().read(db, ctx, cursors))
    assert [len(b.events) for b in again] == [1] and again[0].events["severity"].iloc[0] == "uncorrected"


def test_not_a_database_is_refused(tmp_path, ctx):
    p = tmp_path / "sn01-b01.db"
    p.write_bytes(b"SQLite format 3\x00" + b"\x00" * 50)
    assert list(RasdaemonReader().read(p, ctx)) == []
    assert "not a readable SQLite database" in ctx.rejects.messages[0] or "cannot read" in ctx.rejects.messages[0]


def test_host_from_path(tmp_path):
    assert host_of_database(tmp_path / "sn01-b07.db") == "sn01-b07"
    assert host_of_database(tmp_path / "sn01-b07" / "ras-mc_event.db") == "sn01-b07"


def test_rows_with_ids_of_zero_or_below_are_read(tmp_path, ctx):
    """Issue 54: the cursor started at 0, so rows a hand-merged database holds at ids 0 and -5 vanished unsaid."""
    db = tmp_path / "sn01-b01.db"
    conn = make_db(db)
    for rid in (-5, 0):
        conn.execute("INSERT INTO mc_event (id, timestamp, err_count, err_type, err_msg, label) VALUES "
                     f"({rid}, '2026-03-02 00:00:0{rid % 7} +0000', 1, 'Uncorrected', 'memory read error', 'DIMM_A2')")
    conn.commit()
    conn.close()
    cursors: dict[str, int] = {}
    ev = read_all(RasdaemonReader(), db, ctx).events
    assert list(ev[ev["kind"] == "edac"]["severity"]) == ["uncorrected", "uncorrected", "corrected"]
    list(RasdaemonReader().read(db, ctx, cursors))
    assert cursors["mc_event"] == 1 and list(RasdaemonReader().read(db, ctx, cursors)) == []


def test_devlink_health_reports_where_rasdaemon_records_them(tmp_path, ctx):
    """rasdaemon built with devlink records the health reporters' reports (its ras-record.c schema): an adapter's
    firmware failing (mlx5's fw_fatal) is a link event at its PCI function, as its kernel line "health compromised"
    is; a queue timeout is said, not a fault."""
    db = tmp_path / "sn01-b01.db"
    conn = make_db(db)
    conn.execute("CREATE TABLE devlink_event (id INTEGER PRIMARY KEY, timestamp TEXT, bus_name TEXT, dev_name TEXT, "
                 "driver_name TEXT, reporter_name TEXT, msg TEXT)")
    insert(conn, "devlink_event", "timestamp, bus_name, dev_name, driver_name, reporter_name, msg",
           [("2026-03-02 00:04:00 +0000", "pci", "0000:08:00.1", "mlx5_core", "fw_fatal", "Health syndrome 0x8"),
            ("2026-03-02 00:05:00 +0000", "pci", "0000:08:00.0", "mlx5_core", "tx", "TX timeout on queue")])
    ev = read_all(RasdaemonReader(), db, ctx).events
    dev = ev[ev["source"] == "rasdaemon:devlink_event"]
    assert list(zip(dev["kind"], dev["severity"], dev["pci"])) == [("link", "error", "0000:08:00.1"),
                                                                    ("devlink", "info", "0000:08:00.0")]
    assert "firmware failed" in dev["message"].iloc[0] and "TX timeout" in dev["message"].iloc[1]


def test_contained_and_uncontained_memory_errors(tmp_path, ctx):
    """A Deferred mc_event (an uncorrectable error the hardware contained by poisoning, as AMD's memory controllers
    report) is a deferred event, not information; the kernel's memory_failure handling of a poisoned page (rasdaemon
    built with it) is deferred when it contained the page (Recovered, Delayed) and uncorrected when not (Failed,
    Ignored)."""
    db = tmp_path / "sn01-b01.db"
    conn = make_db(db)
    conn.execute("INSERT INTO mc_event (timestamp, err_count, err_type, err_msg, label) VALUES "
                 "('2026-03-02 00:06:00 +0000', 1, 'Deferred', 'memory read error', 'DIMM_C1')")
    conn.execute("CREATE TABLE memory_failure_event (id INTEGER PRIMARY KEY, timestamp TEXT, pfn TEXT, page_type TEXT, "
                 "action_result TEXT)")
    insert(conn, "memory_failure_event", "timestamp, pfn, page_type, action_result",
           [("2026-03-02 00:07:00 +0000", "0x1a2b3c", "dirty LRU page", "Recovered"),
            ("2026-03-02 00:08:00 +0000", "0x1a2b3d", "reserved kernel page", "Ignored")])
    ev = read_all(RasdaemonReader(), db, ctx).events
    assert ev[ev["source"] == "rasdaemon:mc_event"]["severity"].tolist() == ["corrected", "deferred"]
    mf = ev[ev["source"] == "rasdaemon:memory_failure_event"]
    assert list(zip(mf["kind"], mf["severity"])) == [("edac", "deferred"), ("edac", "uncorrected")]
    assert "page 0x1a2b3c (dirty LRU page): Recovered" in mf["message"].iloc[0]


# rasdaemon 0.8.1 on (ras-record.c): arm_event with the ARM processor error information
ARM_EVENT = ("CREATE TABLE arm_event (id INTEGER PRIMARY KEY, timestamp TEXT, error_count INTEGER, affinity INTEGER, "
             "mpidr INTEGER, running_state INTEGER, psci_state INTEGER, err_info BLOB, context_info BLOB, "
             "vendor_info BLOB, error_type TEXT, error_flags TEXT, error_info INTEGER, virt_fault_addr INTEGER, "
             "phy_fault_addr INTEGER)")
# before 0.8.1: no error information at all
ARM_EVENT_OLD = ("CREATE TABLE arm_event (id INTEGER PRIMARY KEY, timestamp TEXT, error_count INTEGER, "
                 "affinity INTEGER, mpidr INTEGER, running_state INTEGER, psci_state INTEGER)")


def test_arm_processor_errors_severity_from_their_error_information(tmp_path, ctx):
    """The ARM processor error information's error_info (UEFI N.2.4.4.1): valid bit 4 with bit 26 says corrected or
    not, valid bit 3 with bit 25 a corrupted processor context (fatal)."""
    db = tmp_path / "gb200-01.db"
    conn = make_db(db)
    conn.execute(ARM_EVENT)
    corrected, uncorrected, corrupt = (1 << 4) | (1 << 26), 1 << 4, (1 << 3) | (1 << 25) | (1 << 4)
    insert(conn, "arm_event", "timestamp, error_count, mpidr, error_type, error_flags, error_info",
           [("2026-03-02 00:04:00 +0000", 1, 0x81080100, " cache error", " first error", corrected),
            ("2026-03-02 00:05:00 +0000", 3, 0x81080200, " bus error", "", uncorrected),
            ("2026-03-02 00:06:00 +0000", 1, 0x0, " micro-architectural error", "", corrupt),
            ("2026-03-02 00:07:00 +0000", 1, 0x0, " TLB error", "", 0)])
    arm = read_all(RasdaemonReader(), db, ctx).events.query("kind == 'arm'")
    assert list(arm["severity"]) == ["corrected", "uncorrected", "fatal", "corrected"]
    assert list(arm["code"]) == [1, 3, 1, 1]
    assert arm["message"].iloc[0] == "cache error on MPIDR 0x81080100, x1, first error"


def test_arm_events_of_an_older_rasdaemon_are_read_without_their_severity(tmp_path, ctx):
    db = tmp_path / "kunpeng-01.db"
    conn = make_db(db)
    conn.execute(ARM_EVENT_OLD)
    insert(conn, "arm_event", "timestamp, error_count, mpidr", [("2026-03-02 00:04:00 +0000", 2, 65536)])
    arm = read_all(RasdaemonReader(), db, ctx).events.query("kind == 'arm'")
    assert list(arm["severity"]) == ["corrected"] and not any("#arm_event" in m for m in ctx.rejects.messages)
    assert arm["message"].iloc[0] == "processor error on MPIDR 0x10000, x2 (severity not recorded)"


def test_vendor_sections_and_disk_errors(tmp_path, ctx):
    """non_standard_event's severity as rasdaemon words it (Informational, Corrected, Recoverable, Fatal) and its
    section type as the UUID it is; disk_errors whose block-layer error says the device failed the request are
    errors, the rest (out of space, retries) information."""
    import uuid
    db = tmp_path / "sn01-b01.db"
    conn = make_db(db)
    conn.execute("CREATE TABLE non_standard_event (id INTEGER PRIMARY KEY, timestamp TEXT, sec_type BLOB, "
                 "fru_id BLOB, fru_text TEXT, severity TEXT, error BLOB)")
    conn.execute("CREATE TABLE disk_errors (id INTEGER PRIMARY KEY, timestamp TEXT, dev TEXT, sector INTEGER, "
                 "nr_sector INTEGER, error TEXT, rwbs TEXT, cmd TEXT)")
    section = uuid.UUID("1f8161e1-55d6-41e6-bd10-7afd1dc5f7c7")
    insert(conn, "non_standard_event", "timestamp, sec_type, fru_text, severity",
           [("2026-03-02 00:04:00 +0000", section.bytes_le, "HIP08 HHA", "Recoverable"),
            ("2026-03-02 00:05:00 +0000", section.bytes_le, None, "Corrected"),
            ("2026-03-02 00:06:00 +0000", None, "x", "Informational")])
    insert(conn, "disk_errors", "timestamp, dev, sector, nr_sector, error, rwbs",
           [("2026-03-02 00:07:00 +0000", "259:0", 123456, 8, "critical medium error", "R"),
            ("2026-03-02 00:08:00 +0000", "8:0", 0, 8, "critical space allocation error", "W")])
    ev = read_all(RasdaemonReader(), db, ctx).events
    cper = ev[ev["kind"] == "cper"]
    assert list(cper["severity"]) == ["uncorrected", "corrected", "info"]
    assert cper["message"].iloc[0] == f"Recoverable error in HIP08 HHA (section {section})"
    disk = ev[ev["kind"] == "disk"]
    assert list(disk["severity"]) == ["error", "info"]
    assert disk["message"].iloc[0] == "disk 259:0: critical medium error (R of 8 sectors at 123456)"
