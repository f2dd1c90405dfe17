"""A prompt nothing is cached for starts small; the full-size one is made ready while the user pauses.

A prompt the engine has not seen (a file just opened, a jump elsewhere in it) costs its whole length in prefill
before the first token, and on a slow CPU every keystroke of that time goes unanswered (prefill rates per machine:
docs/performance.md). So the completer chooses such a layout at the cold start's size (`coldPromptTokens`,
prompt/sizing.py: a few seconds of prefill) and answers from it. After that answer, this module builds the full-size
prompt for the same cursor and prefills it into the engine's spare cache for the document (Engine.prefill_spare),
as background work (background.py): any request that needs the engine stops it (the chunks done stay in the spare,
and the next pause goes on from there; its layout is kept while it holds, like any layout). Once the spare holds
all of it, the document takes it over (take_growth): the next keystroke's prompt has the full size and finds it
computed. Only a backend that supports_prefill grows prompts.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from .prompt import OpenDocument
from .scheduler import await_engine

logger = logging.getLogger(__name__)

# How long after an answer the growth waits before it builds its prompt and takes the engine: while the user types
# on, the next keystroke usually comes sooner (most gaps between keystrokes are shorter), and a growth started then
# would only hold up that keystroke's prompt on the prompt thread and have its prefill aborted.
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
    """A plan when the answer just given came from a cold start's smaller layout, or from a prompt with project
    context (a fresh ranking may change it: prepare_growth decides)."""
    if not (prepared.grows or prepared.reranks):
        return None
    return GrowthPlan(snap.uri, snap.version, snap.language_id, snap.text, line, character_utf16)


def start_growth(ls, plan: GrowthPlan | None) -> None:
    """Start the pending growth as background work, unless other work runs (a request goes first, the next line
    too: it is wanted sooner) or the backend cannot."""
    if plan is None or not ls.ready or not ls.completer.supports_prefill or ls.snapshot(plan.uri) is None:
        return
    if ls.scheduler.background is not None:
        return  # a next line being written (wanted sooner), or this growth already
    if (ticket := ls.scheduler.begin_background(plan.uri, plan.version, ("growth", plan.uri))) is None:
        return
    ls.background.run(ticket, _grow(ls, plan, ticket), f"growing the prompt of {plan.uri}")


async def _grow(ls, plan: GrowthPlan, ticket) -> None:
    await asyncio.sleep(START_DELAY_S)
    if not ticket.live:
        return
    ls.telemetry.count("growth_started")
    doc = OpenDocument(uri=plan.uri, language_id=plan.language_id, text=plan.text)
    settings, others, completer = ls.settings, ls.other_documents(plan.uri), ls.completer
    project = ls.project.project_for(plan.uri, settings)

    def build():
        if not ticket.live:
            return None
        return completer.prepare_growth(doc, plan.line, plan.character_utf16, settings, other_docs=others,
                                        project=project)
    prepared = await ls.prompt_worker.call(build)
    if prepared is None:
        if ticket.live:
            ls.background.growth_done(plan)  # the document's layout is full-size already
        return
    if not ticket.live:
        return
    held = await await_engine(completer.grow(prepared, ticket.token), ticket.token)
    if not ticket.live or held < prepared.ready_tokens:
        return
    await ls.prompt_worker.call(completer.take_growth, prepared)
    ls.background.growth_done(plan)
    ls.telemetry.count("growth_taken")
    logger.info("%s: the full-size prompt (%d tokens) is ready", plan.uri, prepared.ready_tokens + 1)
