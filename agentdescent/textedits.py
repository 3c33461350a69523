"""Search/replace edits of a text, applied exactly, and when two edited writes of one text merge.

This module owns the meaning of an edit, the ``(search, replace)`` pair a code model
writes: the search text must occur **exactly once** in the text it is applied to, and is
replaced there; an empty search stands for "the whole of an empty text" (a new file). A
list of edits applies in order, each on the result of the ones before. `apply_edits` is
the one place that rule lives: the code strategy (`agentdescent.code.FileTree`) builds
diffs with it, `agentdescent.types.Diff.apply` rebases an edited write onto a newer value
with it, and `agentdescent.merge.fusion` asks `merge_writes` whether two edits of one value
are disjoint (each applies on the other's result, and both orders give the same text).

Pure text processing: it must not import anything from the package but its errors, read
files, or decide what an edit means beyond the rule above.
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import EditRefused

__all__ = ["apply_edits", "merge_writes"]

#: One edit: ``(search, replace)``.
Edit = tuple[str, str]


def _excerpt(text: str, limit: int = 80) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= limit else first[: limit - 3] + "..."


def apply_edits(text: str, edits: Sequence[Edit], *, path: str = "the text") -> str:
    """``text`` with every edit applied in order; each search must occur exactly once.

    Args:
        text: the text to edit ("" for a file that does not exist yet).
        edits: ``(search, replace)`` pairs. An empty search replaces the whole text, and
            only an empty text (it creates a file).
        path: what the text is, for the message.

    Returns:
        The edited text.

    Raises:
        EditRefused: a search is not found (``reason="not_found"``), found more than
            once (``"ambiguous"``), or empty on a text that is not (``"not_found"``).
    """
    for number, (search, replace) in enumerate(edits, 1):
        where = f"{path}: edit {number} of {len(edits)}"
        if search == "":
            if text != "":
                raise EditRefused(
                    f"{where} has an empty SEARCH part, which only creates a new file, but {path} "
                    "already has content; quote the lines to replace in SEARCH",
                    path=path, reason="not_found",
                )
            text = replace
            continue
        count = text.count(search)
        if count == 0:
            raise EditRefused(
                f"{where}: its SEARCH part (starting {_excerpt(search)!r}) is not in {path}; SEARCH "
                "must quote the current lines exactly, whitespace included",
                path=path, reason="not_found",
            )
        if count > 1:
            raise EditRefused(
                f"{where}: its SEARCH part (starting {_excerpt(search)!r}) occurs {count} times in "
                f"{path}; quote more lines around it so that it occurs once",
                path=path, reason="ambiguous",
            )
        text = text.replace(search, replace, 1)
    return text


def merge_writes(a_value: str, a_edits: Sequence[Edit], b_value: str, b_edits: Sequence[Edit]) -> str | None:
    """The text both edited writes make together, or None when they overlap.

    Two writes of one text, each built by edits on the same original: they are disjoint
    when A's edits apply on B's result, B's on A's, and both orders give the same text
    (then that text holds both changes). Neither original is needed. Writes without
    edits (whole replacements) and file creations never merge.
    """
    if not a_edits or not b_edits or any(s == "" for s, _ in (*a_edits, *b_edits)):
        return None
    try:
        ab = apply_edits(b_value, a_edits)
        ba = apply_edits(a_value, b_edits)
    except EditRefused:
        return None
    return ab if ab == ba else None
