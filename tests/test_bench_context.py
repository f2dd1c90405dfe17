"""`codecue-bench context`: holes cut from a small multi-file project written here (cross-file vs in-file lines,
imports resolved to the files that define the names), the saved and typed documents, scoring, and one run of the
benchmark through the real server on the tiny pair."""
from __future__ import annotations

import ast
import os

import pytest
from lsprotocol import types as lsp

from codecue_bench.context_ceiling import HoleDefinitions, ceiling_rows
from codecue_bench.context_bench import (
    NAIVE_PREFIX_TOKENS,
    NAIVE_SUFFIX_TOKENS,
    answer_line,
    naive_prompt,
    naive_rows,
    run_context_bench,
    score,
    summarize,
)
from codecue_bench.crossfile import (
    CROSS,
    IN_FILE,
    Resolver,
    absolute,
    blanked,
    file_candidates,
    python_files,
    select_holes,
    typed,
)

PROJECT = {
    "pkg/__init__.py": "from .models import User\n\n__all__ = ['User']\n",
    "pkg/models.py": (
        "class User:\n"
        "    def __init__(self, name):\n"
        "        self.name = name\n"
        "\n"
        "\n"
        "def make_user(name):\n"
        "    return User(name.strip())\n"),
    "pkg/util.py": (
        "WIDTH = 3\n"
        "\n"
        "\n"
        "def slugify(text):\n"
        "    return text.lower().replace(' ', '-')\n"),
    "pkg/sub/deep.py": (
        "from ..util import slugify\n"
        "\n"
        "\n"
        "def deep(text):\n"
        "    label = slugify(text) + '!'\n"
        "    return label\n"),
    "pkg/service.py": (
        "import os\n"
        "import pkg.util as u\n"
        "from pkg import User\n"
        "from . import models\n"
        "from .util import slugify\n"
        "\n"
        "MODULE_LEVEL = slugify('not in a function')\n"
        "\n"
        "\n"
        "def register(name):\n"
        '    """Register a user under a slug."""\n'
        "    user = User(name)\n"
        "    slug = slugify(user.name)\n"
        "    other = models.make_user(slug)\n"
        "    width = u.WIDTH * 2\n"
        "    path = os.path.join(slug, 'x')\n"
        "    # a comment that is long enough\n"
        "    total = len(slug) + len(path)  # trailing comment\n"
        "    count = len(slug) + width\n"
        "    result = slugify(\n"
        "        path)\n"
        "    if isinstance(other, User):\n"
        "        from .util import WIDTH\n"
        "        return (user, other, total, count, result, WIDTH)\n"
        "    return None\n"
        "\n"
        "\n"
        "class Registry:\n"
        "    label = slugify('class body')\n"),
}

# (path, expected line stripped) -> (kind, names used, files that define them): every hole the files hold.
EXPECTED_HOLES = {
    ("pkg/service.py", "user = User(name)"): (CROSS, ("User",), ("pkg/models.py",)),  # re-exported by __init__
    ("pkg/service.py", "slug = slugify(user.name)"): (CROSS, ("slugify",), ("pkg/util.py",)),
    ("pkg/service.py", "other = models.make_user(slug)"): (CROSS, ("models.make_user",), ("pkg/models.py",)),
    ("pkg/service.py", "width = u.WIDTH * 2"): (CROSS, ("u.WIDTH",), ("pkg/util.py",)),
    ("pkg/service.py", "path = os.path.join(slug, 'x')"): (IN_FILE, (), ()),
    ("pkg/service.py", "count = len(slug) + width"): (IN_FILE, (), ()),
    ("pkg/service.py", "if isinstance(other, User):"): (CROSS, ("User",), ("pkg/models.py",)),
    ("pkg/service.py", "return (user, other, total, count, result, WIDTH)"): (CROSS, ("WIDTH",), ("pkg/util.py",)),
    ("pkg/service.py", "return None"): (IN_FILE, (), ()),
    ("pkg/sub/deep.py", "label = slugify(text) + '!'"): (CROSS, ("slugify",), ("pkg/util.py",)),
    ("pkg/sub/deep.py", "return label"): (IN_FILE, (), ()),
    ("pkg/models.py", "self.name = name"): (IN_FILE, (), ()),
    ("pkg/models.py", "return User(name.strip())"): (IN_FILE, (), ()),
    ("pkg/util.py", "return text.lower().replace(' ', '-')"): (IN_FILE, (), ()),
}


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "synth-0"
    for path, text in PROJECT.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def candidates(root):
    resolver = Resolver(python_files(root))
    return [h for path in sorted(resolver.files) for h in file_candidates("synth", "0", path, resolver)]


def test_every_hole_is_classified_and_its_names_resolved_to_the_defining_files(project):
    found = {(h.path, h.expected.strip()): (h.kind, h.names, h.files) for h in candidates(project)}
    # Left out: the docstring, the comment lines, the multi-line call, the import inside the function, module and
    # class level code, and `def` lines.
    assert found == EXPECTED_HOLES


def test_a_hole_knows_its_line_and_indentation(project):
    lines = PROJECT["pkg/service.py"].split("\n")
    for hole in candidates(project):
        text = PROJECT[hole.path].split("\n")
        assert text[hole.line] == hole.expected and hole.expected.startswith(hole.indent)
        assert hole.indent.strip() == "" and hole.expected[len(hole.indent)] != " "
    assert lines.index("    user = User(name)") == 11


@pytest.mark.parametrize("path, level, module, expected", [
    ("pkg/service.py", 1, "util", "pkg.util"),
    ("pkg/service.py", 1, None, "pkg"),
    ("pkg/sub/deep.py", 2, "util", "pkg.util"),
    ("pkg/sub/__init__.py", 1, "deep", "pkg.sub.deep"),
    ("pkg/service.py", 0, "pkg.util", "pkg.util"),
])
def test_relative_imports_are_made_absolute_from_the_files_package(path, level, module, expected):
    node = ast.ImportFrom(module=module, names=[ast.alias("x")], level=level)
    assert absolute(path, node) == expected


def test_bindings_separate_imported_names_from_module_aliases(project):
    names, aliases = Resolver(python_files(project)).bindings("pkg/service.py")
    assert names == {"User": "pkg/models.py", "slugify": "pkg/util.py", "WIDTH": "pkg/util.py"}
    assert aliases == {"u": "pkg.util", "models": "pkg.models"}  # os is not the project's


def test_selection_is_seeded_capped_per_file_and_in_file_order(project):
    first = select_holes("synth", "0", project, CROSS, count=4, seed=1, per_file=3)
    assert first == select_holes("synth", "0", project, CROSS, count=4, seed=1, per_file=3)
    assert len(first) == 4 and all(h.kind == CROSS for h in first)
    assert sum(h.path == "pkg/service.py" for h in first) <= 3
    assert first == sorted(first, key=lambda h: (h.path, h.line))
    everything = select_holes("synth", "0", project, IN_FILE, count=100)
    assert {(h.path, h.expected.strip()) for h in everything} == {k for k, v in EXPECTED_HOLES.items()
                                                                   if v[0] == IN_FILE}


def test_the_saved_file_has_the_line_blank_and_the_editor_its_indentation():
    text = "def f():\n    x = 1\n    return x\n"
    assert blanked(text, 1) == "def f():\n\n    return x\n"
    assert typed(text, 1, "    ") == "def f():\n    \n    return x\n"


@pytest.mark.parametrize("answer, expected, exact", [
    ("    x = f(a)", "    x = f(a)", True),
    ("    x = f(a)   ", "    x = f(a)", True),       # trailing whitespace aside
    ("    x = f(b)", "    x = f(a)", False),
    ("x = f(a)", "    x = f(a)", False),             # the indentation counts
    ("    ", "    x = f(a)", False),
])
def test_score_is_exact_match_and_similarity(answer, expected, exact):
    match, similarity = score(answer, expected)
    assert match is exact
    assert (similarity == 1.0) is (answer.strip() == expected.strip())
    assert 0.0 <= similarity <= 1.0


def item(text, start=None):
    rng = None if start is None else lsp.Range(lsp.Position(3, start), lsp.Position(3, start))
    return lsp.InlineCompletionList(items=[lsp.InlineCompletionItem(insert_text=text, range=rng)])


@pytest.mark.parametrize("before, result, expected", [
    ("    ", item("x = 1\n    y = 2"), "    x = 1"),
    ("    r", item("eturn x"), "    return x"),
    ("    r", item("return x", start=4), "    return x"),   # an item whose range starts before the cursor
    ("    ", lsp.InlineCompletionList(items=[]), "    "),
    ("    ", None, "    "),
])
def test_the_answer_is_the_cursor_line_with_the_items_first_line(before, result, expected):
    assert answer_line(before, result) == expected


def test_summary_means_and_percentiles():
    rows = [{"exact": True, "similarity": 1.0, "prompt_tokens": 100, "context_tokens": None, "cold_ms": 10.0,
             "warm_ms": 1.0, "warm_exact": True, "warm_answered_by": "typethrough"},
            {"exact": False, "similarity": 0.5, "prompt_tokens": 300, "context_tokens": None, "cold_ms": 30.0,
             "warm_ms": 5.0, "warm_exact": False, "warm_answered_by": "engine"}]
    s = summarize(rows)
    assert (s["holes"], s["exact"], s["similarity"], s["prompt_tokens"], s["context_tokens"]) == (2, 0.5, 0.75,
                                                                                                   200, None)
    assert s["cold_ms"] == {"p50": 10.0, "p90": 30.0} and s["warm_ms"] == {"p50": 1.0, "p90": 5.0}
    assert s["warm_answered_by"] == {"engine": 1, "typethrough": 1}


def test_the_benchmark_runs_every_setting_through_the_server(project, tiny_pair_env, monkeypatch):
    for key, value in tiny_pair_env.items():  # the ceiling runs in this process
        monkeypatch.setenv(key, value)
    before = {path: (project / path).read_text() for path in PROJECT}
    env = dict(os.environ, **tiny_pair_env, OMP_NUM_THREADS="1")
    so_far = []
    report = run_context_bench([("synth", "0", project)], ["file", "tabs", "index", "ceiling"], per_project=2,
                               pair="tiny", env=env, progress=so_far.append)
    # After each server the report so far (a run stopped midway keeps it); the in-process ceiling comes last.
    assert [sorted(r["summary"]) for r in so_far] == [["file"], ["file", "tabs"], ["file", "index", "tabs"]]
    assert [len(r["rows"]) for r in so_far] == [2, 4, 6]
    # The cached project is never written: each server works on a copy.
    assert {path: (project / path).read_text() for path in PROJECT} == before
    holes = report["holes"]
    assert len(holes) == 2 and all(h["kind"] == CROSS and h["files"] for h in holes)
    assert report["projects"] == [{"name": "synth", "version": "0", "released": None, "holes": 2}]
    assert list(report["summary"]) == ["file", "tabs", "index", "ceiling"] == list(report["per_project"])
    assert all(s["warmup_ms"] > 0 and s["load_s"] > 0 for s in report["servers"])
    assert [(s["project"], s["setting"]) for s in report["servers"]] == [("synth", "file"), ("synth", "tabs"),
                                                                           ("synth", "index")]
    rows, ceiling = report["rows"][:6], report["rows"][6:]
    assert [(r["setting"], r["path"], r["line"]) for r in ceiling] == [("ceiling", h["path"], h["line"]) for h in holes]
    for row, hole in zip(rows, holes * 3):
        assert (row["path"], row["line"], row["expected"]) == (hole["path"], hole["line"], hole["expected"])
        # The tabs setting opened the files defining the line's names before the holed file; the others only it.
        tabs = list(hole["files"]) if row["setting"] == "tabs" else []
        assert row["tabs"] == tabs and row["open_documents"] == 1 + len(tabs)
        assert row["cold_answered_by"] == "engine" and row["prompt_tokens"] > 0
        assert row["answer"].startswith(hole["indent"])
        assert row["warm_answer"].startswith(hole["expected"][:len(hole["indent"]) + 1])
        assert row["warm_answered_by"] in ("engine", "typethrough")
        assert row["exact"] == (row["answer"].rstrip() == hole["expected"].rstrip())
    for setting in ("file", "tabs", "index"):
        summary = report["summary"][setting]
        assert summary["exact"] == sum(r["exact"] for r in rows if r["setting"] == setting) / 2
        assert summary["holes"] == 2 and summary["cold_ms"]["p50"] > 0
        assert summary["warm_ms"]["p50"] > 0 and sum(summary["warm_answered_by"].values()) == 2


def test_the_naive_prompt_keeps_the_last_prefix_and_first_suffix_tokens(monkeypatch, tiny_pair_env):
    from engine.engine import Engine
    from engine.loading.pair import load_pair

    for key, value in tiny_pair_env.items():
        monkeypatch.setenv(key, value)
    engine = Engine(load_pair("tiny"))
    try:
        prefix = "".join(f"value_{i} = compute({i})\n" for i in range(600))
        suffix = "".join(f"print(result_{i})\n" for i in range(600))
        ids = naive_prompt(engine, prefix, suffix)
        marker = engine.special_token_id
        assert ids[0] == marker(engine.fim.prefix) and ids[-1] == marker(engine.fim.middle)
        assert ids[1:NAIVE_PREFIX_TOKENS + 1] == engine.encode(prefix)[-NAIVE_PREFIX_TOKENS:]
        assert ids[NAIVE_PREFIX_TOKENS + 1] == marker(engine.fim.suffix)
        assert ids[NAIVE_PREFIX_TOKENS + 2:-1] == engine.encode(suffix)[:NAIVE_SUFFIX_TOKENS]
        short = naive_prompt(engine, "x = 1\n", "")  # shorter than the budgets: all of it
        assert short == [marker(engine.fim.prefix), *engine.encode("x = 1\n"), marker(engine.fim.suffix),
                         marker(engine.fim.middle)]
    finally:
        engine.close()


def test_naive_rows_answer_the_in_file_holes_to_the_end_of_the_line(project, monkeypatch, tiny_pair_env):
    for key, value in tiny_pair_env.items():
        monkeypatch.setenv(key, value)
    holes = select_holes("synth", "0", project, IN_FILE, count=2)
    rows = naive_rows({"synth": project}, holes, "tiny", max_new_tokens=8)
    assert [(r["path"], r["line"], r["setting"]) for r in rows] == [(h.path, h.line, "naive") for h in holes]
    for row, hole in zip(rows, holes):
        assert "\n" not in row["answer"] and row["answer"].startswith(hole.indent)
        assert row["exact"] == score(row["answer"], hole.expected)[0] and row["prompt_tokens"] > 3


def test_the_ceiling_shows_exactly_the_definitions_the_line_uses(project):
    from codecue_lsp.context.index import WorkspaceIndex

    index = WorkspaceIndex([str(project)], languages=("python",), cache_dir=None)
    index.build()
    for hole in select_holes("synth", "0", project, CROSS, count=10):
        snippets = HoleDefinitions(index, hole).snippets(hole.path, "python", "", 0, 0)
        wanted = {n.split(".")[-1] for n in hole.names}
        assert {s.name for s in snippets} == wanted, hole
        assert {s.path for s in snippets} <= set(hole.files)
        assert all(s.text.lstrip().startswith(("def ", "class ", s.name)) for s in snippets)


def test_ceiling_rows_complete_every_cross_file_hole_with_its_definitions(project, monkeypatch, tiny_pair_env):
    for key, value in tiny_pair_env.items():
        monkeypatch.setenv(key, value)
    holes = select_holes("synth", "0", project, CROSS, count=2)
    before = {h.path: (project / h.path).read_text() for h in holes}
    rows = ceiling_rows({"synth": project}, holes, "tiny", score)
    assert [(r["path"], r["line"], r["setting"]) for r in rows] == [(h.path, h.line, "ceiling") for h in holes]
    for row, hole in zip(rows, holes):
        assert "\n" not in row["answer"] and row["answer"].startswith(hole.indent)
        assert row["exact"] == score(row["answer"], hole.expected)[0]
        assert set(row["context_files"]) == set(hole.files) and row["context_tokens"] > 0
    assert {h.path: (project / h.path).read_text() for h in holes} == before  # the project is left as it was


class FakeStats:
    """A BenchClient whose codecue.stats answers come from a list (the last one repeats)."""

    def __init__(self, answers):
        self.answers, self.calls = list(answers), 0

    async def stats(self):
        self.calls += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


@pytest.mark.parametrize("answers, expected, calls", [
    ([{"ready": True}], None, 1),  # a server without index stats: nothing to wait for
    ([{"context": {"files": 0, "indexing": True}}, {"context": {"files": 3, "indexing": True}},
      {"context": {"files": 5, "indexing": False}}], 5, 3),
    ([{"context": {"files": 2, "indexing": False}}], 2, 1),
])
def test_the_index_setting_waits_while_the_server_is_indexing(monkeypatch, answers, expected, calls):
    import asyncio

    import codecue_bench.context_bench as bench_module

    async def no_sleep(seconds):
        pass
    monkeypatch.setattr(bench_module.asyncio, "sleep", no_sleep)
    fake = FakeStats(answers)
    index = asyncio.run(bench_module.wait_index(fake))
    assert (index and index["files"]) == expected and fake.calls == calls
