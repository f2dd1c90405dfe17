"""Document snapshot + cursor -> prompt -> engine request -> post-processed completion text.

Test knob: CODECUE_TEST_STEP_DELAY_MS=N makes every engine step at least N ms slower (the delay runs on the engine
worker between steps, so a cancel is still seen within one step). It exists so that end-to-end tests can observe
cancellation and supersession with the (very fast) tiny model; it is never set in normal use.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from engine.types import CancelToken, CompletionRequest, CompletionResult

from .config import Settings
from .postprocess import make_stop_predicate, postprocess
from .prompt import Layouts, OpenDocument, SyntaxCache, budget_for, build_prompt
from .prompt.sizing import prompt_total, total_for_prefill_rate

logger = logging.getLogger(__name__)

STEP_DELAY_ENV = "CODECUE_TEST_STEP_DELAY_MS"



def encode_built(engine, built) -> tuple[list[int], bytes]:
    """A built prompt's ids and, when it ends in the cursor line's typed text (middle_from "line"), the healed
    bytes for CompletionRequest.heal: the model re-chooses that text's last token (engine/healing.py)."""
    ids = engine.encode_prompt(built.pieces)
    return engine.heal_prompt(ids) if built.middle else (ids, b"")


def shared_prefix_length(engine, ids: list[int], middle_from: str) -> int:
    """Prompt tokens the next keystroke's request will likely share. With the typed line after the FIM middle marker
    (middle_from "line"), all of them: a keystroke on the line usually changes only the word being typed, at the
    prompt's end, whose last token healing has already left out (encode_built), and the engine prefills all but the
    prompt's last token. When the next request does not share a pass after all (a newline, a longer merge, an edit
    elsewhere, another document), the engine stops the cancelled pass as that request arrives (engine/kvcache.py,
    SharedPasses). 0 in the cursor layout, where a keystroke changes the prefix's end and shifts the suffix, and for
    a prompt without the marker."""
    if middle_from != "line":
        return 0
    return len(ids) if engine.special_token_id(engine.fim.middle) in ids else 0


@dataclass
class Prepared:
    built: object  # prompt.BuiltPrompt
    request: CompletionRequest


class Completer:
    def __init__(self, engine, syntax: SyntaxCache | None = None, step_delay_s: float | None = None) -> None:
        self.engine = engine
        self.syntax = syntax
        if step_delay_s is None:
            step_delay_s = float(os.environ.get(STEP_DELAY_ENV) or 0) / 1000.0
        self.step_delay_s = step_delay_s
        self.layouts = Layouts()
        rate = getattr(engine, "prefill_tokens_per_s", None)
        self.auto_prompt_tokens = total_for_prefill_rate(rate)
        logger.info("prompts of at most %d tokens (promptTokens auto: %s)", self.auto_prompt_tokens,
                    f"this machine prefills {rate:.0f} tok/s" if rate else "prefill rate not measured, the default")

    def prompt_tokens(self, settings: Settings) -> int:
        return prompt_total(settings.prompt_tokens, self.auto_prompt_tokens)

    def prepare(self, doc: OpenDocument, line: int, character_utf16: int, settings: Settings,
                other_docs: Sequence[OpenDocument] = ()) -> Prepared:
        """Build the prompt. The server calls this on its codecue-prompt thread, the one thread that owns the syntax
        cache (scheduler.PromptWorker), never on the event loop."""
        built = build_prompt(doc, line, character_utf16, self.engine.fim, self.engine.count_tokens,
                             other_docs=other_docs, budget=budget_for(self.prompt_tokens(settings)),
                             syntax=self.syntax, middle_from=settings.middle_from,
                             previous=self.layouts.get(doc.uri), middle_lines=settings.middle_lines)
        self.layouts.remember(built.layout)
        ids, heal = encode_built(self.engine, built)
        request = CompletionRequest(
            prompt_ids=ids,
            heal=heal,
            shared_prefix=shared_prefix_length(self.engine, ids, settings.middle_from),
            max_new_tokens=settings.max_tokens,
            stop=make_stop_predicate(built),
            session=doc.uri,
            drafter=settings.drafter,
        )
        return Prepared(built=built, request=request)

    def submit(self, prepared: Prepared, token: CancelToken):
        return self.engine.submit(prepared.request, token, on_tokens=self._step_delay(token))

    def finish(self, prepared: Prepared, result: CompletionResult) -> str:
        return postprocess(result.text, prepared.built)

    def complete(self, prepared: Prepared, token: CancelToken | None = None) -> tuple[str, CompletionResult]:
        """Blocking form, for `codecue-lsp --check` and benchmarks."""
        token = token or CancelToken()
        result = self.submit(prepared, token).result()
        return self.finish(prepared, result), result

    def _step_delay(self, token: CancelToken) -> Callable[[list[int], str], None] | None:
        if self.step_delay_s <= 0:
            return None
        delay = self.step_delay_s

        def slow_step(_ids: list[int], _text: str) -> None:
            deadline = time.monotonic() + delay
            while not token.is_set() and time.monotonic() < deadline:
                time.sleep(min(0.005, delay))
        return slow_step
