"""`codecue-lsp` without models, `--version`, `--check`, and the real-model end-to-end test."""
from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from lsp_helpers import (
    complete,
    items_of,
    open_doc,
    running_server,
    server_env,
    stats,
    wait_until_loaded,
)
from lsprotocol import types as lsp

FIB = "def fibonacci(n):\n    if n <= 1:\n        return n\n    "


def run_cli(env: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "codecue_lsp", *args], env=server_env(env), capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.asyncio
async def test_missing_models_show_a_message_and_answer_empty_lists(tmp_path):
    env = {"CODECUE_HOME": str(tmp_path / "empty-home"), "OMP_NUM_THREADS": "1"}
    async with running_server(env, "--debounce-ms", "0") as client:
        loaded = await wait_until_loaded(client, timeout=60)
        assert not loaded["ready"] and "codecue-models fetch" in loaded["load_error"]
        errors = [m for m in client.messages if m.type == lsp.MessageType.Error]
        assert errors and "codecue-models fetch" in errors[0].message
        uri = "file:///work/missing.py"
        open_doc(client, uri, FIB)
        assert items_of(await complete(client, uri, 3, 4)) == []
        assert (await stats(client))["requests"] == 1  # still serving


def test_version():
    out = run_cli({}, "--version", timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("codecue-lsp ")


def test_check_with_the_tiny_pair(tiny_pair_env):
    out = run_cli(dict(tiny_pair_env, OMP_NUM_THREADS="1"), "--check", "--pair", "tiny", "--max-tokens", "8")
    assert out.returncode == 0, out.stderr
    assert "loaded in" in out.stdout and "cold:" in out.stdout and "warm:" in out.stdout
    assert "eager steps" in out.stdout  # compiled steps are a GPU's default, not a CPU's
    assert "completion:" in out.stdout


def test_check_without_models_fails_with_the_fix(tmp_path):
    out = run_cli({"CODECUE_HOME": str(tmp_path / "empty-home")}, "--check", timeout=120)
    assert out.returncode != 0
    assert "codecue-models fetch" in out.stderr


def default_pair_ready() -> bool:
    try:
        from engine.store.config import load_config
        from engine.store.local import is_ready

        spec = load_config().pair("default")
        return is_ready(spec.target.name) and (spec.draft is None or is_ready(spec.draft.name))
    except Exception:
        return False


@pytest.mark.real_model
@pytest.mark.skipif(not default_pair_ready(), reason="needs the default pair: run `codecue-models fetch`")
@pytest.mark.asyncio
async def test_real_model_completes_the_recursive_call():
    async with running_server({}, "--debounce-ms", "0", "--max-tokens", "32") as client:
        loaded = await wait_until_loaded(client, timeout=600)
        assert loaded["ready"], loaded
        uri = "file:///work/fib.py"
        open_doc(client, uri, FIB)
        items = items_of(await asyncio.wait_for(complete(client, uri, 3, 4), 180))
        assert items, "no completion"
        text = items[0].insert_text
        assert "fibonacci(n - 1)" in text or "fibonacci(n-1)" in text, text


def test_tcp_listens_on_loopback_and_answers_initialize(tmp_path):
    import json
    import socket
    import time

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = server_env({"CODECUE_HOME": str(tmp_path / "empty-home")})
    proc = subprocess.Popen([sys.executable, "-m", "codecue_lsp", "--tcp", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=30)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.2)
        with conn:
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                               "params": {"processId": None, "rootUri": None, "capabilities": {}}}).encode()
            conn.sendall(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            data = b""
            while b"inlineCompletionProvider" not in data:
                chunk = conn.recv(65536)
                assert chunk, data
                data += chunk
        assert b'"id": 1' in data or b'"id":1' in data
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert proc.stdout.read() == b""  # nothing on stdout: the protocol goes over the socket


@pytest.mark.parametrize("flag,env,setting", [(None, None, "auto"), ("on", None, "on"), ("off", "on", "off"),
                                              ("auto", "off", "auto"), (None, "off", "off")])
def test_torch_prefill_flag_sets_the_engines_option(monkeypatch, flag, env, setting):
    """`--torch-prefill` (as replay's --compare passes server flags) overrides $CODECUE_TORCH_PREFILL in the engine's
    options (engine/options.py), and the process environment is left as it was."""
    import os

    import codecue_lsp.__main__ as cli
    from engine import options
    from engine.weights import torch_prefill

    if env is None:
        monkeypatch.delenv("CODECUE_TORCH_PREFILL", raising=False)
    else:
        monkeypatch.setenv("CODECUE_TORCH_PREFILL", env)
    monkeypatch.setattr(cli, "check", lambda settings: 0)
    assert cli.main(["--check"] + ([f"--torch-prefill={flag}"] if flag else [])) == 0
    assert os.environ.get("CODECUE_TORCH_PREFILL") == env
    assert options.current().torch_prefill == setting
    assert torch_prefill.wanted(False, setting) is (setting == "on")
    assert torch_prefill.wanted(True, setting) is (setting != "off")


@pytest.mark.parametrize("flag,chunk,code", [(None, None, 0), ("16", 16, 0), ("auto", None, 0), ("lots", None, 2)])
def test_prefill_chunk_flag_sets_the_engines_option(monkeypatch, capsys, flag, chunk, code):
    """`--prefill-chunk` sets EngineOptions.prefill_chunk (engine/weights/llamacpp.prefill_chunk_for); a value that
    is neither a number nor auto is refused with a message, before anything loads."""
    import os

    import codecue_lsp.__main__ as cli
    from engine import options

    monkeypatch.delenv("CODECUE_PREFILL_CHUNK", raising=False)
    monkeypatch.setattr(cli, "check", lambda settings: 0)
    assert cli.main(["--check"] + ([f"--prefill-chunk={flag}"] if flag else [])) == code
    assert "CODECUE_PREFILL_CHUNK" not in os.environ
    if code:
        assert "--prefill-chunk" in capsys.readouterr().err
    else:
        assert options.current().prefill_chunk == chunk
