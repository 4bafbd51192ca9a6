"""The watch's timing rules on a fake clock: no threads, no files, no sleeping."""

from __future__ import annotations

import math

import pytest

from puremind.watch_schedule import Schedule, StandingWarnings, Timing

T = Timing(debounce=2.0, max_delay=10.0, rescan=600.0, compact_quiet=60.0, compact_latest=300.0, poll=1.0,
           retry=10.0, busy_retry=0.5)


def fresh(now: float = 0.0) -> Schedule:
    return Schedule(T, now)


def run_completely(s: Schedule, now: float, *, owed: bool = False) -> None:
    ticket = s.run_started(now)
    s.run_done(ticket, now, owed=owed)


def test_a_run_waits_for_the_vault_to_be_quiet_for_the_debounce():
    s = fresh()
    s.changed(100.0)
    assert s.decide(101.0).action == "wait"
    s.changed(101.5)  # still changing: the debounce starts again
    assert s.decide(103.0).action == "wait"
    decision = s.decide(103.5)
    assert decision.action == "run" and not decision.rescan


def test_a_note_rewritten_every_second_still_gets_a_run_after_the_maximal_delay():
    s = fresh()
    t = 100.0
    while t < 110.0:
        s.changed(t)
        assert s.decide(t).action == "wait", t
        t += 1.0
    s.changed(110.0)
    assert s.decide(110.0).action == "run"  # 10 s after the first change, though the vault never went quiet


def test_the_wait_is_until_the_next_deadline_and_at_most_one_poll():
    s = fresh()
    assert s.decide(5.0).seconds == pytest.approx(T.poll)  # nothing due: check the folder again in a poll
    s.changed(10.0)
    assert s.decide(11.5).seconds == pytest.approx(0.5)


def test_a_change_during_a_run_starts_one_more_run_after_it():
    s = fresh()
    s.changed(100.0)
    ticket = s.run_started(102.0)
    assert not s.dirty
    s.changed(103.0)  # while the run reads the notes
    s.run_done(ticket, 104.0, owed=False)
    assert s.dirty and s.decide(105.0).action == "run"


def test_a_run_that_does_not_complete_puts_its_change_back_with_its_first_time():
    s = fresh()
    s.changed(100.0)
    ticket = s.run_started(102.0)
    s.run_incomplete(ticket)  # Ctrl-C, a busy lock, a failure
    assert s.dirty and s.first_change == 100.0
    quiet = fresh()
    rescan = quiet.run_started(700.0)  # a rescan has no change of its own: its start time stands in
    quiet.run_incomplete(rescan)
    assert quiet.dirty and quiet.first_change == 700.0


def test_without_changes_a_rescan_runs_after_the_rescan_interval_and_says_so():
    s = fresh(0.0)
    assert s.decide(599.0).action == "wait"
    decision = s.decide(600.0)
    assert decision.action == "run" and decision.rescan
    run_completely(s, 600.0)
    assert s.decide(1199.0).action == "wait" and s.decide(1200.0).action == "run"


def test_a_failed_run_is_retried_after_the_retry_interval_even_with_changes_waiting():
    s = fresh()
    s.changed(100.0)
    ticket = s.run_started(102.0)
    s.run_incomplete(ticket)
    s.run_failed(102.0)
    s.changed(103.0)
    assert s.decide(111.9).action == "wait"
    assert s.decide(112.0).action == "run"


def test_recovering_from_failures_rescans_at_once():
    s = fresh()
    run_completely(s, 50.0)
    s.rescan_now()
    decision = s.decide(51.0)
    assert decision.action == "run" and decision.rescan


def test_a_busy_index_is_tried_again_shortly():
    s = fresh()
    s.changed(100.0)
    ticket = s.run_started(102.0)
    s.run_incomplete(ticket)
    s.busy(102.0)
    assert s.decide(102.4).action == "wait" and s.decide(102.5).action == "run"


def test_nothing_runs_while_the_vault_folder_is_gone():
    s = fresh()
    s.changed(100.0)
    s.vault_gone = True
    assert s.run_due(1e9) == math.inf and s.decide(1e6).action == "wait"
    s.vault_gone = False
    assert s.decide(1e6).action == "run"


def test_compaction_waits_for_quiet_after_a_run_that_left_deleted_text():
    s = fresh()
    s.changed(100.0)
    ticket = s.run_started(102.0)
    s.run_done(ticket, 103.0, owed=True)
    assert s.owed_since == 100.0  # owed since the change that caused it
    assert s.decide(159.0).action == "wait"
    assert s.decide(160.0).action == "compact"  # 60 s after the last change
    s.compacted(160.0, done=True)
    assert s.owed_since is None and s.decide(161.0).action == "wait"


def test_compaction_happens_at_the_latest_after_compact_latest_even_if_changes_never_stop():
    s = fresh()
    s.changed(0.0)
    run_completely(s, 2.0, owed=True)
    t = 2.0
    while t < 300.0:  # a change every 30 s, each indexed: never 60 s quiet
        s.changed(t)
        run_completely(s, t + 2.0, owed=True)
        assert s.decide(t + 2.5).action != "compact", t
        t += 30.0
    assert s.owed_since == 0.0
    assert s.decide(300.0).action == "compact"


def test_a_due_run_goes_before_a_due_compaction():
    s = fresh()
    s.changed(0.0)
    run_completely(s, 2.0, owed=True)
    s.changed(500.0)
    assert s.decide(502.0).action == "run"  # both are due; the run first


def test_a_compaction_kept_from_finishing_waits_before_the_next_try():
    s = fresh()
    s.changed(0.0)
    run_completely(s, 2.0, owed=True)
    assert s.decide(60.0).action == "compact"
    s.compacted(60.0, done=False)  # a reader held the -wal file
    assert s.decide(119.0).action == "wait" and s.decide(120.0).action == "compact"
    s.compact_blocked(120.0)  # `puremind index` was running
    assert s.decide(179.0).action == "wait" and s.decide(180.0).action == "compact"


def test_a_run_that_leaves_nothing_to_compact_settles_what_was_owed():
    s = fresh()
    s.changed(0.0)
    run_completely(s, 2.0, owed=True)
    run_completely(s, 3.0, owed=False)  # a run that compacted (or found the mark gone)
    assert s.owed_since is None


def test_a_long_debounce_stretches_the_maximal_delay():
    assert Timing.for_debounce(2.0).max_delay == 60.0
    assert Timing.for_debounce(30.0).max_delay == 300.0


def test_standing_warnings_are_said_when_they_start_not_while_they_last():
    standing = StandingWarnings()
    held = {"removals held": "340 of 346 are missing"}
    assert standing.to_say(held, ["340 of 346 are missing", "cannot read a.md"]) == ["340 of 346 are missing",
                                                                                     "cannot read a.md"]
    assert standing.to_say(held, ["340 of 346 are missing", "cannot read a.md"]) == ["cannot read a.md"]
    assert standing.to_say({}, []) == []
    assert standing.to_say(held, ["340 of 346 are missing"]) == ["340 of 346 are missing"]  # it came back
