"""The engine's options (engine/options.py) and the one module of each package that reads the environment."""
from __future__ import annotations

import ast
import json
import logging
import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path

import pytest

from codecue_lsp.config import engine_options
from engine import options
from engine.options import REPO_MODELS_TOML, RETIRED, VARIABLES, EngineOptions

REPO = Path(__file__).resolve().parents[1]

# environment -> the fields it sets (every other field keeps its default)
CASES = [
    ({}, {}),
    ({"CODECUE_HOME": "/data/cc"}, {"home": Path("/data/cc")}),
    ({"CODECUE_HOME": ""}, {}),  # empty: the default, as before
    ({"CODECUE_MODELS_TOML": "/etc/codecue/models.toml"}, {"models_toml": Path("/etc/codecue/models.toml")}),
    ({"CODECUE_DEVICE": "cuda:1"}, {"device": "cuda:1"}),
    ({"CODECUE_DTYPE": "bfloat16"}, {"dtype": "bfloat16"}),
    ({"CODECUE_TARGET_WEIGHTS": "gguf", "CODECUE_DRAFT_WEIGHTS": "int4"},
     {"target_weights": "gguf", "draft_weights": "int4"}),
    ({"CODECUE_COMPILE": "1"}, {"compile": True}),
    ({"CODECUE_COMPILE": "on"}, {"compile": True}),
    ({"CODECUE_COMPILE": "off"}, {"compile": False}),
    ({"CODECUE_COMPILE": "0"}, {"compile": False}),
    ({"CODECUE_COMPILE": ""}, {"compile": False}),  # set but empty: off, as before
    ({"CODECUE_TORCH_PREFILL": "on"}, {"torch_prefill": "on"}),
    ({"CODECUE_TORCH_PREFILL": "1"}, {"torch_prefill": "on"}),
    ({"CODECUE_TORCH_PREFILL": "0"}, {"torch_prefill": "off"}),
    ({"CODECUE_TORCH_PREFILL": "auto"}, {}),
    ({"CODECUE_PREFILL_CHUNK": "40"}, {"prefill_chunk": 40}),
    ({"CODECUE_PREFILL_CHUNK": "0"}, {"prefill_chunk": 1}),
    ({"CODECUE_PREFILL_CHUNK": "auto"}, {}),
    ({"CODECUE_LLAMACPP_EXTRA_BUFFERS": "1"}, {"llamacpp_extra_buffers": True}),
    ({"CODECUE_LLAMACPP_EXTRA_BUFFERS": "0"}, {"llamacpp_extra_buffers": False}),
    ({"CODECUE_LLAMACPP_EXTRA_BUFFERS": "auto"}, {}),
    ({"CODECUE_KERNEL_MARCH": "x86-64-v3"}, {"kernel_march": "x86-64-v3"}),
    ({"CODECUE_EXTENSIONS": "/opt/cc-kernels"}, {"extensions": Path("/opt/cc-kernels")}),
    ({"CODECUE_VERBOSE_BUILD": "1"}, {"verbose_build": True}),
    ({"UNRELATED": "1", "PATH": "/bin"}, {}),
]


@pytest.mark.parametrize("env, changed", CASES)
def test_each_variable_sets_its_field(env, changed, caplog):
    with caplog.at_level(logging.WARNING, logger="engine.options"):
        got = EngineOptions.from_environment(env)
    assert got == replace(EngineOptions(), **changed)
    assert not caplog.records


def test_the_defaults_are_what_a_user_who_sets_nothing_had():
    got = EngineOptions.from_environment({})
    assert got.home == Path.home() / ".cache" / "codecue" and got.models_toml == REPO_MODELS_TOML
    assert got.extensions_dir == got.home / "extensions"
    assert (got.device, got.dtype, got.target_weights, got.draft_weights, got.compile) == (None,) * 5
    assert (got.torch_prefill, got.prefill_chunk, got.llamacpp_extra_buffers) == ("auto", None, None)
    assert (got.kernel_march, got.verbose_build) == ("native", False)
    assert (got.lean_step, got.weight_arena, got.draft_extension, got.draft_window, got.length_by_confidence) \
        == ("native", True, True, True, True)


@pytest.mark.parametrize("variable, value", [("CODECUE_PREFILL_CHUNK", "lots"), ("CODECUE_TORCH_PREFILL", "maybe"),
                                             ("CODECUE_LLAMACPP_EXTRA_BUFFERS", "2")])
def test_a_value_that_does_not_parse_is_named_and_left_at_its_default(variable, value, caplog):
    with caplog.at_level(logging.WARNING, logger="engine.options"):
        assert EngineOptions.from_environment({variable: value}) == EngineOptions()
    assert len(caplog.records) == 1 and variable in caplog.text


@pytest.mark.parametrize("variable", sorted(RETIRED))
def test_a_retired_variable_gives_one_warning_naming_it_and_changes_nothing(variable, caplog):
    with caplog.at_level(logging.WARNING, logger="engine.options"):
        got = EngineOptions.from_environment({variable: "0"})
    assert got == EngineOptions()
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert variable in caplog.records[0].getMessage() and "retired" in caplog.records[0].getMessage()


def test_the_server_warns_once_about_a_retired_variable_and_its_flags_win(caplog):
    env = {"CODECUE_DRAFT_WINDOW": "0", "CODECUE_PREFILL_CHUNK": "64", "CODECUE_TORCH_PREFILL": "off"}
    with caplog.at_level(logging.WARNING, logger="engine.options"):
        got = engine_options("on", "16", env=env)
    assert (got.torch_prefill, got.prefill_chunk, got.draft_window) == ("on", 16, True)
    assert len(caplog.records) == 1 and "CODECUE_DRAFT_WINDOW" in caplog.text
    assert engine_options(env=env).prefill_chunk == 64
    with pytest.raises(ValueError):
        engine_options(prefill_chunk="lots", env={})


def test_the_environment_of_a_field_reads_back_as_that_field():
    chosen = EngineOptions(home=Path("/h"), models_toml=Path("/m.toml"), device="cpu", dtype="float32",
                           target_weights="vnni", draft_weights="vnni4", compile=False, torch_prefill="off",
                           prefill_chunk=40, llamacpp_extra_buffers=False, kernel_march="x86-64-v3",
                           extensions=Path("/k"), verbose_build=True)
    assert set(chosen.environment()) == set(VARIABLES.values())
    assert EngineOptions.from_environment(chosen.environment()) == chosen
    assert set(EngineOptions().environment()) == {"CODECUE_HOME", "CODECUE_MODELS_TOML"}


def test_current_is_read_once_and_use_and_using_replace_it(monkeypatch):
    monkeypatch.setenv("CODECUE_KERNEL_MARCH", "x86-64-v3")
    options.use(None)
    first = options.current()
    assert first.kernel_march == "x86-64-v3" and options.current() is first
    monkeypatch.setenv("CODECUE_KERNEL_MARCH", "native")
    assert options.current() is first  # the environment is read once
    with options.using(draft_window=False) as inside:
        assert options.current() is inside and not inside.draft_window and inside.kernel_march == "x86-64-v3"
    assert options.current() is first
    options.use(replace(first, prefill_chunk=8))
    assert options.current().prefill_chunk == 8


def test_a_child_process_gets_the_options_set_with_use(tmp_path, monkeypatch):
    monkeypatch.setenv("CODECUE_PREFILL_CHUNK", "99")  # the process's own environment says otherwise
    monkeypatch.setenv("CODECUE_DRAFT_VOCAB", "0")  # retired: the child is not told (it would warn again)
    options.use(replace(options.current(), home=tmp_path / "home", prefill_chunk=40, torch_prefill="off",
                        llamacpp_extra_buffers=None))
    env = options.child_environment()
    assert env["PYTHONPATH"].split(":")[0] == str(REPO)
    assert "CODECUE_DRAFT_VOCAB" not in env
    script = ("import json; from engine import options; o = options.current(); "
              "print(json.dumps([str(o.home), o.prefill_chunk, o.torch_prefill, o.llamacpp_extra_buffers]))")
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [str(tmp_path / "home"), 40, "off", None]
    assert "retired" not in done.stderr


def test_the_server_turns_progress_bars_off_without_touching_the_environment(monkeypatch):
    import os

    from huggingface_hub.utils import are_progress_bars_disabled, enable_progress_bars
    from transformers.utils import logging as transformers_logging

    from codecue_lsp.config import quiet_progress_bars

    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    try:
        quiet_progress_bars()
        assert are_progress_bars_disabled() and not transformers_logging.is_progress_bar_enabled()
        assert "HF_HUB_DISABLE_PROGRESS_BARS" not in os.environ
    finally:
        enable_progress_bars()
        transformers_logging.enable_progress_bar()


# --- who reads and who writes the environment ------------------------------------------------------------------
READERS = {"engine": "engine/options.py", "codecue_lsp": "codecue_lsp/config.py"}
WRITE_METHODS = {"setdefault", "update", "pop", "popitem", "clear", "__setitem__", "__delitem__"}
ALLOWED_WRITES = {("engine/options.py", "set_inductor_cache")}  # torch reads its cache folder from nowhere else


def is_environ(node) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name)
            and node.value.id == "os") or (isinstance(node, ast.Name) and node.id == "environ")


def environment_uses(tree: ast.AST) -> tuple[list[int], list[tuple[str, int]]]:
    """(lines that touch the environment, (function, line) of each write)."""
    reads, writes = [], []

    def visit(node, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        if is_environ(node) or (isinstance(node, ast.Attribute) and node.attr in ("getenv", "putenv", "unsetenv")
                                and isinstance(node.value, ast.Name) and node.value.id == "os"):
            reads.append(node.lineno)
        if isinstance(node, ast.ImportFrom) and node.module == "os" and \
                {a.name for a in node.names} & {"environ", "getenv", "putenv", "unsetenv"}:
            reads.append(node.lineno)
        write = (isinstance(node, ast.Subscript) and is_environ(node.value) and isinstance(node.ctx, (ast.Store, ast.Del))) \
            or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and ((is_environ(node.func.value) and node.func.attr in WRITE_METHODS)
                     or node.func.attr in ("putenv", "unsetenv")
                     or (node.func.attr == "dict" and any(is_environ(a) for a in node.args))))  # mock.patch.dict
        if write:
            writes.append((function, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, function)
    visit(tree, "")
    return reads, writes


def scan(package: str) -> dict[str, tuple[list[int], list[tuple[str, int]]]]:
    found = {}
    for path in sorted((REPO / package).rglob("*.py")):
        reads, writes = environment_uses(ast.parse(path.read_text(), str(path)))
        if reads or writes:
            found[path.relative_to(REPO).as_posix()] = (reads, writes)
    return found


@pytest.mark.parametrize("package", sorted(READERS))
def test_one_module_of_each_package_reads_the_environment(package):
    assert set(scan(package)) == {READERS[package]}


@pytest.mark.parametrize("package", ["engine", "codecue_lsp", "codecue_bench"])
def test_no_module_writes_the_environment(package):
    writes = {(module, function) for module, (_, found) in scan(package).items() for function, _ in found}
    assert writes <= ALLOWED_WRITES


def test_the_scan_sees_reads_and_writes():
    reads, writes = environment_uses(ast.parse(
        "import os\nfrom os import getenv\n"
        "def f():\n    os.environ['A'] = '1'\n    os.environ.setdefault('B', '2')\n    x = os.getenv('C')\n"
        "def g():\n    mock.patch.dict(os.environ, D='1')\n    del os.environ['A']\n    os.putenv('E', '1')\n"))
    assert len(reads) >= 6
    assert [function for function, _ in writes] == ["f", "f", "g", "g", "g"]


def test_every_field_says_what_it_does():
    source = (REPO / "engine" / "options.py").read_text().splitlines()
    for f in fields(EngineOptions):
        line = next(line for line in source if line.strip().startswith(f"{f.name}:"))
        assert "  # " in line, f"{f.name} has no comment"
