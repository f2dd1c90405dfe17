"""Keep the backend's lookup index (the local engine's engine.decode.suffix_index, through update_workspace) in step
with the open documents, off the event loop: a document is sent once the user pauses typing and tokenized on one
worker thread (a large file must not block `$/cancelRequest`), which also keeps a document's updates and its removal
in order. A backend that does not index (indexes_workspace False) gets nothing."""
from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from .backend import CompletionBackend

logger = logging.getLogger(__name__)

DEBOUNCE_S = 0.5


class WorkspaceSync:
    def __init__(self, text_of: Callable[[str], str | None]):
        """text_of(key) -> the document's current text, or None when it is gone or too large to index."""
        self.text_of = text_of
        self.timers: dict[str, asyncio.TimerHandle] = {}
        self.worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="codecue-workspace")

    def changed(self, backend: CompletionBackend | None, key: str) -> None:
        if backend is None or not backend.indexes_workspace:
            return  # not loaded yet (the server sends every open document once it is), or nothing to index
        self._cancel_timer(key)
        self.timers[key] = asyncio.get_running_loop().call_later(DEBOUNCE_S, self._send, backend, key)

    def closed(self, backend: CompletionBackend | None, key: str) -> None:
        self._cancel_timer(key)
        if backend is not None and backend.indexes_workspace:
            self.worker.submit(_logged, backend.update_workspace, key, None)

    def shutdown(self) -> None:
        for key in list(self.timers):
            self._cancel_timer(key)
        self.worker.shutdown(wait=False, cancel_futures=True)

    def _cancel_timer(self, key: str) -> None:
        if (timer := self.timers.pop(key, None)) is not None:
            timer.cancel()

    def _send(self, backend: CompletionBackend, key: str) -> None:
        self.timers.pop(key, None)
        self.worker.submit(_logged, backend.update_workspace, key, self.text_of(key))


def _logged(fn, *args) -> None:
    try:
        fn(*args)
    except Exception:
        logger.exception("workspace update failed")
