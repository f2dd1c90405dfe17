"""The local backend (backend.CompletionBackend): document + cursor -> prompt -> Engine request -> shown text.

Test knob: CODECUE_TEST_STEP_DELAY_MS=N (read in config.py) makes every engine step at least N ms slower (the delay
runs on the engine worker between steps, so a cancel is still seen within one step). It exists so that end-to-end
tests can observe cancellation and supersession with the (very fast) tiny model; it is never set in normal use.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable, Sequence

from engine.types import CancelToken, CompletionRequest

from .backend import BackendStats, Completion, CompletionBackend, Health, converted
from .config import Settings, step_delay_for_tests
from .postprocess import make_stop_predicate, postprocess
from .prompt import Layouts, OpenDocument, SyntaxCache, budget_for, build_prompt
from .prompt.sizing import (
    cold_total,
    context_total,
    cold_total_for_prefill_rate,
    prompt_total,
    total_for_prefill_rate,
)

logger = logging.getLogger(__name__)



def encode_built(engine, built) -> tuple[list[int], bytes]:
    """A built prompt's ids and, when it ends in the cursor line's typed text (middle_from "line"), the healed
    bytes for CompletionRequest.heal: the model re-chooses that text's last token (engine/decode/healing.py)."""
    ids = engine.encode_prompt(built.pieces)
    return engine.heal_prompt(ids) if built.middle else (ids, b"")


def shared_prefix_length(engine, ids: list[int], middle_from: str) -> int:
    """Prompt tokens the next keystroke's request will likely share. With the typed line after the FIM middle marker
    (middle_from "line"), all of them: a keystroke on the line usually changes only the word being typed, at the
    prompt's end, whose last token healing has already left out (encode_built), and the engine prefills all but the
    prompt's last token. When the next request does not share a pass after all (a newline, a longer merge, an edit
    elsewhere, another document), the engine stops the cancelled pass as that request arrives (engine/decode/kvcache.py,
    SharedPasses). 0 in the cursor layout, where a keystroke changes the prefix's end and shifts the suffix, and for
    a prompt without the marker."""
    if middle_from != "line":
        return 0
    return len(ids) if engine.special_token_id(engine.fim.middle) in ids else 0


@dataclass
class Prepared:
    built: object  # prompt.BuiltPrompt
    request: CompletionRequest
    total: int = 0  # the prompt size the settings ask for (the built one may be a cold start's, smaller)

    @property
    def grows(self) -> bool:
        """Its layout was chosen at a cold start's size: the full one is to be made ready (growth.py)."""
        layout = self.built.layout
        return layout is not None and 0 < layout.total < self.total

    @property
    def reranks(self) -> bool:
        """Built with project context: the next pause may rank it afresh (growth.py)."""
        return self.built.project

    @property
    def ready_tokens(self) -> int:
        """How many tokens make it ready (grown or warmed): all but the last, which a request runs itself."""
        return len(self.request.prompt_ids) - 1


class Completer(CompletionBackend):
    """The local backend: prompts encoded for the in-process Engine, which runs them on its worker thread."""

    kind = "local"
    supports_prefill = True
    supports_next_line = True
    indexes_workspace = True
    supports_alternatives = True

    def __init__(self, engine, syntax: SyntaxCache | None = None, step_delay_s: float | None = None) -> None:
        self.engine = engine
        self.syntax = syntax
        if step_delay_s is None:
            step_delay_s = step_delay_for_tests()
        self.step_delay_s = step_delay_s
        self.layouts = Layouts()
        self.growing = Layouts()  # the full-size layouts being prefilled into the engine's spare (growth.py)
        rate = engine.prefill_tokens_per_s
        self.auto_prompt_tokens = total_for_prefill_rate(rate)
        self.auto_cold_prompt_tokens = cold_total_for_prefill_rate(rate)
        logger.info("prompts of at most %d tokens (promptTokens auto: %s)", self.auto_prompt_tokens,
                    f"this machine prefills {rate:.0f} tok/s" if rate else "prefill rate not measured, the default")

    def prompt_tokens(self, settings: Settings) -> int:
        return prompt_total(settings.prompt_tokens, self.auto_prompt_tokens)

    def cold_prompt_tokens(self, settings: Settings) -> int:
        return cold_total(settings.cold_prompt_tokens, self.prompt_tokens(settings), self.auto_cold_prompt_tokens)

    def prepare(self, doc: OpenDocument, line: int, character_utf16: int, settings: Settings,
                other_docs: Sequence[OpenDocument] = (), project=None) -> Prepared:
        """Build the prompt. The server calls this on its codecue-prompt thread, the one thread that owns the syntax
        cache (scheduler.PromptWorker), never on the event loop. A layout chosen afresh is chosen at the cold
        start's size (nothing of it is cached: it all costs prefill first), unless the full-size one fits that anyway
        (a small file); growth.py makes the full one ready."""
        total = self.prompt_tokens(settings)
        built = self._build(doc, line, character_utf16, settings, other_docs, total, self.layouts.get(doc.uri),
                            project)
        encoded = encode_built(self.engine, built)
        cold = self.cold_prompt_tokens(settings)
        if not built.kept and cold < total and len(encoded[0]) + bool(encoded[1]) > cold:
            built = self._build(doc, line, character_utf16, settings, other_docs, cold, None, project)
            encoded = encode_built(self.engine, built)
        if not built.kept:
            logger.debug("%s: a layout chosen afresh at line %d, %d of %d tokens", doc.uri, line,
                         built.layout.total, total)
        self.layouts.remember(built.layout)
        return self._prepared(built, settings, doc.uri, total, encoded)

    def prepare_growth(self, doc: OpenDocument, line: int, character_utf16: int, settings: Settings,
                       other_docs: Sequence[OpenDocument] = (), project=None) -> Prepared | None:
        """The full-size prompt for this cursor, in the layout being grown for the document (kept while it holds,
        like any layout); or, for a full-size layout with project context, the prompt a fresh ranking gives when its
        context differs from the kept one's (the cursor moved to another scope, the project changed): the context
        changes only here, while the user pauses, never on a keystroke. None when there is nothing to grow. On the
        prompt thread."""
        total, current = self.prompt_tokens(settings), self.layouts.get(doc.uri)
        if current is None:
            return None
        if current.total >= total:
            if project is None:
                return None
            fresh = self._build(doc, line, character_utf16, settings, other_docs, total, None, project)
            if fresh.layout is None or fresh.layout.items == current.items:
                return None
            built = fresh
        else:
            built = self._build(doc, line, character_utf16, settings, other_docs, total, self.growing.get(doc.uri),
                                project)
        self.growing.remember(built.layout)
        return self._prepared(built, settings, doc.uri, total, encode_built(self.engine, built))

    def grow(self, prepared: Prepared, token: CancelToken) -> Future[int]:
        """Prefill a growth prompt into the engine's spare cache for its document: what a request's prefill computes,
        all but the last token (`ready_tokens`). A future of how many of them the spare holds (a cancel keeps the
        chunks done, for the next try)."""
        ids = list(prepared.request.prompt_ids[:prepared.ready_tokens])
        return self.engine.prefill_spare(prepared.request.session, ids, token)

    def prefill(self, prepared: Prepared, token: CancelToken) -> Future[int]:
        """Prefill a prompt into its document's own session before anyone asks for it (warmup.py): all but the last
        token (`ready_tokens`). A future of how many of them the session holds (a cancel keeps the chunks done)."""
        request = prepared.request
        ids = list(request.prompt_ids[:prepared.ready_tokens])
        return self.engine.prefill(request.session, ids, token, shared=request.shared_prefix)

    def take_growth(self, prepared: Prepared) -> None:
        """The grown layout is the document's from now on, and so is the spare cache that holds it: the next
        keystroke's prompt keeps it and finds it computed. On the prompt thread, so every prompt built after this
        has the layout, and submitted after the engine's take_spare (both queues are first in, first out)."""
        uri = prepared.request.session
        self.layouts.remember(prepared.built.layout)
        self.growing.forget(uri)
        self.engine.take_spare(uri)

    def _build(self, doc, line, character_utf16, settings, other_docs, total, previous, project=None):
        return build_prompt(doc, line, character_utf16, self.engine.fim, self.engine.count_tokens,
                            other_docs=other_docs, budget=budget_for(total, context=context_total(settings, total)),
                            syntax=self.syntax, middle_from=settings.middle_from, previous=previous,
                            middle_lines=settings.middle_lines, project=project)

    def _prepared(self, built, settings: Settings, session: str, total: int, encoded) -> Prepared:
        ids, heal = encoded  # encode_built(self.engine, built)
        request = CompletionRequest(
            prompt_ids=ids,
            heal=heal,
            shared_prefix=shared_prefix_length(self.engine, ids, settings.middle_from),
            max_new_tokens=settings.max_tokens,
            stop=make_stop_predicate(built),
            session=session,
            drafter=settings.drafter,
            kind=built.mode,
        )
        return Prepared(built=built, request=request, total=total)

    def submit(self, prepared: Prepared, token: CancelToken,
               on_text: Callable[[str], None] | None = None) -> Future[Completion]:
        future = self.engine.submit(prepared.request, token, on_tokens=self._on_tokens(token, on_text))
        return converted(future, self._completion)

    def alternative(self, prepared: Prepared, rank: int, token: CancelToken) -> Future[Completion]:
        request = dataclasses.replace(prepared.request, first_rank=rank)
        return converted(self.engine.submit(request, token, on_tokens=self._on_tokens(token, None)), self._completion)

    def _completion(self, result) -> Completion:
        """The engine's result with each token's text, for the confidence (on the engine's thread, tokens a few)."""
        texts = [self.engine.decode([token]) for token in result.token_ids] if result.token_probs else ()
        return Completion.from_engine(result, texts)

    def finish(self, prepared: Prepared, completion: Completion) -> str:
        return postprocess(completion.text, prepared.built)

    def complete(self, prepared: Prepared, token: CancelToken | None = None) -> tuple[str, Completion]:
        """Blocking form, for `codecue-lsp --check` and benchmarks."""
        token = token or CancelToken()
        completion = self.submit(prepared, token).result()
        return self.finish(prepared, completion), completion

    def update_workspace(self, key: str, text: str | None) -> None:
        self.engine.update_workspace(key, text)

    def forget(self, uri: str) -> None:
        try:
            self.engine.forget_session(uri)
        except RuntimeError:  # the engine has shut down
            pass

    def stats(self) -> BackendStats:
        engine = self.engine
        return BackendStats(sessions=len(engine.sessions), busy=bool(engine.busy), phase=str(engine.phase),
                            index_documents=len(engine.workspace),
                            workspace_documents=engine.workspace.count("workspace"))

    def health(self) -> Health:
        return Health(healthy=True)  # a loaded engine answers; its own errors raise from the request

    def describe(self) -> dict:
        return {"kind": self.kind, "url": None, "healthy": True, "last_error": None}

    def watch_health(self, show: Callable[[str], None]) -> None:
        pass  # never turns unhealthy (see health)

    def close(self) -> None:
        self.engine.close()

    def _on_tokens(self, token: CancelToken,
                   on_text: Callable[[str], None] | None) -> Callable[[list[int], str], None] | None:
        """The engine's per-step callback: the caller's stream, then the test knob's delay (step_delay_s)."""
        delay = self.step_delay_s
        if delay <= 0 and on_text is None:
            return None

        def each_step(_ids: list[int], text: str) -> None:
            if on_text is not None:
                on_text(text)
            if delay <= 0:
                return
            deadline = time.monotonic() + delay
            while not token.is_set() and time.monotonic() < deadline:
                time.sleep(min(0.005, delay))
        return each_step
