"""The store on embedded SQLite (WAL) and on a real PostgreSQL server, migrated by alembic."""

import io
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import inspect, text
from sqlmodel import select

from daemon.replay import replay
from daemon.store import Store

TABLES = {"entity", "health", "finding", "incident", "action", "alert_outbox", "alert", "alert_group", "silence",
          "alert_cursor", "lease", "warm_state", "alembic_version"}
HEAD = "0012"  # the newest migration
ROOT = Path(__file__).resolve().parents[3]


def check_replay_into(url: str, trace_dir) -> None:
    out = io.StringIO()
    result = replay([trace_dir], findings_out=out, db_url=url)
    store = Store(url)  # a second open is a no-op migration
    try:
        assert set(inspect(store.engine).get_table_names()) >= TABLES
        rows = store.findings()
        assert len(rows) == len(out.getvalue().splitlines()) > 0
        assert rows[0].reasons and isinstance(rows[0].reasons, list)
        incidents = store.incidents(status="open")
        assert {i.entity for i in incidents} == {i.entity for i in result.pipeline.incidents.open.values()}
        assert all(i.evidence for i in incidents)
        with store.session() as s:
            assert s.exec(text("SELECT version_num FROM alembic_version")).one()[0] == HEAD
            assert s.exec(text("SELECT count(*) FROM entity")).one()[0] == 4 * (1 + 8 + 4)
    finally:
        store.close()


def check_replay_twice(url: str, trace_dir) -> None:
    """Issue 54: a trace replayed twice into one database doubled every finding row; now each is written once."""
    replay([trace_dir], findings_out=io.StringIO(), db_url=url)
    store = Store(url)
    try:
        once = [(f.entity, f.ts, f.state) for f in store.findings()]
    finally:
        store.close()
    replay([trace_dir], findings_out=io.StringIO(), db_url=url)
    store = Store(url)
    try:
        assert [(f.entity, f.ts, f.state) for f in store.findings()] == once and once
    finally:
        store.close()


def test_a_trace_replayed_twice_into_sqlite_writes_each_finding_once(tmp_path, trace_dir):
    check_replay_twice(f"sqlite:///{tmp_path}/twice.db", trace_dir)


@pytest.mark.postgres
def test_a_trace_replayed_twice_into_postgresql_writes_each_finding_once(pg_url, trace_dir):
    check_replay_twice(pg_url, trace_dir)


def test_findings_written_twice_before_are_folded_by_the_migration(tmp_path):
    """A database a doubled replay left behind (before migration 0012) keeps the first of each finding."""
    from alembic import command

    from daemon.store import alembic_config

    url = f"sqlite:///{tmp_path}/old.db"
    store = Store(url)
    with store.engine.begin() as conn:
        cfg = alembic_config(store.engine)
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0011")
        for score in (1.0, 0.5):
            conn.execute(text("INSERT INTO finding (ts, entity, kind, state, score, detector, reasons) "
                              f"VALUES (30.0, 'n1/gpu0', 'accelerator', 'failed', {score}, 'rules', '[]')"))
    store.close()
    store = Store(url)  # migrates to the head
    try:
        rows = store.findings()
        assert [(f.entity, f.score) for f in rows] == [("n1/gpu0", 1.0)]
    finally:
        store.close()


def test_sqlite_file_in_wal_mode(tmp_path, trace_dir):
    url = f"sqlite:///{tmp_path}/state/raswarden.db"
    check_replay_into(url, trace_dir)
    store = Store(url)
    with store.engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    store.close()


@pytest.mark.postgres
def test_postgresql(pg_url, trace_dir):
    check_replay_into(pg_url, trace_dir)



def check_read_only(url: str) -> None:
    """A read-only store reads what a writer wrote, and refuses to write itself."""
    from daemon.store import SilenceRow

    writer = Store(url)
    with writer.session() as s:
        s.add(SilenceRow(id="sil-ro", matchers=["rack=r07"], starts_at=1.0, ends_at=2.0, created_by="t",
                         comment=""))
        s.commit()
    writer.close()
    reader = Store(url, read_only=True)
    try:
        with reader.session() as s:
            assert [r.id for r in s.exec(select(SilenceRow)).all()] == ["sil-ro"]
            s.add(SilenceRow(id="sil-2", matchers=[], starts_at=1.0, ends_at=2.0, created_by="t", comment=""))
            with pytest.raises(Exception, match="(?i)read.?only|readonly"):
                s.commit()
    finally:
        reader.close()


def test_a_read_only_sqlite_store_never_writes(tmp_path):
    check_read_only(f"sqlite:///{tmp_path}/state.db")


@pytest.mark.postgres
def test_a_read_only_postgresql_store_never_writes(pg_url):
    check_read_only(pg_url)


def migrate_at_once(url: str, gate: Path, n: int = 4) -> list[str]:
    """``n`` raswarden processes opening one new store at the same moment (the shards of a cluster started together,
    held at a gate until all are up): the errors of those that failed."""
    code = ("import sys, time\nfrom pathlib import Path\nfrom daemon.store import Store\n"
            "Path(sys.argv[3]).touch()\n"
            "while not Path(sys.argv[2]).exists():\n    time.sleep(0.005)\nStore(sys.argv[1]).close()\n")
    ready = [gate.with_name(f"{gate.name}.ready{i}") for i in range(n)]
    procs = [subprocess.Popen([sys.executable, "-c", code, url, str(gate), str(r)], cwd=ROOT, stderr=subprocess.PIPE,
                              text=True) for r in ready]
    deadline = time.monotonic() + 120
    while not all(r.exists() for r in ready):  # every one imported and waiting at the gate
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "a process did not get ready"
        time.sleep(0.02)
    gate.touch()
    errors = []
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        if proc.returncode:
            errors.append(err.strip().splitlines()[-1])
    return errors


@pytest.mark.postgres
def test_shards_started_together_migrate_a_new_postgresql_once(pg_url, tmp_path):
    assert migrate_at_once(pg_url, tmp_path / "go") == []
    store = Store(pg_url)
    with store.session() as s:
        assert s.exec(text("SELECT version_num FROM alembic_version")).all() == [(HEAD,)]
    store.close()


def test_instances_started_together_migrate_a_new_sqlite_file_once(tmp_path):
    assert migrate_at_once(f"sqlite:///{tmp_path}/raswarden.db", tmp_path / "go") == []


def broken_stores(tmp_path) -> dict[str, tuple[str, str]]:
    """Stores raswarden cannot open: URL and what the one line must say (issue 54, probe 7)."""
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(bytes(range(256)) * 20)
    good = tmp_path / "good.db"
    Store(f"sqlite:///{good}").close()
    truncated = tmp_path / "truncated.db"
    truncated.write_bytes(good.read_bytes()[:1000])
    newer = tmp_path / "newer.db"
    Store(f"sqlite:///{newer}").close()
    eng = __import__("sqlalchemy").create_engine(f"sqlite:///{newer}")
    with eng.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    eng.dispose()
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return {"garbage": (f"sqlite:///{garbage}", "not a SQLite database"),
            "truncated": (f"sqlite:///{truncated}", "damaged"),
            "newer": (f"sqlite:///{newer}", "written by a newer raswarden"),
            "scheme": ("foo://bar", "no such kind of store"),
            "unreachable": (f"postgresql+psycopg://raswarden:s3cret@127.0.0.1:{port}/raswarden",
                            "nothing answers at the server's address")}


@pytest.mark.parametrize("case", ["garbage", "truncated", "newer", "scheme", "unreachable"])
def test_a_store_that_cannot_be_opened_is_one_line_and_exit_2(tmp_path, case):
    url, said = broken_stores(tmp_path)[case]
    trace = str(ROOT / "fixtures" / "traces" / "sn01-mini")
    for command in (["incidents", "--db", url], ["replay", trace, "--db", url]):
        done = subprocess.run([sys.executable, "-m", "daemon", *command], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and said in lines[0], done.stderr
        assert "Traceback" not in done.stderr and "s3cret" not in done.stderr


@pytest.mark.parametrize("error, said", [
    (TimeoutError("another raswarden holds the migrations lock"), "another raswarden is migrating this store"),
    (OSError(28, "No space left on device"), "the disk is full"),
    (Exception("attempt to write a readonly database"), "read-only here"),
    (Exception("database is locked"), "holds the database locked"),
])
def test_store_errors_name_their_cause_and_hide_the_password(error, said):
    from daemon.store import store_error

    text = str(store_error("postgresql+psycopg://raswarden:s3cret@db1/raswarden", error))
    assert said in text and "s3cret" not in text and text.startswith("store postgresql+psycopg://raswarden:***@db1")
