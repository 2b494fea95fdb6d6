"""``raswarden reload``'s wait: against real processes that answer, refuse, never answer or die."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from daemon.service.reloadanswer import AnswerWriter, answer_path, read_answer, reload_and_wait

# A process that answers each SIGHUP the way the daemon does: applied while ./verdict says so, else refused.
ANSWERING = textwrap.dedent("""
    import signal, sys, threading, pathlib
    from daemon.service.reloadanswer import AnswerWriter
    writer, hup = AnswerWriter(runtime_dir=sys.argv[1]), threading.Event()
    signal.signal(signal.SIGHUP, lambda *_: hup.set())
    print("ready", flush=True)
    while True:
        hup.wait(); hup.clear()
        verdict = (pathlib.Path(sys.argv[1]) / "verdict").read_text()
        writer.write(verdict == "applied", "" if verdict == "applied" else "line 3: unknown key 'bogus'")
""")


@pytest.fixture
def daemon_like(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", ANSWERING, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    yield proc
    proc.kill()
    proc.wait()


def test_waits_for_the_answer_and_tells_applied_from_refused(daemon_like, tmp_path):
    (tmp_path / "verdict").write_text("applied")
    assert reload_and_wait(daemon_like.pid, 30, tmp_path)[0] == 0
    (tmp_path / "verdict").write_text("refused")
    code, message = reload_and_wait(daemon_like.pid, 30, tmp_path)
    assert code == 1 and "unknown key 'bogus'" in message
    (tmp_path / "verdict").write_text("applied")  # an older answer in the file is not taken for this one
    assert reload_and_wait(daemon_like.pid, 30, tmp_path)[0] == 0
    assert read_answer(answer_path(daemon_like.pid, tmp_path)).count == 3


def test_a_process_that_never_answers_times_out_and_one_that_dies_is_told(tmp_path):
    deaf = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGHUP, "
                             "signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert deaf.stdout.readline().strip() == "ready"
        code, message = reload_and_wait(deaf.pid, 0.5, tmp_path)
        assert code == 1 and "no answer" in message
    finally:
        deaf.kill()
        deaf.wait()
    # SIGHUP's default action ends it (set again: under nohup the test runner's children inherit it ignored)
    dying = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGHUP, "
                              "signal.SIG_DFL); print('ready', flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    assert dying.stdout.readline().strip() == "ready"
    code, message = reload_and_wait(dying.pid, 30, tmp_path)
    dying.wait()
    assert code == 1 and "exited" in message
    assert reload_and_wait(dying.pid, 1, tmp_path) == (1, f"no process {dying.pid}")


def test_without_a_runtime_directory_nothing_is_written_and_the_signal_is_not_waited_for(monkeypatch):
    monkeypatch.delenv("RUNTIME_DIRECTORY", raising=False)
    writer = AnswerWriter(pid=1234)
    assert writer.path is None
    writer.write(True)
    assert writer.count == 1


def test_a_process_it_may_not_signal_is_told_not_a_traceback(tmp_path):
    import os

    if os.getuid() != 0:
        assert reload_and_wait(1, 1, tmp_path)[1].startswith("not allowed to signal process 1")
        return
    nobody = subprocess.run([sys.executable, "-c", "import os, sys; sys.path.insert(0, os.getcwd()); "
                             "from daemon.service.reloadanswer import reload_and_wait; os.setuid(65534); "
                             "print(reload_and_wait(1, 1)[1])"],
                            capture_output=True, text=True, timeout=60)
    assert nobody.stdout.startswith("not allowed to signal process 1"), nobody.stderr


def test_an_unreadable_answer_counts_as_none(tmp_path):
    path = answer_path(42, f"{tmp_path}:/elsewhere")  # systemd joins several runtime directories with ':'
    assert path == tmp_path / "raswarden-42.reload"
    path.write_text('{"count": "x"')
    assert read_answer(path).count == 0
