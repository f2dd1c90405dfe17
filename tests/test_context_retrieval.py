"""Lexical retrieval: windows of files, ranked by the Jaccard similarity of identifier sets to the query."""
import pytest

from codecue_lsp.context import retrieval
from codecue_lsp.context.retrieval import RetrievalIndex, TextChunk, chunk_text, identifiers
from codecue_lsp.context.types import Chunk

FILES = {
    "db/session.py": "def open_session(engine_url, pool_size):\n    pool = make_pool(engine_url, pool_size)\n"
                     "    return Session(pool)\n",
    "web/routes.py": "def index(request):\n    template = render_template('index.html')\n    return template\n",
    "util/strings.py": "def slugify(title):\n    return title.lower().replace(' ', '-')\n",
    "db/models.py": "class User(Base):\n    email = Column(String)\n    pool_size = 3\n",
}
QUERY = "engine_url = settings.engine_url\nsession = open_session(engine_url, pool_size=5)\n"


def build(files=FILES) -> RetrievalIndex:
    index = RetrievalIndex()
    for path, text in files.items():
        index.add(path, chunk_text(path, text))
    return index


def paths(results):
    return [chunk.path for _, chunk in results]


def test_identifiers_drop_keywords_common_words_and_single_letters():
    assert identifiers("def f(self, x): return self.open_session(x, None)") == {"open_session"}
    assert identifiers("const total = items.length; let i = 0;") == {"total", "items", "length"}


@pytest.mark.parametrize("lines, expected", [
    (5, [(0, 5)]),
    (20, [(0, 20)]),
    (25, [(0, 20), (10, 25)]),
    (45, [(0, 20), (10, 30), (20, 40), (30, 45)]),
])
def test_chunk_windows(lines, expected):
    text = "\n".join(f"line_{i}" for i in range(lines))
    chunks = chunk_text("a.py", text)
    assert [(c.start_line, c.end_line) for c in chunks] == expected
    assert all(c.text == "\n".join(text.split("\n")[c.start_line:c.end_line]) for c in chunks)
    assert [c.plain() for c in chunks] == [Chunk("a.py", c.start_line, c.end_line) for c in chunks]


def test_blank_windows_are_skipped():
    text = "alpha\n" + "\n" * 40 + "omega"
    assert [(c.start_line, c.end_line) for c in chunk_text("a.py", text)] == [(0, 20), (30, 42)]
    assert chunk_text("a.py", "\n\n  \n") == []


def test_the_chunk_sharing_the_query_identifiers_ranks_first():
    results = build().query(QUERY, 3)
    assert paths(results)[0] == "db/session.py"
    assert "db/models.py" in paths(results)  # shares pool_size only: ranked, lower
    assert results[0][0] > results[1][0] > 0
    assert "web/routes.py" not in paths(results)  # shares nothing: never scored


def test_scores_are_jaccard():
    index = RetrievalIndex()
    index.add("a.py", [TextChunk("a.py", 0, 1, "alpha beta gamma delta")])
    [(score, chunk)] = index.query("alpha beta omega", 5)
    assert score == pytest.approx(2 / 5)  # {alpha, beta} / {alpha, beta, gamma, delta, omega}
    assert chunk.path == "a.py"


def test_text_free_chunks_are_scored_by_the_identifiers_given_with_them():
    index = RetrievalIndex()
    chunks = [Chunk("a.py", 0, 20), Chunk("a.py", 10, 30)]
    index.add("a.py", chunks, [identifiers("alpha beta gamma delta"), identifiers("omega zeta")])
    assert index.query("alpha beta omega", 5) == [(pytest.approx(2 / 5), chunks[0]), (pytest.approx(1 / 4), chunks[1])]
    with pytest.raises(ValueError):  # one identifier set per chunk
        index.add("a.py", [Chunk("a.py", 0, 20)], [identifiers("alpha"), identifiers("beta")])
    assert index.by_path["a.py"] == tuple(chunks) and len(index) == 2  # the refused add changed nothing


def test_exclude_path_skips_the_current_file():
    index = build()
    assert "db/session.py" not in paths(index.query(QUERY, 5, exclude_path="db/session.py"))
    assert paths(index.query(QUERY, 5, exclude_path="db/session.py"))[0] == "db/models.py"


def test_boost_paths_reorders():
    index = build()
    assert paths(index.query(QUERY, 2)) == ["db/session.py", "db/models.py"]
    boosted = index.query(QUERY, 2, boost_paths={"db/models.py": 10.0})
    assert paths(boosted) == ["db/models.py", "db/session.py"]


def test_remove_drops_and_add_replaces():
    index = build()
    index.remove("db/session.py")
    assert "db/session.py" not in paths(index.query(QUERY, 5))
    assert "db/session.py" not in index.by_path
    index.add("web/routes.py", chunk_text("web/routes.py", "x = open_session(engine_url, pool_size)\n"))
    results = index.query(QUERY, 5)
    assert paths(results)[0] == "web/routes.py"
    assert all("render_template" not in chunk.text for _, chunk in results)  # the old text is gone
    assert index.query("render_template", 5) == []
    index.remove("not/indexed.py")  # removing an unknown path is a no-op
    assert len(index) == 3  # chunks of routes, strings and models


def test_many_replacements_keep_answers_and_compact_postings():
    index = build()
    for round_ in range(50):
        index.add("db/session.py", chunk_text("db/session.py", f"open_session(engine_url, pool_size, v{round_})"))
    assert paths(index.query(QUERY, 1)) == ["db/session.py"]
    assert len(index._postings["open_session"]) < 10  # removed chunks' postings were rewritten away
    assert len(index) == 4


def test_query_reads_only_the_rarest_postings_when_the_index_is_large(monkeypatch):
    monkeypatch.setattr(retrieval, "MAX_POSTINGS", 5)
    index = RetrievalIndex()
    for i in range(20):  # "common_name" is in every chunk; "rare_name" in one
        index.add(f"f{i}.py", [TextChunk(f"f{i}.py", 0, 1, f"common_name other_{i}")])
    index.add("target.py", [TextChunk("target.py", 0, 1, "common_name rare_name")])
    results = index.query("common_name rare_name", 3)
    assert paths(results) == ["target.py"]  # common_name's long list was not read
    assert results[0][0] == 1.0  # the score is still the exact Jaccard


def test_query_does_not_change_the_index():
    index = build()
    before = ({w: list(p) for w, p in index._postings.items()}, dict(index._entries), dict(index._stale))
    index.query(QUERY, 3, exclude_path="db/session.py", boost_paths={"db/models.py": 2.0})
    assert ({w: list(p) for w, p in index._postings.items()}, dict(index._entries), dict(index._stale)) == before


@pytest.mark.parametrize("text, k", [("", 3), ("def return None", 3), (QUERY, 0), ("unknown_name", 3)])
def test_empty_answers(text, k):
    assert build().query(text, k) == []
