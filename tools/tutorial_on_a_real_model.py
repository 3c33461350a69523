"""Run docs/tutorial.md's python blocks, in order, against a real OpenAI-compatible server.

The docs test (tests/test_docs.py) runs the tutorial against a scripted stand-in and
checks every number it prints. This tool runs the same code against your model: the
first block (the stand-in) is replaced by your ``--base-url`` / ``--model`` / key, and
the statements that only make sense for the stand-in are left out: the ``assert``
statements (they pin the stand-in's numbers) and every statement that reads what the
stand-in received (``server``, ``proposer``), with whatever those statements define.
Everything else runs as written, and prints as it would for you::

    python tools/tutorial_on_a_real_model.py --base-url http://127.0.0.1:8090/v1 --model smollm2-135m --api-key local

``--print`` writes the program it would run instead of running it. Exit 0 when every
block ran; otherwise the traceback names the block.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAND_IN_NAMES = {"server", "proposer"}


def program(tutorial: str, base_url: str, model: str, api_key: str, proposer_url: str | None,
            proposer_model: str | None) -> str:
    """The tutorial's python blocks as one program for a real server (see the module docstring)."""
    blocks = re.findall(r"```python\n(.*?)```", tutorial, re.S)
    if not blocks:
        raise SystemExit("tutorial_on_a_real_model: no python blocks in the tutorial")
    blocks[0] = (f"BASE_URL, MODEL, API_KEY = {base_url!r}, {model!r}, {api_key!r}\n"
                 f"PROPOSE_URL, PROPOSE_MODEL = {proposer_url or base_url!r}, {proposer_model or model!r}\n")
    dropped = set(STAND_IN_NAMES)
    parts = []
    for index, block in enumerate(blocks):
        tree = _WithoutAsserts().visit(ast.parse(block))
        kept = []
        for node in tree.body:
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            if isinstance(node, ast.Pass) or names & dropped:
                dropped.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
                continue
            kept.append(ast.unparse(node))
        parts.append(f"print('--- block {index + 1} of {len(blocks)}', flush=True)\n" + "\n".join(kept) + "\n")
    return "\n".join(parts)


class _WithoutAsserts(ast.NodeTransformer):
    """Every ``assert`` becomes ``pass`` (at any depth: a loop or a function keeps its shape)."""

    def visit_Assert(self, node: ast.Assert) -> ast.Pass:
        return ast.copy_location(ast.Pass(), node)


def main(argv: list[str] | None = None) -> int:
    """Build the program and run it from the repository root (the tickets ship with the package)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="the server's API root, with /v1")
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key", default=None, help="default: OPENAI_API_KEY (any string for a local server)")
    parser.add_argument("--proposer-base-url", default=None, help="the second model's server (default: --base-url)")
    parser.add_argument("--proposer-model", default=None, help="the second model (default: --model)")
    parser.add_argument("--tutorial", type=Path, default=ROOT / "docs" / "tutorial.md")
    parser.add_argument("--print", dest="show", action="store_true", help="print the program instead of running it")
    args = parser.parse_args(argv)
    key = args.api_key or os.environ.get("OPENAI_API_KEY")
    if not key:
        parser.error("give --api-key (any string for a local server) or set OPENAI_API_KEY")
    code = program(args.tutorial.read_text(encoding="utf-8"), args.base_url, args.model, key,
                   args.proposer_base_url, args.proposer_model)
    if args.show:
        print(code.replace(repr(key), "'***'"))
        return 0
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    exec(compile(code, str(args.tutorial), "exec"), {"__name__": "__tutorial__"})  # the docs' own code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
