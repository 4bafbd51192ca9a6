"""What the code imports is what pyproject.toml declares.

A plain `pip install puremind` gets the `dependencies` only. A third-party module imported by the runtime and
not declared works today only while another package happens to bring it (huggingface_hub 1.x brought
`requests`, 2.x does not), and then breaks a plain install with a ModuleNotFoundError. These tests read every
import in the source with `ast` (lazy ones inside functions too) and check each against the declared lists.
"""
from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
# Modules that are not installed under their distribution's name.
MODULE_DIST = {"mcp_types": "mcp-types", "huggingface_hub": "huggingface-hub", "onnx_ir": "onnx-ir"}
# Heavy modules the runtime may import only inside a function (the torch backend, the export path).
OPTIONAL_IN_RUNTIME = {"torch", "transformers", "optimum", "onnx", "onnx_ir", "coremltools", "onnxruntime_genai"}


def _dist_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _declared(*groups: str) -> set[str]:
    names = {_dist_name(r) for r in PYPROJECT["project"]["dependencies"]} if "core" in groups else set()
    for group in groups:
        names |= {_dist_name(r) for r in PYPROJECT["project"]["optional-dependencies"].get(group, [])}
    return names


def _imports(folder: Path) -> dict[str, list[tuple[str, int, bool]]]:
    """Top-level third-party module -> [(file, line, at module level)] for every import under `folder`."""
    found: dict[str, list[tuple[str, int, bool]]] = {}
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        top_level = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in ("puremind", "export", "__future__"):
                    continue
                where = (str(path.relative_to(REPO)), node.lineno, id(node) in top_level)
                found.setdefault(top, []).append(where)
    return found


def _dist(module: str) -> str:
    return MODULE_DIST.get(module, module).lower().replace("_", "-")


def test_the_scan_sees_the_imports_it_must_check():
    # A scan that found nothing would pass every check below.
    runtime = _imports(REPO / "puremind")
    assert {"numpy", "onnxruntime", "mcp", "pydantic", "tokenizers", "watchdog"} <= set(runtime)
    assert "torch" in runtime  # the torch backend, lazily
    assert {"optimum", "torch"} <= set(_imports(REPO / "export"))


def test_every_module_the_runtime_imports_is_a_declared_dependency():
    core, optional = _declared("core"), _declared("torch", "export")
    missing = {
        module: places[:2]
        for module, places in _imports(REPO / "puremind").items()
        if _dist(module) not in core and not (module in OPTIONAL_IN_RUNTIME and _dist(module) in optional)
    }
    assert not missing, f"imported by puremind/ but not declared in [project] dependencies: {missing}"


def test_the_runtime_imports_torch_and_the_export_tools_only_inside_functions():
    # A module-level import would make `import puremind...` fail on the runtime-only install.
    eager = {
        module: [place for place in places if place[2]]
        for module, places in _imports(REPO / "puremind").items()
        if module in OPTIONAL_IN_RUNTIME
    }
    eager = {module: places for module, places in eager.items() if places}
    assert not eager, f"optional modules imported at module level in puremind/: {eager}"


def test_every_module_the_export_code_imports_is_declared_by_the_export_extra():
    declared = _declared("core", "export")
    missing = {m: p[:2] for m, p in _imports(REPO / "export").items() if _dist(m) not in declared}
    assert not missing, f"imported by export/ but not declared in the [export] extra: {missing}"


@pytest.mark.parametrize("module", ["requests"])
def test_modules_no_longer_brought_by_a_dependency_are_not_imported(module):
    assert module not in _imports(REPO / "puremind")
