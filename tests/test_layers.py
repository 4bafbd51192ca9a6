"""The import graph points one way (STYLE.md): front ends -> services -> indexer, retrieval, watcher, connect,
export -> store, chunker, vault, models -> cjk, langs, fingerprint, messages, config, errors; `store` and `models`
never import each other, and no module imports a module above it, lazily inside a function or not.

Every `import puremind...` (and relative import in export/) is read with `ast`, so a lazy import counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Each unit (a module, or a package) and its layer: a unit may import units of its own layer's group listed in
# SAME_LAYER_OK, or of any lower layer, never of a higher one.
LAYERS: dict[str, int] = {
    "cli": 5, "server": 5, "demo": 5, "__main__": 5,
    "services": 4, "doctor": 4,
    "indexer": 3, "index_plan": 3, "retrieval": 3, "watcher": 3, "watch_schedule": 3, "connect": 3, "export": 3,
    "inbox": 3, "evaluate": 3,
    "results": 2, "store": 2, "chunker": 2, "vault": 2, "models": 2,
    "cjk": 1, "langs": 1, "eta": 1, "redact": 1, "folders": 1, "progress": 2, "fingerprint": 1, "inotify_watches": 1, "messages": 1, "config": 1, "errors": 0, "__init__": 0,
}
# Imports inside one layer that the design allows: the watcher runs the indexer and its schedule; the indexer
# applies its plan; retrieval reads the store; the vault's safe reads share the chunker's line rules; the doctor
# reads the settings as the services turn them into model choices; eval runs searches.
SAME_LAYER_OK = {("watcher", "indexer"), ("indexer", "index_plan"), ("watcher", "watch_schedule"),
                 ("retrieval", "store"), ("vault", "chunker"), ("doctor", "services"),
                 ("evaluate", "retrieval")}
FRONT_ENDS = 5  # the command line, the server and the demo may call one another (`puremind serve` starts the server)
NEVER = {("store", "models"), ("models", "store"), ("models", "export"), ("models", "services"),
         ("store", "services"), ("retrieval", "services"), ("indexer", "services"), ("watcher", "services")}


def _unit(path: Path) -> str:
    rel = path.relative_to(REPO)
    if rel.parts[0] == "export":
        return "export"
    parts = rel.parts[1:]  # below puremind/
    return parts[0] if len(parts) > 1 else Path(parts[0]).stem


def _imported_units(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: inside the same package
                continue
            names = [node.module or ""]
            if node.module == "puremind":  # `from puremind import services` names a module; __version__ is not one
                names = [f"puremind.{a.name}" for a in node.names if not a.name.startswith("__")]
        for name in names:
            parts = name.split(".")
            if parts[0] == "puremind" and len(parts) > 1:
                found.add(parts[1])
    return found


def _edges() -> set[tuple[str, str, str]]:
    edges = set()
    for folder in (REPO / "puremind", REPO / "export"):
        for path in sorted(folder.rglob("*.py")):
            unit = _unit(path)
            for target in _imported_units(path):
                if target != unit:
                    edges.add((unit, target, str(path.relative_to(REPO))))
    return edges


def test_the_graph_scan_sees_the_imports_it_must_check():
    edges = {(a, b) for a, b, _ in _edges()}
    assert ("cli", "services") in edges and ("services", "models") in edges and ("store", "fingerprint") in edges


def test_every_unit_has_a_layer():
    units = {a for a, _, _ in _edges()} | {b for _, b, _ in _edges()}
    assert sorted(units - set(LAYERS)) == []


@pytest.mark.parametrize("edge", sorted(NEVER))
def test_units_that_must_not_meet(edge):
    found = [where for a, b, where in _edges() if (a, b) == edge]
    assert found == [], f"{edge[0]} imports {edge[1]} in {found}"


def test_no_module_imports_one_above_it():
    upward = [(a, b, where) for a, b, where in _edges()
              if LAYERS[b] > LAYERS[a] or (LAYERS[b] == LAYERS[a] < FRONT_ENDS and (a, b) not in SAME_LAYER_OK)]
    assert upward == []


def test_the_export_modules_do_not_import_each_other_in_a_circle():
    graph: dict[str, set[str]] = {}
    for path in (REPO / "export").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[path.stem] = {node.module.split(".")[0] for node in ast.walk(tree)
                            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in graph.get(start, ()))

    assert [m for m in graph if reaches(m, m, {m})] == []
