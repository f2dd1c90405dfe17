"""Several suggestions for a request the user made (triggerKind Invoked: a manual trigger, or the editor asking for
more to cycle through): the answer an automatic request gets first, then up to ALTERNATIVES others, each started
from the target's next-best first token at the cursor and continued greedily, with the same stop rules and
post-processing (engine CompletionRequest.first_rank). Written only when asked for, after the first suggestion, one
at a time on the engine, each stopped by the request's CancelToken like any request.
"""
from __future__ import annotations

from dataclasses import dataclass

from .prompt import OpenDocument
from .scheduler import await_engine
from .telemetry import count_engine_results

ALTERNATIVES = 2  # what VS Code and Neovim cycle through: three in all
# The most first-token ranks tried for them: a rank whose suggestion is empty, whitespace or the same as one already
# found is skipped, and each try costs a short completion on the engine.
MOST_RANKS = 4


@dataclass(frozen=True)
class Suggestion:
    text: str
    confidence: float | None = None  # confidence.py; None where not known (type-through, a backend without them)


def distinct(suggestions: list[Suggestion]) -> list[Suggestion]:
    """The suggestions with code, each text once, in order."""
    seen: set[str] = set()
    out = []
    for suggestion in suggestions:
        if suggestion.text.strip() and suggestion.text not in seen:
            seen.add(suggestion.text)
            out.append(suggestion)
    return out


async def write_alternatives(ls, ticket, snap, cursor, character_utf16: int, prepared, first: Suggestion,
                             stale) -> list[Suggestion] | None:
    """Up to ALTERNATIVES suggestions other than `first`; None when the request went stale meanwhile (`stale()`: an
    edit, a newer request or a cancel), [] when the backend writes none. `prepared`: the prompt `first` was written
    from, or None (it came from the type-through cache): then the prompt is built here and its greedy answer (rank
    0) is tried too, as it may differ from a suggestion typed into."""
    backend = ls.completer
    if backend is None or not backend.supports_alternatives:
        return []
    ranks = range(1, MOST_RANKS + 1)
    if prepared is None:
        ls.scheduler.stop_background()  # the engine is needed now
        doc = OpenDocument(uri=snap.uri, language_id=snap.language_id, text=snap.text)
        prepared = await ls.prepare_prompt(ticket, doc, cursor.line, character_utf16)
        if prepared is None or stale():
            return None
        ranks = range(0, MOST_RANKS + 1)
    found: list[Suggestion] = []
    for rank in ranks:
        future = backend.alternative(prepared, rank, ticket.token)
        count_engine_results(future, ls.telemetry)
        completion = await await_engine(future, ticket.token)
        if stale():
            return None
        if completion.outcome != "completed":
            break  # the backend failed: the first suggestion still stands
        text = backend.finish(prepared, completion)
        found = distinct([first, *found, Suggestion(text, completion.confidence)])[1:]
        if len(found) == ALTERNATIVES:
            break
    return found
