"""How fast a run goes and how long it has left: pure arithmetic on (time, notes done), for the progress line.

The rate is the run's own, recent batches weighted most: notes done over the seconds since the first note was
seen, each second (and the notes done in it) weighing half as much per HALF_LIFE seconds of age. A steady run is
estimated at its exact rate; a run whose pace changes (a machine that gets busy, notes that get longer) follows
the new pace within a minute or so. A first index embeds
every note, so its notes cost about the same on average and the rate settles early; in a later run the unchanged
notes go by in no time, so the estimate is then low, but so is what is left. No estimate is given before
MIN_SECONDS and MIN_NOTES, where one slow note would make it wild.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_SECONDS = 3.0
MIN_NOTES = 5
#: seconds after which a stretch of the run counts half as much in the rate
HALF_LIFE = 30.0


@dataclass
class Eta:
    """Fed `update(now, done, total)` as a run goes; `rate()` in notes/s, `remaining()` in seconds."""

    started: float | None = None
    first_done: int = 0
    now: float = 0.0
    done: int = 0
    total: int = 0
    #: notes and seconds so far, each decayed by its age (see HALF_LIFE)
    weighted_notes: float = 0.0
    weighted_seconds: float = 0.0

    def update(self, now: float, done: int, total: int) -> None:
        """`done` as the indexer reports it: the note it starts now is the done-th (so done - 1 are finished)."""
        if self.started is not None and (done < self.done or total != self.total):
            self.started = None  # a new run (a watch runs many through one progress line)
        if self.started is None:
            self.started, self.first_done = now, done  # the clock starts with the first note seen
            self.weighted_notes = self.weighted_seconds = 0.0
        elif now > self.now:
            decay = 0.5 ** ((now - self.now) / HALF_LIFE)
            self.weighted_notes = self.weighted_notes * decay + (done - self.done)
            self.weighted_seconds = self.weighted_seconds * decay + (now - self.now)
        else:
            self.weighted_notes += done - self.done
        self.now, self.done, self.total = now, done, total

    def rate(self) -> float | None:
        """Notes per second so far, or None while too little has run to say."""
        if self.started is None:
            return None
        seconds = self.now - self.started
        notes = self.done - self.first_done
        if seconds < MIN_SECONDS or notes < MIN_NOTES or self.weighted_seconds <= 0:
            return None
        return self.weighted_notes / self.weighted_seconds

    def remaining(self) -> float | None:
        """Seconds left at the rate so far, or None while too little has run to say."""
        rate = self.rate()
        if rate is None or rate <= 0:
            return None
        return max(self.total - self.done + 1, 0) / rate  # the note started now is not finished


def clock(seconds: float) -> str:
    """'42 s', '3 min 05 s', '1 h 12 min'."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def progress_text(eta: Eta, unit: str = "notes") -> str:
    """' 12.3 notes/s, 4 min 05 s left' once there is an estimate, else ''."""
    rate, left = eta.rate(), eta.remaining()
    if rate is None or left is None:
        return ""
    return f" {rate:.1f} {unit}/s, {clock(left)} left"
