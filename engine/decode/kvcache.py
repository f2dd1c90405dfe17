"""KV caches that remember which tokens they hold, so requests of one session reuse their common prefix."""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from engine.interrupt import PassCancelled, cancellable
from engine.types import CancelToken
from engine.weights.kv_layers import new_dynamic_cache
from engine.weights.lean_step import MAX_TOKENS as LEAN_MAX_TOKENS
from engine.weights.lean_step import lean_step_for
from engine.weights.prefill_plan import common_prefix_length, prefill_pieces

log = logging.getLogger(__name__)


# Tokens per prefill pass of a torch model: 256-token chunks measured a little faster than 128 and far faster than 512
# (attention's score matrices outgrow the cache past 256), and a chunk inside the prompt part the next request shares
# ends even when cancelled: 256 is both faster and sooner idle.
PREFILL_CHUNK = 256


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
    """A new, empty cache for one session of model: its own kind when it has one (engine/weights/llamacpp.py), else a
    TrackedCache over transformers' caches."""
    new_cache = getattr(model, "new_cache", None)
    return new_cache() if new_cache is not None else TrackedCache(model)


@dataclass
class TrackedCache:
    """A transformers KV cache plus the exact token ids whose keys/values it holds (`ids`). A model with compiled
    static steps (engine/weights/compiled.py) gets a preallocated StaticCache and its compiled passes; others a
    DynamicCache.
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
        """engine/weights/lean_step.py's pass for a short pass on a cache of dynamic layers (not a static cache)."""
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
