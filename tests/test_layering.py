"""The layering: engine/ knows tokens and tensors and never imports the server (or
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


def module_cycles(*packages: str) -> list[tuple[str, ...]]:
    """Every import circle between modules of `packages` (imports for type checking only do not count)."""
    import grimp

    graph = grimp.build_graph(*packages, exclude_type_checking_imports=True)
    cycles = set()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            chain = graph.find_shortest_chain(importer=imported, imported=module)
            if chain:
                cycles.add(tuple(sorted(set(chain))))
    return sorted(cycles)


def test_no_import_circle_anywhere():
    assert module_cycles("engine", "codecue_lsp", "codecue_bench") == []


def test_the_circle_check_finds_a_circle(tmp_path, monkeypatch):
    package = tmp_path / "circular"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from circular import b\n")  # hidden inside a function
    (package / "b.py").write_text("from circular import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert module_cycles("circular") == [("circular.a", "circular.b")]


def test_the_layering_contracts_hold():
    """`lint-imports` (import-linter) with the contracts in pyproject.toml: packages and engine layers one way."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint)], cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout
