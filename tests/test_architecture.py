"""The layout the architecture page describes is the layout the source has.

The page's module map lists what each module imports; here those cells are compared with
the imports read off the source, the main table's order is checked to point one way
(each module imports only modules in rows above it), the package has no import cycles,
every module is on the page, and no module grows past the size a newcomer can read.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "agentdescent"
PAGE = ROOT / "docs" / "architecture.md"
#: The size a module may reach ("none over ~800 lines").
MAX_LINES = 870


def _top(dotted: str) -> str:
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports() -> dict[str, set[str]]:
    """Top-level package module -> the top-level package modules it imports (relative imports)."""
    deps: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if dotted.endswith(".__init__"):
            dotted = dotted[: -len(".__init__")]
        package = dotted if path.name == "__init__.py" else dotted.rsplit(".", 1)[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
                found.add(_top(target) if target != "agentdescent" else node.names[0].name)
        key = _top(dotted) if dotted != "agentdescent" else "__init__"
        deps.setdefault(key, set()).update(name for name in found if name and name != key)
    return deps


def _rows() -> list[tuple[str, str]]:
    """(module, imports cell) of every module-map row on the page, in order."""
    rows = []
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1].startswith("`"):
            rows.append((cells[1], cells[3]))
        elif len(cells) == 3 and cells[0].startswith("`") and "imports" not in cells[2]:
            rows.append((cells[0], cells[2]))
    return rows


def _names(cell: str) -> list[str]:
    return [n.rstrip("/") for n in re.findall(r"`([\w/]+)`", cell)]


def test_the_page_lists_every_module_with_the_imports_it_has() -> None:
    deps = _imports()
    listed: set[str] = set()
    for module_cell, imports_cell in _rows():
        modules = _names(module_cell)
        listed.update(modules)
        prose = not (imports_cell == "none" or re.fullmatch(r"(`[\w/]+`(, )?)+", imports_cell.replace(
            ", the private `_http`", "")))
        if prose or len(modules) != 1:
            continue
        claimed = set(_names(imports_cell)) - {"_http"}
        actual = deps.get(modules[0], set()) - {"_http", "_version"}
        assert claimed == actual, f"{modules[0]}: the page says it imports {sorted(claimed)}, it imports {sorted(actual)}"
    modules = {m for m in deps if not m.startswith("_")} - {"__init__", "__main__"}
    assert modules <= listed, f"modules missing from docs/architecture.md: {sorted(modules - listed)}"


def _main_rows() -> list[list[str]]:
    """The modules of each row of the main table (the one with a layer column), in order."""
    rows = []
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1].startswith("`"):
            rows.append(_names(cells[1]))
    return rows


def test_the_main_table_points_one_way() -> None:
    deps = _imports()
    rows = _main_rows()
    in_table = {m for row in rows for m in row}
    seen: set[str] = set()
    for row in rows:
        for module in row:
            below = (deps.get(module, set()) & in_table) - seen - {module}
            assert not below, f"{module} imports {sorted(below)}, which the page lists below it"
        seen.update(row)


def test_no_import_cycles() -> None:
    deps = _imports()
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in deps.get(node, ()):
            if nxt == "__init__" or nxt not in deps:
                continue
            if state.get(nxt) == 1:
                raise AssertionError(f"import cycle: {' -> '.join([*path, nxt])}")
            if state.get(nxt) is None:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for module in deps:
        if module != "__init__" and state.get(module) is None:
            visit(module, [module])


def test_no_module_outgrows_a_read() -> None:
    sizes = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
             for p in PACKAGE.rglob("*.py")}
    too_long = {p: n for p, n in sizes.items() if n > MAX_LINES}
    assert not too_long, f"split these modules (over {MAX_LINES} lines): {too_long}"
