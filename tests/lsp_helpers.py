"""Start the real `codecue-lsp` subprocess under pytest-lsp and drive it (shared by tests/test_server_*.py)."""
from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path

from codecue_bench.lsp_session import running
from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, client_capabilities

REPO = Path(__file__).resolve().parents[1]


def server_env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


@asynccontextmanager
async def running_server(env: dict[str, str], *args: str, init_options: dict | None = None,
                         capabilities: str = "visual-studio-code", root: Path | None = None):
    """An initialized client talking to `python -m codecue_lsp --stdio ARGS`; shut down cleanly afterwards.
    root: the workspace folder (rootUri and workspaceFolders); None sends neither, so no index is built."""
    config = ClientServerConfig(server_command=[sys.executable, "-m", "codecue_lsp", "--stdio", *args],
                                server_env=server_env(env))
    async with running(config) as client:
        client.initialize_result = await client.initialize_session(lsp.InitializeParams(
            capabilities=client_capabilities(capabilities), initialization_options=init_options,
            root_uri=root.as_uri() if root else None,
            workspace_folders=[lsp.WorkspaceFolder(uri=root.as_uri(), name=root.name)] if root else None))
        yield client


async def stats(client) -> dict:
    return await asyncio.wait_for(
        client.workspace_execute_command_async(lsp.ExecuteCommandParams(command="codecue.stats")), 60)


async def wait_until_loaded(client, timeout: float = 120.0) -> dict:
    """Poll codecue.stats until the pair is ready or failed to load."""
    deadline = time.monotonic() + timeout
    while True:
        current = await stats(client)
        if current["ready"] or current["load_error"]:
            return current
        if time.monotonic() > deadline:
            raise TimeoutError(f"model pair not loaded after {timeout} s: {current}")
        await asyncio.sleep(0.1)


async def wait_for_stats(client, predicate, what: str = "the condition", timeout: float = 60.0) -> dict:
    """Poll codecue.stats until predicate(stats) holds: waits on the server's state, not on a clock. `timeout` is
    only a hang guard (generous: a loaded machine may take long, a broken server never gets there)."""
    deadline = time.monotonic() + timeout
    while not predicate(current := await stats(client)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the server's stats never met {what} within {timeout} s: {current}")
        await asyncio.sleep(0.02)
    return current


async def configure(client, settings: dict, section: str = "codecue", timeout: float = 30.0) -> None:
    """Change the client's settings and return once the server runs with them. The server pulls them
    (workspace/configuration) on didChangeConfiguration. Once the client has answered, the answer reaches the
    server's handler in three turns of its event loop (concurrent future, asyncio future, the handler's task),
    and each request round trip takes at least one turn: after three, the settings are applied."""
    pulled = asyncio.Event()
    get_configuration = client.get_configuration

    def answering(*args, **kwargs):
        pulled.set()
        return get_configuration(*args, **kwargs)

    client.get_configuration = answering  # pytest-lsp's workspace/configuration handler calls it
    try:
        client.set_configuration(settings, section=section)
        client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(settings=None))
        await asyncio.wait_for(pulled.wait(), timeout)
    finally:
        del client.get_configuration
    for _ in range(3):
        await stats(client)


def open_doc(client, uri: str, text: str, language: str = "python", version: int = 1) -> None:
    client.text_document_did_open(lsp.DidOpenTextDocumentParams(
        text_document=lsp.TextDocumentItem(uri=uri, language_id=language, version=version, text=text)))


def change_doc(client, uri: str, version: int, text: str, start: tuple[int, int] | None = None,
               end: tuple[int, int] | None = None) -> None:
    """Incremental change (replace [start, end) with text), or a full change when start is None."""
    if start is None:
        change = lsp.TextDocumentContentChangeWholeDocument(text=text)
    else:
        change = lsp.TextDocumentContentChangePartial(
            range=lsp.Range(start=lsp.Position(*start), end=lsp.Position(*(end or start))), text=text)
    client.text_document_did_change(lsp.DidChangeTextDocumentParams(
        text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version), content_changes=[change]))


def completion_params(uri: str, line: int, character: int) -> lsp.InlineCompletionParams:
    return lsp.InlineCompletionParams(
        text_document=lsp.TextDocumentIdentifier(uri=uri), position=lsp.Position(line=line, character=character),
        context=lsp.InlineCompletionContext(trigger_kind=lsp.InlineCompletionTriggerKind.Automatic))


async def complete(client, uri: str, line: int, character: int, timeout: float = 300.0):
    """The server's answer; a server that does not answer within `timeout` (only a hang guard: a real model on a
    busy CPU may take long) fails the test."""
    return await asyncio.wait_for(
        client.text_document_inline_completion_async(completion_params(uri, line, character)), timeout)


def items_of(result) -> list:
    if result is None:
        return []
    return list(result.items if hasattr(result, "items") else result)


_raw_ids = iter(range(10_000, 1_000_000))


async def raw_request(client, method: str, params, timeout: float = 30.0):
    """Send a request exactly as given (possibly invalid for the protocol); returns (result, error) as sent.
    No answer within `timeout` raises TimeoutError: a hung server must fail a test, not pass as an "error"."""
    msg_id = next(_raw_ids)
    future = asyncio.get_running_loop().create_future()
    client.protocol._request_futures[msg_id] = future  # pygls resolves it when the response arrives
    send_raw(client, json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}).encode())
    try:
        return await asyncio.wait_for(future, timeout), None
    except JsonRpcException as exc:  # pygls raises the error response as an exception
        return None, exc
    except TimeoutError:
        raise TimeoutError(f"no response to {method} (id {msg_id}) within {timeout} s: the server hangs") from None
    finally:
        client.protocol._request_futures.pop(msg_id, None)


def send_raw(client, body: bytes) -> None:
    """Write one framed message with an arbitrary body (e.g. bytes that are not UTF-8)."""
    client.protocol.writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
