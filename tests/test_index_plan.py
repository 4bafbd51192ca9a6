"""The index run's plan, decided from a walk and stored states alone: no vault, no index, no clock."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from puremind.index_plan import (
    MASS_REMOVAL_NOTES,
    NO_NOTES,
    REMOVALS_HELD,
    content_action,
    note_identity,
    plan_run,
    unreadable_warnings,
)
from puremind.store.rows import FileState
from puremind.vault import NoteFile, WalkResult

ROOT = Path("/vault")


def note(rel: str, size: int = 10, mtime: int = 1, ino: int = 1, ctime: int = 1) -> NoteFile:
    return NoteFile(rel=rel, size=size, mtime_ns=mtime, dev=1, ino=ino, ctime_ns=ctime)


def stored(n: NoteFile, sha: str = "s", **changes) -> FileState:
    fields = dict(path=n.rel, sha256=sha, size=n.size, mtime_ns=n.mtime_ns, indexed_at=0.0, identity=note_identity(n))
    fields.update(changes)
    return FileState(**fields)


def walk(*notes: NoteFile, unlisted=(), uncertain=()) -> WalkResult:
    return WalkResult(notes=sorted(notes, key=lambda n: n.rel), skipped=Counter(), unlisted=list(unlisted),
                      uncertain=list(uncertain))


def steps(plan) -> dict[str, str]:
    return {s.note.rel: s.step for s in plan.steps}


def test_a_note_with_the_stored_size_mtime_and_identity_is_not_read_and_any_other_is():
    same, touched, swapped, new = note("a.md"), note("b.md", mtime=5), note("c.md", ino=9), note("d.md")
    states = {"a.md": stored(same), "b.md": stored(note("b.md")), "c.md": stored(note("c.md"))}
    plan = plan_run(ROOT, walk(same, touched, swapped, new), states)
    assert steps(plan) == {"a.md": "unchanged", "b.md": "read", "c.md": "read", "d.md": "read"}
    assert plan.unchanged == 1 and plan.remove == [] and not plan.standing


def test_a_recut_reads_and_chunks_an_unchanged_note_again():
    # (a new model or missing vectors no longer re-read notes: phase two embeds the stored chunks, tests/test_two_phase.py)
    n = note("a.md")
    plan = plan_run(ROOT, walk(n), {"a.md": stored(n, sha="x")}, recut=True)
    (step,) = plan.steps
    assert step.step == "read" and step.force
    assert content_action(step, "x") == "put"  # same content, still chunked again


def test_after_reading_the_content_hash_decides_between_touching_and_storing():
    n = note("a.md", mtime=7)
    (step,) = plan_run(ROOT, walk(n), {"a.md": stored(note("a.md"), sha="old")}).steps
    assert content_action(step, "old") == "touch"
    assert content_action(step, "new") == "put"
    (fresh,) = plan_run(ROOT, walk(note("b.md")), {}).steps
    assert content_action(fresh, "anything") == "put"


def test_missing_notes_are_removed_except_below_an_unlisted_folder_or_behind_an_unchecked_symlink():
    keep = note("keep.md")
    states = {p: stored(note(p)) for p in ("keep.md", "gone.md", "locked/x.md", "link.md")}
    plan = plan_run(ROOT, walk(keep, unlisted=["locked"], uncertain=["link.md"]), states)
    assert plan.remove == ["gone.md"]
    assert plan.kept_unlisted == 1 and plan.kept_missing == 0
    assert any("could not be listed (locked)" in w for w in plan.walk_warnings)
    assert any("could not be checked (link.md)" in w for w in plan.walk_warnings)


def test_an_unlisted_vault_root_keeps_every_note():
    states = {p: stored(note(p)) for p in ("a.md", "b/c.md")}
    plan = plan_run(ROOT, walk(unlisted=[""]), states)
    assert plan.remove == [] and plan.kept_unlisted == 2
    assert "could not be listed (.)" in plan.walk_warnings[0]


def test_a_vault_that_looks_empty_removes_nothing_and_keeps_its_label_unless_removals_are_allowed():
    states = {"a.md": stored(note("a.md"))}
    plan = plan_run(ROOT, walk(), states)
    assert plan.looks_empty and plan.remove == [] and plan.kept_missing == 1
    assert "looks empty" in plan.standing[REMOVALS_HELD]
    allowed = plan_run(ROOT, walk(), states, allow_removals=True)
    assert not allowed.looks_empty and allowed.remove == ["a.md"] and not allowed.standing


def test_mass_removal_is_held_back_above_both_bounds_and_goes_through_below_either():
    many = MASS_REMOVAL_NOTES + 1
    indexed = {f"n{i}.md": stored(note(f"n{i}.md")) for i in range(many + 1)}
    one_left = note("n0.md")
    held = plan_run(ROOT, walk(one_left), indexed)
    assert held.remove == [] and held.kept_missing == many and "none were removed" in held.standing[REMOVALS_HELD]
    for flags in ({"allow_removals": True}, {"rebuild": True}):
        assert len(plan_run(ROOT, walk(one_left), indexed, **flags).remove) == many
    # more than MASS_REMOVAL_NOTES go, but less than half of a large index: a deleted folder, not a swap
    large = {f"n{i}.md": stored(note(f"n{i}.md")) for i in range(4 * many)}
    kept = [note(f"n{i}.md") for i in range(many, 4 * many)]
    assert len(plan_run(ROOT, walk(*kept), large).remove) == many
    # more than half, but not more than MASS_REMOVAL_NOTES: a small vault tidied up
    small = {f"n{i}.md": stored(note(f"n{i}.md")) for i in range(MASS_REMOVAL_NOTES)}
    assert len(plan_run(ROOT, walk(note("n0.md")), small).remove) == MASS_REMOVAL_NOTES - 1


def test_an_empty_vault_with_an_empty_index_says_no_notes_were_found():
    plan = plan_run(ROOT, walk(), {})
    assert "no Markdown notes were found" in plan.standing[NO_NOTES] and not plan.looks_empty


def test_unreadable_notes_are_named_three_at_a_time_and_say_when_a_previous_entry_is_kept():
    bad = [(f"b{i}.md", "permission denied") for i in range(5)]
    lines = unreadable_warnings(bad, {"b0.md": stored(note("b0.md"))})
    assert lines[0] == "cannot read b0.md: permission denied (previous entry kept)"
    assert lines[1] == "cannot read b1.md: permission denied"
    assert lines[-1] == "... and 2 more unreadable notes" and len(lines) == 4


def test_the_plan_keeps_the_walk_order_for_progress():
    names = ["b.md", "a.md", "c/d.md"]
    plan = plan_run(ROOT, walk(*(note(n) for n in names)), {})
    assert [s.note.rel for s in plan.steps] == sorted(names)
