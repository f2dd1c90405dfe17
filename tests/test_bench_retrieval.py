"""The retrieval benchmark's scoring on a tiny synthetic project (no downloads)."""
import pytest

from codecue_bench import retrieval_bench as bench

FILLER = "".join(f"    step_{i} = compute_step(step_{i - 1} if {i} else seed)\n" for i in range(25))
PROJECT = {
    "proj/__init__.py": "",
    "proj/store.py": (
        "import sqlite3\n\n\n"
        "class RecordStore:\n"
        "    def __init__(self, database_path):\n"
        "        self.connection = sqlite3.connect(database_path)\n\n"
        "    def fetch_record(self, record_id):\n"
        "        return self.connection.execute(record_id)\n\n\n"
        "DEFAULT_TABLE = 'records'\n"),
    "proj/service.py": (
        "from .store import RecordStore, DEFAULT_TABLE\n"
        "from os import path\n\n\n"
        "def load(database_path, record_id):\n"
        "    connection_ready = path.exists(database_path)\n"
        "    store = RecordStore(database_path)\n"
        "    return store.fetch_record(record_id), DEFAULT_TABLE, connection_ready\n\n\n"
        "def unrelated(seed):\n" + FILLER + "    return RecordStore\n"),
    "proj/noise.py": "def compute_step(value):\n    return value * 2\n",
}


def test_definitions_find_def_class_and_module_assignments():
    found = bench.definitions(PROJECT)
    assert found["RecordStore"] == [("proj/store.py", 3)]
    assert found["fetch_record"] == [("proj/store.py", 7)]
    assert found["DEFAULT_TABLE"] == [("proj/store.py", 11)]
    assert found["load"] == [("proj/service.py", 4)]
    assert "connection" not in found  # an attribute inside a method is not a module-level definition


def test_cases_are_first_uses_of_project_imports_inside_functions():
    cases = bench.find_cases(PROJECT)
    assert [(c.path, c.line, c.name) for c in cases] == [
        ("proj/service.py", 6, "RecordStore"), ("proj/service.py", 7, "DEFAULT_TABLE"),
        ("proj/service.py", 36, "RecordStore")]  # `path` comes from the stdlib: no case
    first = cases[0]
    assert first.targets == (("proj/store.py", 3),)
    assert first.query.split("\n") == PROJECT["proj/service.py"].split("\n")[:6]
    assert len(cases[2].query.split("\n")) == bench.QUERY_LINES


def test_hit_and_mention():
    chunks = bench.all_chunks(PROJECT, 20, 10)
    store = [c for c in chunks if c.path == "proj/store.py"]
    noise = [c for c in chunks if c.path == "proj/noise.py"]
    assert bench.hit(store, (("proj/store.py", 3),))
    assert not bench.hit(noise, (("proj/store.py", 3),))
    assert bench.mention(store, "RecordStore") and not bench.mention(noise, "RecordStore")


@pytest.mark.parametrize("retriever", [bench.JaccardRetriever, bench.BM25Retriever])
def test_evaluate_scores_recall_and_times(retriever):
    cases = bench.find_cases(PROJECT)
    row = bench.evaluate(PROJECT, cases, retriever)
    assert row["cases"] == 3 and row["retriever"] == retriever.name
    # The first two queries share database_path/record_id/connection with store.py: its chunk comes first.
    assert row["recall@1"] == pytest.approx(2 / 3)
    assert row["recall@5"] >= row["recall@3"] >= row["recall@1"]
    assert row["build_s"] > 0 and row["query_ms_mean"] > 0  # measured, not left at zero


def test_pooled_weights_projects_by_cases():
    rows = [{"project": "a", "retriever": "jaccard", "lines": 20, "stride": 10, "cases": 1, "build_s": 1.0,
             "query_ms_mean": 1.0, "query_ms_p95": 1.0, **{f"{m}@{k}": 1.0 for m in ("recall", "mention")
                                                           for k in bench.KS}},
            {"project": "b", "retriever": "jaccard", "lines": 20, "stride": 10, "cases": 3, "build_s": 1.0,
             "query_ms_mean": 2.0, "query_ms_p95": 5.0, **{f"{m}@{k}": 0.0 for m in ("recall", "mention")
                                                           for k in bench.KS}}]
    total = bench.pooled(rows, "jaccard", 20, 10)
    assert total["cases"] == 4 and total["recall@1"] == 0.25 and total["query_ms_mean"] == 1.75
    assert total["query_ms_p95"] == 5.0
    assert "ALL" in bench.table([total])


def test_scale_run_on_a_folder(tmp_path):
    for i in range(6):
        body = "".join(f"def handler_{i}_{j}(request_{j}, shared_state):\n    return shared_state.value_{j}\n"
                       for j in range(30))
        (tmp_path / f"m{i}.py").write_text(body)
    result = bench.scale(tmp_path, n_files=4, queries=4)
    assert result["files"] == 4 and result["chunks"] > 4 * 5
    assert result["top5_scores_exact"] == 1.0  # a small index reads every posting: the answer is exact
    assert result["bytes_per_chunk"] > 0 and result["query_ms_p95"] >= result["query_ms_p50"] > 0
