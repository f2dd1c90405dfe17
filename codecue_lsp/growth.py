"""A prompt nothing is cached for starts small; the full-size one is made ready while the user pauses.

A prompt the engine has not seen (a file just opened, a jump elsewhere in it) costs its whole length in prefill
before the first token: ~21 s for the 1,024 tokens "auto" gives on 2 AVX2-only Zen 3 cores (49 tok/s), and every
keystroke of that time goes unanswered. So the completer chooses such a layout at the cold start's size
(`coldPromptTokens`, prompt/sizing.py: ~12 s of prefill, 512 tokens there) and answers from it. After that answer,
this module builds the full-size prompt for the same cursor and prefills it into the engine's spare cache for the
document (Engine.prefill_spare), as background work: any request that needs the engine stops it (the chunks done
stay in the spare, and the next pause goes on from there; its layout is kept while it holds, like any layout). Once
the spare holds all of it, the document takes it over (Completer.take_growth): the next keystroke's prompt has the
full size and finds it computed. Local engine only.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from .completer import ready_tokens
from .scheduler import await_engine, run_background

logger = logging.getLogger(__name__)

# How long after an answer the growth waits before it builds its prompt and takes the engine: while the user types
# on, the next keystroke usually comes sooner (a 50-70 wpm trace: 89 % of its gaps are under 0.3 s), and a growth
# started then would only hold up that keystroke's prompt on the prompt thread and have its prefill aborted.
START_DELAY_S = 0.3


@dataclass(frozen=True)
class GrowthPlan:
    """Where the full-size prompt is wanted: the document and cursor of the answer given from the small one."""
    uri: str
    version: int | None
    language_id: str
    text: str
    line: int
    character_utf16: int


def plan_growth(snap, line: int, character_utf16: int, prepared) -> GrowthPlan | None:
    """A plan when the answer just given came from a cold start's smaller layout."""
    if not getattr(prepared, "grows", False):
        return None
    return GrowthPlan(snap.uri, snap.version, snap.language_id, snap.text, line, character_utf16)


def start_growth(ls) -> None:
    """Start the pending growth as background work, unless other work runs (a request goes first, the next line
    too: it is wanted sooner) or it is turned off."""
    plan = ls.pending_growth
    if plan is None or ls.settings.engine != "local" or not ls.ready or ls.snapshot(plan.uri) is None:
        return
    if ls.scheduler.background is not None:
        return  # a next line being written (wanted sooner), or this growth already
    if (ticket := ls.scheduler.begin_background(plan.uri, plan.version, ("growth", plan.uri))) is None:
        return
    run_background(ls, ticket, _grow(ls, plan, ticket), f"growing the prompt of {plan.uri}")


async def _grow(ls, plan: GrowthPlan, ticket) -> None:
    from .prompt import OpenDocument

    await asyncio.sleep(START_DELAY_S)
    if not ticket.live:
        return
    ls.telemetry.count("growth_started")
    doc = OpenDocument(uri=plan.uri, language_id=plan.language_id, text=plan.text)
    settings, others, completer = ls.settings, ls.other_documents(plan.uri), ls.completer

    def build():
        if not ticket.live:
            return None
        return completer.prepare_growth(doc, plan.line, plan.character_utf16, settings, other_docs=others)
    prepared = await ls.prompt_worker.call(build)
    if prepared is None:
        if ticket.live and ls.pending_growth is plan:
            ls.pending_growth = None  # the document's layout is full-size already
        return
    if not ticket.live:
        return
    held = await await_engine(completer.grow(prepared, ticket.token), ticket.token)
    if not ticket.live or held < ready_tokens(prepared):
        return
    await ls.prompt_worker.call(completer.take_growth, prepared)
    if ls.pending_growth is plan:
        ls.pending_growth = None
    ls.telemetry.count("growth_taken")
    logger.info("%s: the full-size prompt (%d tokens) is ready", plan.uri, len(prepared.request.prompt_ids))
