"""Loading the backend behind the server (the local model pair, or a remote endpoint's template and tokenizer): in
its own thread, with progress, and a message that names the fix."""
from __future__ import annotations

import asyncio
import logging
import uuid
from concurrent.futures import ThreadPoolExecutor

from lsprotocol import types as lsp

from engine.store.config import load_config, ModelsError

from .backend import CompletionBackend
from .config import Settings
from .remote import build_remote_completer

logger = logging.getLogger(__name__)

LOADER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="codecue-load")
PROGRESS_CREATE_TIMEOUT_S = 30  # the editor's answer to window/workDoneProgress/create; the load goes on meanwhile


async def load_models(ls) -> None:
    """Load the pair in a thread, showing progress; on failure tell the user how to fix it and keep serving."""

    settings = ls.settings
    token = f"codecue-load-{uuid.uuid4().hex[:8]}"
    # Not the loop's default executor: asyncio.run waits for that one at exit, and a client that leaves while the
    # weights load would wait for the whole load.
    loading = asyncio.get_running_loop().run_in_executor(LOADER, build_completer, settings, ls.syntax)
    # Asked while the pair loads: a busy editor may answer late, and without this progress its status never says ready.
    progress = await _create_progress(ls, token)
    if progress:
        ls.work_done_progress.begin(token, lsp.WorkDoneProgressBegin(
            title="CodeCue", message=f"loading model pair {settings.pair}", percentage=0))
    try:
        completer = await loading
    except Exception as exc:
        if isinstance(exc, ModelsError):
            message = f"CodeCue: {exc}"
        else:
            logger.exception("loading the model pair failed")
            message = (f"CodeCue could not load model pair {settings.pair!r} ({exc}). "
                       f"Run `codecue-models fetch` (or `codecue-models verify`) and restart.")
        if "codecue-models fetch" not in message:
            message += " Run `codecue-models fetch` and restart."
        ls.load_error = message
        logger.error("%s", message)
        ls.window_show_message(lsp.ShowMessageParams(type=lsp.MessageType.Error, message=message))
        if progress:
            ls.work_done_progress.end(token, lsp.WorkDoneProgressEnd(message="model loading failed"))
        return
    loop = asyncio.get_running_loop()

    def show(message: str) -> None:  # called from the backend's thread, once per outage
        loop.call_soon_threadsafe(ls.window_show_message,
                                  lsp.ShowMessageParams(type=lsp.MessageType.Error, message=message))
    completer.watch_health(show)
    # The pair's threshold was measured on its own target; a remote engine may serve another model.
    ls.pair_min_confidence = pair_min_confidence(settings.pair) if settings.engine == "local" else 0.0
    ls.completer = completer
    logger.info("model pair %s ready (engine %s)", settings.pair, settings.engine)
    for uri in list(ls.workspace.text_documents):
        ls.sync_workspace(uri)
    ls.background.start_idle()  # a cursor that came to rest while the pair loaded
    if progress:
        ls.work_done_progress.report(token, lsp.WorkDoneProgressReport(message="ready", percentage=100))
        ls.work_done_progress.end(token, lsp.WorkDoneProgressEnd(message=f"model pair {settings.pair} ready"))


def pair_min_confidence(pair: str) -> float:
    """The pair's gate threshold in models.toml: what minConfidence "auto" means (0 where it names none)."""
    try:
        return load_config().pair(pair).min_confidence
    except ModelsError:
        return 0.0


def build_completer(settings: Settings, syntax=None) -> CompletionBackend:
    """The backend the settings name: "local" loads the pair into an Engine, a URL a remote endpoint."""
    if settings.engine != "local":
        return build_remote_completer(settings, syntax)
    # torch and the engine load here, on the loading thread: the server answers `initialize` without waiting for them
    from engine.engine import Engine
    from engine.loading.pair import load_pair

    from .completer import Completer

    pair = load_pair(settings.pair, device=settings.device, dtype=settings.dtype)
    engine = Engine(pair)
    if settings.middle_from == "line":
        engine.prepare_healing()
    return Completer(engine, syntax=syntax)


async def _create_progress(ls, token: str) -> bool:
    window = ls.client_capabilities.window
    if not (window and window.work_done_progress):
        return False
    try:
        await asyncio.wait_for(ls.work_done_progress.create_async(token), timeout=PROGRESS_CREATE_TIMEOUT_S)
        return True
    except Exception as exc:
        logger.warning("window/workDoneProgress/create failed: %s", exc)
        return False
