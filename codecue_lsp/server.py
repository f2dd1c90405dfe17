"""The CodeCue language server: pygls handlers that only wire the pieces together.

Custom notifications (client -> server, params are plain objects; all fields optional):
  codecue/didShowCompletion    {uri, length, id}
  codecue/didAcceptCompletion  {uri, length, acceptedLength, id, text, position}   (acceptedLength < length for
                               partial accepts; text: what was accepted, inserted at position {line, character})
  codecue/didRejectCompletion  {uri, length, id}
  id: the client's, one per suggestion shown: shown / accepted / rejected count once per id (telemetry.py); an
  accept with text and position is checked for retention 30 s later (retention.py).
Command: workspace/executeCommand "codecue.stats" -> counters and state (stats.server_stats).
The server holds the backend (backend.CompletionBackend, once loaded: loading.py) and the background work
(background.BackgroundWork); the handlers call them and the modules named in each.
"""
from __future__ import annotations

import asyncio
import logging
import os
import re
import threading
from dataclasses import dataclass
from urllib.parse import unquote

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer

from . import inline, project_wiring, warmup
from .backend import CompletionBackend
from .background import BackgroundWork
from .config import (
    CONFIG_SECTION,
    context_cache_dir,
    MAX_DOCUMENT_CHARS,
    Settings,
    configure_logging,
    quiet_progress_bars,
    quiet_pygls,
    restart_needed,
    workspace_layer,
)
from .context.service import ProjectService
from .documents import use_lsp_lines
from .loading import load_models
from .positions import UNIT_COUNTERS, utf16_units
from .prompt import OpenDocument, SyntaxCache
from .protocol import CodeCueProtocol
from .retention import RetentionChecks
from .scheduler import PromptWorker, Scheduler
from .stats import server_stats
from .telemetry import Telemetry, event_params
from .transport import serve_stdio, serve_tcp
from .typethrough import TypeThroughCache
from .workspace_sync import WorkspaceSync

logger = logging.getLogger(__name__)


def server_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("codecue")
    except metadata.PackageNotFoundError:  # running from a source checkout
        return "0.1.0+source"


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Snapshot:
    uri: str
    language_id: str
    version: int | None
    text: str


class CodeCueServer(LanguageServer):
    def __init__(self, cli_settings: dict | None = None) -> None:
        super().__init__("codecue-lsp", server_version(), protocol_cls=CodeCueProtocol,
                         text_document_sync_kind=lsp.TextDocumentSyncKind.Incremental)
        self.cli_settings = dict(cli_settings or {})  # explicit flags win over editor settings
        self.settings = Settings().merged(self.cli_settings)
        self.scheduler = Scheduler()
        self.typethrough = TypeThroughCache()
        self.background = BackgroundWork(self)  # next line, warm-up at rest, prompt growth
        self.telemetry = Telemetry()
        self.retention = RetentionChecks(self.telemetry, self._open_text)
        self.completer: CompletionBackend | None = None  # set once loaded (loading.py)
        self.pair_min_confidence = 0.0  # the loaded pair's gate threshold (models.toml), minConfidence "auto"
        self.load_error: str | None = None
        self.initialization_options = None
        self.syntax = _new_syntax_cache()
        self.prompt_worker = PromptWorker()  # owns self.syntax: parses and prompt building, off the loop
        self._load_task: asyncio.Task | None = None
        self.workspace_sync = WorkspaceSync(self._indexable_text)
        self.project = ProjectService(context_cache_dir())  # the workspace index (context/service.py)
        self.workspace_roots: list[str] = []  # folders from initialize's workspaceFolders / rootUri
        self.last_prompt: dict | None = None  # what the last prompt held, for codecue.stats

    @property
    def ready(self) -> bool:
        return self.completer is not None

    def min_confidence(self) -> float:
        """The confidence gate's threshold in force: the setting, or with "auto" the loaded pair's."""
        if self.settings.min_confidence is None:
            return self.pair_min_confidence
        return self.settings.min_confidence

    def report_server_error(self, error: Exception, source) -> None:
        # Malformed messages are logged, not shown: a popup per bad message helps nobody.
        logger.error("server error (%s): %s", getattr(source, "__name__", source), error)

    # --- settings ----------------------------------------------------------------------------------------------
    def apply_settings(self, workspace=None) -> None:
        """Defaults, then initializationOptions, the workspace's configuration and the flags (later win)."""
        base = Settings().merged(self.initialization_options)
        trusted = base.merged(self.cli_settings)  # what the workspace's user-only settings must match
        new = base.merged(workspace_layer(workspace, trusted)).merged(self.cli_settings)
        if self.ready and (changed := restart_needed(self.settings, new)):
            logger.warning("settings %s take effect after a restart", ", ".join(changed))
        if new.log_level != self.settings.log_level:
            logging.getLogger().setLevel(new.log_level)
            quiet_pygls(new.log_level)
        self.settings = new

    async def pull_configuration(self) -> dict | None:
        caps = self.client_capabilities.workspace
        if not (caps and caps.configuration):
            return None
        try:
            result = await asyncio.wait_for(self.workspace_configuration_async(
                lsp.ConfigurationParams(items=[lsp.ConfigurationItem(section=CONFIG_SECTION)])), timeout=5)
        except Exception as exc:  # a client that cannot answer must not stop the server
            logger.warning("workspace/configuration failed: %s", exc)
            return None
        return result[0] if result and isinstance(result[0], dict) else None

    # --- documents -----------------------------------------------------------------------------------------------
    def snapshot(self, uri: str) -> Snapshot | None:
        """The open document's current text, or None for a document the client never opened."""
        doc = self.workspace.text_documents.get(unquote(uri)) if isinstance(uri, str) else None
        if doc is None:
            return None
        text = doc.source
        if _LONE_SURROGATE.search(text):  # from "\ud800" escapes in the JSON; same length, so offsets hold
            text = _LONE_SURROGATE.sub("\ufffd", text)
        return Snapshot(uri=doc.uri, language_id=doc.language_id or "", version=doc.version, text=text)

    def _open_text(self, uri: str) -> str | None:
        snap = self.snapshot(uri)
        return snap.text if snap is not None else None

    def current_version(self, uri: str) -> int | None:
        doc = self.workspace.text_documents.get(unquote(uri))
        return doc.version if doc is not None else None

    def update_syntax(self, uri: str):
        """Queue a parse of the document's current text (taken now, on the loop) on the prompt worker."""
        snap = self.snapshot(uri)
        if self.syntax is None or snap is None:
            return None
        return self.prompt_worker.latest_only(snap.uri, self._apply_syntax, snap)

    def _apply_syntax(self, snap: Snapshot) -> None:
        try:
            if len(snap.text) > MAX_DOCUMENT_CHARS:
                self.syntax.close(snap.uri)
            else:
                self.syntax.update(snap.uri, snap.language_id, snap.text)
        except Exception:
            logger.exception("syntax update failed for %s", snap.uri)

    def close_document(self, uri: str) -> None:
        """Forget a closed document everywhere; the slow parts (engine lock, syntax cache) off the loop."""
        self.scheduler.supersede(uri)
        self.scheduler.stop_background(uri)
        self.typethrough.forget(uri)
        self.background.forget(uri)
        self.sync_workspace(uri, closed=True)
        if self.syntax is not None:
            self.prompt_worker.forget(uri)
            self.prompt_worker.run(self.syntax.close, uri)
        if self.completer is not None:
            self.completer.forget(uri)

    async def prepare_prompt(self, ticket, doc, line: int, character_utf16: int):
        """The backend's prepared prompt, built on the prompt worker; None when the ticket was superseded
        before its turn came. Everything the thread reads is taken here: immutable texts, the settings object."""
        settings, others, completer = self.settings, self.other_documents(doc.uri), self.completer
        project = self.project.project_for(doc.uri, settings)

        def build():
            if not ticket.live:
                return None
            prepared = completer.prepare(doc, line, character_utf16, settings, other_docs=others, project=project)
            self.last_prompt = prompt_summary(prepared.built)
            return prepared
        return await self.prompt_worker.call(build)

    def sync_workspace(self, uri: str, closed: bool = False) -> None:
        key = unquote(uri)
        self.workspace_sync.closed(self.completer, key) if closed else self.workspace_sync.changed(self.completer, key)

    def _indexable_text(self, key: str) -> str | None:
        snap = self.snapshot(key)
        return snap.text if snap is not None and len(snap.text) <= MAX_DOCUMENT_CHARS else None

    def other_documents(self, uri: str) -> list:
        """Snapshots of the other open documents (their texts are immutable strings: safe to hand to a thread)."""
        out = []
        for doc in list(self.workspace.text_documents.values()):
            if doc.uri != uri and len(doc.source) <= MAX_DOCUMENT_CHARS:
                out.append(OpenDocument(uri=doc.uri, language_id=doc.language_id or "", text=doc.source))
        return out

    def position_units(self):
        encoding = self.workspace.position_encoding
        return UNIT_COUNTERS.get(getattr(encoding, "value", encoding) or "utf-16", utf16_units)


def prompt_summary(built) -> dict:
    """The last prompt's make-up for codecue.stats: tokens per section and the other files it showed."""
    return {"sections": dict(built.sections), "context_files": list(built.context_files), "kept": built.kept,
            "project": built.project}


def _new_syntax_cache():
    try:
        return SyntaxCache()
    except Exception:  # tree-sitter missing or broken: prompts fall back to line-based rules
        logger.exception("syntax cache unavailable")
        return None


def make_server(cli_settings: dict | None = None) -> CodeCueServer:
    server = CodeCueServer(cli_settings)

    @server.feature(lsp.INITIALIZE)
    def on_initialize(ls: CodeCueServer, params: lsp.InitializeParams) -> None:
        use_lsp_lines(ls.workspace)  # pygls' own line split is not LSP's (documents.py)
        ls.initialization_options = params.initialization_options
        ls.apply_settings()
        ls.workspace_roots = project_wiring.workspace_roots(params)

    @server.feature(lsp.INITIALIZED)
    async def on_initialized(ls: CodeCueServer, params: lsp.InitializedParams) -> None:
        workspace_settings = await ls.pull_configuration()
        ls.apply_settings(workspace_settings)
        ls._load_task = asyncio.ensure_future(load_models(ls))
        await project_wiring.start_index(ls)

    @server.feature(lsp.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def on_configuration(ls: CodeCueServer, params: lsp.DidChangeConfigurationParams) -> None:
        pulled = await ls.pull_configuration()
        before = ls.settings
        ls.apply_settings(pulled if pulled is not None else params.settings)
        if project_wiring.index_settings_changed(before, ls.settings):
            await project_wiring.start_index(ls)  # what is indexed changed: index again (the cache keeps it cheap)

    @server.feature(lsp.TEXT_DOCUMENT_DID_OPEN)
    def on_open(ls: CodeCueServer, params: lsp.DidOpenTextDocumentParams) -> None:
        ls.update_syntax(params.text_document.uri)
        ls.sync_workspace(params.text_document.uri)
        ls.project.viewed(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_CHANGE)
    def on_change(ls: CodeCueServer, params: lsp.DidChangeTextDocumentParams) -> None:
        if ls.scheduler.supersede(params.text_document.uri) is not None:
            ls.telemetry.count("superseded")
        ls.update_syntax(params.text_document.uri)
        ls.sync_workspace(params.text_document.uri)
        ls.project.viewed(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_DID_SAVE, lsp.SaveOptions(include_text=False))
    def on_save(ls: CodeCueServer, params: lsp.DidSaveTextDocumentParams) -> None:
        snap = ls.snapshot(params.text_document.uri)
        ls.project.saved(params.text_document.uri, snap.text if snap is not None else None)

    @server.feature(lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def on_watched_files(ls: CodeCueServer, params: lsp.DidChangeWatchedFilesParams) -> None:
        ls.project.files_changed(project_wiring.watched_changes(params))

    @server.feature(lsp.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    async def on_workspace_folders(ls: CodeCueServer, params: lsp.DidChangeWorkspaceFoldersParams) -> None:
        ls.workspace_roots = project_wiring.changed_roots(ls.workspace_roots, params.event)
        await project_wiring.start_index(ls)  # the cache makes the folders indexed before cheap to take again

    @server.feature(lsp.TEXT_DOCUMENT_DID_CLOSE)
    def on_close(ls: CodeCueServer, params: lsp.DidCloseTextDocumentParams) -> None:
        ls.close_document(params.text_document.uri)

    @server.feature(lsp.TEXT_DOCUMENT_INLINE_COMPLETION, lsp.InlineCompletionOptions())
    async def on_inline_completion(ls: CodeCueServer, params: lsp.InlineCompletionParams):
        return await inline.inline_completion(ls, params)

    @server.feature("codecue/didShowCompletion")
    def on_shown(ls: CodeCueServer, params) -> None:
        ls.telemetry.on_shown(event_params(params))

    @server.feature("codecue/didAcceptCompletion")
    def on_accepted(ls: CodeCueServer, params) -> None:
        event = event_params(params)
        ls.telemetry.on_accepted(event)
        ls.retention.accepted(event)

    @server.feature("codecue/didRejectCompletion")
    def on_rejected(ls: CodeCueServer, params) -> None:
        ls.telemetry.on_rejected(event_params(params))

    @server.feature(warmup.METHOD)
    def on_cursor_moved(ls: CodeCueServer, params) -> None:
        warmup.cursor_moved(ls, params)

    @server.command("codecue.stats")
    def stats(ls: CodeCueServer, *args) -> dict:
        return server_stats(ls)

    @server.feature(lsp.SHUTDOWN)
    def on_shutdown(ls: CodeCueServer, params) -> None:
        ls.background.stop()
        ls.project.shutdown()
        ls.scheduler.cancel_all()
        ls.workspace_sync.shutdown()
        ls.prompt_worker.shutdown()
        if ls.completer is not None:
            ls.completer.close()

    @server.feature(lsp.EXIT)
    def on_exit(ls: CodeCueServer, params) -> None:
        # pygls ends the event loop, then joins its worker threads; the stdin reader can block there until the
        # client closes the pipe, and a client that waits for us to exit first would wait forever. A daemon timer
        # ends the process if the orderly way has not within a few seconds.
        code = 0 if ls.protocol._shutdown else 1
        timer = threading.Timer(EXIT_GRACE_SECONDS, hard_exit, args=(code,))
        timer.daemon = True
        timer.start()

    return server


EXIT_GRACE_SECONDS = 3.0


def hard_exit(code: int) -> None:
    logging.shutdown()
    os._exit(code)


def run(cli_settings: dict, tcp_port: int | None = None) -> None:
    quiet_progress_bars()
    settings = Settings().merged(cli_settings)
    configure_logging(settings.log_level, settings.log_file)

    server = make_server(cli_settings)
    # Our own frame reader (transport.py): pygls' trusts Content-Length and dies or desynchronises on garbage.
    if tcp_port is not None:
        serve_tcp(server, "127.0.0.1", tcp_port)  # loopback only: completions expose the user's code
    else:
        serve_stdio(server)
    # The loop has ended (exit notification, or the client went away). Leave now: interpreter shutdown would join
    # the engine's and pygls's worker threads, and one of those may sit in a blocking read of stdin.
    hard_exit(0 if server.protocol._shutdown else 1)
