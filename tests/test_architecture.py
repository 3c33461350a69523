"""The layout the architecture page describes is the layout the source has.

The page draws the package as folders (layers) on a ground floor of small modules. Here
the page's folder table is compared with the imports read off the source (every folder
imports from outside itself exactly what its row says, and only folders in rows above it),
the package has no import cycle between modules nor between folders, every module is on
the page, every folder's ``__init__`` says what it owns and must not import, and no module
grows past the size a newcomer can read.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import agentdescent

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "agentdescent"
PAGE = ROOT / "docs" / "architecture.md"
#: The size a module may reach.
MAX_LINES = 600
#: The runtime is wiring only.
MAX_RUNTIME_LINES = 500
#: The ground floor: the modules every layer uses, at the package's top level.
GROUND = {"errors", "validation", "seams", "clock", "failures", "textedits", "fate", "types", "messages",
          "tokens", "usage", "model", "processes", "fewshot"}
PRIVATE = {"_http", "_version"}


def _modules() -> dict[str, Path]:
    """Dotted module name (``agentdescent.merge.fusion``; packages by their own name) -> file."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(dotted: str, path: Path) -> set[str]:
    """The package modules ``path`` imports (resolved; ``from . import x`` names x), lazily or not."""
    package = dotted if path.name == "__init__.py" else dotted.rsplit(".", 1)[0]
    modules = _modules()
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                child = f"{target}.{alias.name}"
                found.add(child if child in modules else target)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("agentdescent"):
            found.add(node.module)
    return {m for m in found if m != dotted}


def _unit(dotted: str) -> str:
    """The folder (``merge``) or ground-floor module (``errors``) a module belongs to."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _unit_imports() -> dict[str, set[str]]:
    deps: dict[str, set[str]] = {}
    for dotted, path in _modules().items():
        unit = _unit(dotted)
        deps.setdefault(unit, set()).update(_unit(m) for m in _imports(dotted, path))
    return {unit: names - {unit} for unit, names in deps.items()}


def _folders() -> set[str]:
    return {p.parent.name for p in PACKAGE.glob("*/__init__.py")}


def _table_rows() -> list[tuple[str, list[str]]]:
    """(folder, imports it claims) of each row of the page's folder table, in order."""
    rows = []
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"`\w+/`", cells[0]) and "`" in cells[2]:
            rows.append((cells[0].strip("`/"), re.findall(r"`(\w+)`", cells[2])))
    return rows


def _module_rows() -> set[str]:
    """Every module the page's module table lists (``merge/fusion``, ``errors``, ``ledger/``)."""
    listed = set()
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`") and cells[0].endswith("`"):
            listed.add(cells[0].strip("`"))
    return listed


def test_the_top_level_holds_only_the_ground_floor_and_folders() -> None:
    top = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert top == GROUND | PRIVATE, f"top-level modules that belong in a folder: {sorted(top - GROUND - PRIVATE)}"
    for name in GROUND:
        leaks = {_unit(m) for m in _imports(f"agentdescent.{name}", PACKAGE / f"{name}.py")} - GROUND - PRIVATE
        assert not leaks, f"the ground-floor module {name} imports the folders {sorted(leaks)}"


def test_every_folder_says_what_it_owns_and_must_not_import() -> None:
    for folder in _folders():
        doc = ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text(encoding="utf-8")))
        assert doc, f"agentdescent/{folder}/__init__.py has no docstring"
        doc = " ".join(doc.split())
        assert "must not import" in doc or "nothing in the package imports it" in doc, (
            f"agentdescent/{folder}/__init__.py does not say what it must not import")


def test_the_folder_table_is_what_the_source_imports_and_points_one_way() -> None:
    deps = _unit_imports()
    rows = _table_rows()
    assert {folder for folder, _ in rows} == _folders(), "the folder table lists other folders than the package has"
    seen: set[str] = set()
    for folder, claimed in rows:
        assert set(claimed) == deps.get(folder, set()), (
            f"{folder}/: the page says it imports {sorted(claimed)}, it imports {sorted(deps.get(folder, set()))}")
        above = {name for name in claimed if name in _folders()} - seen
        assert not above, f"{folder}/ imports {sorted(above)}, which the page lists below it"
        seen.add(folder)


def test_no_import_cycles_between_modules() -> None:
    modules = _modules()
    edges = {m: {t for t in _imports(m, p) if t in modules and t != "agentdescent"} for m, p in modules.items()}
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            # a package's __init__ re-exports its own modules: importing them is not a cycle
            if node.startswith(nxt + "."):
                continue
            if state.get(nxt) == 1:
                raise AssertionError(f"import cycle: {' -> '.join([*path, nxt])}")
            if state.get(nxt) is None:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for module in edges:
        if module != "agentdescent" and state.get(module) is None:
            visit(module, [module])


def test_every_module_is_on_the_page() -> None:
    listed = _module_rows()
    folders = _folders()
    whole = {"ledger", "providers", "code", "domains", "testing"}  # listed as one row each
    missing = []
    for dotted in _modules():
        parts = dotted.split(".")[1:]
        if not parts or parts[0] in PRIVATE | {"__main__"} or parts == [parts[0]] and parts[0] in folders:
            continue
        key = parts[0] + "/" if parts[0] in whole else "/".join(parts)
        if key not in listed:
            missing.append(key)
    assert not missing, f"modules missing from docs/architecture.md: {sorted(missing)}"


def test_no_module_outgrows_a_read() -> None:
    sizes = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
             for p in PACKAGE.rglob("*.py")}
    too_long = {p: n for p, n in sizes.items() if n > MAX_LINES}
    assert not too_long, f"split these modules (over {MAX_LINES} lines): {too_long}"
    runtime = sizes["agentdescent/engine/runtime.py"]
    assert runtime < MAX_RUNTIME_LINES, f"agentdescent/engine/runtime.py is {runtime} lines: wiring only, under {MAX_RUNTIME_LINES}"


def test_specs_module_names_still_import_and_name_the_module_itself() -> None:
    import importlib

    for name, home in agentdescent.SPEC_MODULES.items():
        old = importlib.import_module(f"agentdescent.{name}")
        assert old is importlib.import_module(f"agentdescent.{home}")
    from agentdescent.async_evolve import async_evolve
    from agentdescent.staleness import get_policy

    assert agentdescent.async_evolve is async_evolve  # the function, as SPEC §7 has it
    assert get_policy("guarded").name == "guarded"
