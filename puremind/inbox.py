"""The inbox: notes that agents propose and the person approves (the spec's v0.2 write path).

A proposal is data from an agent. It lives in pureMind's own folder (`<home>/inbox/`, 0700), never in the vault,
as one 0600 Markdown file per proposal: a header pureMind writes (every value JSON-encoded on one line, so no
title, tag or reason can add a line of its own), then the proposed text exactly as given. Only `approve` writes
to the vault: a new note (a safe name from the title, never an existing file, never outside the vault or in a
hidden or skipped folder), with frontmatter saying where it came from.

Every change to the inbox (propose, approve, reject, edit) holds an exclusive lock on `<home>/inbox/.lock`, so
overlapping servers and a person at the terminal never lose or mix proposals. Files are written to a temporary
name and renamed into place (a killed run leaves the old state, never half a file); an approve that was killed
after writing the note is finished by the next approve of the same proposal (the note carries its id).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import secrets
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
#: The longest file name stem approve makes from a title (characters).
MAX_NAME_CHARS = 100
#: The frontmatter keys pureMind writes on an approved note; the proposed text's own frontmatter cannot set them.
OWN_KEYS = ("title", "tags", "source", "inbox_id", "proposed_by", "proposed", "approved")
_HEADER_KEYS = ("id", "title", "tags", "reason", "client", "proposed", "sha256")
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

    @property
    def first_line(self) -> str:
        return next((line.strip() for line in self.text.splitlines() if line.strip()), "")


@dataclass(frozen=True)
class Proposed:
    """What `propose` did: the proposal's id, whether an identical pending one was reused, and where it is."""

    id: str
    merged: bool
    path: Path


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


def _digest(title: str, text: str) -> str:
    return hashlib.sha256(json.dumps([title, text]).encode("utf-8", "surrogatepass")).hexdigest()


def render_proposal(p: Proposal) -> str:
    """The proposal file: pureMind's header (one JSON value per line), then the text as given."""
    values = {"id": p.id, "title": p.title, "tags": list(p.tags), "reason": p.reason, "client": p.client,
              "proposed": p.proposed, "sha256": p.sha256}
    header = "\n".join(f"{key}: {json.dumps(values[key], ensure_ascii=False)}" for key in _HEADER_KEYS)
    return f"---\n{header}\n---\n{p.text}"


def parse_proposal(raw: str, path: Path | None = None) -> Proposal:
    """Read back what render_proposal wrote. Raises InboxError for a file pureMind did not write."""
    lines = raw.split("\n")
    if len(lines) < len(_HEADER_KEYS) + 2 or lines[0] != "---" or lines[len(_HEADER_KEYS) + 1] != "---":
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
                    values["proposed"], values["sha256"], path)


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
    def _locked(self) -> Iterator[None]:
        self._ensure()
        fd = os.open(self.dir / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
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
                out.append(parse_proposal(path.read_text(encoding="utf-8"), path))
            except (OSError, UnicodeDecodeError, InboxError):
                continue
        return sorted(out, key=lambda p: p.id, reverse=True)  # ids grow with time (see propose)

    def get(self, pid: str) -> Proposal:
        """One pending proposal. Raises InboxError when there is none with that id."""
        if not isinstance(pid, str) or not _ID.match(pid):
            raise InboxError(f"no pending proposal {pid!r}", hint="`puremind inbox` lists them")
        path = self.dir / f"{pid}.md"
        try:
            return parse_proposal(path.read_text(encoding="utf-8"), path)
        except FileNotFoundError:
            raise InboxError(f"no pending proposal {pid!r}", hint="`puremind inbox` lists them") from None

    # -- changing --------------------------------------------------------------------------------------------

    def propose(self, title: str, text: str, tags: list[str] | tuple[str, ...] = (), reason: str = "",
                client: str = "") -> Proposed:
        """Store a proposal (or find the identical pending one). Raises InboxError for a proposal beyond the
        limits or a full inbox."""
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
            proposal = Proposal(pid, title, text, clean_tags, reason, client, _now(), digest)
            self._write(path, render_proposal(proposal))
            return Proposed(pid, False, path)

    def reject(self, pid: str) -> Proposal:
        """Remove a pending proposal. Raises InboxError when there is none with that id."""
        with self._locked():
            proposal = self.get(pid)
            assert proposal.path is not None
            proposal.path.unlink()
            return proposal

    def replace_text(self, pid: str, text: str) -> Proposal:
        """The person's edit of a proposal's text (`puremind inbox edit`)."""
        with self._locked():
            old = self.get(pid)
            assert old.path is not None
            new = Proposal(old.id, old.title, text, old.tags, old.reason, old.client, old.proposed,
                           _digest(old.title, text), old.path)
            self._write(old.path, render_proposal(new))
            return new

    def approve(self, pid: str, vault: Path, folder: str = "inbox", name: str | None = None) -> Path:
        """Write the proposal as a new note in `vault` (in `folder`, named `name` or after its title, with a
        suffix where a file exists), then remove it from the inbox. Returns the note's path.

        Raises:
            InboxError: no such proposal, or a folder or name the vault rules refuse.
        """
        with self._locked():
            proposal = self.get(pid)
            assert proposal.path is not None
            target_dir = note_folder(vault, folder)
            stem = safe_stem(name if name else proposal.title, fallback=f"proposal-{proposal.id}")
            _remove_stale_temps(target_dir)
            note = _already_written(target_dir, stem, proposal.id)
            if note is None:
                note = _write_new_note(target_dir, stem, approved_note(proposal))
            proposal.path.unlink()
            return note


def _id_of(micros: int) -> str:
    """A proposal id: UTC date and time, then the microseconds (YYYYMMDD-HHMMSS-uuuuuu)."""
    seconds, rest = divmod(micros, 1_000_000)
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(seconds)) + f"-{rest:06d}"


def _id_micros(pid: str) -> int:
    stamp = datetime.strptime(pid[:15], "%Y%m%d-%H%M%S").replace(tzinfo=timezone.utc)
    return int(stamp.timestamp()) * 1_000_000 + int(pid[16:])


def safe_stem(title: str, fallback: str) -> str:
    """A file name stem from an untrusted title: no separators, control characters or leading dots, not a
    Windows device name, at most MAX_NAME_CHARS characters; `fallback` when nothing usable is left."""
    text = unicodedata.normalize("NFC", title or "")
    text = "".join(" " if unicodedata.category(c)[0] == "C" else c for c in text)
    text = re.sub(r'[\\/:*?"<>|]+', " ", text)
    text = " ".join(text.split()).strip(" .")
    text = text.lstrip(".-").strip()
    if not re.search(r"\w", text):
        text = ""
    text = text[:MAX_NAME_CHARS].rstrip(" .")
    if text.split(".")[0].casefold() in _WINDOWS_RESERVED:
        text = "_" + text
    if text.casefold().endswith((".md", ".markdown")):
        text = text.rsplit(".", 1)[0].rstrip(" .") or text
    return text or fallback


def note_folder(vault: Path, folder: str) -> Path:
    """The vault folder approve writes into, made when missing. Raises InboxError for a folder outside the
    vault, hidden, skipped, or reached through a symlink that leads out of it."""
    from puremind.vault import note_rel_is_valid

    rel = (folder or "").strip().strip("/")
    if folder and (folder.startswith("/") or "\\" in folder):
        raise InboxError(f"the folder {folder!r} must be a path inside the vault, like 'inbox' or 'notes/agents'")
    if rel and not note_rel_is_valid(f"{rel}/x.md"):
        raise InboxError(f"the folder {folder!r} is not one pureMind indexes (no '..', hidden or skipped folders)")
    root = Path(vault)
    if not root.is_dir():
        raise InboxError(f"the vault {root} is not a folder")
    target = root / rel if rel else root
    target.mkdir(parents=True, exist_ok=True, mode=0o755)
    real_root, real_target = os.path.realpath(root), os.path.realpath(target)
    if os.path.commonpath([real_root, real_target]) != real_root:
        raise InboxError(f"the folder {folder!r} leads out of the vault (a symlink)")
    return target


def approved_note(p: Proposal) -> str:
    """The note approve writes: pureMind's frontmatter (where it came from), the proposed text's own frontmatter
    keys merged in below it except pureMind's keys, then the text."""
    own = {"title": p.title, "tags": list(p.tags), "source": "pureMind inbox", "inbox_id": p.id,
           "proposed_by": p.client or "unknown", "proposed": p.proposed, "approved": _now()}
    lines = [f"{key}: {json.dumps(own[key], ensure_ascii=False)}" for key in OWN_KEYS]
    body = p.text
    theirs: list[str] = []
    split = body.split("\n")
    if split and split[0].strip() == "---":
        end = next((i for i in range(1, len(split)) if split[i].strip() in ("---", "...")), None)
        if end is not None:
            skipping = False
            for line in split[1:end]:
                key = line.split(":", 1)[0].strip().casefold() if ":" in line and not line[:1].isspace() else None
                if key is not None:
                    skipping = key in OWN_KEYS
                elif line[:1] not in (" ", "\t", "-"):
                    skipping = False
                if not skipping:
                    theirs.append(line)
            body = "\n".join(split[end + 1:])
    return "---\n" + "\n".join(lines + theirs) + "\n---\n" + body.lstrip("\n")


def _candidates(stem: str) -> Iterator[str]:
    yield f"{stem}.md"
    for n in range(2, 10_000):
        yield f"{stem} {n}.md"


def _already_written(folder: Path, stem: str, pid: str) -> Path | None:
    """The note an earlier, killed approve of this proposal wrote (it carries the proposal's id)."""
    marker = f"inbox_id: {json.dumps(pid)}"
    for name in _candidates(stem):
        path = folder / name
        if not path.exists():
            return None
        try:
            with path.open(encoding="utf-8", errors="replace") as fh:
                head = fh.read(4096)
        except OSError:
            continue
        if marker in head.split("\n---", 1)[0]:
            return path
    return None


#: The hidden temporary file an approve writes before linking it to the note's name.
APPROVE_TEMP_PREFIX = ".puremind-approve-"
#: A temporary file this much older than now was left by a killed approve (a running one is seconds old).
STALE_TEMP_S = 60.0


def _remove_stale_temps(folder: Path) -> None:
    """Remove what approves killed before they finished left in `folder`: their hidden temporary files (each is
    either a copy of a note already linked into place or a note never linked; the proposal is still pending)."""
    now = time.time()
    for tmp in folder.glob(f"{APPROVE_TEMP_PREFIX}*.tmp"):
        try:
            if tmp.is_file() and not tmp.is_symlink() and now - tmp.lstat().st_mtime > STALE_TEMP_S:
                tmp.unlink()
        except OSError:
            pass


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


def _write_new_note(folder: Path, stem: str, content: str) -> Path:
    """`content` as a new file `stem.md` (or `stem 2.md`, ...), never replacing one: a hidden temporary file
    linked to the first free name, whole or not at all."""
    tmp = _written_temp(folder, APPROVE_TEMP_PREFIX, content, 0o644)
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
