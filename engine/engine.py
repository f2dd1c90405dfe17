"""Engine: one loaded pair, one worker thread, per-session KV caches. Callers submit requests and may cancel them."""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import torch

from .drafters import HybridDrafter, LookupDrafter, ModelDrafter, NoDrafter
from .kvcache import TrackedCache
from .models import LoadedPair
from .speculative import SpeculationController, generate
from .types import CancelToken, CompletionRequest, CompletionResult

log = logging.getLogger(__name__)


@dataclass
class Session:
    """What one document keeps between requests: both models' caches and how well speculation has been doing."""
    target: TrackedCache
    draft: TrackedCache | None
    controllers: dict[str, SpeculationController] = field(default_factory=dict)


class Engine:
    def __init__(self, pair: LoadedPair, max_sessions: int = 4):
        self.pair = pair
        self.tokenizer = pair.tokenizer
        self.fim = pair.spec.target.fim
        self.stop_token_ids = set(pair.spec.target.stop_token_ids)
        if self.tokenizer.eos_token_id is not None:
            self.stop_token_ids.add(self.tokenizer.eos_token_id)
        self.max_sessions = max_sessions
        self.sessions: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()  # one generation at a time: batch size 1, the caches are not shared
        # The LSP thread encodes while the worker decodes; a HF fast tokenizer may raise "Already borrowed"
        # when one object is used from two threads at once.
        self._tokenizer_lock = threading.Lock()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="codecue-engine")

    # --- text <-> tokens -----------------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        with self._tokenizer_lock:
            return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        with self._tokenizer_lock:
            return self.tokenizer.decode(ids, skip_special_tokens=True)

    def count_tokens(self, text: str) -> int:
        return len(self.encode(text))

    # --- requests --------------------------------------------------------------------------------------------------
    def submit(self, request: CompletionRequest, cancel_token: CancelToken | None = None,
               on_tokens: Callable[[list[int], str], None] | None = None) -> Future:
        """Run on the engine's worker thread; the future resolves to a CompletionResult."""
        return self._worker.submit(self.complete, request, cancel_token, on_tokens)

    def complete(self, request: CompletionRequest, cancel_token: CancelToken | None = None,
                 on_tokens: Callable[[list[int], str], None] | None = None) -> CompletionResult:
        with self._lock, torch.inference_mode():
            session = self._session(request.session)
            drafter_name = self._available_drafter(request.drafter)
            controller = session.controllers.setdefault(
                drafter_name, SpeculationController(max_k=request.max_draft_tokens))
            controller.max_k = request.max_draft_tokens
            controller.adaptive = request.adaptive_k
            drafter = self._drafter(drafter_name, session, request)
            try:
                return generate(session.target, drafter, controller, request, self.decode, self.stop_token_ids,
                                cancel_token, on_tokens)
            except BaseException:
                self.sessions.pop(request.session, None)  # never reuse caches a failure may have left half-written
                raise

    def close(self) -> None:
        self._worker.shutdown(wait=True, cancel_futures=True)
        self.sessions.clear()

    def reset_session(self, session: str) -> None:
        with self._lock:
            self.sessions.pop(session, None)

    # --- helpers ---------------------------------------------------------------------------------------------------
    def _session(self, key: str | None) -> Session:
        if key is None:  # a one-off request keeps nothing
            return self._new_session()
        if key in self.sessions:
            self.sessions.move_to_end(key)
        else:
            self.sessions[key] = self._new_session()
            while len(self.sessions) > self.max_sessions:
                self.sessions.popitem(last=False)
        return self.sessions[key]

    def _new_session(self) -> Session:
        draft = TrackedCache(self.pair.draft) if self.pair.draft is not None else None
        return Session(target=TrackedCache(self.pair.target), draft=draft)

    def _available_drafter(self, name: str) -> str:
        if name in ("draft", "hybrid") and self.pair.draft is None:
            return "lookup"  # no draft model loaded: the model-free drafter still helps
        if name not in ("none", "draft", "lookup", "hybrid"):
            raise ValueError(f"unknown drafter {name!r} (none, draft, lookup, hybrid)")
        return name

    def _drafter(self, name: str, session: Session, request: CompletionRequest):
        if name == "none":
            return NoDrafter()
        if name == "lookup":
            return LookupDrafter()
        generator = torch.Generator().manual_seed(request.seed + 1) if request.seed is not None else None
        # Pinned K (adaptive_k=False) drafts exactly K tokens: no early stop on low draft confidence.
        min_confidence = 0.3 if request.adaptive_k else 0.0
        model = ModelDrafter(self.pair.draft, session.draft, request.temperature, request.top_p, generator,
                             min_confidence)
        return model if name == "draft" else HybridDrafter(LookupDrafter(min_ngram=3), model)
