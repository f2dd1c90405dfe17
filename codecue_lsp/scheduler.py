"""Per-document request scheduling: at most one completion in flight per document.

A newer request or an edit of the same document supersedes the older request: its CancelToken is set (the engine
stops within one speculative step) and its handler answers an empty list instead of stale text.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
from dataclasses import dataclass, field

from engine.types import CancelToken


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
    def __init__(self) -> None:
        self._in_flight: dict[str, Ticket] = {}
        self._numbers = itertools.count(1)

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

    def finish(self, ticket: Ticket) -> None:
        if self._in_flight.get(ticket.uri) is ticket:
            del self._in_flight[ticket.uri]

    def in_flight(self, uri: str) -> Ticket | None:
        return self._in_flight.get(uri)

    def cancel_all(self) -> None:
        for uri in list(self._in_flight):
            self.supersede(uri)


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
