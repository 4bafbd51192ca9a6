"""The progress display of `puremind index` and `watch` on a terminal: one rich.progress bar per phase of a run
(reading notes, then embedding passages), each with its count, rate, elapsed time and time left.

The rate and the time left are this run's own, recent batches weighted most (puremind.eta). The bar is drawn on
stderr, only when stderr is a terminal, refreshed by the calls themselves (no drawing thread), and cleared when
the phase ends, so that the run's one summary line stays the only lasting output.
"""

from __future__ import annotations

import time
from typing import Any

from puremind.eta import Eta, clock

#: what each phase shows and counts
PHASES = {"reading": ("reading notes", "notes"), "embedding": ("embedding passages", "passages"),
          "evaluating": ("eval: searching", "queries")}
REFRESH_S = 0.1


class ProgressDisplay:
    """Called as the indexer's progress callback: `display(phase, done, total, name)`; `close()` clears it."""

    def __init__(self, console: Any = None):
        from rich.console import Console

        self._console = console if console is not None else Console(stderr=True)
        self._progress: Any = None
        self._task: Any = None
        self._phase: str | None = None
        self._eta = Eta()
        self._last = 0.0
        self._started = 0.0

    def __call__(self, phase: str, done: int, total: int, name: str) -> None:
        now = time.monotonic()
        if phase != self._phase or done < self._eta.done or total != self._eta.total:
            self.close()
            self._phase, self._eta, self._started = phase, Eta(), now
        if self._progress is None:
            self._open(phase, total)
        self._eta.update(now, done, total)
        if done < total and now - self._last < REFRESH_S:
            return
        self._last = now
        rate, left = self._eta.rate(), 0.0 if done >= total else self._eta.remaining()
        unit = PHASES.get(phase, (phase, "items"))[1]
        shown = name if len(name) <= 40 else "..." + name[-37:]
        self._progress.update(
            self._task, completed=done, note=shown,
            rate=f"{rate:.1f} {unit}/s" if rate is not None else f"- {unit}/s",
            elapsed=clock(now - self._started),
            left=f"{clock(left)} left" if left is not None else "estimating",
        )
        self._progress.refresh()
        if done >= total:
            self.close()
            self._phase = None

    def _open(self, phase: str, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TextColumn("{task.fields[elapsed]}"),
            TextColumn("{task.fields[left]}"),
            TextColumn("{task.fields[note]}", style="dim"),
            console=self._console,
            auto_refresh=False,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._progress.start()
        self._task = self._progress.add_task(PHASES.get(phase, (phase, ""))[0], total=total, note="", rate="",
                                             elapsed="0 s", left="estimating")

    def close(self) -> None:
        """Clear the bar (the phase ended, was stopped, or the run failed; or a line is about to be printed: the
        next call draws it again, with the same rate and time left)."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def progress_display() -> ProgressDisplay | None:
    """A display on stderr when it is a terminal, else None (no progress output at all)."""
    import sys

    return ProgressDisplay() if sys.stderr.isatty() else None


__all__ = ["PHASES", "ProgressDisplay", "progress_display"]
