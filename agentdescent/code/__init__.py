"""Evolving code: a file tree checked by its own tests, in a sandbox.

The public names: `FileTree` (the strategy: a folder's source files as the artifact, and
search/replace edits that change it), `Sandbox` (where a state's code runs: a fresh
temporary copy, a scrubbed environment, a timeout that kills the whole process group,
resource limits, and no writes outside its folder or network where the platform allows)
and `TestSuite` (the project's tests as tasks and reward: one sandboxed run per state,
per-test results from JUnit XML, failing tests' messages as feedback).

    from agentdescent import evolve
    from agentdescent.code import TestSuite

    suite = TestSuite("my_project", timeout=30)
    result = evolve(**suite.evolve_kwargs(propose=my_proposer), rounds=10)

See the docs page "Evolving code" (docs/code.md).
"""

from __future__ import annotations

from .edits import FileEdit, parse_edits
from .sandbox import Sandbox, SandboxRun
from .suite import SuiteRun, TestOutcome, TestSuite
from .tree import FileTree

__all__ = ["FileEdit", "FileTree", "Sandbox", "SandboxRun", "SuiteRun", "TestOutcome", "TestSuite", "parse_edits"]
