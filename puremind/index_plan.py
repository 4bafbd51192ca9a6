"""What one index run must do, decided from the walk and the stored state alone: no file is read, nothing is
written, no clock is read. `indexer.index_vault` prepares the inputs (the walk, the stored file states, the model
check) and applies the plan.

The rules:
- a note whose size, mtime and identity (device, inode, ctime) match the stored state is unchanged, unless the
  run re-cuts every note (a rebuild, another chunker), the model changed, or the note lacks vectors;
- any other note is read; its content hash then decides between only updating the stat (`content_action`) and
  chunking it again;
- notes missing from the vault are removed, except those below a folder that could not be listed and symlinks
  that could not be checked, and none at all when the vault looks empty while the index is not, or when more
  than MASS_REMOVAL_NOTES notes and more than MASS_REMOVAL_SHARE of the index would go at once (unless the user
  allows removals; a rebuild allows the second).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Mapping

from puremind.store.rows import FileState
from puremind.vault import NoteFile, WalkResult

#: A run that would remove more than this many notes *and* more than this share of the indexed ones removes none
#: (a sync tool or a mount half there, a vault folder swapped for a nearly empty one) unless `allow_removals`.
#: Deleting a folder of 30 notes out of 6,000 goes through; 340 out of 346 is held back and said.
MASS_REMOVAL_NOTES = 20
MASS_REMOVAL_SHARE = 0.5

#: The standing warnings (a lasting state of the vault, said once by a watch while it lasts), by kind.
REMOVALS_HELD = "removals held"
NO_NOTES = "no notes"

Step = Literal["unchanged", "read"]
ContentAction = Literal["touch", "put"]


@dataclass(frozen=True)
class NoteStep:
    """One note of the walk and what the run does with it. `force`: chunk (and embed) it again even when its
    content is the one stored."""

    note: NoteFile
    state: FileState | None
    step: Step
    force: bool = False


@dataclass
class RunPlan:
    """Everything one run decides before it reads a note."""

    root: Path
    steps: list[NoteStep]
    remove: list[str]
    #: notes below folders that could not be listed (kept as they are)
    kept_unlisted: int = 0
    #: notes missing from the vault that are kept (the vault looked empty, or too many would go at once)
    kept_missing: int = 0
    #: the vault looks empty while the index is not: nothing removed and the index keeps its vault label
    looks_empty: bool = False
    standing: dict[str, str] = field(default_factory=dict)
    #: the warnings about the walk itself (folders not listed, symlinks not checked), after the standing ones
    walk_warnings: list[str] = field(default_factory=list)

    @property
    def unchanged(self) -> int:
        return sum(1 for s in self.steps if s.step == "unchanged")


def note_identity(note: NoteFile) -> str:
    """Device, inode and ctime of the file a note is read from: any swap or rewrite changes one of them."""
    return f"{note.dev}:{note.ino}:{note.ctime_ns}"


def plan_run(
    root: Path,
    walk: WalkResult,
    states: Mapping[str, FileState],
    *,
    recut: bool = False,
    rebuild: bool = False,
    allow_removals: bool = False,
) -> RunPlan:
    """The plan of one run: a step for every walked note (in walk order), and the notes to remove."""
    steps = []
    for note in walk.notes:
        state = states.get(note.rel)
        force = recut
        same_file = state is not None and (state.size, state.mtime_ns, state.identity) == (
            note.size, note.mtime_ns, note_identity(note))
        steps.append(NoteStep(note, state, "unchanged" if same_file and not force else "read", force))
    plan = RunPlan(root=root, steps=steps, remove=[])
    _plan_removals(plan, walk, states, rebuild=rebuild, allow_removals=allow_removals)
    plan.walk_warnings = walk_warnings(walk)
    return plan


def content_action(step: NoteStep, digest: str) -> ContentAction:
    """After reading a note: "touch" (same content, only the stat is updated) or "put" (chunk and store it)."""
    if step.state is not None and not step.force and step.state.sha256 == digest:
        return "touch"
    return "put"


def _plan_removals(plan: RunPlan, walk: WalkResult, states: Mapping[str, FileState], *, rebuild: bool,
                   allow_removals: bool) -> None:
    root = plan.root
    present = {n.rel for n in walk.notes}
    # Notes whose state the walk could not determine (a permission problem on a symlink's target): kept.
    present.update(walk.uncertain)
    gone = [p for p in states if p not in present]
    plan.kept_unlisted = sum(1 for p in gone if _below_any(p, walk.unlisted))
    gone = [p for p in gone if not _below_any(p, walk.unlisted)]
    plan.looks_empty = bool(gone) and not walk.notes and bool(states) and not allow_removals
    confirm = "if they were deleted, run `puremind index --allow-removals` to remove them from the index"
    if plan.looks_empty:
        plan.standing[REMOVALS_HELD] = (
            f"the vault {root} looks empty while the index holds {_n(len(states), 'note')}: nothing was removed "
            f"(was a drive unmounted or a sync folder emptied? {confirm})"
        )
    elif not (allow_removals or rebuild) and len(gone) > max(MASS_REMOVAL_NOTES, MASS_REMOVAL_SHARE * len(states)):
        # A rebuild means "make the index this vault" (it also switches an index to another vault).
        plan.standing[REMOVALS_HELD] = (
            f"{len(gone)} of the {_n(len(states), 'indexed note')} are missing from the vault {root}: none were "
            f"removed, as more than {MASS_REMOVAL_NOTES} and more than half of the notes would go at once (was a "
            f"sync folder swapped or a drive half mounted? {confirm})"
        )
    if REMOVALS_HELD in plan.standing:
        plan.kept_missing = len(gone)
        gone = []
    if not walk.notes and not states:
        plan.standing[NO_NOTES] = (
            f"no Markdown notes were found in the vault {root} (is it the right folder? notes are .md or "
            ".markdown files; hidden folders such as .obsidian and skipped ones such as node_modules are not read)"
        )
    plan.remove = gone


def walk_warnings(walk: WalkResult) -> list[str]:
    """What the walk could not see: folders it could not list, symlinked notes it could not check."""
    warnings = []
    if walk.unlisted:
        shown = ", ".join(p or "." for p in walk.unlisted[:3]) + (" ..." if len(walk.unlisted) > 3 else "")
        warnings.append(f"{_n(len(walk.unlisted), 'folder')} could not be listed ({shown}): the notes below were kept")
    if walk.uncertain:
        shown = ", ".join(walk.uncertain[:3]) + (" ..." if len(walk.uncertain) > 3 else "")
        warnings.append(f"{_n(len(walk.uncertain), 'symlinked note')} could not be checked ({shown}): previous entries kept")
    return warnings


def unreadable_warnings(unreadable: list[tuple[str, str]], states: Mapping[str, FileState]) -> list[str]:
    """The first three unreadable notes by name, then how many more."""
    warnings = []
    for rel, reason in unreadable[:3]:
        kept = " (previous entry kept)" if rel in states else ""
        warnings.append(f"cannot read {rel}: {reason}{kept}")
    if len(unreadable) > 3:
        warnings.append(f"... and {_n(len(unreadable) - 3, 'more unreadable note')}")
    return warnings


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _below_any(path: str, folders: list[str]) -> bool:
    for folder in folders:
        if folder == "" or path.startswith(folder.rstrip("/") + "/"):
            return True
    return False


__all__ = [
    "MASS_REMOVAL_NOTES",
    "MASS_REMOVAL_SHARE",
    "NO_NOTES",
    "REMOVALS_HELD",
    "NoteStep",
    "RunPlan",
    "content_action",
    "note_identity",
    "plan_run",
    "unreadable_warnings",
    "walk_warnings",
]
