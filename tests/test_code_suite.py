"""`TestSuite` on real projects: discovery, one sandboxed run per state, timeouts, crashes, the veto, escapes."""

from __future__ import annotations

import os
import pwd
import sys
import threading
import uuid
from pathlib import Path

import pytest

from agentdescent import LLMAgent, Split, evolve
from agentdescent.code import FileTree, Sandbox, TestSuite
from agentdescent.ledger import MemoryLedger
from agentdescent.testing import FakeProvider

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox's tests run on Linux")

CALC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
TESTS = """\
from calc import add, mul


class TestAdd:
    def test_small(self):
        assert add(1, 2) == 3

    def test_zero(self):
        assert add(0, 0) == 0

    def test_negative(self):
        assert add(-1, -2) == -3

    def test_large(self):
        assert add(10, 5) == 15


def test_mul():
    assert mul(2, 3) == 6


def test_mul_zero():
    assert mul(5, 0) == 0
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "tests").mkdir(parents=True)
    (root / "calc.py").write_text(CALC)
    (root / "tests" / "test_calc.py").write_text(TESTS)
    return root


def make_suite(root: Path, timeout: float = 20.0, **kwargs) -> TestSuite:
    return TestSuite(root, timeout=timeout, plugins=(), **kwargs)


def test_the_tests_are_discovered_as_tasks_with_their_source_and_group(project):
    suite = make_suite(project)
    tasks = suite.tasks()
    assert [t.id for t in tasks] == ["tests/test_calc.py::TestAdd::test_small", "tests/test_calc.py::TestAdd::test_zero",
                                     "tests/test_calc.py::TestAdd::test_negative",
                                     "tests/test_calc.py::TestAdd::test_large",
                                     "tests/test_calc.py::test_mul", "tests/test_calc.py::test_mul_zero"]
    assert tasks[0].meta == {"test": tasks[0].id, "file": "tests/test_calc.py", "group": "tests/test_calc.py::TestAdd"}
    assert tasks[4].meta["group"] == "tests/test_calc.py"
    assert "def test_small(self):\n    assert add(1, 2) == 3" in tasks[0].prompt
    assert sorted(suite.initial) == ["calc.py"]  # the tests are not part of the artifact


def test_one_run_scores_every_test_of_a_state_and_failures_carry_their_message(project):
    suite = make_suite(project)
    tasks = suite.tasks()
    rendered = suite.tree.render(suite.initial)
    scores = {}
    threads = [threading.Thread(target=lambda t=t: scores.__setitem__(t.id, suite.reward(t, suite.run(rendered, t))))
               for t in tasks for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert suite.stats()["suite_runs"] == 1  # eighteen askers, one run (plus the discovery)
    assert [float(scores[t.id]) for t in tasks] == [0.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    feedback = scores[tasks[0].id].feedback
    assert feedback.startswith(f"the test {tasks[0].id} failed") and "assert -1 == 3" in feedback
    fixed = dict(suite.initial, **{"calc.py": CALC.replace("a - b", "a + b")})
    assert all(o.passed for o in suite.evaluate(fixed).values())
    assert suite.stats()["suite_runs"] == 2 and suite.stats()["sandbox_seconds"] > 0


def test_a_state_that_loops_forever_is_killed_at_its_timeout_and_scores_zero(project):
    suite = TestSuite(project, timeout=3.0, sandbox=Sandbox(timeout=3.0, grace=0.5), plugins=())
    tasks = suite.tasks()
    looping = {"calc.py": "while True:\n    pass\n"}
    runs = suite.stats()["suite_runs"]
    outcomes = suite.evaluate(looping)
    assert {o.outcome for o in outcomes.values()} == {"timeout"}
    # counts, not seconds: one sandbox run for all six tests, killed at its timeout (never earlier)
    assert suite.stats()["suite_runs"] == runs + 1
    hits = suite.stats()["cache_hits"]
    killed = suite.results(looping).sandbox  # from the cache: no second run
    assert suite.stats()["suite_runs"] == runs + 1 and suite.stats()["cache_hits"] == hits + 1
    assert killed.timed_out and killed.seconds >= 3.0, killed.describe()
    assert killed.describe() == "killed after its 3 s timeout (+0.5 s grace)"
    score = suite.reward(tasks[0], outcomes[tasks[0].id].line())
    assert float(score) == 0.0 and "timed out" in score.feedback and "timeout" in score.feedback
    assert suite.stats()["timeouts"] == 1


def test_a_crash_and_a_collection_error_score_zero_with_feedback_saying_so(project):
    suite = make_suite(project)
    tasks = suite.tasks()
    crashed = suite.evaluate({"calc.py": "import os\nos._exit(3)\n"})
    assert {o.outcome for o in crashed.values()} == {"not run"}
    assert "crashed" in crashed[tasks[0].id].message
    broken = suite.evaluate({"calc.py": "def add(a, b)\n    return a + b\n"})
    assert {o.outcome for o in broken.values()} == {"error"}
    feedback = suite.reward(tasks[0], broken[tasks[0].id].line()).feedback
    assert "not collected" in feedback and "SyntaxError" in feedback


def test_the_veto_refuses_a_candidate_that_breaks_any_test_the_head_passes(project):
    suite = make_suite(project)
    suite.tasks()
    head = suite.initial
    fixes_add_breaks_mul = {"calc.py": CALC.replace("a - b", "a + b").replace("a * b", "a + b")}
    reason = suite.veto(head, fixes_add_breaks_mul)
    assert reason is not None and "breaks 2 test(s) the head passes" in reason and "test_mul" in reason
    assert suite.veto(head, {"calc.py": "def add(a, b):\n    return 0\n"}) is not None  # mul gone: all of mul's fail
    assert suite.veto(head, {"calc.py": CALC.replace("a - b", "a + b")}) is None


def test_evolve_kwargs_wire_the_suite_in_and_check_the_agent(project):
    suite = make_suite(project)
    kwargs = suite.evolve_kwargs(propose=lambda *a: None, rounds=1)
    assert kwargs["run"] == suite.run and kwargs["reward"] == suite.reward and kwargs["strategy"] is suite.tree
    assert kwargs["initial_state"] == suite.initial and kwargs["agg_config"].commit_veto == suite.veto
    assert kwargs["agg_config"].rescore == "deterministic" and kwargs["rounds"] == 1
    rules = LLMAgent(FakeProvider(lambda messages, **o: "x"))
    with pytest.raises(ValueError, match="proposal='edit'"):
        suite.evolve_kwargs(agent=rules)
    edits = LLMAgent(FakeProvider(lambda messages, **o: "x"), proposal="edit")
    assert suite.evolve_kwargs(agent=edits)["propose"] == edits.propose
    with pytest.raises(ValueError, match="not both"):
        suite.evolve_kwargs(agent=edits, propose=lambda *a: None)


def test_a_real_agent_in_edit_mode_fixes_the_code_through_the_engine(project):
    suite = make_suite(project)
    fix = "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n"
    agent = LLMAgent(FakeProvider(lambda messages, **o: fix), proposal="edit")
    ledger = MemoryLedger()
    result = evolve(**suite.evolve_kwargs(agent=agent), rounds=2, n_workers=1, seed=0, ledger=ledger,
                    split=Split(held_out_frac=0.5, stratify="group"), self_verify=True)
    assert "a + b" in result.state["calc.py"]
    assert all(o.passed for o in suite.evaluate(result.state).values())
    assert (project / "calc.py").read_text() == CALC  # the project folder is never written


def test_an_agent_given_to_evolve_beside_the_suite_only_proposes(project):
    suite = make_suite(project)
    fix = "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n"
    asked: list[str] = []

    def model(messages, **options):
        asked.append(messages[-1]["content"])
        return fix

    result = evolve(**suite.evolve_kwargs(), agent=LLMAgent(FakeProvider(model), proposal="edit"), rounds=2,
                    n_workers=1, seed=0, split=Split(held_out_frac=0.5, stratify="group"))
    assert "a + b" in result.state["calc.py"]
    assert asked and all("You are fixing the code of a project" in a for a in asked)  # never asked to solve a test
    assert "assert -1 == 3" in asked[0] or "assert 1 == -3" in asked[0] or "assert 5 == 15" in asked[0]
    with pytest.raises(ValueError, match="proposal='edit'"):
        evolve(**suite.evolve_kwargs(), agent=LLMAgent(FakeProvider(model)), rounds=1)


def test_edits_that_do_not_apply_are_counted_and_never_end_the_run(project):
    suite = make_suite(project)
    wrong = "calc.py\n<<<<<<< SEARCH\n    return a ^ b\n=======\n    return a + b\n>>>>>>> REPLACE\n"
    result = evolve(**suite.evolve_kwargs(propose=lambda *a: wrong), rounds=2, n_workers=2, seed=0,
                    split=Split(held_out_frac=0.5, stratify="group"))
    assert result.error is None and result.version == 1
    assert result.counters["edits_refused"] >= 1
    assert sum((r.proposals or {}).get("edits_refused", 0) for r in result.history) == result.counters["edits_refused"]
    assert suite.tree.refused() == {"not_found": result.counters["edits_refused"]}
    # each round says which kinds were refused, as the replies' refusals are
    kinds: dict[str, int] = {}
    for r in result.history:
        for kind, n in (r.proposals or {}).get("edits_refused_kinds", {}).items():
            kinds[kind] = kinds.get(kind, 0) + n
    assert kinds == suite.tree.refused() == {"not_found": result.counters["edits_refused_not_found"]}


def test_a_patch_cannot_reach_the_home_the_repository_or_the_key(project, tmp_path, monkeypatch):
    secret = f"sk-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    home = Path(pwd.getpwuid(os.getuid()).pw_dir) / f"agentdescent-escape-{uuid.uuid4().hex}"
    outside = tmp_path / f"outside-{uuid.uuid4().hex}"
    in_repo = project / f"escape-{uuid.uuid4().hex}"
    hostile = CALC.replace("    return a - b\n", f"""\
    import glob, os
    found = [os.environ.get("OPENAI_API_KEY", "")]
    for name in glob.glob("/proc/*/environ"):
        try:
            found.append(open(name, "rb").read().decode("latin-1"))
        except OSError:
            pass
    for path in ({str(home)!r}, {str(outside)!r}, {str(in_repo)!r}, os.path.expanduser("~/escaped")):
        try:
            with open(path, "w") as handle:
                handle.write("escaped")
        except OSError as exc:
            found.append(f"refused {{path}}: {{exc}}")
    raise AssertionError(" ".join(found))
""")
    suite = make_suite(project)
    try:
        outcomes = suite.evaluate({"calc.py": hostile})
        message = outcomes["tests/test_calc.py::TestAdd::test_small"].message
        assert "AssertionError" in message and "refused" in message
        for path in (home, outside, in_repo):
            assert not path.exists(), f"{path} was written from the sandbox"
        assert all(secret not in o.message for o in outcomes.values())
    finally:
        for path in (home, outside, in_repo):
            if path.exists():
                path.unlink()


def test_another_runner_writing_junit_is_read_too(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "lib.py").write_text("VALUE = 1\n")
    (root / "check.py").write_text("""\
import sys
sys.path.insert(0, ".")
import lib
ok = lib.VALUE == 2
case = '<testcase classname="checks" name="value">' + ('' if ok else '<failure message="VALUE is not 2"/>') + '</testcase>'
other = '<testcase classname="checks" name="always"></testcase>'
import os
os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)
open(sys.argv[1], "w").write('<testsuite>' + case + other + '</testsuite>')
""")
    suite = TestSuite(root, command=[sys.executable, "check.py", "{junit}"], timeout=20,
                      tree=FileTree(include=["lib.py"]))
    assert [t.id for t in suite.tasks()] == ["checks::value", "checks::always"]
    outcomes = suite.evaluate(suite.initial)
    assert not outcomes["checks::value"].passed and "VALUE is not 2" in outcomes["checks::value"].message
    assert suite.evaluate({"lib.py": "VALUE = 2\n"})["checks::value"].passed


def test_bad_arguments_are_refused(project, tmp_path):
    with pytest.raises(ValueError, match="not a folder"):
        TestSuite(tmp_path / "missing")
    with pytest.raises(ValueError, match="timeout"):
        TestSuite(project, timeout=0)
    with pytest.raises(TypeError, match="Sandbox"):
        TestSuite(project, sandbox="no")
    with pytest.raises(ValueError, match="no file of the folder matches"):
        TestSuite(project, tree=FileTree(include=["*.rs"]))
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "lib.py").write_text("X = 1\n")
    with pytest.raises(ValueError, match="no test found"):
        make_suite(empty).tasks()


def test_a_command_that_prints_a_number_is_the_reward(tmp_path):
    from agentdescent import Task
    from agentdescent.code import CommandReward, read_score

    root = tmp_path / "solver"
    root.mkdir()
    (root / "solver.py").write_text("def solve(n):\n    return n + 1\n")
    (root / "score.py").write_text(
        "import json, sys\nsys.path.insert(0, '.')\nfrom solver import solve\nn = int(sys.argv[1])\n"
        "got = solve(n)\nprint(json.dumps({'score': 1.0 if got == n * n else 0.0, 'feedback': f'solve({n}) gave {got}, want {n * n}'}))\n")
    tasks = [Task(str(n), f"square {n}") for n in (2, 3, 4, 5, 6, 7)]
    reward = CommandReward(root, f"{sys.executable} score.py {{task}}", tasks, timeout=20,
                           tree=FileTree(include=["solver.py"]))
    rendered = reward.tree.render(reward.initial)
    score = reward.reward(tasks[0], reward.run(rendered, tasks[0]))
    assert float(score) == 0.0 and score.feedback == "solve(2) gave 3, want 4"
    fix = "solver.py\n<<<<<<< SEARCH\n    return n + 1\n=======\n    return n * n\n>>>>>>> REPLACE\n"
    result = evolve(**reward.evolve_kwargs(propose=lambda *a: fix), rounds=2, n_workers=2, seed=0)
    assert "n * n" in result.state["solver.py"] and result.final_reward == 1.0
    assert reward.stats()["runs"] >= 6
    hanging = CommandReward(root, [sys.executable, "-c", "while True: pass"], tasks, sandbox=Sandbox(timeout=1, grace=0.2))
    output = hanging.run(rendered, tasks[0])
    assert float(hanging.reward(tasks[0], output)) == 0.0 and "timeout" in output
    assert read_score("progress 3\n0.75\n") == (0.75, "progress 3") and read_score("2.5\n") is None
