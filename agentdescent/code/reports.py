"""What a test run reported, and whether to believe it: the runner's channel, and JUnit XML.

This module owns reading a suite run's report: `read_channel` takes the records
``agentdescent/code/_runner.py`` wrote on the sandbox's results channel and says whether
they hold together (every line a record with the run's nonce, in order, one end record
last, counts and exit statuses that agree); `read_junit` reads a custom runner's JUnit
XML. It must not run anything, and knows nothing of tasks, caches or scores
(`agentdescent.code.TestSuite` decides what a report is worth).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..types import clip_middle

__all__ = ["ChannelReport", "read_channel", "read_junit"]

#: Longest message kept per test (head and tail of the failure text).
MAX_MESSAGE_CHARS = 1200


def _cut(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    return clip_middle(text.strip(), limit)


#: The outcomes a test record may give.
TEST_OUTCOMES = frozenset({"passed", "failed", "error", "skipped"})
NO_END, CUT_OFF = "the runner never reported its end", "the runner was cut off mid-record"
_EXIT_NAMES = {0: "all passed", 1: "tests failed", 2: "interrupted", 3: "internal error", 4: "usage error",
               5: "no tests collected"}


@dataclass(frozen=True)
class ChannelReport:
    """What `read_channel` made of a run's results channel.

    Args:
        records: the test records (``node``, ``outcome``, ``message``), in order.
        end: the end record (``exitstatus``, ``counts``), or None if there was none.
        problem: why the records are not to be believed, or None when they hold together.
    """

    records: list[dict[str, Any]]
    end: dict[str, Any] | None
    problem: str | None


def _statuses(counts: Mapping[str, int], collect_only: bool) -> set[int]:
    """The exit statuses pytest gives a run whose records count ``counts``."""
    if counts.get("collection error"):
        return {1, 2}  # interrupted by the errors, or run on with --continue-on-collection-errors
    if collect_only:
        return {0} if counts.get("collected") else {5}
    if counts.get("failed") or counts.get("error"):
        return {1}
    return {0} if counts.get("passed") or counts.get("skipped") else {5}


def read_channel(text: str | None, nonce: str | None, returncode: int | None, *,
                 collect_only: bool = False) -> ChannelReport:
    """The runner's records from a run's results channel, and whether they hold together.

    They are believed only if: every line is a JSON record carrying the run's ``nonce``;
    ``seq`` runs 0, 1, 2... without a gap or a repeat; no test is reported twice; there
    is exactly one end record and it is the last line (a line after it is an exit hook's,
    or a thread's); the end's counts are the records' own; the process's exit status is
    the one the end record gives, and that status is the one pytest gives such results (0:
    all passed or skipped, 1: some failed or errored, 5: none collected, 1 or 2 with a
    collection error). A ``tampered`` record (the runner saw pytest's own code replaced by
    the project's) refuses them too.

    Args:
        text: `SandboxRun.channel`.
        nonce: `SandboxRun.nonce`.
        returncode: `SandboxRun.returncode`.
        collect_only: the run was the runner's ``--collect-only`` (``collected`` records).

    Returns:
        A `ChannelReport`; its ``problem`` names the first thing that does not hold.
    """
    records: list[dict[str, Any]] = []
    end: dict[str, Any] | None = None
    if text is None or not nonce:
        return ChannelReport(records, end, "the run had no results channel")
    lines = text.split("\n")
    cut_off = lines.pop() != ""  # the text ends with a newline unless a line was cut off
    allowed = {"collected", "collection error"} if collect_only else TEST_OUTCOMES | {"collection error"}
    seen: set[str] = set()
    for i, line in enumerate(lines):
        if end is not None:
            return ChannelReport(records, end, "a record after the end (an exit hook?)")
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            return ChannelReport(records, end, f"line {i + 1} of the channel is not a record: {line[:80]!r}")
        if record.get("n") != nonce:
            return ChannelReport(records, end, f"record {i + 1} does not carry the run's nonce (it was not written "
                                               "by the runner)")
        if record.get("seq") != i or isinstance(record.get("seq"), bool):
            return ChannelReport(records, end, f"records out of order: seq {record.get('seq')!r} where {i} was due "
                                               "(a record left out, or written twice)")
        if "tampered" in record:
            return ChannelReport(records, end, f"the test process changed pytest's own code: {record['tampered']}")
        if record.get("end") is True:
            status, counts = record.get("exitstatus"), record.get("counts")
            if (not isinstance(status, int) or isinstance(status, bool) or not isinstance(counts, dict)
                    or not all(isinstance(v, int) for v in counts.values())):
                return ChannelReport(records, end, f"a malformed end record: {line[:120]!r}")
            end = record
            continue
        node, outcome = record.get("node"), record.get("outcome")
        if not isinstance(node, str) or outcome not in allowed or not isinstance(record.get("message", ""), str):
            return ChannelReport(records, end, f"record {i + 1} is of no known kind: {line[:120]!r}")
        if node in seen:
            return ChannelReport(records, end, f"the test {node} was reported twice")
        seen.add(node)
        records.append({"node": node, "outcome": outcome, "message": record.get("message", "")})
    if end is not None and cut_off:
        return ChannelReport(records, end, "a record after the end (an exit hook?)")
    if end is None:
        how = CUT_OFF if cut_off else NO_END
        return ChannelReport(records, end, f"{how} (exit status {returncode}): a crash, or os._exit from a test?")
    counts: dict[str, int] = {}
    for record in records:
        counts[record["outcome"]] = counts.get(record["outcome"], 0) + 1
    claimed = {k: v for k, v in end["counts"].items() if v}
    if claimed != counts:
        return ChannelReport(records, end, f"the end record counts {claimed} but the records are {counts}")
    status = end["exitstatus"]
    if returncode != status:
        return ChannelReport(records, end, f"the runner exited with status {returncode} but its end record says "
                                           f"{status} (an exit hook, or os._exit after the end?)")
    if status not in _statuses(counts, collect_only):
        name = _EXIT_NAMES.get(status, "unknown")
        return ChannelReport(records, end, f"pytest's exit status {status} ({name}) does not match its results "
                                           f"{counts or '(none)'}")
    return ChannelReport(records, end, None)


def read_junit(text: str) -> tuple[dict[tuple[str, str], tuple[str, str]], list[str]]:
    """(classname, name) -> (outcome, message) of every test case, and the collection errors."""
    if not text.strip():
        return {}, []
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        return {}, [f"the runner's JUnit XML is unreadable ({exc})"]
    found: dict[tuple[str, str], tuple[str, str]] = {}
    errors: list[str] = []
    for case in root.iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                message = _cut("\n".join(x for x in (child.get("message", ""), child.text or "") if x))
                break
        if not classname and outcome == "error":  # a file that failed to collect
            errors.append(f"{name}: {message}")
            continue
        found[(classname, name)] = (outcome, message)
    return found, errors
