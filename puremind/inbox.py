"""The inbox: notes that agents propose and the person approves (the spec's v0.2 write path).

A proposal is data from an agent. It lives in pureMind's own folder (`<home>/inbox/`, 0700), never in the vault,
as one 0600 Markdown file per proposal: a header pureMind writes (every value JSON-encoded on one line, so no
title, tag or reason can add a line of its own), then the proposed text exactly as given. Only `approve` writes
to the vault: a new note (a safe name from the title, never an existing file, never outside the vault or in a
hidden or skipped folder), with pureMind's frontmatter saying where it came from; of the proposed text's own
frontmatter only plain `key: value` entries that do not name one of pureMind's keys are kept (see
`approved_note`). `puremind inbox show` prints that note, exactly as approve would write it.

Every change to the inbox (propose, approve, reject, edit) holds an exclusive lock on `<home>/inbox/.lock`, so
overlapping servers and a person at the terminal never lose or mix proposals. Files are written to a temporary
name and renamed into place (a killed run leaves the old state, never half a file). Before it writes a note, an
approve records where (`<id>.approving` in the inbox): an approve killed after writing the note is finished by the
next approve of the same proposal, whatever folder or name that one asks for (the note is never written twice),
a reject of it keeps the note and says where it is, and the killed run's temporary file is removed by the next
inbox command that takes the lock (while the lock is held no approve is running, so none is still being written)."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import secrets
import shlex
import stat
import time
import unicodedata
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

from puremind.errors import PuremindError

#: Limits of what an agent may propose (a full inbox is an error the agent sees, never a silent drop).
MAX_TEXT_CHARS = 100_000
MAX_TITLE_CHARS = 200
MAX_TAGS = 20
MAX_TAG_CHARS = 64
MAX_REASON_CHARS = 1_000
MAX_PENDING = 200
#: The longest file name stem approve makes from a title or `--name` (characters) ...
MAX_NAME_CHARS = 100
#: ... and in bytes: a name is at most 255 bytes (Linux, APFS) or 255 UTF-16 units (HFS+), and the stem leaves
#: room for the largest suffix approve adds (" 9999") and ".md".
MAX_NAME_BYTES = 255 - len(" 9999.md")
#: The frontmatter keys pureMind writes on an approved note; the proposed text's own frontmatter cannot set them.
OWN_KEYS = ("title", "tags", "source", "inbox_id", "proposed_by", "proposed", "approved")
_HEADER_KEYS = ("id", "title", "tags", "reason", "client", "proposed", "sha256")
#: the optional last header line of a scoped agent's proposal
_SCOPE_KEY = "scope"
_ID = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9]{6}$")
_WINDOWS_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10)), *(f"lpt{i}" for i in range(1, 10))}


class InboxError(PuremindError):
    """A proposal that cannot be taken, found or approved (exit 2 on the CLI, a tool error over MCP)."""


@dataclass(frozen=True)
class Proposal:
    id: str
    title: str
    text: str
    tags: tuple[str, ...] = ()
    reason: str = ""
    client: str = ""
    proposed: str = ""
    sha256: str = ""
    path: Path | None = field(default=None, compare=False)
    #: the vault folders the proposing agent was scoped to (`serve --scope`); approve writes only into them
    scope: tuple[str, ...] = ()

    def folder_for(self, folder: str) -> str:
        """Where approve writes by default: `folder` ([inbox] folder), or, when it lies outside the proposing
        agent's scope, the first scope folder."""
        return folder if not self.scope or self.allows(folder) else self.scope[0]

    def allows(self, folder: str) -> bool:
        """Whether approve may write into vault folder `folder`: any folder, or one inside the agent's scope."""
        from puremind.folders import folder_key, in_folders

        key = folder_key(folder)
        return not self.scope or (".." not in key.split("/") and in_folders(key, self.scope))

    @property
    def first_line(self) -> str:
        return next((line.strip() for line in self.text.splitlines() if line.strip()), "")


@dataclass(frozen=True)
class Proposed:
    """What `propose` did: the proposal's id, whether an identical pending one was reused, and where it is."""

    id: str
    merged: bool
    path: Path


@dataclass(frozen=True)
class Approved:
    """What `approve_note` did: the note's path, and whether an earlier, killed approve had already written it
    (then the folder and name asked for now were not used)."""

    path: Path
    earlier: bool = False


@dataclass(frozen=True)
class Rejected:
    """What `reject_note` did: the proposal it removed, and the note an earlier, killed approve of it had already
    written (kept: pureMind never deletes a file in the vault), or None."""

    proposal: Proposal
    note: Path | None = None


@dataclass(frozen=True)
class Preview:
    """What `approve` would do now (for `puremind inbox show`): the note's text, and where it would go, or
    where an earlier, killed approve already wrote it, or why the folder is refused."""

    text: str
    path: Path | None = None
    earlier: bool = False
    problem: str = ""


def inbox_dir(home: Path) -> Path:
    return Path(home) / "inbox"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _clean_line(text: str, limit: int, what: str) -> str:
    """One line of metadata: control characters and line breaks become spaces; too long is an error."""
    if not isinstance(text, str):
        raise InboxError(f"the {what} must be text")
    cleaned = " ".join("".join(" " if unicodedata.category(c)[0] == "C" else c for c in text).split())
    if len(cleaned) > limit:
        raise InboxError(f"the {what} has {len(cleaned):,} characters; at most {limit:,} are taken")
    return cleaned


def _read(path: Path) -> str:
    """A proposal file's text exactly as written: no newline translation (a CR or CRLF stays as the agent sent it)."""
    with open(path, encoding="utf-8", newline="") as fh:
        return fh.read()


def _digest(title: str, text: str) -> str:
    return hashlib.sha256(json.dumps([title, text]).encode("utf-8", "surrogatepass")).hexdigest()


def render_proposal(p: Proposal) -> str:
    """The proposal file: pureMind's header (one JSON value per line), then the text as given."""
    values = {"id": p.id, "title": p.title, "tags": list(p.tags), "reason": p.reason, "client": p.client,
              "proposed": p.proposed, "sha256": p.sha256}
    header = "\n".join(f"{key}: {json.dumps(values[key], ensure_ascii=False)}" for key in _HEADER_KEYS)
    if p.scope:  # only for a scoped agent's proposal, so the files of earlier versions read the same
        header += f"\n{_SCOPE_KEY}: {json.dumps(list(p.scope), ensure_ascii=False)}"
    return f"---\n{header}\n---\n{p.text}"


def parse_proposal(raw: str, path: Path | None = None) -> Proposal:
    """Read back what render_proposal wrote. Raises InboxError for a file pureMind did not write."""
    lines = raw.split("\n")
    size = len(_HEADER_KEYS)
    scope: tuple[str, ...] = ()
    if (len(lines) >= size + 3 and lines[0] == "---" and lines[size + 1].startswith(f"{_SCOPE_KEY}: ")
            and lines[size + 2] == "---"):
        try:
            value = json.loads(lines[size + 1].partition(": ")[2])
        except ValueError:
            value = None
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise InboxError(f"{path or 'the proposal'} is not a pureMind proposal file")
        scope = tuple(value)
        lines = lines[:size + 1] + lines[size + 2:]
    if len(lines) < size + 2 or lines[0] != "---" or lines[size + 1] != "---":
        raise InboxError(f"{path or 'the proposal'} is not a pureMind proposal file")
    values = {}
    for key, line in zip(_HEADER_KEYS, lines[1:len(_HEADER_KEYS) + 1]):
        name, sep, value = line.partition(": ")
        if name != key or not sep:
            raise InboxError(f"{path or 'the proposal'} is not a pureMind proposal file")
        try:
            values[key] = json.loads(value)
        except ValueError:
            raise InboxError(f"{path or 'the proposal'} is not a pureMind proposal file") from None
    text = "\n".join(lines[len(_HEADER_KEYS) + 2:])
    return Proposal(values["id"], values["title"], text, tuple(values["tags"]), values["reason"], values["client"],
                    values["proposed"], values["sha256"], path, scope)


class Inbox:
    """The proposals of one pureMind home."""

    def __init__(self, home: Path, *, max_pending: int = MAX_PENDING):
        self.dir = inbox_dir(home)
        self.max_pending = max_pending

    # -- locking and files ---------------------------------------------------------------------------------

    def _ensure(self) -> None:
        from puremind.store.files import make_parent

        make_parent(self.dir / ".lock")  # 0700 folders, whatever the umask
        os.chmod(self.dir, 0o700)

    @contextmanager
    def _locked(self, *, wait: bool = True) -> Iterator[bool]:
        """The inbox's exclusive lock, held for the block. With wait=False it is not waited for: the block gets
        False when another process holds it (and True when this one does)."""
        self._ensure()
        fd = os.open(self.dir / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _write(self, path: Path, content: str) -> None:
        """`content` at `path`, whole or not at all (a temporary file renamed into place), 0600."""
        tmp = _written_temp(path.parent, f".{path.name}.", content, 0o600)
        try:
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def _paths(self) -> list[Path]:
        if not self.dir.is_dir():
            return []
        return sorted(p for p in self.dir.iterdir() if p.suffix == ".md" and _ID.match(p.stem))

    # -- reading ---------------------------------------------------------------------------------------------

    def pending(self) -> list[Proposal]:
        """Every pending proposal, newest first (a file that cannot be read is left out)."""
        out = []
        for path in self._paths():
            try:
                out.append(parse_proposal(_read(path), path))
            except (OSError, UnicodeDecodeError, InboxError):
                continue
        return sorted(out, key=lambda p: p.id, reverse=True)  # ids grow with time (see propose)

    def get(self, pid: str) -> Proposal:
        """One pending proposal. Raises InboxError when there is none with that id."""
        if not isinstance(pid, str) or not _ID.match(pid):
            raise InboxError(f"no pending proposal {pid!r}", hint="`puremind inbox` lists them")
        path = self.dir / f"{pid}.md"
        try:
            return parse_proposal(_read(path), path)
        except FileNotFoundError:
            raise InboxError(f"no pending proposal {pid!r}", hint="`puremind inbox` lists them") from None

    # -- changing --------------------------------------------------------------------------------------------

    def propose(self, title: str, text: str, tags: list[str] | tuple[str, ...] = (), reason: str = "",
                client: str = "", scope: tuple[str, ...] = ()) -> Proposed:
        """Store a proposal (or find the identical pending one). `scope`: the vault folders the proposing agent
        is scoped to (approve then writes only into them). Raises InboxError for a proposal beyond the limits or
        a full inbox."""
        title = _clean_line(title, MAX_TITLE_CHARS, "title")
        if not title:
            raise InboxError("the title is empty")
        if not isinstance(text, str):
            raise InboxError("the text must be text")
        if "\x00" in text:
            raise InboxError("the text holds a NUL character")
        if len(text) > MAX_TEXT_CHARS:
            raise InboxError(f"the text has {len(text):,} characters; at most {MAX_TEXT_CHARS:,} are taken")
        if not text.strip():
            raise InboxError("the text is empty")
        if not isinstance(tags, (list, tuple)) or len(tags) > MAX_TAGS:
            raise InboxError(f"tags must be a list of at most {MAX_TAGS}")
        clean_tags = tuple(dict.fromkeys(t for t in (_clean_line(t, MAX_TAG_CHARS, "tag") for t in tags) if t))
        reason = _clean_line(reason or "", MAX_REASON_CHARS, "reason")
        client = _clean_line(client or "", 200, "client")
        digest = _digest(title, text)
        with self._locked():
            pending = self.pending()
            same = next((p for p in pending if p.sha256 == digest), None)
            if same is not None and same.path is not None:
                return Proposed(same.id, True, same.path)
            if len(pending) >= self.max_pending:
                raise InboxError(f"the inbox is full: {len(pending)} proposals wait for the person to approve or "
                                 "reject them", hint="ask the user to run `puremind inbox`")
            # The id is the UTC time to the microsecond, made under the lock: ids grow with time and never
            # collide (a taken one, or one older than the newest pending, moves on by a microsecond).
            now = time.time_ns() // 1000
            newest = max((_id_micros(p.id) for p in pending), default=0)
            micros = max(now, newest + 1)
            while True:
                pid = _id_of(micros)
                path = self.dir / f"{pid}.md"
                if not path.exists():
                    break
                micros += 1
            proposal = Proposal(pid, title, text, clean_tags, reason, client, _now(), digest, scope=tuple(scope))
            self._write(path, render_proposal(proposal))
            return Proposed(pid, False, path)

    def reject(self, pid: str) -> Proposal:
        """Remove a pending proposal (see reject_note). Raises InboxError when there is none with that id."""
        return self.reject_note(pid).proposal

    def reject_note(self, pid: str) -> Rejected:
        """Remove a pending proposal. Where an earlier approve of it was killed after writing its note, the note is
        kept (it is a file in the vault, and the person may have seen it) and returned, to be reported.

        Raises:
            InboxError: there is no pending proposal with that id.
        """
        with self._locked():
            self._tidy()
            proposal = self.get(pid)
            assert proposal.path is not None
            note = self._written_earlier(proposal.id)
            proposal.path.unlink()
            self._journal(proposal.id).unlink(missing_ok=True)
            return Rejected(proposal, note)

    def replace_text(self, pid: str, text: str) -> Proposal:
        """The person's edit of a proposal's text (`puremind inbox edit`)."""
        with self._locked():
            old = self.get(pid)
            assert old.path is not None
            new = Proposal(old.id, old.title, text, old.tags, old.reason, old.client, old.proposed,
                           _digest(old.title, text), old.path, old.scope)
            self._write(old.path, render_proposal(new))
            return new

    def approve(self, pid: str, vault: Path, folder: str = "inbox", name: str | None = None) -> Path:
        """Write the proposal as a new note in the vault and return its path (see approve_note)."""
        return self.approve_note(pid, vault, folder, name).path

    def approve_note(self, pid: str, vault: Path, folder: str = "inbox", name: str | None = None) -> Approved:
        """Write the proposal as a new note in `vault` (in `folder`, named `name` or after its title, with a
        suffix where a file exists), then remove it from the inbox. Where an earlier approve of it was killed
        after writing its note, that note is the one (`folder` and `name` are not used): it is never written twice.

        Raises:
            InboxError: no such proposal; a folder or name the vault rules refuse; or the note could not be
                written (a file system error: the proposal stays pending, nothing half-written is left).
        """
        with self._locked():
            self._tidy()
            proposal = self.get(pid)
            assert proposal.path is not None
            note = self._written_earlier(proposal.id)
            earlier = note is not None
            if note is None:
                _check_scope(proposal, folder)
                target_dir = note_folder(vault, folder)
                stem = _note_stem(proposal, name)
                _check_note_path(vault, target_dir, stem)
                try:
                    _remove_stale_temps(target_dir)
                    note = _already_written(target_dir, stem, proposal.id)
                    earlier = note is not None
                    if note is None:
                        # Say where the note goes before writing it: a killed run is finished from here.
                        self._write(self._journal(proposal.id), json.dumps({"folder": str(target_dir), "stem": stem}))
                        note = _write_new_note(target_dir, stem, approved_note(proposal),
                                               f"{APPROVE_TEMP_PREFIX}{proposal.id}-")
                except OSError as exc:
                    raise _write_error(exc, target_dir) from None
            proposal.path.unlink()
            self._journal(proposal.id).unlink(missing_ok=True)
            return Approved(note, earlier)

    def preview(self, pid: str, vault: Path | None, folder: str = "inbox", name: str | None = None) -> Preview:
        """The note approve would write now, and where (nothing is created). Raises InboxError when there is no
        pending proposal with that id."""
        proposal = self.get(pid)
        text = approved_note(proposal)
        earlier = self._written_earlier(proposal.id)
        if earlier is not None:
            return Preview(text, earlier, earlier=True)
        if vault is None:
            return Preview(text, problem="no vault is set")
        try:
            _check_scope(proposal, folder)
            target_dir = note_folder(vault, folder, create=False)
            stem = _note_stem(proposal, name)
            _check_note_path(vault, target_dir, stem)
        except InboxError as exc:
            return Preview(text, problem=exc.message)
        path = next((target_dir / n for n in _candidates(stem) if not os.path.lexists(target_dir / n)), None)
        return Preview(text, path, problem="" if path else f"no free file name for {stem!r}")

    def tidy(self) -> None:
        """Remove what killed approves left (see _tidy), unless an inbox command holds the lock now: never
        waits, never fails (`puremind inbox` lists the proposals either way)."""
        if not self.dir.is_dir():
            return
        try:
            with self._locked(wait=False) as held:
                if held:  # else an approve is running: its temporary file is not stale
                    self._tidy()
        except OSError:
            return

    # -- what a killed approve left ------------------------------------------------------------------------------

    def _journal(self, pid: str) -> Path:
        """Where approve records the folder and name stem of the note it is about to write."""
        return self.dir / f"{pid}{JOURNAL_SUFFIX}"

    def _read_journal(self, pid: str) -> tuple[Path, str] | None:
        try:
            data = json.loads(self._journal(pid).read_text(encoding="utf-8"))
            return Path(data["folder"]), str(data["stem"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _written_earlier(self, pid: str) -> Path | None:
        """The note an earlier approve of this proposal wrote before it was killed (it carries the proposal's id
        in its frontmatter), found where that approve recorded it was writing; None when there is none."""
        journal = self._read_journal(pid)
        if journal is None:
            return None
        folder, stem = journal
        try:
            return _already_written(folder, stem, pid)
        except (OSError, ValueError):
            return None

    def _tidy(self) -> None:
        """With the lock held (so no approve or other change is running): remove the temporary files of killed
        runs (in the inbox, and those of approves where each recorded it was writing) and the records of approves
        whose proposal is gone."""
        _remove_temps(self.dir, ".*.tmp")
        try:
            journals = [p for p in self.dir.iterdir() if p.name.endswith(JOURNAL_SUFFIX)]
        except OSError:
            return
        for journal in journals:
            pid = journal.name[: -len(JOURNAL_SUFFIX)]
            if not _ID.match(pid):
                continue
            where = self._read_journal(pid)
            if where is not None:
                _remove_temps(where[0], f"{APPROVE_TEMP_PREFIX}{pid}-*.tmp")
            try:
                if not (self.dir / f"{pid}.md").exists():
                    journal.unlink(missing_ok=True)
            except OSError:
                pass  # tidying never stops the command that does it


def _id_of(micros: int) -> str:
    """A proposal id: UTC date and time, then the microseconds (YYYYMMDD-HHMMSS-uuuuuu)."""
    seconds, rest = divmod(micros, 1_000_000)
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(seconds)) + f"-{rest:06d}"


def _id_micros(pid: str) -> int:
    stamp = datetime.strptime(pid[:15], "%Y%m%d-%H%M%S").replace(tzinfo=timezone.utc)
    return int(stamp.timestamp()) * 1_000_000 + int(pid[16:])


def safe_stem(title: str, fallback: str) -> str:
    """A file name stem from an untrusted title: no separators, control characters or leading dots, not a
    Windows device name, at most MAX_NAME_CHARS characters and MAX_NAME_BYTES bytes (cut between whole characters,
    never between a letter and its accents); `fallback` when nothing usable is left."""
    text = unicodedata.normalize("NFC", title or "")
    text = "".join(" " if unicodedata.category(c)[0] == "C" else c for c in text)
    text = re.sub(r'[\\/:*?"<>|]+', " ", text)
    text = " ".join(text.split()).strip(" .")
    text = text.lstrip(".-").strip()
    if not re.search(r"\w", text):
        text = ""
    if text.casefold().endswith((".md", ".markdown")):
        text = text.rsplit(".", 1)[0].rstrip(" .") or text
    text = _cut_name(text)
    if text.split(".")[0].casefold() in _WINDOWS_RESERVED:
        text = _cut_name("_" + text)
    return text or fallback


def _name_fits(text: str) -> bool:
    return (len(text.encode("utf-8", "surrogatepass")) <= MAX_NAME_BYTES
            and len(unicodedata.normalize("NFD", text).encode("utf-16-le", "surrogatepass")) // 2 <= MAX_NAME_BYTES)


def _cut_name(text: str) -> str:
    """`text` cut to MAX_NAME_CHARS characters and to what `_name_fits`, between grapheme-like units (a combining
    mark stays with its letter: where the cut would separate them, the letter goes too)."""
    keep = min(len(text), MAX_NAME_CHARS)
    while keep > 0 and not _name_fits(text[:keep]):
        keep -= 1
    while 0 < keep < len(text) and unicodedata.category(text[keep])[0] == "M":
        keep -= 1
    return text[:keep].rstrip(" .") if keep < len(text) else text


def _note_stem(p: Proposal, name: str | None) -> str:
    """The note's file name stem: `name` (the person's `--name`) or the title, both through safe_stem."""
    if name is None or name == "":
        return safe_stem(p.title, fallback=f"proposal-{p.id}")
    stem = safe_stem(name, fallback="")
    if not stem:
        raise InboxError(f"the name {name!r} leaves nothing usable for a file name",
                         hint="give a name with letters or digits, without a folder (use --to for that)")
    return stem


def _check_scope(proposal: Proposal, folder: str) -> None:
    """Refuse a folder outside the scope of the agent that proposed the note (its `serve --scope`)."""
    if not proposal.allows(folder):
        raise InboxError(f"proposal {proposal.id} came from an agent scoped to {', '.join(proposal.scope)}; "
                         f"{folder!r} lies outside it",
                         hint=f"approve it into a folder inside the scope, e.g. --to {shlex.quote(proposal.scope[0])}")


def _check_note_path(vault: Path, folder: Path, stem: str) -> None:
    """Refuse a note whose vault-relative path the index would not take (too long, for one)."""
    from puremind.vault import note_rel_is_valid

    rel = os.path.relpath(folder, vault)
    rel = "" if rel == "." else rel.replace(os.sep, "/") + "/"
    if not note_rel_is_valid(f"{rel}{stem} 9999.md"):
        raise InboxError(f"the note's path {rel}{stem}.md is too long for the index",
                         hint="use a shorter --to folder or --name")


def _write_error(exc: OSError, folder: Path) -> InboxError:
    """A file system error while approving, as one line: what failed and where; the proposal stays pending."""
    where = exc.filename or folder
    return InboxError(f"cannot write the note in {folder}: {exc.strerror or exc} ({where})",
                      hint="the proposal is still pending; fix the problem and approve it again")


def note_folder(vault: Path, folder: str, *, create: bool = True) -> Path:
    """The vault folder approve writes into, made when missing (one level at a time, each checked before the next
    is made; with create=False nothing is made). Returns it as the index sees it: the vault path, then the real
    path inside it (a folder symlink inside the vault is followed).

    Raises:
        InboxError: a folder outside the vault, hidden, skipped, not a folder, or reached through a symlink that
            leads out of the vault or into a hidden or skipped folder. Nothing is made then.
    """
    from puremind.vault import note_rel_is_valid

    raw = folder or ""
    if raw.startswith("/") or "\\" in raw or "\x00" in raw:
        raise InboxError(f"the folder {folder!r} must be a path inside the vault, like 'inbox' or 'notes/agents'")
    rel = raw.strip().strip("/")
    if rel and not note_rel_is_valid(f"{rel}/x.md"):
        raise InboxError(f"the folder {folder!r} is not one pureMind indexes (no '..', hidden or skipped folders)")
    root = Path(vault)
    if not root.is_dir():
        raise InboxError(f"the vault {root} is not a folder")
    real_root = os.path.realpath(root)
    current, real_rel = root, "."
    for part in rel.split("/") if rel else []:
        current = current / part
        if create and not os.path.lexists(current):
            try:
                os.mkdir(current, 0o755)  # its parent was checked: a real folder inside the vault
            except FileExistsError:
                pass
            except OSError as exc:
                raise _write_error(exc, current.parent) from None
        real_rel = _inside(real_root, current, folder, must_exist=create)
    return root if real_rel == "." else root / real_rel


def _inside(real_root: str, path: Path, folder: str, *, must_exist: bool) -> str:
    """`path`'s real path relative to the vault's, checked: inside the vault, not hidden or skipped, a folder."""
    from puremind.vault import note_rel_is_valid

    real = os.path.realpath(path)
    if os.path.commonpath([real_root, real]) != real_root:
        raise InboxError(f"the folder {folder!r} leads out of the vault (a symlink)")
    rel = os.path.relpath(real, real_root).replace(os.sep, "/")
    if rel != "." and not note_rel_is_valid(f"{rel}/x.md"):
        raise InboxError(f"the folder {folder!r} leads into a hidden or skipped folder (a symlink)")
    if (must_exist or os.path.lexists(path)) and not os.path.isdir(real):
        raise InboxError(f"the folder {folder!r} is not a folder in the vault")
    return rel


def approved_note(p: Proposal, approved: str | None = None) -> str:
    """The note approve writes: pureMind's frontmatter (where it came from), then what is kept of the proposed
    text's own frontmatter (see _their_frontmatter), then the rest of the text as given."""
    own = {"title": p.title, "tags": list(p.tags), "source": "pureMind inbox", "inbox_id": p.id,
           "proposed_by": p.client or "unknown", "proposed": p.proposed, "approved": approved or _now()}
    lines = [f"{key}: {json.dumps(own[key], ensure_ascii=False)}" for key in OWN_KEYS]
    body = p.text
    theirs: list[str] = []
    split = body.split("\n")
    if split and split[0].strip() == "---":
        end = next((i for i in range(1, len(split)) if split[i].strip() in ("---", "...")), None)
        if end is not None:
            theirs = _their_frontmatter(split[1:end])
            body = "\n".join(split[end + 1:])
    return "---\n" + "\n".join(lines + theirs) + "\n---\n" + body.lstrip("\n")


#: A top-level frontmatter entry kept from a proposal: a plain key (a letter, digit or _ first; then those,
#: spaces, '.', '-', '/'), then ':' and a space or the line's end. Quoted, complex (`? `), flow (`{`), aliased
#: (`*`), anchored, tagged and merge (`<<`) keys are never kept: only a YAML parser could tell what they name.
_PLAIN_KEY = re.compile(r"(\w[\w .\-/]*?)[ \t]*:(?:[ \t]|$)")
#: Characters a YAML reader takes as a line break (a line holding one could start a key of its own) or refuses.
_NOT_IN_FRONTMATTER = re.compile("[\r\x85\u2028\u2029\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x84\x86-\x9f\ufeff\ufffe\uffff"
                                 "\ud800-\udfff]")
_OWN_FOLDED = frozenset(OWN_KEYS)


def _their_frontmatter(lines: list[str]) -> list[str]:
    """The lines of a proposal's own frontmatter that approve keeps, below pureMind's keys. The lines are grouped
    into entries (a line that starts in the first column, then the lines under it: indented, `- ` items, blank lines and
    comments); an entry is kept, as is, only when it cannot set or swallow one of pureMind's keys:

    - its key is a plain one (see _PLAIN_KEY) and, compared casefolded and NFKC-normalised, not pureMind's;
    - no line of it holds a character YAML reads as a line break (CR, NEL, U+2028, U+2029) or refuses, and no line
      of it starts with a tab;
    - its value does not start with an anchor, alias, tag or reserved character, and a quoted or flow value
      ('...', "...", [...], {...}) ends within the entry.

    Everything before the first entry, and every entry that fails, is left out."""
    entries: list[list[str]] = []
    for line in lines:
        bare = line[:-1] if line.endswith("\r") else line
        starts_entry = bool(bare) and not (bare[0] in " \t#" or bare == "-" or bare.startswith("- ") or not bare.strip())
        if starts_entry or not entries:
            entries.append([line])
        else:
            entries[-1].append(line)
    kept: list[str] = []
    for entry in entries:
        first = entry[0][:-1] if entry[0].endswith("\r") else entry[0]
        match = _PLAIN_KEY.match(first)
        if match is None:
            continue
        key = unicodedata.normalize("NFKC", match.group(1).strip()).casefold()
        if key in _OWN_FOLDED:
            continue
        bare_lines = [line[:-1] if line.endswith("\r") else line for line in entry]
        if any(_NOT_IN_FRONTMATTER.search(line) or line.startswith("\t") for line in bare_lines):
            continue
        value = "\n".join([first[match.end():], *bare_lines[1:]]).lstrip(" ")
        if value[:1] in ("&", "*", "!", "%", "@", "`") or not _value_ends(value):
            continue
        kept.extend(entry)
    return kept


def _value_ends(value: str) -> bool:
    """False for a quoted or flow value that does not end in `value` (YAML would read on, into what follows)."""
    if value[:1] not in ("'", '"', "[", "{"):
        return True
    depth, i, n = 0, 0, len(value)
    while i < n:
        c = value[i]
        if c == '"' or c == "'":
            i += 1
            while i < n:
                if c == '"' and value[i] == "\\":
                    i += 2
                    continue
                if value[i] == c:
                    if c == "'" and i + 1 < n and value[i + 1] == "'":
                        i += 2
                        continue
                    break
                i += 1
            else:
                return False
            if depth == 0:
                return True
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
            if depth <= 0:
                return True
        i += 1
    return False


def _candidates(stem: str) -> Iterator[str]:
    yield f"{stem}.md"
    for n in range(2, 10_000):
        yield f"{stem} {n}.md"


def _already_written(folder: Path, stem: str, pid: str) -> Path | None:
    """The note an earlier, killed approve of this proposal wrote in `folder` (it carries the proposal's id)."""
    marker = f"inbox_id: {json.dumps(pid)}"
    for name in _candidates(stem):
        path = folder / name
        if not os.path.lexists(path):
            return None
        try:
            with path.open(encoding="utf-8", errors="replace") as fh:
                head = fh.read(4096)
        except OSError:
            continue
        if marker in head.split("\n---", 1)[0].split("\n"):
            return path
    return None


#: The hidden temporary file an approve writes before linking it to the note's name
#: (`.puremind-approve-<proposal id>-<random>.tmp`).
APPROVE_TEMP_PREFIX = ".puremind-approve-"
#: The record, in the inbox, of the folder and name an approve is writing (`<proposal id>.approving`).
JOURNAL_SUFFIX = ".approving"
#: A temporary file this much older than now was left by a killed approve (a running one is seconds old). Only for
#: temporary files no record of this inbox names (another pureMind home may approve into the same folder).
STALE_TEMP_S = 60.0


def _remove_temps(folder: Path, pattern: str, older_than: float | None = None) -> None:
    """Remove the regular files in `folder` matching `pattern` (older than `older_than` seconds, when given)."""
    now = time.time()
    try:
        found = list(folder.glob(pattern))
    except OSError:
        return
    for tmp in found:
        try:
            st = tmp.lstat()
            if stat.S_ISREG(st.st_mode) and (older_than is None or now - st.st_mtime > older_than):
                tmp.unlink()
        except OSError:
            pass


def _remove_stale_temps(folder: Path) -> None:
    """Remove old temporary files of approves in `folder` that no record names (see STALE_TEMP_S)."""
    _remove_temps(folder, f"{APPROVE_TEMP_PREFIX}*.tmp", STALE_TEMP_S)


def _written_temp(folder: Path, prefix: str, content: str, mode: int) -> Path:
    """A new hidden file `<prefix><random>.tmp` in `folder` holding `content`, flushed to disk (nothing is left
    behind when writing fails)."""
    tmp = folder / f"{prefix}{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _write_new_note(folder: Path, stem: str, content: str, prefix: str = APPROVE_TEMP_PREFIX) -> Path:
    """`content` as a new file `stem.md` (or `stem 2.md`, ...), never replacing one: a hidden temporary file
    linked to the first free name, whole or not at all."""
    tmp = _written_temp(folder, prefix, content, 0o644)
    try:
        for name in _candidates(stem):
            try:
                os.link(tmp, folder / name)  # fails when the name exists: nothing is ever overwritten
            except FileExistsError:
                continue
            return folder / name
        raise InboxError(f"no free file name for {stem!r} in {folder}")
    finally:
        tmp.unlink(missing_ok=True)
