"""KV caches that remember which tokens they hold, so requests of one session reuse their common prefix."""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from .interrupt import PassCancelled, cancellable
from .kv_layers import new_dynamic_cache
from .lean_step import MAX_TOKENS as LEAN_MAX_TOKENS, lean_step_for
from .types import CancelToken

log = logging.getLogger(__name__)


# Tokens per prefill pass of a torch model. 1,024 tokens of the 1.5B in vnni (W8A8 prefill, Zen 5, 2 cores): 128 /
# 256 / 512-token chunks ran at ~300 / ~330 / ~185 tok/s (attention's score matrices outgrow the cache past 256), and a
# chunk inside the prompt part the next request shares ends even when cancelled: 256 is both faster and sooner idle.
PREFILL_CHUNK = 256


def common_prefix_length(a: list[int], b: list[int]) -> int:
    m = min(len(a), len(b))
    if a[:m] == b[:m]:  # the usual case: one extends the other; list equality runs at C speed
        return m
    lo, hi = 0, m  # binary search for the first mismatch; a[:lo] == b[:lo] holds throughout
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def prefill_pieces(start: int, end: int, chunk: int, shared: int = 0, cancelled=None, finishing=None):
    """(first, last, stop_when) for each prefill pass over positions start..end, `chunk` tokens each, cut where the
    `shared` prefix ends. stop_when is what may stop the pass within (engine/interrupt.py): `cancelled`, except for
    a pass inside the shared prefix, which the next keystroke's request will likely reuse
    (CompletionRequest.shared_prefix): a cancel lets it end instead of throwing its work away, and only
    `finishing(last)` may stop it (the engine's test that a later request still wants these tokens; None: nothing).
    The caller still stops before the next pass. Without this, a slow CPU that aborts every pass on the next
    keystroke never gets through a long prompt while the user types (docs/benchmarks.md)."""
    while start < end:
        stop = min(start + chunk, end)
        if start < shared < stop:
            stop = shared
        if stop <= shared:
            yield start, stop, finishing(stop) if finishing is not None else None
        else:
            yield start, stop, cancelled
        start = stop


class SharedPasses:
    """The prefill pass a cancelled request lets end (prefill_pieces), and whether a later request still wants it:
    one that does not share its tokens (another document, or a prompt that changed before the pass's end) abandons
    it, so a user who jumps elsewhere does not wait for it. An engine has one; requests run one at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current = None  # (session, ids up to the pass's end, the request's cancel token, abandon token)

    def finishing_for(self, session: str | None, prompt_ids, cancel_token: CancelToken | None):
        """prefill_pieces' `finishing` for one request: registers each shared pass before it runs."""
        abandon = CancelToken()

        def finishing(stop: int):
            with self._lock:
                self._current = (session, list(prompt_ids[:stop]), cancel_token, abandon)
            return abandon.is_set
        return finishing

    def arriving(self, session: str | None, prompt_ids) -> None:
        """A later request was submitted (on the caller's thread): abandon a cancelled request's pass it does not
        share. A pass of a one-off request (no session) keeps nothing, so any later request abandons it."""
        with self._lock:
            current = self._current
        if current is None:
            return
        owner, ids, token, abandon = current
        if token is not None and token.is_set() and (
                owner is None or session != owner or list(prompt_ids[:len(ids)]) != ids):
            log.debug("a cancelled prefill pass up to token %d is not shared by the next request: stopping it",
                      len(ids))
            abandon.set()

    def done(self) -> None:
        with self._lock:
            self._current = None


def cache_for(model):
    """A new, empty cache for one session of model: its own kind when it has one (engine/llamacpp.py), else a
    TrackedCache over transformers' caches."""
    new_cache = getattr(model, "new_cache", None)
    return new_cache() if new_cache is not None else TrackedCache(model)


@dataclass
class TrackedCache:
    """A transformers KV cache plus the exact token ids whose keys/values it holds (`ids`). A model with compiled
    static steps (engine/compiled.py) gets a preallocated StaticCache and its compiled passes; others a DynamicCache.
    """
    model: torch.nn.Module
    cache: DynamicCache = None
    ids: list[int] = field(default_factory=list)

    def __post_init__(self):
        self.steps = getattr(self.model, "codecue_steps", None)
        if self.steps is not None and self.steps.failed:
            self.steps = None
        if self.cache is None:
            self.cache = self.steps.new_cache(self) if self.steps is not None else new_dynamic_cache(self.model.config)

    def _grow_past_capacity(self, extra: int) -> None:
        """A static cache cannot hold more than its capacity: move this session to a dynamic cache (eager passes),
        recomputing what it held. Rare: prompts are budgeted well below the capacity."""
        if self.steps is None or len(self.ids) + extra <= self.steps.capacity:
            return
        held, self.steps = list(self.ids), None
        self.cache, self.ids = new_dynamic_cache(self.model.config), []
        for start in range(0, len(held), PREFILL_CHUNK):
            self.forward(held[start:start + PREFILL_CHUNK], logits="none")

    def truncate(self, length: int) -> None:
        extra = len(self.ids) - length
        if extra > 0:
            self.cache.crop(-extra)
            del self.ids[length:]

    def forward(self, new_ids: list[int], logits: str = "all", cancelled=None) -> torch.Tensor | None:
        """Run the model on new_ids after the cached ones. logits: "all" -> [len, vocab], "last" -> [1, vocab],
        "none" (prefill: the lm head over a 151,936 vocabulary is skipped where possible). Raises PassCancelled
        when cancelled() turns true between two layers; the cache then holds exactly `ids` again."""
        self._grow_past_capacity(len(new_ids) + 16)  # 16: room for a padded verify pass
        try:
            with cancellable(self.model, cancelled):
                lean = self._lean_step(len(new_ids))
                if self.steps is not None:
                    out = self.steps.run(self.cache, list(new_ids), logits)
                elif lean is not None:
                    out = lean(self.cache, list(new_ids), len(self.ids), logits, cancelled)
                else:
                    x = torch.tensor([new_ids], dtype=torch.long, device=self.model.device)
                    keep = 0 if logits == "all" else 1
                    out = self.model(input_ids=x, cache=self.cache, use_cache=True, logits_to_keep=keep).logits[0]
        except PassCancelled:
            self._crop_layers_to_ids()
            raise
        except BaseException:
            # A forward that died half-way may have appended to some layers only: start this cache afresh.
            self.steps = None if (self.steps is not None and self.steps.failed) else self.steps
            self.cache = self.steps.new_cache(self) if self.steps is not None else new_dynamic_cache(self.model.config)
            self.ids = []
            raise
        self.ids.extend(new_ids)
        return None if logits == "none" else out.float()

    def _lean_step(self, tokens: int):
        """engine/lean_step.py's pass for a short pass on a cache of dynamic layers (not a static cache)."""
        if self.steps is not None or tokens > LEAN_MAX_TOKENS or not isinstance(self.cache.layers[0], DynamicLayer):
            return None
        return lean_step_for(self.model)

    def _crop_layers_to_ids(self) -> None:
        """A pass stopped between layers: the layers before the stop hold its keys/values, the others do not.
        Cut each layer back on its own, so the cached prefix stays valid and reusable."""
        for layer in self.cache.layers:
            extra = int(layer.get_seq_length()) - len(self.ids)
            if extra > 0:
                layer.crop(-extra)

    def reuse_prefix(self, ids: list[int]) -> int:
        """Drop what is not a prefix of ids; return how many of ids are already cached."""
        keep = common_prefix_length(self.ids, ids)
        self.truncate(keep)
        return keep

    def extend_to(self, ids: list[int], chunk: int = PREFILL_CHUNK, cancelled=lambda: False,
                  shared: int = 0, finishing=None) -> tuple[int, int]:
        """Make the cache hold exactly ids, reusing the common prefix; prefill the rest in chunks. A cancel stops
        the prefill within one decoder layer, keeping the chunks done so far, except that a chunk inside the first
        `shared` tokens ends first unless `finishing` says otherwise (prefill_pieces). Returns (reused, computed)."""
        reused = self.reuse_prefix(ids)
        for start, stop, stop_when in prefill_pieces(reused, len(ids), chunk, shared, cancelled, finishing):
            if cancelled():  # a model without a layer gate can still stop between chunks
                break
            try:
                self.forward(ids[start:stop], logits="none", cancelled=stop_when)
            except PassCancelled:
                break
        return reused, len(self.ids) - reused
