"""The progress line's rate and time left (puremind.eta): pure arithmetic on (time, notes done)."""

from __future__ import annotations

import pytest

from puremind.eta import MIN_NOTES, MIN_SECONDS, Eta, clock, progress_text


def test_a_steady_run_is_estimated_from_its_own_rate():
    eta = Eta()
    for done in range(1, 101):
        eta.update(100.0 + 0.5 * done, done, 200)  # two notes a second
    # the 100th note starts now: 99 are finished in 49.5 s, 101 are left
    assert eta.rate() == pytest.approx(2.0)
    assert eta.remaining() == pytest.approx(50.5)
    assert progress_text(eta) == " 2.0 notes/s, 50 s left"


def test_no_estimate_before_a_few_seconds_and_a_few_notes():
    eta = Eta()
    eta.update(0.0, 1, 100)
    eta.update(MIN_SECONDS / 2, MIN_NOTES + 5, 100)
    assert eta.rate() is None and eta.remaining() is None and progress_text(eta) == ""
    eta = Eta()
    eta.update(0.0, 1, 100)
    eta.update(MIN_SECONDS * 10, MIN_NOTES - 1, 100)
    assert eta.remaining() is None


def test_a_new_run_through_the_same_line_starts_a_new_estimate():
    eta = Eta()
    for done in range(1, 51):
        eta.update(float(done), done, 50)  # one note a second
    for done in range(1, 41):
        eta.update(1000.0 + 0.1 * done, done, 40)  # ten notes a second
    assert eta.rate() == pytest.approx(10.0)


def test_times_read_as_a_person_reads_them():
    assert clock(42.4) == "42 s"
    assert clock(185) == "3 min 05 s"
    assert clock(4320) == "1 h 12 min"


def test_recent_batches_weigh_most_when_the_pace_changes():
    eta = Eta()
    t = 0.0
    for done in range(1, 301):  # five minutes at one note a second
        t += 1.0
        eta.update(t, done, 1000)
    for done in range(301, 421):  # then the machine gets busy: a note every two seconds for four minutes
        t += 2.0
        eta.update(t, done, 1000)
    average = (420 - 1) / (t - 1.0)
    assert eta.rate() == pytest.approx(0.5, rel=0.05), "the estimate follows the new pace"
    assert abs(eta.rate() - 0.5) < abs(average - 0.5)


def test_the_progress_bar_says_nothing_is_left_when_its_phase_is_done(monkeypatch):
    """The last update of a phase (done == total) shows 0 s left, not the estimator's last guess, before the bar
    is cleared."""
    import io

    from rich.console import Console

    from puremind import progress as progress_module
    from puremind.progress import ProgressDisplay

    now = [100.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: now[0])
    shown: list[str] = []
    display = ProgressDisplay(Console(file=io.StringIO(), force_terminal=True, width=200))
    real_update = None

    def update(task, **fields):
        shown.append(fields["left"])
        return real_update(task, **fields)

    for done in range(0, 11):
        now[0] += 1.0
        display("embedding", done, 10, f"note{done}.md")
        if real_update is None and display._progress is not None:
            real_update = display._progress.update
            display._progress.update = update
    assert shown and shown[-1] == "0 s left"
