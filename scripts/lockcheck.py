"""Compare the running environment with lock files: exit 1, naming each difference, unless every locked package
is installed at its locked version and nothing else is installed (but pureMind itself and pip).

    python scripts/lockcheck.py requirements/test.txt [...]        exact check (scripts/install-locked)
    python scripts/lockcheck.py --report requirements/test.txt     only print the differences (scripts/check-latest)
"""
from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

ALWAYS_THERE = {"pip", "puremind"}
LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked(paths: list[str]) -> dict[str, str]:
    pins: dict[str, str] = {}
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            m = LINE.match(line)
            if m:
                pins[norm(m.group(1))] = m.group(2)
    return pins


def installed() -> dict[str, str]:
    return {norm(d.metadata["Name"]): d.version for d in metadata.distributions() if d.metadata["Name"]}


def differences(pins: dict[str, str], have: dict[str, str]) -> list[str]:
    out = []
    for name, version in sorted(pins.items()):
        if name not in have:
            out.append(f"{name}: locked {version}, not installed")
        elif have[name] != version:
            out.append(f"{name}: locked {version}, installed {have[name]}")
    for name in sorted(set(have) - set(pins) - ALWAYS_THERE):
        out.append(f"{name}: installed {have[name]}, not in the lock")
    return out


def main(argv: list[str]) -> int:
    report = "--report" in argv
    paths = [a for a in argv if a != "--report"]
    if not paths:
        print("usage: lockcheck.py [--report] LOCK [LOCK ...]", file=sys.stderr)
        return 2
    diff = differences(locked(paths), installed())
    if report:
        print("\n".join(diff) if diff else "no package differs from the lock")
        return 0
    if diff:
        print("lockcheck: this environment is not the lock's:\n  " + "\n  ".join(diff), file=sys.stderr)
        return 1
    print(f"lockcheck: the environment matches the lock ({len(locked(paths))} packages)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
