"""Vault folders as pureMind compares them: the keys of `[agents] private` folders and of an agent's scope.

A folder and a note path are compared NFC and casefolded, so a case or Unicode normalisation variant of a folder
is the same folder, as on macOS. The index stores each note's key (files.path_key), so that the store matches an
agent's scope in SQL exactly as `in_folders` does here. Standard library only.
"""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path

from puremind.errors import ConfigError

_SCOPE_HINT = "give a folder of the vault, relative to it (e.g. --scope projects/)"


def folder_key(folder: str) -> str:
    """A vault-relative folder as `[agents] private` folders are compared: NFC, casefolded, `/` separated, with
    no leading `./` or `/` and one trailing `/` ("Journal" -> "journal/"). "" for the vault itself."""
    parts = [p for p in unicodedata.normalize("NFC", folder).replace("\\", "/").split("/") if p not in ("", ".")]
    return "".join(p.casefold() + "/" for p in parts)


def path_key(rel: str) -> str:
    """A vault-relative note path as folders are matched against it: NFC, casefolded."""
    return unicodedata.normalize("NFC", rel).casefold()


def in_folders(rel: str, folders: tuple[str, ...] | list[str]) -> bool:
    """Whether the note at vault-relative path `rel` lies under one of `folders` (compared as `folder_key` makes
    them: a case or Unicode normalisation variant of a folder is the same folder, as on macOS)."""
    key = path_key(rel)
    return any(key.startswith(f) for f in (folder_key(f) for f in folders) if f)


def scope_folders(vault: Path, scope: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """An agent's scope folders (`serve --scope`, `[agents] scope`) as given, each made vault-relative
    ("Work/Notes"); () when one of them is the vault itself. A folder is given relative to the vault (or as an
    absolute path inside it) and must be a folder of the vault, compared as `folder_key` makes them.

    Raises:
        ConfigError: a folder outside the vault, with `..`, or that is not a folder of the vault.
    """
    real_vault = os.path.realpath(vault)
    kept: list[str] = []
    for given in scope:
        folder = given
        if folder.startswith(("/", "~")):
            absolute = os.path.realpath(os.path.expanduser(folder))
            if os.path.commonpath([absolute, real_vault]) != real_vault:
                raise ConfigError(f"the scope folder {given!r} lies outside the vault {vault}", hint=_SCOPE_HINT)
            folder = os.path.relpath(absolute, real_vault)
        parts = [part for part in folder.replace("\\", "/").split("/") if part not in ("", ".")]
        if ".." in parts:
            raise ConfigError(f"the scope folder {given!r} climbs out with '..'", hint=_SCOPE_HINT)
        key = folder_key(folder)
        if not key:
            return ()  # the vault itself: everything
        if not _has_folder(real_vault, key):
            raise ConfigError(f"the scope folder {given!r} is not a folder of the vault {vault}", hint=_SCOPE_HINT)
        kept.append("/".join(parts))
    return tuple(kept)


def _has_folder(root: str, key: str) -> bool:
    """Whether the folder `root` holds a folder whose path, compared as `folder_key` makes it, is `key`."""
    here = [root]
    for part in key.rstrip("/").split("/"):
        found = []
        for folder in here:
            try:
                with os.scandir(folder) as entries:
                    found += [e.path for e in entries if e.is_dir() and folder_key(e.name) == part + "/"]
            except OSError:
                continue
        if not found:
            return False
        here = found
    return True
