"""The layering the benchmarks' move restored: engine/ knows tokens and tensors and never imports the server (or
the benchmarks, which sit on top of both)."""
import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[1] / "engine"
UPPER = ("codecue_lsp", "codecue_bench")


def imported_modules(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def test_engine_never_imports_the_server_or_the_benchmarks():
    files = sorted(ENGINE.rglob("*.py"))
    assert len(files) > 5  # the scan really looked at the engine
    bad = [(f.name, m) for f in files for m in imported_modules(f) if m.split(".")[0] in UPPER]
    assert bad == []


def test_the_scan_catches_an_upward_import(tmp_path):
    # Nested in a function, as the old engine/bench.py did it.
    sample = tmp_path / "x.py"
    sample.write_text("def f():\n    from codecue_lsp.bench_server import main\n    import codecue_bench.gpu\n")
    assert imported_modules(sample) == ["codecue_lsp.bench_server", "codecue_bench.gpu"]
