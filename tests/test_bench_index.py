"""codecue-bench index on a small corpus: the report's shape, and a warm restart that parses nothing."""
from __future__ import annotations

import json

from codecue_bench import index_bench


def test_a_small_index_bench(tmp_path):
    report = index_bench.run(40, tmp_path, fresh_process=False)
    assert report["files_copied"] == 40
    assert report["cold"]["parsed"] == 40 and report["cold"]["files"] == 40
    assert report["warm"]["parsed"] == 0 and report["warm"]["reused"] == 40  # everything from the cache
    assert report["index"]["files"] == 40 and report["index"]["definitions"] > 0
    assert report["update_ms"]["files"] == 20 and report["update_ms"]["max"] >= report["update_ms"]["median"] > 0
    assert report["cache_mb"] > 0
    assert set(report["within_targets"]) == {"cold_s", "added_rss_mb", "update_max_ms"}
    json.dumps(report)  # the --json output


def test_the_corpus_keeps_the_tree_and_only_indexable_files(tmp_path):
    source = tmp_path / "site"
    (source / "pkg" / "sub").mkdir(parents=True)
    (source / "pkg" / "a.py").write_text("A = 1\n")
    (source / "pkg" / "sub" / "b.py").write_text("B = 1\n")
    (source / "pkg" / "data.txt").write_text("text\n")
    (source / "pkg" / "c_pb2.py").write_text("C = 1\n")
    (source / "pkg" / "bin.py").write_bytes(b"\0\0")
    (source / "node_modules").mkdir()
    (source / "node_modules" / "d.py").write_text("D = 1\n")
    dest = tmp_path / "corpus"
    assert index_bench.build_corpus(dest, 10, source) == 2
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*.py")) == ["pkg/a.py", "pkg/sub/b.py"]


def test_the_cli_writes_json(tmp_path, capsys):
    out = tmp_path / "report.json"
    code = index_bench.main(["--files", "12", "--json", str(out), "--keep", str(tmp_path / "work")])
    report = json.loads(out.read_text())
    assert report["warm"]["parsed"] == 0 and report["warm"]["fresh_process"] is True
    assert "cold build" in capsys.readouterr().out
    assert code in (0, 1)
