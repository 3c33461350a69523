"""The demonstrations' text format: input -> output pairs written into a rendered artifact, and read back.

An artifact may hold *demonstrations* (`agentdescent.merge.demonstrations`): worked
examples a model is shown before its task. A strategy renders them, after its
instructions, in one documented plain-text block that any runner can read as it is::

    <instructions>

    <<<demonstrations>>>
    <<<input>>>
    the first example's input
    <<<output>>>
    its output
    <<<input>>>
    ...
    <<<end demonstrations>>>

Each marker is a line of its own. A line of a demonstration that itself starts with
``<<<`` (or with backslashes and then ``<<<``) is written with one more backslash in
front and read back without it, so any text survives the round trip. `LLMAgent` reads
the block back (`split_demonstrations`) and sends the pairs as chat turns (user: input,
assistant: output) after the system message, which a small model follows far better than
examples pasted into prose.

This module owns only the format; it must not import anything of the package.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["BEGIN", "END", "INPUT", "OUTPUT", "render_demonstrations", "split_demonstrations"]

#: The line that opens the demonstrations block.
BEGIN = "<<<demonstrations>>>"
#: The line before each demonstration's input.
INPUT = "<<<input>>>"
#: The line before each demonstration's output.
OUTPUT = "<<<output>>>"
#: The line that closes the block.
END = "<<<end demonstrations>>>"

_ESCAPED = re.compile(r"^(\\*)<<<")


def _escape(text: str) -> str:
    return "\n".join(("\\" + line) if _ESCAPED.match(line) else line for line in text.split("\n"))


def _unescape(lines: Sequence[str]) -> str:
    return "\n".join(line[1:] if line.startswith("\\") and _ESCAPED.match(line[1:]) else line for line in lines)


def render_demonstrations(pairs: Sequence[tuple[str, str]]) -> str:
    """The block for ``pairs`` (``(input, output)``, in order), or ``""`` when there are none."""
    if not pairs:
        return ""
    lines = [BEGIN]
    for given, expected in pairs:
        lines += [INPUT, _escape(given), OUTPUT, _escape(expected)]
    lines.append(END)
    return "\n".join(lines)


def split_demonstrations(rendered: str) -> tuple[str, list[tuple[str, str]]]:
    """``(instructions, pairs)``: the text outside the block, and the block's pairs in order.

    A text with no well-formed block (no `BEGIN` line, no `END` line after it, or pairs
    that do not alternate input/output) is all instructions, returned unchanged with no
    pairs: the format never guesses.
    """
    lines = rendered.split("\n")
    try:
        start = lines.index(BEGIN)
        end = lines.index(END, start + 1)
    except ValueError:
        return rendered, []
    pairs: list[tuple[str, str]] = []
    body = lines[start + 1:end]
    i = 0
    while i < len(body):
        if body[i] != INPUT:
            return rendered, []
        try:
            mid = body.index(OUTPUT, i + 1)
        except ValueError:
            return rendered, []
        nxt = next((j for j in range(mid + 1, len(body)) if body[j] == INPUT), len(body))
        if INPUT in body[i + 1:mid]:
            return rendered, []
        pairs.append((_unescape(body[i + 1:mid]), _unescape(body[mid + 1:nxt])))
        i = nxt
    instructions = "\n".join(lines[:start] + lines[end + 1:]).strip("\n")
    return instructions, pairs
