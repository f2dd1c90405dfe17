"""The editor side of a replay: a pygls LanguageClient connected to a server process over stdio."""
from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import attrs
from lsprotocol import types
from pygls.io_ import run_async
from pygls.lsp.client import LanguageClient
from pygls.protocol import LanguageServerProtocol

CLIENT_CAPABILITIES = types.ClientCapabilities(
    general=types.GeneralClientCapabilities(position_encodings=[types.PositionEncodingKind.Utf16]),
    text_document=types.TextDocumentClientCapabilities(
        synchronization=types.TextDocumentSyncClientCapabilities(),
        inline_completion=types.InlineCompletionClientCapabilities(),
    ),
)


@attrs.define
class RawInlineCompletionResponse:
    """An inlineCompletion response kept as the server's JSON: lsprotocol's item has no place for the fields a
    CodeCue server adds to it (`codecue.confidence`, inline.py), and structuring would drop them."""
    id: Any
    result: Any = None
    jsonrpc: str = "2.0"


class ReplayProtocol(LanguageServerProtocol):
    def get_result_type(self, method: str):
        if method == types.TEXT_DOCUMENT_INLINE_COMPLETION:
            return RawInlineCompletionResponse
        return super().get_result_type(method)


async def start_server(command: list[str], stderr_path: Path) -> tuple[LanguageClient, asyncio.subprocess.Process]:
    """Start `command` and connect a client to its stdio. Its stderr goes to a file, so a chatty server never
    blocks on a full pipe (pygls' own start_io pipes stderr and never reads it)."""
    client = LanguageClient("codecue-replay", "0.1", protocol_cls=ReplayProtocol)
    for method in (types.WINDOW_LOG_MESSAGE, types.WINDOW_SHOW_MESSAGE, "$/logTrace", "telemetry/event"):
        client.feature(method)(lambda *args: None)  # an editor shows these; a replay has no one to show them to
    with open(stderr_path, "wb") as stderr:
        try:
            process = await asyncio.create_subprocess_exec(*command, stdin=asyncio.subprocess.PIPE,
                                                           stdout=asyncio.subprocess.PIPE, stderr=stderr)
        except FileNotFoundError:
            raise SystemExit(f"codecue-replay: server command not found: {command[0]!r}") from None
    client.protocol.set_writer(process.stdin)
    client._server = process  # lets pygls fail pending requests when the process exits
    client._async_tasks.extend([
        asyncio.create_task(run_async(stop_event=client._stop_event, reader=process.stdout,
                                      protocol=client.protocol)),
        asyncio.create_task(client._server_exit()),
    ])
    return client, process


async def initialize(client: LanguageClient, timeout: float) -> types.InitializeResult:
    params = types.InitializeParams(process_id=os.getpid(), root_uri=None, capabilities=CLIENT_CAPABILITIES,
                                    client_info=types.ClientInfo(name="codecue-replay", version="0.1"))
    result = await asyncio.wait_for(client.initialize_async(params), timeout)
    client.initialized(types.InitializedParams())
    return result


def incremental_sync(result: types.InitializeResult) -> bool:
    sync = result.capabilities.text_document_sync
    kind = sync.change if isinstance(sync, types.TextDocumentSyncOptions) else sync
    return kind != types.TextDocumentSyncKind.Full


async def server_stats(client: LanguageClient, timeout: float = 10.0):
    """`workspace/executeCommand codecue.stats` as plain JSON, or {"error": ...} when the server has none."""
    try:
        stats = await asyncio.wait_for(
            client.workspace_execute_command_async(types.ExecuteCommandParams(command="codecue.stats")), timeout)
    except Exception as exc:  # a server without the command still gets a report
        return {"error": f"{type(exc).__name__}: {exc}"}
    if hasattr(stats, "__attrs_attrs__"):
        stats = client.protocol._converter.unstructure(stats)
    return stats


async def wait_until_ready(client: LanguageClient, timeout: float) -> dict | None:
    """A CodeCue server loads its models in the background: wait for `ready` (or `load_error`) in
    codecue.stats so that loading is not timed as latency. Servers without the command are ready at once."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        stats = await server_stats(client)
        if not isinstance(stats, dict) or "ready" not in stats or stats["ready"] or stats.get("load_error"):
            return stats
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"the server was not ready after {timeout:.0f} s: {stats}")
        await asyncio.sleep(0.2)


async def stop_server(client: LanguageClient, process: asyncio.subprocess.Process, timeout: float = 10.0) -> None:
    if process.returncode is None:
        try:
            await asyncio.wait_for(client.shutdown_async(None), timeout)
            client.exit(None)
            await asyncio.wait_for(process.wait(), timeout)
        except (asyncio.TimeoutError, RuntimeError, ConnectionError, OSError):
            pass
    if process.returncode is None:
        process.kill()
        await process.wait()
    try:
        await asyncio.wait_for(client.stop(), timeout)
    except asyncio.TimeoutError:
        pass


def process_tree(pid: int) -> list[int]:
    pids, queue = [], [pid]
    while queue:
        current = queue.pop()
        pids.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                queue += [int(p) for p in task.read_text().split()]
            except OSError:
                pass
    return pids


def _status_mb(pid: int, field: str) -> float | None:
    """Sum of one /proc/<pid>/status memory field (kB) over the server and its children, MB; None off Linux."""
    total, found = 0, False
    for member in process_tree(pid):
        try:
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith(field + ":"):
                    total += int(line.split()[1])
                    found = True
        except OSError:
            continue
    return total / 1024.0 if found else None


def _psutil_rss_mb(pid: int) -> float | None:
    try:
        import psutil
    except ImportError:
        return None
    try:
        return psutil.Process(pid).memory_info().rss / 2**20
    except psutil.Error:
        return None


def peak_rss_mb(pid: int) -> float | None:
    """Peak resident memory of the server and its children (VmHWM), MB; psutil's current RSS off Linux."""
    peak = _status_mb(pid, "VmHWM")
    return peak if peak is not None else _psutil_rss_mb(pid)


def rss_mb(pid: int) -> float | None:
    """Resident memory of the server and its children now (VmRSS), MB."""
    now = _status_mb(pid, "VmRSS")
    return now if now is not None else _psutil_rss_mb(pid)
