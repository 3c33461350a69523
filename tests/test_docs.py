"""Docs are executed: every ```python block of README.md and docs/*.md runs offline.

The blocks of one page run in order in one namespace, from the repository root, so a
page can build on its earlier blocks. A block that should not run is written as
```text or ```bash instead.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)


def _blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text(encoding="utf-8"))


@pytest.mark.parametrize("page", [p for p in PAGES if _blocks(p)], ids=lambda p: p.name)
def test_python_blocks_run(page: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("AGENTDESCENT_CACHE", str(tmp_path / "cache"))
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for i, code in enumerate(_blocks(page), start=1):
        try:
            exec(compile(code, f"{page.name}[block {i}]", "exec"), namespace)
        except Exception as exc:  # pragma: no cover - the failure message is the point
            pytest.fail(f"{page.name}, python block {i} raised {type(exc).__name__}: {exc}")


def test_api_page_is_current() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_api_docs.py"), "--check"],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr


def test_every_docs_page_is_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if p.name not in nav]
    assert not missing, f"docs pages missing from mkdocs.yml nav: {missing}"


def test_readme_opens_with_the_two_commands_and_ci_runs_the_second() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_block = re.search(r"```bash\n(.*?)```", readme, re.S)
    assert first_block is not None and readme.index("```bash") < readme.index("\n\n", readme.index("```bash"))
    commands = [line for line in first_block.group(1).splitlines() if line.strip()]
    assert len(commands) == 2
    assert commands[0].endswith("python -m examples.run_demo")
    assert commands[1].endswith("python -m pytest")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    # .ci/run reads the test command out of the README with this pattern
    pattern = re.search(r"grep -m1 -E '([^']+)' README.md", ci)
    assert pattern is not None
    matches = [line for line in readme.splitlines() if re.match(pattern.group(1), line)]
    assert matches and matches[0] == commands[1]


def test_the_tutorial_runs_outside_the_checkout(tmp_path: Path) -> None:
    """Its code needs the installed package only: no ``tests.`` module, no file of the repository."""
    code = "\n".join(_blocks(ROOT / "docs" / "tutorial.md"))
    assert "tests." not in code and "examples/" not in code
    script = tmp_path / "tutorial.py"
    script.write_text(code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["AGENTDESCENT_CACHE"] = str(tmp_path / "cache")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
