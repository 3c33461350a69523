"""Reading a code model's reply as file edits: search/replace blocks and whole-file replacements.

This module owns the proposal format of `agentdescent.code.FileTree`, parsed strictly:

- a **search/replace block**: a line holding the file's relative path, then
  ``<<<<<<< SEARCH``, the old lines, ``=======``, the new lines, ``>>>>>>> REPLACE``. An
  empty search part on a path the tree does not have creates that file. Several blocks
  may follow one path line, and the path line may sit outside or inside a code fence
  (both are how code models write them).
- a **whole-file replacement**: a line holding the path, then the whole file in a fenced
  block (three or more backticks or tildes, closed by the same fence).

Prose around the blocks is ignored. A marker out of order, a block without its path, or a
fence never closed is refused (`agentdescent.errors.EditRefused`, ``reason="malformed"``);
a reply with no block at all is refused with ``reason="no_edit"``. A path is kept as the
reply wrote it: whether it may be edited is decided once, by the tree
(`agentdescent.code.FileTree.check_path`, the rules of `agentdescent.code.paths`), and so is
whether the edits apply (`agentdescent.code.tree`).

Pure text processing: it must not touch files, the ledger or a model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import EditRefused

__all__ = ["FileEdit", "parse_edits"]

SEARCH = "<<<<<<< SEARCH"
DIVIDER = "======="
REPLACE = ">>>>>>> REPLACE"

_FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})[\w+.-]*\s*$")
_MARKERS = (SEARCH, DIVIDER, REPLACE)
_LABEL = re.compile(r"^(?:#+\s*|[-*]\s+)?(?:(?:file|path|filename)\s*:\s*)?", re.IGNORECASE)


@dataclass
class FileEdit:
    """What a reply does to one file: search/replace edits, or a whole new content.

    Args:
        path: the path as the reply wrote it (the tree normalises and checks it).
        edits: ``(search, replace)`` pairs in reply order (empty for a whole replacement).
        content: the whole new file, for a whole-file replacement; else None.
    """

    path: str
    edits: list[tuple[str, str]] = field(default_factory=list)
    content: str | None = None


def _path_of(line: str) -> str | None:
    """The path a line names, or None when it does not look like one."""
    text = _LABEL.sub("", line.strip()).strip().strip("`*\"'").strip()
    if text.endswith(":"):
        text = text[:-1].strip()
    if not text or any(c.isspace() for c in text) or text in _MARKERS or _FENCE.match(text):
        return None
    if "." not in text.rsplit("/", 1)[-1] and "/" not in text:
        return None  # a bare word ("Here", "Fix"), not a file name
    return text


def _block_text(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


def parse_edits(reply: str) -> list[FileEdit]:
    """The file edits in ``reply``, in order, one `FileEdit` per path (edits of one path merged in order).

    Raises:
        EditRefused: a malformed block (``reason="malformed"``) or no block at all
            (``reason="no_edit"``).
    """
    if not isinstance(reply, str):
        raise EditRefused(f"a proposal must be a str, got {type(reply).__name__}", reason="malformed")
    lines = reply.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    found: dict[str, FileEdit] = {}
    last_path: str | None = None
    block_fence: str | None = None  # the fence around search/replace blocks we are inside
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped == SEARCH:
            if last_path is None:
                raise EditRefused(
                    f"line {i + 1}: a {SEARCH} block without a path line before it; put the file's "
                    "relative path on the line above the block", reason="malformed")
            search, i = _until(lines, i + 1, DIVIDER, (SEARCH, REPLACE), "its SEARCH part")
            replace, i = _until(lines, i + 1, REPLACE, (SEARCH, DIVIDER), "its REPLACE part")
            entry = found.setdefault(last_path, FileEdit(last_path))
            if entry.content is not None:
                raise EditRefused(f"{last_path}: both a whole-file replacement and search/replace blocks; "
                                  "give one or the other", path=last_path, reason="malformed")
            entry.edits.append((_block_text(search), _block_text(replace)))
        elif stripped in (DIVIDER, REPLACE):
            raise EditRefused(f"line {i + 1}: {stripped!r} without a {SEARCH} before it", reason="malformed")
        elif block_fence is not None and stripped == block_fence:
            block_fence = None  # the fence around blocks closes; the path stays for more blocks
        elif (fence := _FENCE.match(stripped)) is not None:
            body, end = _fenced(lines, i, fence.group("fence"))
            if any(b.strip() == SEARCH for b in body):
                block_fence = fence.group("fence")  # blocks inside a fence: read them line by line
            else:
                if last_path is not None and last_path not in found:
                    found[last_path] = FileEdit(last_path, content=_block_text(body))
                last_path = None
                i = end
        elif stripped:
            # a path line names the file of the blocks (or the fenced file) right below it;
            # any other text in between (prose) leaves no path
            last_path = _path_of(line)
        i += 1
    if not found:
        raise EditRefused(
            "no edit in the reply: give a path line followed by a <<<<<<< SEARCH / ======= / "
            ">>>>>>> REPLACE block, or a path line followed by the whole file in a fenced block",
            reason="no_edit")
    return list(found.values())


def _until(lines: list[str], start: int, end_marker: str, wrong: tuple[str, ...], what: str) -> tuple[list[str], int]:
    out: list[str] = []
    for j in range(start, len(lines)):
        stripped = lines[j].strip()
        if stripped == end_marker:
            return out, j
        if stripped in wrong:
            raise EditRefused(f"line {j + 1}: {stripped!r} inside {what}; expected {end_marker!r} first",
                              reason="malformed")
        out.append(lines[j])
    raise EditRefused(f"{what} is never closed: {end_marker!r} is missing", reason="malformed")


def _fenced(lines: list[str], start: int, fence: str) -> tuple[list[str], int]:
    for j in range(start + 1, len(lines)):
        if lines[j].strip() == fence:
            return lines[start + 1:j], j
    raise EditRefused(f"line {start + 1}: a code fence {fence!r} that is never closed", reason="malformed")
