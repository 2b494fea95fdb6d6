"""The replay summary's wording (daemon/cli/traces.py)."""

from daemon.cli.traces import grouped_notes


def test_a_note_said_of_many_files_is_one_line_and_a_lone_one_stays_seen():
    notes = [f"/t/sn01-b{i:02d}.dmesg: its times name no zone: read as UTC" for i in range(1, 41)]
    notes.insert(7, "/t/sn01-b07.dmesg: its last line is stamped 8.0 h after the file was last written, read as UTC")
    out = grouped_notes(notes)
    assert out == ["40 files (/t/sn01-b01.dmesg, /t/sn01-b02.dmesg, /t/sn01-b03.dmesg and 37 more): its times name no "
                   "zone: read as UTC",
                   "/t/sn01-b07.dmesg: its last line is stamped 8.0 h after the file was last written, read as UTC"]
    assert grouped_notes(["a note without a place"]) == ["a note without a place"]


def test_a_zone_that_is_none_is_refused_as_the_command_line_is_read(capsys):
    import pytest

    from daemon.cli import build_parser

    for command in (["replay", "t"], ["convert", "t", "--out", "o"], ["evaluate", "t"]):
        with pytest.raises(SystemExit) as exc:
            build_parser().parse_args([*command, "--timezone", "CST"])
        assert exc.value.code == 2 and "'CST' is no time zone" in capsys.readouterr().err
    assert build_parser().parse_args(["replay", "t", "--timezone", "Asia/Shanghai"]).timezone == "Asia/Shanghai"
