"""Finding code that reaches into the test runner or the process's exit, in a Python file's text.

This module owns one static scan, `scan`, and its difference between two texts,
`new_findings`. `agentdescent.code.FileTree.to_diff` runs it on every Python file a
proposal writes (``FileTree(machinery=...)``: refuse such diffs, flag them, or allow them)
because a candidate's code runs inside the test process, where it could lie about its
results from inside: read the runner's nonce from its frames or from `gc`, write records
of its own to the result channel's descriptor, patch pytest, or end the process before the
runner reports (`os._exit`, an `atexit` hook, a signal). An honest fix to a project's code
needs none of that.

What is found (each a `Finding`: what, the line, why it matters):

- imports of the runner and of the modules that reach into the interpreter: ``pytest``,
  ``_pytest``, ``pluggy``, ``atexit``, ``ctypes``, ``gc``, ``inspect``, ``faulthandler``,
  ``importlib``, ``builtins``, ``signal``; and of those that run code hidden in text or
  data: ``code``, ``codeop``, ``runpy``, ``pickle``, ``marshal``, ``shelve``, ``dill``,
  ``cloudpickle``, ``timeit``, ``pdb``, ``bdb``, ``doctest``, ``cProfile``, ``profile``,
  ``trace`` (a module of the project's own of such a name is not one of them);
- the process's exit and its signals: ``os._exit``, ``os.abort``, ``os.kill``,
  ``os.killpg``; ``sys.exit``, ``exit()``, ``quit()`` and ``raise SystemExit`` at module
  level (outside functions and outside ``if __name__ == "__main__":``);
- the interpreter's insides: ``sys._getframe``, ``sys._current_frames``, ``sys.settrace``,
  ``sys.setprofile`` (and ``threading``'s), ``sys.modules``, ``sys.addaudithook``,
  ``sys.meta_path``, ``sys.path_hooks``, ``sys.path`` (a module written at run time, then
  imported), ``site``, ``imp``, ``zipimport``, ``pkgutil``, assigning ``sys.stdout``/``sys.stderr``;
- code built at run time: ``__import__``, ``exec``, ``eval``, ``compile`` (the builtins,
  not ``re.compile``), ``types.FunctionType``/``CodeType``; ``getattr``/``setattr``/
  ``delattr``, ``operator.attrgetter``/``methodcaller`` with a name that is not a literal
  string, ``__getattribute__``, and ``vars(...)``, ``globals()``, ``locals()`` or a
  ``__dict__`` read by a computed key;
- frames and function internals: ``f_back``, ``f_globals``, ``f_locals``, ``f_builtins``,
  ``f_code``, ``tb_frame``, ``gi_frame``, ``cr_frame``, ``ag_frame``, ``__globals__``,
  ``__code__``, ``__subclasses__``, ``__builtins__`` (as attributes, names or literal
  strings);
- the result channel: raw descriptor writes (``os.write``, ``os.writev``, ``os.pwrite``,
  ``os.fdopen``, ``os.dup``, ``os.dup2``), and strings naming the runner's files or
  variables (``.agentdescent``, ``junit``, ``AGENTDESCENT_``) or ``/proc/``, ``/dev/fd``.

Module aliases are followed (``import os as o; o._exit(0)`` is found). A text that does
not parse is scanned line by line with patterns instead (coarser, never silent). It is a
tripwire, not a proof: code can always hide what it does from a static reading; the
sandbox and the runner's own checks (`agentdescent.code.reports`) are what hold.

Pure text processing: it must not import, compile or run the code it reads, nor touch
files.
"""

from __future__ import annotations

import ast
import functools
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Finding", "new_findings", "scan"]


@dataclass(frozen=True)
class Finding:
    """One place a file's code reaches into the test runner or the process's exit.

    Args:
        what: what was found, as the code spells it (``"os._exit"``, ``"import atexit"``,
            ``"'/proc/' in a string"``).
        line: the 1-based line it is on.
        why: what it would let the code do, in a few words.
    """

    what: str
    line: int
    why: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.what} ({self.why})"


#: Modules whose import is a finding, with what they reach.
MODULES = {
    "pytest": "the test runner", "_pytest": "the test runner's insides", "pluggy": "the test runner's hooks",
    "atexit": "exit hooks, after the runner reports", "ctypes": "raw memory", "gc": "every live object, the runner's too",
    "inspect": "frames and the runner's objects", "faulthandler": "the process's crash handling",
    "importlib": "the import system", "builtins": "the builtins every module shares",
    "signal": "signal handlers and the process's end",
    **dict.fromkeys(("site", "imp", "zipimport", "pkgutil"), "imports code from where the tree does not say"),
    **dict.fromkeys(("code", "codeop", "runpy", "pickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle",
                     "timeit", "pdb", "bdb", "doctest", "cProfile", "profile", "trace"),
                    "runs code hidden in text or data"),
}

#: ``os`` attributes that are findings.
OS_ATTRS = {
    "_exit": "ends the process before the runner reports", "abort": "ends the process before the runner reports",
    "kill": "signals processes, the runner's too", "killpg": "signals processes, the runner's too",
    "write": "writes to a raw descriptor: the result channel", "writev": "writes to a raw descriptor: the result channel",
    "pwrite": "writes to a raw descriptor: the result channel", "fdopen": "opens a raw descriptor: the result channel",
    "dup": "copies a raw descriptor: the result channel", "dup2": "copies a raw descriptor: the result channel",
}

#: ``sys`` attributes that are findings (``exit`` only at module level; ``stdout``/``stderr`` only assigned).
SYS_ATTRS = {
    "_getframe": "reads the runner's frames", "_current_frames": "reads the runner's frames",
    "settrace": "traces the runner's code", "setprofile": "traces the runner's code",
    "modules": "reaches every loaded module, the runner's too", "addaudithook": "hooks the interpreter",
    "meta_path": "hooks every later import", "path_hooks": "hooks every later import",
    "path": "imports code from where the tree does not say (a module written at run time)",
    "path_importer_cache": "hooks every later import",
}
_SYS_EXIT = "ends the process at import, before the runner reports"
_SYS_STREAM = "replaces the process's output, where results are read"

#: Attribute names that are findings on any object.
ATTRS = {
    "_exit": OS_ATTRS["_exit"], "killpg": OS_ATTRS["killpg"], "_getframe": SYS_ATTRS["_getframe"],
    "_current_frames": SYS_ATTRS["_current_frames"], "settrace": SYS_ATTRS["settrace"],
    "setprofile": SYS_ATTRS["setprofile"], "addaudithook": SYS_ATTRS["addaudithook"],
    "meta_path": SYS_ATTRS["meta_path"], "path_hooks": SYS_ATTRS["path_hooks"],
    **dict.fromkeys(("f_back", "f_globals", "f_locals", "f_builtins", "f_code", "tb_frame", "gi_frame", "cr_frame",
                     "ag_frame"), "walks frames to the runner's"),
    "__globals__": "reaches a function's module, the runner's too", "__code__": "rewrites a function's code",
    "__subclasses__": "reaches every class, the runner's too", "__builtins__": "the builtins every module shares",
    "__getattribute__": "reaches an attribute chosen at run time",
    "FunctionType": "makes a function of raw code", "CodeType": "makes raw code",
}

#: Builtin names whose use is a finding (unless the file binds the name itself).
NAMES = {"__import__": "imports a module chosen at run time", "exec": "runs code built at run time",
         "eval": "runs code built at run time", "compile": "builds code at run time",
         "__builtins__": ATTRS["__builtins__"]}

#: Substrings of string literals that are findings (matched case-insensitively).
STRINGS = {".agentdescent": "names the runner's files", "junit": "names the runner's report file",
           "agentdescent_": "names the runner's variables", "/proc/": "reads the processes' insides",
           "/dev/fd": "reaches the raw descriptors: the result channel"}

_MODULE_EXITS = {"exit": _SYS_EXIT, "quit": _SYS_EXIT}
_DYNAMIC_ATTR = "reaches an attribute chosen at run time"


def scan(text: str, own: Iterable[str] = ()) -> list[Finding]:
    """The findings in the Python source ``text``, in line order.

    Parsed with `ast` (nothing is imported or run); a text that does not parse is read
    line by line with patterns instead.

    Args:
        text: the file's source.
        own: top-level module names of the project itself: importing one of those is
            not a finding (a project may have its own ``profile`` or ``trace``).
    """
    return list(_scan(text, frozenset(own)))


def new_findings(new: str, old: str | None, own: Iterable[str] = ()) -> list[Finding]:
    """The findings of ``new`` that ``old`` (the file before the edit; None: a new file) does not have.

    Compared by what was found: when ``new`` holds more of one ``what`` than ``old`` did,
    every place of that ``what`` in ``new`` is listed (at least one is the edit's). So an
    edit of a file that already imports ``inspect`` is not refused for that import.
    ``own`` is as for `scan`.
    """
    mine = frozenset(own)
    found = _scan(new, mine)
    if old is None or not found:
        return list(found)
    before = Counter(f.what for f in _scan(old, mine))
    now = Counter(f.what for f in found)
    grown = {what for what, n in now.items() if n > before.get(what, 0)}
    return [f for f in found if f.what in grown]


@functools.lru_cache(maxsize=256)
def _scan(text: str, own: frozenset[str]) -> tuple[Finding, ...]:
    try:
        tree = ast.parse(text)
        found = _Visitor(tree, own).run()
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        found = [f for f in _scan_lines(text) if not (f.what.startswith("import ") and f.what[7:] in own)]
    return tuple(sorted(set(found), key=lambda f: (f.line, f.what)))


class _Visitor(ast.NodeVisitor):
    """One walk of a module: imports (with their aliases), attributes, names, calls, strings."""

    def __init__(self, tree: ast.Module, own: frozenset[str]) -> None:
        self.tree = tree
        self.own = own
        self.found: list[Finding] = []
        self.aliases: dict[str, str] = {}  # local name -> the module it is (os, sys, threading)
        self.bound: set[str] = set()  # names the file binds itself (a local `compile` is not the builtin)
        self.depth = 0  # functions entered: module level is 0
        self.main_guard = 0  # `if __name__ == "__main__":` blocks entered

    def run(self) -> list[Finding]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):  # names out of os/sys are checked where they are imported
                for alias in node.names:
                    top = alias.name.split(".")[0]
                    self.aliases[alias.asname or top] = alias.name if alias.asname else top
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                self.bound.add(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bound.add(node.name)
            elif isinstance(node, ast.arg):
                self.bound.add(node.arg)
        self.visit(self.tree)
        return self.found

    def add(self, what: str, node: ast.AST, why: str) -> None:
        self.found.append(Finding(what, getattr(node, "lineno", 1), why))

    def module_of(self, node: ast.expr) -> str | None:
        """The module ``node`` names (``os``, ``sys``...), following aliases and ``os.sys``."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id if node.id not in self.bound else None)
        if isinstance(node, ast.Attribute) and node.attr == "sys" and self.module_of(node.value) == "os":
            return "sys"
        return None

    # ------------------------------------------------------------- scopes

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_Lambda = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        guard = (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
                 and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant)
                 and test.comparators[0].value == "__main__")
        if not guard:
            self.generic_visit(node)
            return
        self.visit(node.test)
        self.main_guard += 1
        for child in node.body:
            self.visit(child)
        self.main_guard -= 1
        for child in node.orelse:
            self.visit(child)

    @property
    def at_import(self) -> bool:
        """Is the code being visited run when the module is imported?"""
        return self.depth == 0 and self.main_guard == 0

    # ------------------------------------------------------------- what is found

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            top = alias.name.split(".")[0]
            if top in MODULES and top not in self.own:
                self.add(f"import {alias.name}", node, MODULES[top])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module:
            return  # the project's own modules
        top = node.module.split(".")[0]
        if top in MODULES and top not in self.own:
            self.add(f"from {node.module} import ...", node, MODULES[top])
            return
        table = {"os": OS_ATTRS, "sys": SYS_ATTRS, "threading": {k: SYS_ATTRS[k] for k in ("settrace", "setprofile")}}
        attrs = table.get(node.module)
        if attrs is None:
            return
        for alias in node.names:
            if alias.name == "*":
                self.add(f"from {node.module} import *", node, "imports the process's controls unseen")
            elif alias.name in attrs:
                self.add(f"{node.module}.{alias.name}", node, attrs[alias.name])
            elif node.module == "sys" and alias.name == "exit" and self.at_import:
                self.add("sys.exit", node, _SYS_EXIT)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        module = self.module_of(node.value)
        if module == "os" and node.attr in OS_ATTRS:
            self.add(f"os.{node.attr}", node, OS_ATTRS[node.attr])
        elif module == "sys" and node.attr in SYS_ATTRS:
            self.add(f"sys.{node.attr}", node, SYS_ATTRS[node.attr])
        elif module == "sys" and node.attr == "exit" and self.at_import:
            self.add("sys.exit", node, _SYS_EXIT)
        elif module == "sys" and node.attr in ("stdout", "stderr") and isinstance(node.ctx, ast.Store):
            self.add(f"sys.{node.attr} assigned", node, _SYS_STREAM)
        elif node.attr in ATTRS:
            self.add(f".{node.attr}", node, ATTRS[node.attr])
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load) and node.id not in self.bound:
            if node.id in NAMES:
                self.add(node.id, node, NAMES[node.id])
            elif node.id in _MODULE_EXITS and self.at_import:
                self.add(f"{node.id}()", node, _MODULE_EXITS[node.id])

    def visit_Raise(self, node: ast.Raise) -> None:
        exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if isinstance(exc, ast.Name) and exc.id == "SystemExit" and self.at_import:
            self.add("raise SystemExit", node, _SYS_EXIT)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        called = func.id if isinstance(func, ast.Name) and func.id not in self.bound else (
            func.attr if isinstance(func, ast.Attribute) else None)
        at = {"getattr": 1, "setattr": 1, "delattr": 1, "attrgetter": 0, "methodcaller": 0}.get(called or "")
        if at is not None and (isinstance(func, ast.Name) or called in ("attrgetter", "methodcaller")):
            name = node.args[at] if len(node.args) > at else None
            if name is not None and not _literal(name):
                self.add(f"{called} with a computed name", node, _DYNAMIC_ATTR)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        space = node.value
        namespace = ((isinstance(space, ast.Call) and isinstance(space.func, ast.Name)
                      and space.func.id in ("vars", "globals", "locals") and space.func.id not in self.bound)
                     or (isinstance(space, ast.Attribute) and space.attr == "__dict__"))
        if namespace and not _literal(node.slice):
            self.add("a namespace read by a computed name", node, _DYNAMIC_ATTR)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        value = node.value
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        if not isinstance(value, str):
            return
        if value in ATTRS:
            self.add(f"{value!r} as a string", node, ATTRS[value])
        folded = value.casefold()
        for needle, why in STRINGS.items():
            if needle in folded:
                self.add(f"{needle!r} in a string", node, why)


def _literal(node: ast.expr) -> bool:
    """Is ``node`` a literal string (a name written out, not computed)?"""
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


# ------------------------------------------------------------- the fallback: a text that does not parse

_LINE_PATTERNS: list[tuple[re.Pattern[str], str, str]] = [
    *((re.compile(rf"\b(?:import|from)\s+(?:[\w.]+\s*,\s*)*{m}\b"), f"import {m}", why) for m, why in MODULES.items()),
    *((re.compile(rf"\bos\s*\.\s*{a}\b"), f"os.{a}", why) for a, why in OS_ATTRS.items()),
    *((re.compile(rf"\bsys\s*\.\s*{a}\b"), f"sys.{a}", why) for a, why in SYS_ATTRS.items()),
    *((re.compile(rf"\bfrom\s+os\s+import\b.*\b{a}\b"), f"os.{a}", why) for a, why in OS_ATTRS.items()),
    *((re.compile(rf"\bfrom\s+sys\s+import\b.*\b{a}\b"), f"sys.{a}", why) for a, why in SYS_ATTRS.items()),
    (re.compile(r"\bfrom\s+(?:os|sys)\s+import\s+\*"), "from os/sys import *", "imports the process's controls unseen"),
    (re.compile(r"\bsys\s*\.\s*exit\b"), "sys.exit", _SYS_EXIT),
    *((re.compile(rf"\.\s*{re.escape(a)}\b"), f".{a}", why) for a, why in ATTRS.items()),
    *((re.compile(rf"(?<![\w.]){re.escape(n)}\b"), n, why) for n, why in NAMES.items()),
    (re.compile(r"\b(?:getattr|setattr|delattr)\s*\([^,()]*,\s*(?![\s'\"])"), "getattr with a computed name",
     _DYNAMIC_ATTR),
    *((re.compile(re.escape(s), re.IGNORECASE), f"{s!r} in a string", why) for s, why in STRINGS.items()),
]


def _scan_lines(text: str) -> list[Finding]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, what, why in _LINE_PATTERNS:
            if pattern.search(line):
                found.append(Finding(what, number, why))
    return found
