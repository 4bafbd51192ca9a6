"""When `puremind watch` runs the indexer and compacts: events and the clock in, decisions out.

No threads, no files, no clock of its own: the watcher calls it with `now` (and holds its lock around the calls,
since watchdog's threads report changes). The rules:

- A run starts once the vault has been quiet for `debounce` seconds, and at the latest `max_delay` seconds after
  the first change it covers, so a note that some tool rewrites every second still gets indexed. Changes made
  during a run start one more run after it: the pending change is taken when a run starts, not when it ends,
  and put back when the run does not complete.
- Without any change for `rescan` seconds it runs anyway (a rescan), in case an event was missed. After
  recovering from failed runs it rescans at once (`rescan_now`): an edit made while the watches were swapped may
  have reached neither observer.
- A failed run is tried again after `retry` seconds; a run that found `puremind index` holding the lock after
  `busy_retry` seconds. While the vault folder is gone, nothing runs.
- The keyword index is compacted once the vault has been quiet for `compact_quiet` seconds after a run that left
  deleted text behind, and at the latest `compact_latest` seconds after the change that caused it; a run that is
  due goes first, and an attempt that could not finish waits `compact_quiet` before the next.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Mapping

Action = Literal["run", "compact", "wait"]


@dataclass(frozen=True)
class Timing:
    """Every interval of a watch, in seconds (tests shrink them)."""

    debounce: float = 2.0
    #: a run starts at the latest this long after the first change it covers, even if changes never pause
    max_delay: float = 60.0
    rescan: float = 600.0
    compact_quiet: float = 60.0
    compact_latest: float = 300.0
    #: how often the vault folder's identity and watchdog's threads are checked
    poll: float = 1.0
    #: a failed run is tried again after this long
    retry: float = 10.0
    #: a run that found `puremind index` holding the lock tries again after this long
    busy_retry: float = 0.5

    @classmethod
    def for_debounce(cls, debounce: float) -> "Timing":
        """The default intervals with this debounce (a long debounce also stretches the maximal delay)."""
        return cls(debounce=debounce, max_delay=max(60.0, 10 * debounce))


@dataclass(frozen=True)
class Decision:
    """What to do now: "run" (`rescan` when no change asked for it), "compact", or "wait" up to `seconds`."""

    action: Action
    seconds: float = 0.0
    rescan: bool = False


@dataclass(frozen=True)
class Ticket:
    """A run in progress: when it started and the first change it covers (None for a rescan)."""

    started: float
    first_change: float | None


class Schedule:
    """The timing state of one watch."""

    def __init__(self, timing: Timing, now: float):
        self.timing = timing
        self.dirty = False
        self.first_change: float | None = None
        self.last_change = -math.inf
        self.last_activity = now
        self.not_before = -math.inf  # retry or busy back-off
        self.vault_gone = False
        self.owed_since: float | None = None  # a compaction is owed since (a change time)
        self.compact_not_before = -math.inf

    # -- events ----------------------------------------------------------------------------------------

    def changed(self, now: float) -> None:
        """A relevant change (or a lost event, or a folder watched anew)."""
        if not self.dirty:
            self.first_change = now
        self.dirty = True
        self.last_change = now

    def run_started(self, now: float) -> Ticket:
        """Take the pending change: changes from now on start one more run."""
        ticket = Ticket(started=now, first_change=self.first_change)
        self.dirty, self.first_change = False, None
        return ticket

    def run_incomplete(self, ticket: Ticket) -> None:
        """The run did not complete: what it was to cover is still to do (a failed rescan is simply retried)."""
        self.dirty = True
        self.first_change = min(x for x in (ticket.first_change, self.first_change, ticket.started) if x is not None)

    def run_done(self, ticket: Ticket, now: float, *, owed: bool) -> None:
        """A run completed; `owed`: it left deleted text in the keyword index (a compaction is owed)."""
        self.not_before = -math.inf
        self.last_activity = now
        if owed and self.owed_since is None:
            self.owed_since = ticket.first_change if ticket.first_change is not None else ticket.started
        elif not owed:
            self.owed_since = None

    def run_failed(self, now: float) -> None:
        self.not_before = now + self.timing.retry
        self.last_activity = now

    def busy(self, now: float) -> None:
        """`puremind index` holds the lock: try again shortly."""
        self.not_before = now + self.timing.busy_retry

    def rescan_now(self) -> None:
        """Look at the vault at once (silently when nothing changed)."""
        self.last_activity = -math.inf

    def compacted(self, now: float, *, done: bool) -> None:
        """A compaction attempt ended; not `done`: a reader kept the -wal file, try again later."""
        if done:
            self.owed_since = None
        else:
            self.compact_not_before = now + self.timing.compact_quiet

    def compact_blocked(self, now: float) -> None:
        """A compaction could not start (`puremind index` is running, or it failed): wait before the next."""
        self.compact_not_before = now + self.timing.compact_quiet

    # -- decisions -------------------------------------------------------------------------------------

    def run_due(self, now: float) -> float:
        if self.vault_gone:
            return math.inf
        due = self.last_activity + self.timing.rescan
        if self.dirty:
            first = now if self.first_change is None else self.first_change
            due = min(due, self.last_change + self.timing.debounce, first + self.timing.max_delay)
        return max(due, self.not_before)

    def compact_due(self, now: float) -> float:
        if self.owed_since is None:
            return math.inf
        due = min(self.last_change + self.timing.compact_quiet, self.owed_since + self.timing.compact_latest)
        return max(due, self.compact_not_before)

    def decide(self, now: float) -> Decision:
        """What to do at `now`: a due run goes before a due compaction; else wait until either is due, or
        until the next check of the vault folder (`poll`)."""
        run_at = self.run_due(now)
        if run_at <= now:
            return Decision("run", rescan=not self.dirty)
        compact_at = self.compact_due(now)
        if compact_at <= now:
            return Decision("compact")
        return Decision("wait", seconds=max(min(run_at, compact_at, now + self.timing.poll) - now, 0.005))


class StandingWarnings:
    """Warnings about a lasting state of the vault (removals held back, no notes) are said when the state starts,
    not again at every run while it lasts."""

    def __init__(self) -> None:
        self._kinds: set[str] = set()

    def to_say(self, standing: Mapping[str, str], warnings: list[str]) -> list[str]:
        """The warnings of a run that are to be said: all but the standing ones the previous run had too."""
        repeated = {text for kind, text in standing.items() if kind in self._kinds}
        self._kinds = set(standing)
        return [warning for warning in warnings if warning not in repeated]


__all__ = ["Decision", "Schedule", "StandingWarnings", "Ticket", "Timing"]
