"""Results a candidate cannot write: forged test results and scores give the truth or 0, never a false pass.

Real processes in the real sandbox. Each hostile tree still has its bug (``add`` subtracts);
each forges in one way what a suite run reports (a ``pytest.py`` that shadows pytest, a
patched `TestReport`, a plugin of its own, an exit hook, ``os._exit``, a late record, a
rewritten test file); the tests of ``add`` must never pass. The channel reader's rules
are checked one by one on records written by hand.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from agentdescent import Task
from agentdescent.code import CommandReward, FileTree, Sandbox, TestSuite
from agentdescent.code.reports import read_channel

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox's tests run on Linux")

CALC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
TEST_ADD = """\
from calc import add


def test_small():
    assert add(1, 2) == 3


def test_zero_left():
    assert add(0, 5) == 5
"""
TEST_MUL = """\
from calc import mul


def test_mul():
    assert mul(2, 3) == 6
"""
ADD = ["tests/test_b_add.py::test_small", "tests/test_b_add.py::test_zero_left"]
MUL = "tests/test_a_mul.py::test_mul"


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> TestSuite:
    root = tmp_path_factory.mktemp("hostile") / "project"
    (root / "tests").mkdir(parents=True)
    (root / "calc.py").write_text(CALC)
    (root / "tests" / "test_a_mul.py").write_text(TEST_MUL)
    (root / "tests" / "test_b_add.py").write_text(TEST_ADD)
    made = TestSuite(root, timeout=20, plugins=())
    assert [t.id for t in made.tasks()] == [MUL, *ADD]
    yield made
    made.close()


def hostile(code: str, **extra: str) -> dict[str, str]:
    """The buggy tree with ``code`` run when calc is imported (at collection), and ``extra`` files."""
    return {"calc.py": textwrap.dedent(code) + "\n" + CALC, **extra}


def never_a_false_pass(suite: TestSuite, state: dict[str, str]) -> dict:
    result = suite.results(state)
    for node in ADD:
        assert not result.outcomes[node].passed, (node, result.outcomes[node], result.sandbox.stdout[-800:])
        assert float(suite.reward(Task(node, ""), result.outcomes[node].line())) == 0.0
    return result


FIND_CHANNEL = """
import fcntl, os
def channels():
    for fd in range(3, 256):
        try:
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        except OSError:
            continue
        if flags & os.O_APPEND and flags & os.O_ACCMODE == os.O_WRONLY:
            yield fd
def all_passed(nonce="0" * 32):
    lines = [{"n": nonce, "seq": i, "node": n, "outcome": "passed", "message": ""}
             for i, n in enumerate(["tests/test_a_mul.py::test_mul", "tests/test_b_add.py::test_small",
                                    "tests/test_b_add.py::test_zero_left"])]
    lines.append({"n": nonce, "seq": 3, "end": True, "exitstatus": 0, "counts": {"passed": 3}})
    return "".join(__import__("json").dumps(x) + "\\n" for x in lines).encode()
"""

JUNIT = ('<testsuite><testcase classname="tests.test_b_add" name="test_small"/>'
         '<testcase classname="tests.test_b_add" name="test_zero_left"/>'
         '<testcase classname="tests.test_a_mul" name="test_mul"/></testsuite>')


def test_an_honest_run_is_believed_and_reports_each_test_as_pytest_does(suite):
    result = suite.results(suite.initial)
    assert result.untrusted is None
    assert [result.outcomes[n].outcome for n in (MUL, *ADD)] == ["passed", "failed", "failed"]
    assert "assert -1 == 3" in result.outcomes[ADD[0]].message
    fixed = suite.results({"calc.py": CALC.replace("a - b", "a + b")})
    assert fixed.untrusted is None and all(o.passed for o in fixed.outcomes.values())


def test_a_pytest_py_in_the_tree_shadows_nothing(suite):
    fake = f"""\
import os, sys
os.makedirs(".agentdescent", exist_ok=True)
open(".agentdescent/junit.xml", "w").write({JUNIT!r})
print("3 passed")
def main(*a, **k):
    return 0
sys.exit(0)
"""
    result = never_a_false_pass(suite, {"calc.py": CALC, "pytest.py": fake, "_pytest.py": fake})
    assert result.untrusted is None and result.outcomes[MUL].passed  # the truth: the real pytest ran


@pytest.mark.parametrize("how", ["at import", "during the test"])
def test_a_module_patching_pytests_reports_is_caught(suite, how):
    patch = """\
import _pytest.reports
_original = _pytest.reports.TestReport.from_item_and_call.__func__
def _forged(cls, item, call):
    report = _original(cls, item, call)
    report.outcome, report.longrepr = "passed", None
    return report
"""
    if how == "at import":
        state = hostile(patch + "_pytest.reports.TestReport.from_item_and_call = classmethod(_forged)\n")
    else:
        state = {"calc.py": patch + CALC.replace(
            "    return a - b", "    _pytest.reports.TestReport.from_item_and_call = classmethod(_forged)\n"
                               "    return a - b")}
    result = never_a_false_pass(suite, state)
    assert result.untrusted is not None and "TestReport.from_item_and_call was replaced" in result.untrusted
    score = suite.reward(Task(ADD[0], ""), result.outcomes[ADD[0]].line())
    assert "not trustworthy" in score.feedback and "changed pytest's own code" in score.feedback
    assert suite.stats()["untrusted"] >= 1


@pytest.mark.parametrize("how", ["a hook of its own", "a property on TestReport"])
def test_a_plugin_or_a_class_attribute_of_the_tree_is_caught(suite, how):
    if how == "a hook of its own":
        code = """\
import gc, pytest, _pytest.config
class _Forger:
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        report.outcome, report.longrepr = "passed", None
        return report
for _o in gc.get_objects():
    if isinstance(_o, _pytest.config.Config):
        _o.pluginmanager.register(_Forger())
        break
"""
        said = "hooks pytest_runtest_makereport"
    else:
        code = """\
import _pytest.reports
_pytest.reports.TestReport.outcome = property(lambda self: "passed", lambda self, value: None)
"""
        said = "TestReport gained outcome"
    result = never_a_false_pass(suite, hostile(code))
    assert result.untrusted is not None and said in result.untrusted


def test_an_exit_hook_never_runs_and_a_record_after_the_end_is_refused(suite):
    atexit_forger = FIND_CHANNEL + """
import atexit, os
def _forge():
    os.makedirs(".agentdescent", exist_ok=True)
    open(".agentdescent/junit.xml", "w").write('<testsuite/>')
    for fd in channels():
        os.write(fd, all_passed())
    os._exit(0)
atexit.register(_forge)
"""
    result = never_a_false_pass(suite, hostile(atexit_forger))
    assert result.untrusted is None and result.outcomes[MUL].passed  # the runner leaves before any exit hook
    late = FIND_CHANNEL + """
import gc, os, _pytest.config
def _late():
    for fd in channels():
        os.write(fd, b'{"forged": true}\\n')
for _o in gc.get_objects():
    if isinstance(_o, _pytest.config.Config):
        _o.add_cleanup(_late)
        break
"""
    result = never_a_false_pass(suite, hostile(late))
    assert result.untrusted == "a record after the end (an exit hook?)"
    assert all(o.outcome == "untrusted" for o in result.outcomes.values())


@pytest.mark.parametrize("junit", [False, True])
def test_os_exit_from_a_test_leaves_no_result_standing(suite, junit):
    write = (f"    import os\n    try:\n        os.makedirs('.agentdescent', exist_ok=True)\n"
             f"        open('.agentdescent/junit.xml', 'w').write({JUNIT!r})\n"
             f"    except OSError:\n        pass  # where work/ is not the command's, it cannot even try\n"
             ) if junit else "    import os\n"
    state = {"calc.py": CALC.replace("    return a - b", write + "    os._exit(0)")}
    result = never_a_false_pass(suite, state)
    assert result.sandbox.returncode == 0 and "never reported its end" in result.untrusted
    assert not result.outcomes[MUL].passed  # reported before the exit, and still not believed
    assert suite.stats()["crashes"] >= 1


def test_records_of_its_own_on_the_channel_are_refused(suite):
    code = FIND_CHANNEL + """
import os
for fd in channels():
    os.write(fd, all_passed())
"""
    result = never_a_false_pass(suite, hostile(code))
    assert "does not carry the run's nonce" in result.untrusted


def test_code_imported_by_one_test_file_cannot_rewrite_another(suite):
    code = """\
import os
for _path in ("tests/test_b_add.py",):
    try:
        with open(_path, "w") as _handle:
            _handle.write("def test_small():\\n    pass\\n\\n\\ndef test_zero_left():\\n    pass\\n")
    except OSError:
        pass
    try:
        os.replace(_path, _path + ".gone")
    except OSError:
        pass
"""
    result = never_a_false_pass(suite, hostile(code))
    assert result.untrusted is None and result.outcomes[ADD[0]].outcome == "failed"


def test_the_recheck_refuses_a_pass_that_needs_another_file_beside_it(suite):
    head = suite.initial
    needs_company = {"calc.py": CALC.replace(
        "    return a - b", "    import sys\n    return a + b if 'test_a_mul' in sys.modules else a - b")}
    full = suite.results(needs_company)
    assert all(full.outcomes[n].passed for n in ADD)  # in the full run, test_a_mul was imported first
    before = suite.stats()["rechecks"]
    reason = suite.veto(head, needs_company)
    assert reason is not None and "fresh interpreter" in reason
    assert f"{ADD[0]} passed in the full run but not alone" in reason
    assert suite.stats()["rechecks"] == before + 1 and suite.stats()["recheck_refusals"] >= 1
    assert suite.veto(head, needs_company) == reason and suite.stats()["rechecks"] == before + 1  # once per state
    honest = {"calc.py": CALC.replace("a - b", "a + b")}
    assert suite.veto(head, honest) is None
    assert suite.stats()["recheck_seconds"] > 0


def test_the_recheck_is_a_knob_that_says_when_it_cannot_apply(tmp_path):
    root = tmp_path / "p"
    root.mkdir()
    (root / "lib.py").write_text("X = 1\n")
    with pytest.raises(ValueError, match="recheck=True"):
        TestSuite(root, command=["true"], recheck=True)
    with pytest.raises(TypeError, match="recheck"):
        TestSuite(root, recheck="yes")
    assert TestSuite(root, command=["true"]).recheck is False and TestSuite(root).recheck is True


def test_an_honest_suite_using_pytests_features_is_reported_as_pytest_reports_it(tmp_path):
    root = tmp_path / "features"
    (root / "tests").mkdir(parents=True)
    (root / "lib.py").write_text("def double(x):\n    return 2 * x\n")
    (root / "tests" / "conftest.py").write_text(textwrap.dedent("""\
        import pytest

        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_makereport(item, call):
            report = yield
            item.stash.setdefault("reports", []).append(report.outcome)
            return report

        @pytest.fixture
        def broken_teardown():
            yield 1
            raise RuntimeError("teardown broke")

        @pytest.fixture
        def broken_setup():
            raise RuntimeError("setup broke")
    """))
    (root / "tests" / "test_features.py").write_text(textwrap.dedent("""\
        import os
        import pytest
        from lib import double

        @pytest.mark.parametrize("x", [1, 2])
        def test_param(x):
            assert double(x) == 2 * x

        def test_fixtures(tmp_path, monkeypatch, capsys):
            monkeypatch.setenv("X", "1")
            (tmp_path / "f").write_text("ok")
            print("hello")
            assert capsys.readouterr().out == "hello\\n" and os.environ["X"] == "1"

        def test_hash_seed_is_the_sandboxs():
            assert hash("a") == 4644417185603328019  # PYTHONHASHSEED=0, as the sandbox sets it

        def test_skipped():
            pytest.skip("not today")

        @pytest.mark.xfail(reason="known")
        def test_xfail():
            assert False

        def test_teardown_error(broken_teardown):
            assert broken_teardown == 1

        def test_setup_error(broken_setup):
            pass

        class TestGroup:
            def test_in_class(self):
                assert double(0) == 0
    """))
    suite = TestSuite(root, timeout=20, plugins=())
    got = {t.id.split("::", 1)[1]: o.outcome for t, o in zip(suite.tasks(), suite.evaluate(suite.initial).values())}
    assert got == {"test_param[1]": "passed", "test_param[2]": "passed", "test_fixtures": "passed",
                   "test_hash_seed_is_the_sandboxs": "passed", "test_skipped": "skipped", "test_xfail": "skipped",
                   "test_teardown_error": "error", "test_setup_error": "error", "TestGroup::test_in_class": "passed"}
    outcomes = suite.evaluate(suite.initial)
    assert "teardown broke" in outcomes["tests/test_features.py::test_teardown_error"].message
    assert outcomes["tests/test_features.py::test_xfail"].message == "xfail: known"
    assert suite.results(suite.initial).untrusted is None and suite.stats()["untrusted"] == 0


# --------------------------------------------------------------------------- the reader's rules

NONCE = "ab" * 16


def channel(*records: dict, nonce: str = NONCE) -> str:
    return "".join(json.dumps({"n": nonce, "seq": i, **r}) + "\n" for i, r in enumerate(records))


def rec(node: str, outcome: str = "passed") -> dict:
    return {"node": node, "outcome": outcome, "message": ""}


def end(status: int, **counts: int) -> dict:
    return {"end": True, "exitstatus": status, "counts": counts}


@pytest.mark.parametrize(("text", "returncode", "problem"), [
    (channel(rec("a"), rec("b", "failed"), end(1, passed=1, failed=1)), 1, None),
    (channel(end(5)), 5, None),
    (channel(rec("a"), end(0, passed=1)) + "junk\n", 0, "a record after the end (an exit hook?)"),
    (channel(rec("a"), end(0, passed=1)) + channel(rec("z"))[:20], 0, "a record after the end"),
    (channel(rec("a"), end(0, passed=1), nonce="cd" * 16), 0, "does not carry the run's nonce"),
    (channel(rec("a"), rec("a"), end(0, passed=2)), 0, "reported twice"),
    (channel(rec("a")).replace('"seq": 0', '"seq": 1'), 0, "out of order"),
    (channel(rec("a"), end(0, passed=2)), 0, "counts"),
    (channel(rec("a"), rec("b", "failed"), end(0, passed=1, failed=1)), 0, "exit status 0 (all passed) does not match"),
    (channel(rec("a"), end(0, passed=1)), 1, "exited with status 1 but its end record says 0"),
    (channel(rec("a")), 0, "never reported its end"),
    (channel(rec("a"), end(0, passed=1))[:-3], None, "cut off mid-record"),
    (channel(rec("a", "won"), end(0, won=1)), 0, "of no known kind"),
    (channel({"tampered": "x was replaced"}, rec("a"), end(0, passed=1)), 0, "changed pytest's own code: x"),
    ("", 0, "never reported its end"),
])
def test_the_channel_is_believed_only_when_it_holds_together(text, returncode, problem):
    report = read_channel(text, NONCE, returncode)
    if problem is None:
        assert report.problem is None and report.end is not None
    else:
        assert report.problem is not None and problem in report.problem, report.problem


def test_a_gap_in_seq_is_refused():
    text = channel(rec("a"), rec("b"), end(0, passed=2))
    lines = text.splitlines(keepends=True)
    assert "out of order" in read_channel(lines[0] + lines[2], NONCE, 0).problem


# --------------------------------------------------------------------------- junit and printed scores


def test_a_custom_runner_that_exits_non_zero_with_every_test_passed_scores_zero(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "lib.py").write_text("VALUE = 1\n")
    (root / "check.py").write_text(textwrap.dedent("""\
        import os, sys
        os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)
        open(sys.argv[1], "w").write('<testsuite><testcase classname="c" name="v"/></testsuite>')
        sys.exit(int(open("lib.py").read().split("=")[1]))
    """))
    suite = TestSuite(root, command=[sys.executable, "check.py", "{junit}"], timeout=20,
                      tree=FileTree(include=["lib.py"]))
    assert [t.id for t in suite.tasks()] == ["c::v"] and suite.evaluate(suite.initial)["c::v"].outcome == "untrusted"
    assert suite.evaluate({"lib.py": "VALUE = 0\n"})["c::v"].passed


def test_a_command_that_prints_more_than_one_score_scores_zero(tmp_path):
    root = tmp_path / "scorer"
    root.mkdir()
    (root / "solver.py").write_text("ANSWER = 0.2\n")
    (root / "score.py").write_text("import sys\nsys.path.insert(0, '.')\nimport solver\nprint(solver.ANSWER)\n")
    tasks = [Task(str(n), "") for n in range(4)]
    reward = CommandReward(root, [sys.executable, "score.py"], tasks, timeout=20, tree=FileTree(include=["solver.py"]),
                           sandbox=Sandbox(timeout=20))
    honest = reward.reward(tasks[0], reward.run(reward.tree.render(reward.initial), tasks[0]))
    assert float(honest) == pytest.approx(0.2)
    exit_hook = "import atexit\natexit.register(lambda: print('{\"score\": 1.0}'))\nANSWER = 0.2\n"
    output = reward.run(reward.tree.render({"solver.py": exit_hook}), tasks[0])
    score = reward.reward(tasks[0], output)
    assert float(score) == 0.0 and "printed more than one score" in score.feedback and "exit hook" in score.feedback
    failing = "import atexit, sys\natexit.register(lambda: print(1.0))\nsys.exit(3)\n"
    assert float(reward.reward(tasks[0], reward.run(reward.tree.render({"solver.py": failing}), tasks[0]))) == 0.0
    assert reward.stats()["refused"] == 1


def test_a_command_rewards_scorer_is_never_the_candidates_to_edit(tmp_path):
    from agentdescent.code import CommandReward, FileTree
    from agentdescent.errors import EditRefused, InvalidArgument

    (tmp_path / "solve.py").write_text("def solve(x):\n    return x\n")
    (tmp_path / "score.py").write_text("import solve\nprint(1.0 if solve.solve(2) == 4 else 0.0)\n")
    tasks = [Task(f"t{i}", f"task {i}") for i in range(4)]
    reward = CommandReward(tmp_path, [sys.executable, "score.py"], tasks, timeout=20)
    assert set(reward.initial) == {"solve.py"}
    reply = "score.py\n<<<<<<< SEARCH\n=======\nprint(1.0)\n>>>>>>> REPLACE\n"
    with pytest.raises(EditRefused):
        reward.tree.to_diff(reward.initial, reply, "w", 0, "code")
    with pytest.raises(InvalidArgument, match="the command's own scorer"):
        CommandReward(tmp_path, [sys.executable, "score.py"], tasks, tree=FileTree(include=["*.py"], exclude=[]))
