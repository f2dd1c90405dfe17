"""LSP around the workspace index: the folders from `initialize`, `$/progress` while it is built, and the file
watcher registered with the client where it can watch files (else the index re-checks mtimes on save)."""
from __future__ import annotations

import asyncio
import logging
import uuid

from lsprotocol import types as lsp

from .context.files import EXTENSIONS
from .context.project import uri_to_path

logger = logging.getLogger(__name__)

WATCHER_ID = "codecue-index-watcher"
_KINDS = {lsp.FileChangeType.Created: "created", lsp.FileChangeType.Changed: "changed",
          lsp.FileChangeType.Deleted: "deleted"}


def workspace_roots(params: lsp.InitializeParams) -> list[str]:
    """Absolute folder paths: workspaceFolders, else rootUri, else rootPath; [] for a client that names none
    (then completions work as before, without project context)."""
    uris = [folder.uri for folder in (params.workspace_folders or [])]
    if not uris and params.root_uri:
        uris = [params.root_uri]
    roots = [path for path in (uri_to_path(uri) for uri in uris) if path]
    if not roots and params.root_path:
        roots = [params.root_path]
    return roots


def changed_roots(roots: list[str], event: lsp.WorkspaceFoldersChangeEvent) -> list[str]:
    """The workspace folders after workspace/didChangeWorkspaceFolders (Neovim adds a folder per new project)."""
    removed = {uri_to_path(folder.uri) for folder in event.removed}
    added = [path for path in (uri_to_path(folder.uri) for folder in event.added) if path]
    return [root for root in dict.fromkeys([*roots, *added]) if root not in removed]


INDEX_SETTINGS = ("context", "exclude_globs", "max_indexed_files", "index_cache", "enabled_languages")


def index_settings_changed(old, new) -> bool:
    return any(getattr(old, name) != getattr(new, name) for name in INDEX_SETTINGS)


def watched_changes(params: lsp.DidChangeWatchedFilesParams) -> list[tuple[str, str]]:
    return [(change.uri, _KINDS.get(change.type, "changed")) for change in params.changes]


async def start_index(ls) -> None:
    """Start indexing the workspace in the background, with `$/progress` where the client shows it."""
    loop = asyncio.get_running_loop()
    progress = _progress_reporter(ls, loop) if _client_shows_progress(ls) else None
    open_uris = list(ls.workspace.text_documents)
    if ls.project.start(ls.workspace_roots, ls.settings, open_uris, progress) is None:
        return
    await _watch_files(ls)


def _client_shows_progress(ls) -> bool:
    window = ls.client_capabilities.window
    return bool(window and window.work_done_progress)


def _progress_reporter(ls, loop):
    """progress(kind, done, total) from the index thread, sent on the event loop."""
    token = f"codecue-index-{uuid.uuid4().hex[:8]}"

    async def create() -> None:
        try:
            await ls.work_done_progress.create_async(token)
        except Exception as exc:  # the client refused: index without showing progress
            logger.debug("workDoneProgress/create failed: %s", exc)

    created = asyncio.run_coroutine_threadsafe(create(), loop)

    def send(kind: str, done: int, total: int) -> None:
        if kind == "begin":
            created.result(timeout=5)
            value = lsp.WorkDoneProgressBegin(title="CodeCue: indexing the workspace", cancellable=False,
                                              percentage=0)
            loop.call_soon_threadsafe(ls.work_done_progress.begin, token, value)
        elif kind == "report":
            percentage = int(100 * done / total) if total else 0
            value = lsp.WorkDoneProgressReport(message=f"{done}/{total} files", percentage=percentage)
            loop.call_soon_threadsafe(ls.work_done_progress.report, token, value)
        else:
            loop.call_soon_threadsafe(ls.work_done_progress.end, token, lsp.WorkDoneProgressEnd(message="indexed"))

    def guarded(kind: str, done: int, total: int) -> None:
        try:
            send(kind, done, total)
        except Exception as exc:  # progress is a courtesy: never stop the index for it
            logger.debug("progress %s failed: %s", kind, exc)
    return guarded


async def _watch_files(ls) -> None:
    """Ask the client to watch the indexed languages' files (dynamic registration), where it can."""
    workspace = ls.client_capabilities.workspace
    watch = workspace.did_change_watched_files if workspace else None
    if not (watch and watch.dynamic_registration):
        return
    pattern = "**/*.{" + ",".join(sorted(ext.lstrip(".") for ext in EXTENSIONS)) + "}"
    options = lsp.DidChangeWatchedFilesRegistrationOptions(watchers=[lsp.FileSystemWatcher(glob_pattern=pattern)])
    registration = lsp.Registration(id=WATCHER_ID, method=lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                                    register_options=options)
    try:
        await asyncio.wait_for(ls.client_register_capability_async(
            lsp.RegistrationParams(registrations=[registration])), timeout=5)
        ls.project.watched = True
    except Exception as exc:
        logger.info("the client does not watch files for us (%s): the index re-checks files on save", exc)
