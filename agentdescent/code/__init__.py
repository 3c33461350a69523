"""Evolving code: a file tree checked by its own tests, in a sandbox.

The public names: `FileTree` (the strategy: a folder's source files as the artifact, and
search/replace edits that change it), `Sandbox` (where a state's code runs: a fresh
temporary copy, a scrubbed environment, a timeout that kills the whole process group,
resource limits, and no writes outside its folder or network where the platform allows)
and `TestSuite` (the project's tests as tasks and reward: one sandboxed run per state,
per-test results from the runner's channel, believed only when they hold together, failing
tests' messages as feedback). `CommandReward` is the general form: a command run on each
state (and task), whose printed number is the reward.

    from agentdescent import evolve
    from agentdescent.code import TestSuite

    suite = TestSuite("my_project", timeout=30)
    result = evolve(**suite.evolve_kwargs(propose=my_proposer), rounds=10)

See the docs page "Evolving code" (docs/code.md).

It imports the ground floor, `merge` (the strategy seam, the commit veto's config) and
`rewards`; it must not import the engine or the command line: a test suite hands the engine
its keywords (`TestSuite.evolve_kwargs`) rather than calling it.
"""

from __future__ import annotations

from .command import CommandReward, read_score
from .edits import FileEdit, parse_edits
from .sandbox import Sandbox, SandboxRun
from .suite import SuiteRun, TestOutcome, TestSuite
from .tree import FileTree

__all__ = ["CommandReward", "FileEdit", "FileTree", "Sandbox", "SandboxRun", "SuiteRun", "TestOutcome", "TestSuite",
           "parse_edits", "read_score"]
