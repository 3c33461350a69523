"""The code strategy's pure parts: text edits, the reply parser, `FileTree`, and fusing edits of one file."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentdescent import EditRefused
from agentdescent.code import FileTree, parse_edits
from agentdescent.merge.fusion import contradicts, union_diff
from agentdescent.textedits import apply_edits, merge_writes
from agentdescent.types import Diff

MODULE = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a + b\n"


def block(path: str, search: str, replace: str) -> str:
    return f"{path}\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"


# --------------------------------------------------------------------------- text edits


def test_an_edit_applies_where_its_search_occurs_once():
    assert apply_edits(MODULE, [("    return a - b\n", "    return a + b\n")]) == MODULE.replace("a - b", "a + b")


@pytest.mark.parametrize(("search", "reason"), [("    return x\n", "not_found"), ("    return a", "ambiguous"),
                                                ("", "not_found")])
def test_an_edit_that_does_not_apply_is_refused_with_its_reason(search, reason):
    with pytest.raises(EditRefused) as caught:
        apply_edits(MODULE, [(search, "y")], path="calc.py")
    assert caught.value.reason == reason and "calc.py" in str(caught.value)


def test_edits_apply_in_order_each_on_the_result_before():
    text = apply_edits("a\n", [("a\n", "b\n"), ("b\n", "c\n")])
    assert text == "c\n"


def test_disjoint_edits_of_one_text_merge_and_overlapping_ones_do_not():
    a = [("    return a - b\n", "    return a + b\n")]
    b = [("    return a + b\n", "    return a * b\n")]  # mul's line (add's line is "a - b" in the original)
    merged = merge_writes(apply_edits(MODULE, a), a, apply_edits(MODULE, b), b)
    assert merged is None  # A's result holds "a + b" twice: B's search is ambiguous there
    c = [("def mul(a, b):\n    return a + b\n", "def mul(a, b):\n    return a * b\n")]
    merged = merge_writes(apply_edits(MODULE, a), a, apply_edits(MODULE, c), c)
    assert merged == "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
    other = [("    return a - b\n", "    return b - a\n")]  # the same line, another change
    assert merge_writes(apply_edits(MODULE, a), a, apply_edits(MODULE, other), other) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta", "eps"]), min_size=4, max_size=4, unique=True),
       st.integers(0, 3), st.integers(0, 3))
def test_merging_two_single_line_edits_keeps_both_or_refuses(words, i, j):
    text = "".join(f"{w}\n" for w in words)
    a = [(f"{words[i]}\n", f"{words[i]}!\n")]
    b = [(f"{words[j]}\n", f"{words[j]}?\n")]
    merged = merge_writes(apply_edits(text, a), a, apply_edits(text, b), b)
    if i == j:
        assert merged is None
    else:
        assert merged is not None and f"{words[i]}!\n" in merged and f"{words[j]}?\n" in merged


# --------------------------------------------------------------------------- the reply parser


def test_blocks_inside_and_outside_fences_and_whole_files_are_read():
    reply = ("I fixed it.\n\ncalc.py\n```python\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n"
             ">>>>>>> REPLACE\n```\n\nnew/util.py\n<<<<<<< SEARCH\n=======\nX = 1\n>>>>>>> REPLACE\n\n"
             "`other.py`\n```python\nprint('hi')\n```\n")
    edits = parse_edits(reply)
    assert [(e.path, e.edits, e.content) for e in edits] == [
        ("calc.py", [("    return a - b\n", "    return a + b\n")], None),
        ("new/util.py", [("", "X = 1\n")], None),
        ("other.py", [], "print('hi')\n"),
    ]


@pytest.mark.parametrize("reply", [
    "<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n",  # no path
    "calc.py\n<<<<<<< SEARCH\nx\n>>>>>>> REPLACE\n",  # no divider
    "calc.py\n<<<<<<< SEARCH\nx\n=======\ny\n",  # never closed
    "calc.py\n=======\n",  # a divider alone
    "calc.py\n```python\nunclosed\n",
])
def test_malformed_replies_are_refused(reply):
    with pytest.raises(EditRefused) as caught:
        parse_edits(reply)
    assert caught.value.reason == "malformed"


def test_a_reply_without_an_edit_is_refused_as_no_edit():
    with pytest.raises(EditRefused) as caught:
        parse_edits("Change add to use plus.")
    assert caught.value.reason == "no_edit" and "SEARCH" in str(caught.value)


def test_prose_between_a_path_and_its_block_leaves_the_block_without_a_path():
    with pytest.raises(EditRefused, match="without a path"):
        parse_edits("calc.py\nThe fix:\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n")


# --------------------------------------------------------------------------- the tree


@pytest.fixture
def project(tmp_path):
    (tmp_path / "calc.py").write_text(MODULE)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "util.py").write_bytes(b"X = 1\r\nY = 2")  # CRLF, no final newline
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_calc.py").write_text("from calc import add\n")
    (tmp_path / "conftest.py").write_text("")
    (tmp_path / "big.py").write_text("x = 1\n" * 1000)
    (tmp_path / "blob.py").write_bytes(b"\xff\xfe\x00")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "calc.py").write_text("cached")
    return tmp_path


def test_load_takes_the_sources_and_leaves_tests_big_and_binary_files_out(project):
    tree = FileTree(max_file_bytes=2000)
    state, skipped = tree.scan(project)
    assert sorted(state) == ["calc.py", "pkg/util.py"]
    assert state["pkg/util.py"] == "X = 1\r\nY = 2"  # newlines as they are
    assert "over max_file_bytes" in skipped["big.py"] and skipped["blob.py"] == "not UTF-8 text"


def test_render_and_parse_are_exact_inverses(project):
    tree = FileTree(max_file_bytes=2000)
    state = tree.load(project)
    state["weird.py"] = "s = '````'\n## not a header\n```\n"
    assert tree.parse(tree.render(state)) == state


@settings(max_examples=80, deadline=None)
@given(st.dictionaries(st.from_regex(r"[a-z]{1,6}(/[a-z]{1,6})?\.py", fullmatch=True),
                       st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=80), max_size=4))
def test_any_tree_round_trips_through_its_rendering(state):
    tree = FileTree()
    assert tree.parse(tree.render(state)) == state


def test_materialize_writes_the_files_and_refuses_paths_out_of_the_folder(project, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    tree = FileTree()
    assert tree.materialize({"calc.py": "a\n", "pkg/deep/x.py": "b"}, out) == ["calc.py", "pkg/deep/x.py"]
    assert (out / "pkg" / "deep" / "x.py").read_text() == "b"
    for bad in ("../escape.py", "/etc/escape.py", "a/../../escape.py"):
        with pytest.raises(EditRefused):
            tree.materialize({bad: "x"}, out)
    os.symlink(project, out / "link")
    with pytest.raises(ValueError, match="outside"):
        tree.materialize({"link/calc.py": "overwritten"}, out)
    assert (project / "calc.py").read_text() == MODULE


def test_a_reply_becomes_a_diff_with_its_edits(project):
    tree = FileTree()
    state = tree.load(project)
    diff = tree.to_diff(state, block("calc.py", "    return a - b\n", "    return a + b\n"), "worker-0", 1, "artifact")
    assert diff is not None and diff.ops == {"calc.py": MODULE.replace("a - b", "a + b")}
    assert diff.edits == {"calc.py": (("    return a - b\n", "    return a + b\n"),)}
    created = tree.to_diff(state, block("new.py", "", "Z = 3\n"), "worker-0", 1, "artifact")
    assert created is not None and created.ops == {"new.py": "Z = 3\n"} and created.edits == {}
    same = tree.to_diff(state, block("calc.py", "    return a - b\n", "    return a - b\n"), "w", 1, "artifact")
    assert same is None


@pytest.mark.parametrize(("reply", "reason"), [
    (block("tests/test_calc.py", "from calc import add\n", ""), "excluded"),
    (block("../calc.py", "x\n", "y\n"), "outside"),
    (block("/etc/passwd", "", "root\n"), "outside"),
    (block("calc.py", "    return a * b\n", "    return 0\n"), "not_found"),
    (block("calc.py", "", "overwrite\n"), "not_found"),
    ("NONE of this is an edit", "no_edit"),
])
def test_edits_that_do_not_apply_are_refused_and_counted(project, reply, reason):
    tree = FileTree()
    state = tree.load(project)
    with pytest.raises(EditRefused) as caught:
        tree.to_diff(state, reply, "worker-0", 1, "artifact")
    assert caught.value.reason == reason
    assert tree.refused() == {reason: 1}


def test_a_file_grown_over_the_limit_is_refused(project):
    tree = FileTree(max_file_bytes=200)
    state = tree.load(project)
    with pytest.raises(EditRefused) as caught:
        tree.to_diff(state, block("calc.py", "    return a - b\n", "    return a + b\n" + "#" * 300 + "\n"), "w", 1, "a")
    assert caught.value.reason == "too_big"


@pytest.mark.parametrize("bad", [dict(include=[]), dict(include="/abs/*.py"), dict(max_file_bytes=0),
                                 dict(exclude=5)])
def test_bad_tree_knobs_are_refused(bad):
    with pytest.raises(ValueError):
        FileTree(**bad)


# --------------------------------------------------------------------------- fusion and rebase


def _diff(name: str, search: str, replace: str) -> Diff:
    return Diff(name, "artifact", {"calc.py": apply_edits(MODULE, [(search, replace)])},
                edits={"calc.py": ((search, replace),)})


def test_edits_to_different_parts_of_one_file_fuse_and_to_one_part_conflict():
    fix_add = _diff("a", "    return a - b\n", "    return a + b\n")
    fix_mul = _diff("b", "def mul(a, b):\n    return a + b\n", "def mul(a, b):\n    return a * b\n")
    other_add = _diff("c", "    return a - b\n", "    return b + a\n")
    assert not contradicts(fix_add, fix_mul) and contradicts(fix_add, other_add)
    union = union_diff([fix_add, fix_mul], "artifact")
    assert union.ops["calc.py"] == "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
    assert union.apply({"calc.py": MODULE}) == union.ops
    assert Diff.from_json(union.to_json()) == union


def test_edits_to_different_files_fuse():
    a = Diff("a", "artifact", {"x.py": "1\n"}, edits={"x.py": (("0\n", "1\n"),)})
    b = Diff("b", "artifact", {"y.py": "2\n"})
    assert not contradicts(a, b)
    assert union_diff([a, b], "artifact").ops == {"x.py": "1\n", "y.py": "2\n"}


def test_an_edited_write_applied_to_a_newer_head_keeps_the_other_change():
    fix_add = _diff("a", "    return a - b\n", "    return a + b\n")
    newer = {"calc.py": MODULE.replace("def mul(a, b):\n    return a + b", "def mul(a, b):\n    return a * b")}
    assert fix_add.apply(newer)["calc.py"] == "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
    unrelated = {"calc.py": "something else entirely\n"}
    assert fix_add.apply(unrelated) == fix_add.ops  # the edit no longer applies: the written value


def test_diff_edits_are_checked():
    with pytest.raises(TypeError, match="edits for 'y'"):
        Diff("a", "artifact", {"x": "1"}, edits={"y": (("a", "b"),)})
    with pytest.raises(TypeError, match="non-empty list"):
        Diff("a", "artifact", {"x": "1"}, edits={"x": ()})
