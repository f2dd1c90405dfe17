"""Engine: one loaded pair, one worker thread, per-session KV caches. Callers submit requests and may cancel them."""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

import torch

from engine import options
from engine.decode.draft_window import DraftWindow
from engine.decode.drafters import (
    HybridDrafter,
    LookupDrafter,
    ModelDrafter,
    NoDrafter,
    extension_lookup,
)
from engine.decode.healing import HealingMasks, back_off, token_bytes
from engine.decode.kvcache import SharedPasses, TrackedCache, cache_for
from engine.decode.pass_costs import PassCosts, uncalibrated_costs
from engine.decode.policy import GainPolicy, SharedAcceptance
from engine.decode.prompt_ids import encode_pieces
from engine.decode.speculative import SpeculationController, generate
from engine.decode.step_guesses import StepGuesses
from engine.decode.suffix_index import SEPARATOR, SuffixIndex
from engine.loading.choice import target_prefill_tok_s
from engine.loading.pair import LoadedPair
from engine.types import CancelToken, CompletionRequest, CompletionResult
from engine.weights import torch_thread
from engine.weights.prefill_plan import common_prefix_length

log = logging.getLogger(__name__)


@dataclass
class Session:
    """What one document keeps between requests: both models' caches and how well speculation has been doing."""
    target: TrackedCache
    draft: TrackedCache | None
    controllers: dict[str, SpeculationController] = field(default_factory=dict)
    policy: GainPolicy | None = None  # drafter "auto"
    history: list[int] = field(default_factory=list)  # earlier completions, SEPARATOR between them


DRAFTERS = ("auto", "none", "draft", "lookup", "hybrid")
HISTORY_TOKENS = 4096  # per session; older completions fall off the front
HISTORY_CONTEXT = 8  # prompt tokens kept before each completion, so that a retyped prefix finds it
WORKSPACE_PIECE_CHARS = 16_384


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
        # (session key, target cache) being filled in the background with a prompt that session will take next
        # (prefill_spare / take_spare); one for the engine, outside the sessions' LRU.
        self.spare: tuple[str, TrackedCache] | None = None
        self._lock = threading.Lock()  # one generation at a time: batch size 1, the caches are not shared
        # The LSP thread encodes while the worker decodes; a HF fast tokenizer may raise "Already borrowed"
        # when one object is used from two threads at once.
        self._tokenizer_lock = threading.Lock()
        # this engine's work on the process's one torch thread (engine/weights/torch_thread.py)
        self._worker = torch_thread.Queue()
        self.shared_passes = SharedPasses()
        self._healing_masks: HealingMasks | None = None
        # Open documents and earlier completions, for lookup drafts.
        self.workspace = SuffixIndex()
        # What a pass costs here: the calibration's table when there is one, refined by every pass either way;
        # shared by all sessions (a machine property). Acceptance is per session, seeded from the pool of all sessions.
        calibrated = getattr(pair, "costs", None)  # the calibration's pass_costs.PassCosts, or None
        if calibrated is not None:
            self.costs = PassCosts(verify_ms=dict(calibrated.verify_ms), draft_ms=calibrated.draft_ms,
                                   draft_pass_ms=getattr(calibrated, "draft_pass_ms", None),
                                   draft_prefill_ms=getattr(calibrated, "draft_prefill_ms", None), calibrated=True)
        else:
            self.costs = uncalibrated_costs(getattr(getattr(pair, "device", None), "type", "cpu"))
        self.acceptance = SharedAcceptance()
        # For the server's stats, read from other threads without a lock (one attribute store each): whether a
        # generation runs on the worker, and which unit of it ("idle" | "prefill" | "draft" | "verify").
        self.busy = False
        self.phase = "idle"
        # A template whose markers are not single special tokens is refused at load, not on the first keystroke.
        for marker in (self.fim.prefix, self.fim.suffix, self.fim.middle, self.fim.file_sep, self.fim.repo_name):
            if marker:
                self.special_token_id(marker)
        markers = (self.fim.prefix, self.fim.suffix, self.fim.middle)
        self.draft_window = DraftWindow(*map(self.special_token_id, markers)) if all(markers) else None
        # Lookup guesses the draft model checks in its steps: counted by this machine's pass widths (shared costs).
        self.step_guesses = StepGuesses(self.costs)

    @property
    def prefill_tokens_per_s(self) -> float | None:
        """This machine's calibrated prefill rate for the target (None: not measured): what a cold prompt costs."""
        return target_prefill_tok_s(getattr(self.pair, "calibration", None), getattr(self.pair, "choice", None))

    # --- text <-> tokens -----------------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Text as the user wrote it. Special-token strings in it (`<|fim_prefix|>`, `<|endoftext|>`) become ordinary
        tokens: a file that mentions them must not inject control tokens. Markers go in through encode_prompt."""
        with self._tokenizer_lock:
            return self.tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)

    def encode_prompt(self, pieces) -> list[int]:
        """A prompt given as ("text", string) and ("special", marker) pieces, in order: text as in `encode`, each
        marker as its one special token (engine/decode/prompt_ids.py)."""
        return encode_pieces(pieces, self.encode, self.special_token_id)

    def heal_prompt(self, ids: list[int]) -> tuple[list[int], bytes]:
        """Token healing for a prompt that ends in user text (engine/decode/healing.py): (ids backed off by their last
        token, its bytes for CompletionRequest.heal); a prompt that ends in a marker comes back unchanged."""
        return back_off(ids, self._healing().table)

    def prepare_healing(self) -> None:
        """Build the healing table now (at load) rather than on the first healed keystroke."""
        self._healing()

    def _healing(self) -> HealingMasks:
        if self._healing_masks is None:  # the vocabulary's bytes, once (~0.5 s for Qwen's 151k tokens)
            with self._tokenizer_lock:
                table = token_bytes(self.tokenizer)
            self._healing_masks = torch_thread.run(HealingMasks, table)  # its tensors: no OpenMP pool here
        return self._healing_masks

    def encode_fim(self, prefix: str, suffix: str) -> list[int]:
        """The model's prefix-suffix-middle prompt around plain text."""
        fim = self.fim
        return self.encode_prompt([("special", fim.prefix), ("text", prefix), ("special", fim.suffix),
                                   ("text", suffix), ("special", fim.middle)])

    def special_token_id(self, marker: str) -> int:
        """The id of a prompt marker. It must be exactly one special token: a marker the tokenizer would not split
        out of user text (or that is several tokens) could not be told apart from code in the prompt."""
        with self._tokenizer_lock:
            ids = self.tokenizer.encode(marker, add_special_tokens=False, split_special_tokens=False)
            added = self.tokenizer.added_tokens_decoder.get(ids[0]) if len(ids) == 1 else None
        if added is None or not added.special or added.content != marker:
            raise ValueError(f"prompt marker {marker!r} is not one special token of the {self.pair.spec.target.name} "
                             f"tokenizer (it encodes as {ids}): fix the model's [fim] template in models.toml")
        return ids[0]

    def decode(self, ids: list[int]) -> str:
        with self._tokenizer_lock:
            return self.tokenizer.decode(ids, skip_special_tokens=True)

    def count_tokens(self, text: str) -> int:
        """Tokens of user text, counted as `encode` splits it (special-token strings in it are several tokens)."""
        return len(self.encode(text))

    # --- workspace -------------------------------------------------------------------------------------------------
    def update_workspace(self, key: str, text: str | None) -> None:
        """Add, replace (text) or remove (None) a document of the lookup drafter's workspace index. Any thread: it
        tokenizes under the tokenizer lock and swaps the document in without stopping a running completion."""
        if text is None:
            self.workspace.remove(key)
            return
        # In pieces that end at a line break: each holds the tokenizer lock only briefly, so a completion that is
        # decoding meanwhile is not held up by a large file. (A token across a piece boundary may split
        # differently; drafts from it are merely less likely to be accepted.)
        tokens: list[int] = []
        start = 0
        while start < len(text):
            end = text.find("\n", start + WORKSPACE_PIECE_CHARS)
            end = len(text) if end < 0 else end + 1
            tokens += self.encode(text[start:end])
            start = end
        self.workspace.add(key, tokens, source="workspace")

    # --- requests --------------------------------------------------------------------------------------------------
    def submit(self, request: CompletionRequest, cancel_token: CancelToken | None = None,
               on_tokens: Callable[[list[int], str], None] | None = None) -> Future:
        """Run on the engine's worker thread; the future resolves to a CompletionResult."""
        self.shared_passes.arriving(request.session, request.prompt_ids)
        return self._worker.submit(self.complete, request, cancel_token, on_tokens)

    def complete(self, request: CompletionRequest, cancel_token: CancelToken | None = None,
                 on_tokens: Callable[[list[int], str], None] | None = None) -> CompletionResult:
        if not torch_thread.on_torch_thread():  # called from another thread: its passes still run on the torch thread
            return self.submit(request, cancel_token, on_tokens).result()
        with self._lock, self._working(), torch.inference_mode():
            session = self._session(request.session)
            drafter_name = self._available_drafter(request.drafter)
            controller = self._controller(drafter_name, session, request)
            drafter = self._drafter(drafter_name, session, request)
            if drafter_name == "auto":  # the policy scores the lookup's drafts in the shadow while it does not draft
                controller.lookup = drafter.get("lookup")
            try:
                first_allowed = self._healing().allowed(request.heal) if request.heal else None
                finishing = self.shared_passes.finishing_for(request.session, request.prompt_ids, cancel_token)
                result = generate(session.target, drafter, controller, request, self.decode, self.stop_token_ids,
                                  cancel_token, on_tokens, on_phase=self._set_phase, first_allowed=first_allowed,
                                  finishing=finishing)
            except BaseException:
                self.sessions.pop(request.session, None)  # never reuse caches a failure may have left half-written
                raise
            finally:
                self.shared_passes.done()
            if result.finish_reason != "cancelled":
                self.acceptance.add_length(len(result.token_ids), request.kind)
            # An alternative (first_rank) is not what the user is likely to type: it stays out of the lookup history.
            if request.session is not None and result.token_ids and not request.first_rank:
                self._remember(request.session, session, list(request.prompt_ids), result.token_ids)
            return result

    # --- a prompt made ready in the background ---------------------------------------------------------------------
    def prefill(self, session: str, prompt_ids, cancel_token: CancelToken | None = None, shared: int = 0) -> Future:
        """Prefill prompt_ids into `session`'s own target cache, as a request for them would first (its cached prefix
        kept, the rest computed in chunks; a cancel keeps the chunks done): the server makes the prompt where the
        user's cursor rests ready before a keystroke asks for it (codecue_lsp/warmup.py). As in a request, a pass
        within the first `shared` tokens ends when cancelled, unless the next request does not share it
        (CompletionRequest.shared_prefix). Resolves to how many of prompt_ids the cache holds."""
        self.shared_passes.arriving(session, prompt_ids)  # as a request does: a pass these ids do not share stops
        return self._worker.submit(self._prefill, session, list(prompt_ids), cancel_token or CancelToken(), shared)

    def _prefill(self, key: str, ids: list[int], token: CancelToken, shared: int) -> int:
        with self._lock, self._working(), torch.inference_mode():
            session = self._session(key)
            self._set_phase("prefill")
            try:
                session.target.extend_to(ids, cancelled=token.is_set, shared=shared,
                                         finishing=self.shared_passes.finishing_for(key, ids, token))
                if session.draft is not None and not token.is_set():
                    # The draft model's view too: a request finding it cold pays its catch-up first (about a second
                    # on 2 cores), which is why the auto policy would not draft with the model on a prompt it sees
                    # for the first time.
                    session.draft.extend_to(self._draft_view()(ids), cancelled=token.is_set)
            except BaseException:
                self.sessions.pop(key, None)  # never reuse a cache a failure may have left half-written
                raise
            finally:
                self.shared_passes.done()
            return len(session.target.ids)

    def prefill_spare(self, session: str, prompt_ids, cancel_token: CancelToken | None = None) -> Future:
        """Prefill prompt_ids into a spare target cache for `session`, leaving the session's own caches as they are:
        the server makes a larger prompt ready there while the user pauses (codecue_lsp/growth.py), and keystrokes
        meanwhile keep being answered from the session's smaller one. A cancel keeps the chunks done, for the next
        call with the same prompt to go on from. One spare for the engine: one for another session is dropped.
        Resolves to how many of prompt_ids the spare holds."""
        return self._worker.submit(self._prefill_spare, session, list(prompt_ids), cancel_token or CancelToken())

    def _prefill_spare(self, key: str, ids: list[int], token: CancelToken) -> int:
        with self._lock, self._working(), torch.inference_mode():
            if self.spare is None or self.spare[0] != key:
                self.spare = None  # its llama.cpp sequence is free before the new one is taken
                self.spare = (key, cache_for(self.pair.target))
            cache = self.spare[1]
            self._set_phase("prefill")
            try:
                cache.extend_to(ids, cancelled=token.is_set)
            except BaseException:
                self.spare = None
                raise
            return len(cache.ids)  # a prefix of ids: extend_to keeps what it shares and stops only between chunks

    def take_spare(self, session: str) -> Future:
        """From now on `session`'s target cache is its spare (its completion history and acceptance stay): the
        prompt that filled the spare is the session's now. Queued on the worker, so requests submitted later see
        it. Resolves to whether there was a spare to take."""
        def take() -> bool:
            with self._lock:
                if self.spare is None or self.spare[0] != session:
                    return False
                cache, self.spare = self.spare[1], None
                self._session(session).target = cache  # the session's own (made anew if it was evicted)
                return True
        return self._worker.submit(take)

    @contextmanager
    def _working(self):
        self.busy = True
        try:
            yield
        finally:
            self.busy, self.phase = False, "idle"

    def _set_phase(self, phase: str) -> None:
        self.phase = phase

    def close(self) -> None:
        self._worker.shutdown(wait=True, cancel_futures=True)
        self.sessions.clear()
        self.spare = None

    def reset_session(self, session: str) -> None:
        with self._lock:
            self.sessions.pop(session, None)
            if self.spare is not None and self.spare[0] == session:
                self.spare = None

    # --- helpers ---------------------------------------------------------------------------------------------------
    def _session(self, key: str | None) -> Session:
        if key is None:  # a one-off request keeps nothing
            return self._new_session()
        if key in self.sessions:
            self.sessions.move_to_end(key)
        else:
            # A history document left by an earlier session of this key (dropped after a failure or a reset)
            # no longer matches the new, empty history.
            self.workspace.remove(f"history:{key}")
            self.sessions[key] = self._new_session()
            while len(self.sessions) > self.max_sessions:
                evicted, _ = self.sessions.popitem(last=False)
                # Its history document goes with it: otherwise every document ever completed in keeps one in the
                # lookup index, and under the index's token cap those crowd out the open files.
                self.workspace.remove(f"history:{evicted}")
        return self.sessions[key]

    def _new_session(self) -> Session:
        draft = cache_for(self.pair.draft) if self.pair.draft is not None else None
        return Session(target=cache_for(self.pair.target), draft=draft)

    def _available_drafter(self, name: str) -> str:
        if name in ("draft", "hybrid") and self.pair.draft is None:
            return "lookup"  # no draft model loaded: the model-free drafter still helps
        if name not in DRAFTERS:
            raise ValueError(f"unknown drafter {name!r} ({', '.join(DRAFTERS)})")
        return name

    def _controller(self, name: str, session: Session, request: CompletionRequest):
        if name == "auto":
            if session.policy is None:
                draft_cache, view = session.draft, self._draft_view()
                lag = (lambda tokens: len(seen := view(tokens)) - common_prefix_length(draft_cache.ids, seen)) \
                    if draft_cache is not None else None
                session.policy = GainPolicy(self.costs, self._auto_choices(), request.max_draft_tokens, lag,
                                            shared=self.acceptance,
                                            length_by_confidence=options.current().length_by_confidence)
            session.policy.max_k, session.policy.kind = request.max_draft_tokens, request.kind
            return session.policy
        controller = session.controllers.setdefault(name, SpeculationController(max_k=request.max_draft_tokens))
        controller.max_k = request.max_draft_tokens
        controller.adaptive = request.adaptive_k
        return controller

    def _draft_view(self):
        """What the draft model sees of the committed tokens: the code around the cursor (engine/decode/draft_window.py;
        EngineOptions.draft_window=False: the whole prompt, which benchmarks compare)."""
        windowed = self.draft_window is not None and options.current().draft_window
        return self.draft_window if windowed else (lambda tokens: tokens)

    def _auto_choices(self) -> tuple[str, ...]:
        return ("none", "lookup", "draft", "hybrid") if self.pair.draft is not None else ("none", "lookup")

    def _remember(self, key: str, session: Session, prompt: list[int], generated: list[int]) -> None:
        """Add a finished completion (with the prompt tokens just before it) to the session's history document."""
        session.history += [SEPARATOR] + prompt[-HISTORY_CONTEXT:] + generated
        del session.history[:-HISTORY_TOKENS]
        self.workspace.add(f"history:{key}", session.history, source="history")

    def _drafter(self, name: str, session: Session, request: CompletionRequest):
        if name == "auto":  # every choice the policy may make, built once per request
            return {choice: self._drafter(choice, session, request) for choice in self._auto_choices()}
        if name == "none":
            return NoDrafter()
        if name == "lookup":
            return LookupDrafter(index=self.workspace)
        generator = torch.Generator().manual_seed(request.seed + 1) if request.seed is not None else None
        # Pinned K (adaptive_k=False) drafts exactly K tokens: no early stop on low draft confidence.
        min_confidence = 0.3 if request.adaptive_k else 0.0
        extend = extension_lookup(self.workspace) if options.current().draft_extension else None
        # Under auto (adaptive K; its policy made by _controller) keep_drafting sizes each draft from the confidences.
        length_rule = (session.policy.keep_drafting if request.drafter == "auto" and request.adaptive_k
                       and session.policy.length_by_confidence else None)
        model = ModelDrafter(self.pair.draft, session.draft, request.temperature, request.top_p, generator,
                             min_confidence, extend, self._draft_view(), self.step_guesses, length_rule)
        if name == "draft":
            return model
        if request.drafter == "auto":  # the policy weighs each lookup source, and sizes the model's K itself
            return HybridDrafter(LookupDrafter(index=self.workspace), model, lambda: session.policy.model_k)
        # On its own, hybrid demands a 3-token lookup match: a weak one would displace the model's longer draft.
        return HybridDrafter(LookupDrafter(min_ngram=3, index=self.workspace), model)

    def forget_session(self, session: str) -> Future:
        """Drop a closed document's caches and completion history without blocking the caller. Queued on the
        worker behind the requests already submitted, so none of them can bring the session back afterwards."""
        def forget() -> None:
            with self._lock:
                self.sessions.pop(session, None)
                if self.spare is not None and self.spare[0] == session:
                    self.spare = None
            self.workspace.remove(f"history:{session}")
        return self._worker.submit(forget)
