"""KV caches that remember which tokens they hold, so requests of one session reuse their common prefix."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import DynamicCache


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


@dataclass
class TrackedCache:
    """A transformers DynamicCache plus the exact token ids whose keys/values it holds (`ids`)."""
    model: torch.nn.Module
    cache: DynamicCache = None
    ids: list[int] = field(default_factory=list)

    def __post_init__(self):
        if self.cache is None:
            self.cache = DynamicCache(config=self.model.config)

    def truncate(self, length: int) -> None:
        extra = len(self.ids) - length
        if extra > 0:
            self.cache.crop(-extra)
            del self.ids[length:]

    def forward(self, new_ids: list[int], logits: str = "all") -> torch.Tensor | None:
        """Run the model on new_ids after the cached ones. logits: "all" -> [len, vocab], "last" -> [1, vocab],
        "none" (prefill: the lm head over a 151,936 vocabulary is skipped where possible)."""
        x = torch.tensor([new_ids], dtype=torch.long, device=self.model.device)
        keep = 0 if logits == "all" else 1
        try:
            out = self.model(input_ids=x, cache=self.cache, use_cache=True, logits_to_keep=keep)
        except BaseException:
            # A forward that died half-way may have appended to some layers only: start this cache afresh.
            self.cache = DynamicCache(config=self.model.config)
            self.ids = []
            raise
        self.ids.extend(new_ids)
        return None if logits == "none" else out.logits[0].float()

    def reuse_prefix(self, ids: list[int]) -> int:
        """Drop what is not a prefix of ids; return how many of ids are already cached."""
        keep = common_prefix_length(self.ids, ids)
        self.truncate(keep)
        return keep

    def extend_to(self, ids: list[int], chunk: int = 512, cancelled=lambda: False) -> tuple[int, int]:
        """Make the cache hold exactly ids, reusing the common prefix; prefill the rest in chunks (so a cancel
        lands between chunks). Returns (reused, computed)."""
        reused = self.reuse_prefix(ids)
        for start in range(reused, len(ids), chunk):
            if cancelled():
                break
            self.forward(ids[start:start + chunk], logits="none")
        return reused, len(self.ids) - reused
