"""`codecue-lsp --stdio --engine http://127.0.0.1:PORT/v1` against a real llama-server (the draft GGUF, one thread):
a real completion, one on a document that names every FIM marker (the prompt goes as token ids, so those strings stay
text), and a cancel mid-stream that the engine sees (its slot stops before the generation is done).
Needs the build of scripts/build-llama-cpp.sh: marked `remote`, run by `make test-remote` (never skipped: when the
build is missing these tests fail)."""
from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from lsp_helpers import (
    change_doc,
    complete,
    items_of,
    open_doc,
    running_server,
    wait_for_stats,
)
from test_prompt_injection import EVERY_MARKER, FIB_WITH_MARKERS
from test_remote_endpoints import free_port

from codecue_lsp.prompt.text import split_cursor
from engine.weights.llamacpp_probe import peer_arguments

pytestmark = [pytest.mark.remote, pytest.mark.asyncio(loop_scope="module")]

CACHE = Path(os.environ.get("CODECUE_HOME") or Path.home() / ".cache" / "codecue")
LLAMA_SERVER = CACHE / "llama.cpp" / "build" / "bin" / "llama-server"
GGUF = CACHE / "gguf" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
HANG_GUARD_S = 120  # only a hang guard: one CPU thread on a shared machine may be slow


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    assert LLAMA_SERVER.is_file(), f"{LLAMA_SERVER} missing: run scripts/build-llama-cpp.sh"
    assert GGUF.is_file(), f"{GGUF} missing: run `codecue-models fetch`"
    port = free_port()
    log = tmp_path_factory.mktemp("llama") / "llama-server.log"
    with open(log, "wb") as out:
        # --no-repack where llama.cpp's repacked (AMX) kernels crash on this machine (engine/weights/llamacpp_probe.py)
        proc = subprocess.Popen([str(LLAMA_SERVER), "-m", str(GGUF), "-t", "1", "-c", "2048", "-np", "1", "--slots",
                                 "--host", "127.0.0.1", "--port", str(port), *peer_arguments(GGUF)],
                                stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while True:
            assert proc.poll() is None, log.read_text()[-2000:]
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "llama-server did not come up"
            time.sleep(0.2)
        yield base, log
    finally:
        proc.terminate()
        proc.wait(30)


def slot(base: str) -> dict:
    return httpx.get(f"{base}/slots", timeout=10).json()[0]


@pytest_asyncio.fixture(loop_scope="module")
async def client(llama):
    base, _ = llama
    async with running_server({}, "--engine", f"{base}/v1", init_options={"maxTokens": 1000}) as c:
        await wait_for_stats(c, lambda s: s["ready"])
        yield c


async def test_real_completion_through_llama_server(llama, client):
    uri = "file:///fib.py"
    doc = "def fibonacci(n):\n    if n <= 1:\n        return n\n    "
    open_doc(client, uri, doc)
    items = items_of(await complete(client, uri, 3, 4, timeout=HANG_GUARD_S))
    assert items, "no completion from llama-server"
    assert "fibonacci(n - 1)" in items[0].insert_text.replace("n-1", "n - 1")
    current = await wait_for_stats(client, lambda s: s["backend"]["healthy"] is True)
    assert current["backend"]["kind"] == "remote" and current["backend"]["last_error"] is None


async def test_marker_strings_in_the_document_do_not_derail_the_engine(llama, client):
    """The local engine's injection test (tests/test_prompt_injection.py) on the real engine: the same document, whose
    comments and strings name every marker, still gets the next line of the function. Sent as text, those strings
    would reach the model as control tokens (a second <|fim_prefix|>, an <|endoftext|> in the middle of the prefix)."""
    uri = "file:///markers.py"
    text, line, character = split_cursor(FIB_WITH_MARKERS)
    assert EVERY_MARKER in text
    open_doc(client, uri, text)
    items = items_of(await complete(client, uri, line, character, timeout=HANG_GUARD_S))
    assert items, "no completion from llama-server"
    assert "fibonacci(n - 1)" in items[0].insert_text.replace("n-1", "n - 1"), items[0].insert_text
    assert not any(marker in items[0].insert_text for marker in EVERY_MARKER.split())


async def test_cancel_mid_stream_stops_the_engine_slot(llama, client):
    base, log = llama
    uri = "file:///primes.py"
    # A long list to continue: the model keeps producing numbers, so the generation runs until it is cancelled.
    doc = "# the first 500 prime numbers\nPRIMES = [\n    2, 3, 5, 7, 11, 13,\n    \n]\n"
    open_doc(client, uri, doc)
    request = asyncio.ensure_future(complete(client, uri, 3, 4, timeout=HANG_GUARD_S))
    deadline = time.monotonic() + HANG_GUARD_S
    while not (s := slot(base))["is_processing"] or s["next_token"][0]["n_decoded"] < 5:
        assert not request.done() and time.monotonic() < deadline, f"never saw the slot generate: {s}"
        await asyncio.sleep(0.05)
    task = s["id_task"]
    change_doc(client, uri, 2, "1", start=(3, 4))  # an edit supersedes the request: its token is set
    assert items_of(await request) == []
    while (s := slot(base))["is_processing"] and s["id_task"] == task:
        assert time.monotonic() < deadline, "the slot kept generating after the cancel"
        await asyncio.sleep(0.05)
    # Stopped by the client, not finished: the slot still had tokens to produce, and the server says it cancelled.
    assert s["id_task"] == task and s["next_token"][0]["has_next_token"] is True, s
    assert f"cancel task, id_task = {task}" in log.read_text()
