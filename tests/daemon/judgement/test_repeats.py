"""A source's errors logged when they start, every ten minutes while they last, and when they clear."""

from __future__ import annotations

import logging

from daemon.judgement.repeats import MAX_PER_TICK, RepeatLog

DOWN = "127.1.0.1:9400: [Errno 111] Connection refused"
OTHER = "127.1.0.2:9400: timed out"


def lines(caplog) -> list[tuple[str, str]]:
    out = [(r.levelname, r.getMessage()) for r in caplog.records]
    caplog.clear()
    return out


def test_an_error_is_logged_when_it_starts_reminded_every_ten_minutes_and_logged_when_it_clears(caplog):
    caplog.set_level(logging.INFO)
    repeats = RepeatLog("collector exporters", logging.getLogger("test.repeats"))
    repeats.report([DOWN], 1000.0)
    assert lines(caplog) == [("WARNING", f"collector exporters: {DOWN}")]
    for t in range(1, 600):  # a tick a second: the same error is not logged again for ten minutes
        repeats.report([DOWN], 1000.0 + t)
    assert lines(caplog) == []
    repeats.report([DOWN, OTHER], 1600.0)
    assert lines(caplog) == [("WARNING", f"collector exporters: {OTHER}"),
                             ("WARNING", f"collector exporters: still {DOWN} (601 ticks over 10 min)")]
    repeats.report([OTHER], 1601.0)
    assert lines(caplog) == [("INFO", f"collector exporters: cleared after 601 ticks over 601 s: {DOWN}")]
    repeats.report([], 1602.0)
    assert lines(caplog) == [("INFO", f"collector exporters: cleared after 2 ticks over 2 s: {OTHER}")]
    repeats.report([DOWN], 1603.0)  # back: a new episode, logged at once
    assert lines(caplog) == [("WARNING", f"collector exporters: {DOWN}")]


def test_many_new_errors_in_one_tick_are_summed_up_and_a_repeat_within_a_tick_counts_once(caplog):
    caplog.set_level(logging.INFO)
    repeats = RepeatLog("collector exporters", logging.getLogger("test.repeats"))
    errors = [f"127.1.0.{i}:9400: [Errno 111] Connection refused" for i in range(1, 11)]
    repeats.report(errors + errors[:2], 0.0)
    logged = lines(caplog)
    assert logged[:MAX_PER_TICK] == [("WARNING", f"collector exporters: {e}") for e in errors[:MAX_PER_TICK]]
    assert logged[MAX_PER_TICK:] == [
        ("WARNING", f"collector exporters: {10 - MAX_PER_TICK} more errors, e.g. {errors[MAX_PER_TICK]}")]
    repeats.report(errors, 1.0)
    assert lines(caplog) == []
    assert all(seen.ticks == 2 for seen in repeats.active.values())


def test_a_racks_worth_of_errors_going_on_and_clearing_at_once_is_a_few_lines(caplog):
    caplog.set_level(logging.INFO)
    repeats = RepeatLog("collector exporters", logging.getLogger("test.repeats"))
    errors = [f"127.1.0.{i}:9400: [Errno 111] Connection refused" for i in range(1, 65)]
    repeats.report(errors, 0.0)
    assert len(lines(caplog)) == MAX_PER_TICK + 1
    repeats.report(errors, 600.0)
    reminded = lines(caplog)
    assert reminded[0] == ("WARNING", f"collector exporters: still {errors[0]} (2 ticks over 10 min)")
    assert reminded[-1] == ("WARNING", f"collector exporters: {64 - MAX_PER_TICK} more errors go on, e.g. still "
                                       f"{errors[MAX_PER_TICK]} (2 ticks over 10 min)")
    assert len(reminded) == MAX_PER_TICK + 1
    repeats.report(errors[:1], 601.0)
    cleared = lines(caplog)
    assert cleared[0] == ("INFO", f"collector exporters: cleared after 2 ticks over 601 s: {errors[1]}")
    assert cleared[-1][1].startswith(f"collector exporters: {63 - MAX_PER_TICK} more errors cleared, e.g. cleared ")
    assert len(cleared) == MAX_PER_TICK + 1 and list(repeats.active) == errors[:1]
