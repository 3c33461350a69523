"""tools/mutate_fork_predicate.py: every mutant still applies to the predicate's current code.

The tool itself (copying the package and running tests/test_context.py per mutant) takes
about 16 s and is run by hand; this checks, in milliseconds, that the anchors it edits have
not drifted from the source, so the tool cannot rot unnoticed as it once did.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("mutate_fork_predicate", ROOT / "tools" / "mutate_fork_predicate.py")
assert SPEC is not None and SPEC.loader is not None
tool = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(tool)


@pytest.mark.parametrize(("name", "target", "edits"), tool.MUTANTS, ids=[m[0] for m in tool.MUTANTS])
def test_every_mutant_applies_once_and_changes_the_source(name, target, edits):
    source = (ROOT / target).read_text(encoding="utf-8")
    mutated = tool.apply(source, edits, target)
    assert mutated != source, name


def test_a_missing_anchor_names_the_file_and_the_tool():
    with pytest.raises(LookupError, match=r"occurs 0 times in .*forkrule.py; update MUTANTS in mutate_fork_predicate.py"):
        tool.apply("nothing here", [("span_ratio >= min_ratio", "x")], tool.RULE)
