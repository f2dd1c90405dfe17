"""A stand-in CodeCue server with a fixed answer, for developing and testing the editor clients.

It speaks the same protocol as `codecue-lsp` (inlineCompletion, the codecue/* notifications, `codecue.stats`)
but always suggests FAKE_COMPLETION (default `print("hello")`) after an optional FAKE_DELAY_MS, so client tests can
assert exact text. The real server is used by the end-to-end tests; this one keeps the client logic tests exact.
A request the user invoked (context.triggerKind 1: trigger key, cycling) also gets the FAKE_ALTERNATIVES items
("|"-separated), as codecue-lsp answers up to three then. `codecue.stats` also lists the trigger kinds asked
(`trigger_kinds`), the codecue/did*Completion notifications as received (`events`: method and params), the
codecue/didMoveCursor params it got (`cursor_moves`), what initialize carried (`initialize`: rootUri,
workspaceFolders, initializationOptions), the workspace folders now (`folders`), and the settings it was sent (`configuration`: each didChangeConfiguration's `notified`, each workspace/configuration
answer for "codecue" `pulled`, asked after initialized and after each didChangeConfiguration, as codecue-lsp asks).

    python fake_server.py            # stdio (a trailing --stdio is accepted, as clients append it)
"""
from __future__ import annotations

import asyncio
import os

from lsprotocol import types
from pygls.lsp.server import LanguageServer

server = LanguageServer("codecue-fake", "0")
counters = {"requests": 0, "cancelled": 0, "shown": 0, "accepted": 0, "rejected": 0, "accepted_chars": 0}
cursor_moves: list[dict] = []  # codecue/didMoveCursor params as received, for the clients' tests to check
initialized: dict = {}  # what the client's initialize carried, for the clients' tests to check
configuration: dict = {"notified": [], "pulled": []}  # the settings the client sent, for the clients' tests
trigger_kinds: list[int | None] = []  # context.triggerKind of each inlineCompletion request
events: list[dict] = []  # {"method", "params"} of each codecue/did*Completion notification


@server.feature(types.INITIALIZE)
def initialize(ls: LanguageServer, params: types.InitializeParams):
    folders = [{"uri": f.uri, "name": f.name} for f in params.workspace_folders or []]
    initialized.update(rootUri=params.root_uri, workspaceFolders=folders,
                       initializationOptions=params.initialization_options)


async def pull_configuration(ls: LanguageServer) -> None:
    caps = ls.client_capabilities.workspace
    if caps and caps.configuration:
        answer = await ls.workspace_configuration_async(
            types.ConfigurationParams(items=[types.ConfigurationItem(section="codecue")]))
        configuration["pulled"].append(answer[0] if answer else None)


@server.feature(types.INITIALIZED)
async def on_initialized(ls: LanguageServer, params: types.InitializedParams):
    await pull_configuration(ls)


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
async def on_configuration(ls: LanguageServer, params: types.DidChangeConfigurationParams):
    configuration["notified"].append(params.settings)
    await pull_configuration(ls)


def completion_text() -> str:
    return os.environ.get("FAKE_COMPLETION", 'print("hello")').replace("\\n", "\n")


def alternatives() -> list[str]:
    given = os.environ.get("FAKE_ALTERNATIVES", "")
    return [text.replace("\\n", "\n") for text in given.split("|")] if given else []


@server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
async def inline_completion(ls: LanguageServer, params: types.InlineCompletionParams):
    counters["requests"] += 1
    kind = params.context.trigger_kind if params.context else None
    trigger_kinds.append(int(kind) if kind is not None else None)
    try:
        await asyncio.sleep(int(os.environ.get("FAKE_DELAY_MS", "0")) / 1000)
    except asyncio.CancelledError:
        counters["cancelled"] += 1
        raise
    pos = params.position
    line = ls.workspace.get_text_document(params.text_document.uri).lines[pos.line:pos.line + 1]
    line_end = len(line[0].rstrip("\r\n")) if line else pos.character
    # The item replaces the rest of the line, as the real server does when completing mid-line.
    end = types.Position(pos.line, max(pos.character, line_end))
    texts = [completion_text()] + (alternatives() if kind == types.InlineCompletionTriggerKind.Invoked else [])
    items = [types.InlineCompletionItem(insert_text=text, range=types.Range(pos, end)) for text in texts]
    return types.InlineCompletionList(items=items)


def plain(value):
    """pygls hands a notification it has no type for over as nested namedtuples: back to plain JSON values."""
    if hasattr(value, "_asdict"):
        value = value._asdict()
    if isinstance(value, dict):
        return {key: plain(v) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def record(method: str, params) -> None:
    events.append({"method": method, "params": plain(params)})


@server.feature("codecue/didShowCompletion")
def did_show(ls, params):
    record("codecue/didShowCompletion", params)
    counters["shown"] += 1


@server.feature("codecue/didAcceptCompletion")
def did_accept(ls, params):
    record("codecue/didAcceptCompletion", params)
    counters["accepted"] += 1
    counters["accepted_chars"] += int(getattr(params, "acceptedLength", 0) or 0)


@server.feature("codecue/didRejectCompletion")
def did_reject(ls, params):
    record("codecue/didRejectCompletion", params)
    counters["rejected"] += 1


@server.feature("codecue/didMoveCursor")
def did_move_cursor(ls, params):
    document, position = params.textDocument, params.position
    cursor_moves.append({"uri": document.uri, "version": getattr(document, "version", None),
                         "line": position.line, "character": position.character})


@server.command("codecue.stats")
def stats(ls, *args):
    return {**counters, "cursor_moves": list(cursor_moves), "trigger_kinds": list(trigger_kinds), "events": events, "initialize": initialized, "configuration": configuration,
            "folders": sorted(f.uri for f in ls.workspace.folders.values())}


if __name__ == "__main__":
    server.start_io()
