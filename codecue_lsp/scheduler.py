"""Per-document request scheduling: at most one completion in flight per document; prompts built off the loop.

A newer request or an edit of the same document supersedes the older request: its CancelToken is set (the engine
stops within one speculative step) and its handler answers an empty list instead of stale text. Background work
(the next line, next_line.py; a full-size prompt, growth.py; the prompt at a resting cursor, warmup.py) goes on
through edits and type-through answers, and stops for any request that needs the engine.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from engine.types import CancelToken

logger = logging.getLogger(__name__)


@dataclass
class Ticket:
    """One inlineCompletion request for one document version."""
    uri: str
    version: int | None
    number: int
    token: CancelToken = field(default_factory=CancelToken)
    superseded: bool = False

    @property
    def live(self) -> bool:
        return not self.superseded and not self.token.is_set()


class Scheduler:
    """Requests in flight, one per document, and at most one piece of background work (next_line.py's next line,
    growth.py's full-size prompt or warmup.py's prompt at the resting cursor), which no edit stops, only a request
    that needs the engine (stop_background)."""

    def __init__(self) -> None:
        self._in_flight: dict[str, Ticket] = {}
        self._numbers = itertools.count(1)
        self.background: Ticket | None = None
        self._background_key = None

    def begin(self, uri: str, version: int | None) -> tuple[Ticket, Ticket | None]:
        """Start a request; returns (its ticket, the older ticket it superseded or None)."""
        older = self.supersede(uri)
        ticket = Ticket(uri=uri, version=version, number=next(self._numbers))
        self._in_flight[uri] = ticket
        return ticket, older

    def supersede(self, uri: str) -> Ticket | None:
        """Cancel the in-flight request of `uri` (a newer request or an edit arrived). Returns it, if any."""
        older = self._in_flight.pop(uri, None)
        if older is None:
            return None
        older.superseded = True
        older.token.set()
        return older

    def begin_background(self, uri: str, version: int | None, key) -> Ticket | None:
        """Start work nobody waits for, in place of any other; None while any request is in flight (the engine
        is shared: it goes first) or the same work (same `key`) is already running."""
        if self._in_flight:
            return None
        if self.background is not None and self.background.live and self._background_key == key:
            return None
        self.stop_background()
        self.background = Ticket(uri=uri, version=version, number=next(self._numbers))
        self._background_key = key
        return self.background

    @property
    def background_kind(self) -> str | None:
        """What the running background work is: its key's first item ("next_line", "growth", "warmup"), or None."""
        key = self._background_key if self.background is not None else None
        return key[0] if isinstance(key, tuple) and key else None

    def stop_background(self, uri: str | None = None) -> None:
        """Stop the background work (only if it is `uri`'s, when given): a request needs the engine."""
        work = self.background
        if work is not None and (uri is None or work.uri == uri):
            work.superseded = True
            work.token.set()
            self.background = None

    def finish(self, ticket: Ticket) -> None:
        if self._in_flight.get(ticket.uri) is ticket:
            del self._in_flight[ticket.uri]
        if self.background is ticket:
            self.background = None

    def in_flight(self, uri: str) -> Ticket | None:
        return self._in_flight.get(uri)

    def cancel_all(self) -> None:
        for uri in list(self._in_flight):
            self.supersede(uri)
        self.stop_background()


async def debounce(ticket: Ticket, seconds: float) -> bool:
    """Wait `seconds` (typing pauses); True when the request is still worth answering."""
    if seconds > 0:
        await asyncio.sleep(seconds)
    return ticket.live


async def await_engine(future: concurrent.futures.Future, token: CancelToken):
    """Await an engine future from the event loop. `$/cancelRequest` cancels the handler's task: the
    CancelledError arrives here, so stop the engine via the token and let pygls answer -32800."""
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        token.set()
        raise


class PromptWorker:
    """The one thread that runs tree-sitter parses and prompt building, off the event loop (a large file takes
    tens of milliseconds, which would hold up `$/cancelRequest` and edits). First in first out: a prompt is built
    after the syntax updates of the edits before it, and whatever it touches (the syntax cache) is only touched
    here."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="codecue-prompt")
        self._latest: dict[str, object] = {}  # key -> newest value queued by `latest_only`, until it has run
        self._lock = threading.Lock()

    async def call(self, fn, *args):
        """fn(*args) on the worker, awaited; a cancelled caller drops it if it has not started yet."""
        return await asyncio.wrap_future(self._pool.submit(fn, *args))

    def run(self, fn, *args) -> concurrent.futures.Future | None:
        """fn(*args) on the worker, errors logged; None once shut down."""
        try:
            return self._pool.submit(_logged, fn, *args)
        except RuntimeError:  # shut down: the server is exiting
            return None

    def latest_only(self, key: str, fn, value) -> concurrent.futures.Future | None:
        """fn(value) on the worker, skipped if a newer value for `key` was queued meanwhile (during a burst of
        keystrokes only the last text needs parsing) or `forget(key)` was called."""
        with self._lock:
            self._latest[key] = value

        def if_latest() -> None:
            with self._lock:
                if self._latest.get(key) is not value:
                    return
                del self._latest[key]
            fn(value)
        return self.run(if_latest)

    def forget(self, key: str) -> None:
        with self._lock:
            self._latest.pop(key, None)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _logged(fn, *args):
    try:
        return fn(*args)
    except Exception:
        logger.exception("%s failed", getattr(fn, "__name__", fn))
