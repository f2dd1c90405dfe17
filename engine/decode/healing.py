"""Token healing: a prompt that ends in the middle of what the user typed ends on an odd token boundary.

`    distance ` tokenizes with a lone trailing space that the model rarely saw before `=`, so it writes ` = ...`
(two spaces); after `append(` it often stops at once. Healing backs the prompt off by its last token and lets the
first generated token be any token whose bytes start with that token's bytes (the token itself included): the model
re-chooses the boundary. The loop applies the same mask to the target's first position whether it drafts or not,
so lossless still means "equal to the target alone" (engine/decode/speculative.py), and the text returned is what
follows the healed bytes.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from functools import lru_cache

import torch


@lru_cache(maxsize=1)
def _byte_of_char() -> dict[str, int]:
    """The inverse of byte-level BPE's byte -> printable character map (GPT-2's `bytes_to_unicode`)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def token_bytes(tokenizer) -> list[bytes]:
    """Every token id's bytes; b"" for special tokens and pieces that are not byte-level BPE (never allowed)."""
    byte_of = _byte_of_char()
    special = set(tokenizer.all_special_ids) | {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    out = []
    for i, piece in enumerate(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))):
        if piece is None or i in special or not all(c in byte_of for c in piece):
            out.append(b"")
        else:
            out.append(bytes(byte_of[c] for c in piece))
    return out


def back_off(ids: list[int], table: list[bytes]) -> tuple[list[int], bytes]:
    """(ids without their last token, that token's bytes), or (ids, b"") when the last token is a marker (no bytes)
    or its bytes are not whole UTF-8 (half a character cannot be matched as text)."""
    if len(ids) < 2 or ids[-1] >= len(table):
        return list(ids), b""
    last = table[ids[-1]]
    try:
        last.decode("utf-8")
    except UnicodeDecodeError:
        return list(ids), b""
    return (list(ids[:-1]), last) if last else (list(ids), b"")


class HealingMasks:
    """Masks of the tokens allowed first after a back-off, per backed-off byte string. Every keystroke backs off a
    new string, so a mask is a range of the byte-sorted vocabulary (two bisections), not a scan of 151k tokens
    (tens of ms in Python)."""

    def __init__(self, table: list[bytes]):
        self.table = table
        order = sorted((b, i) for i, b in enumerate(table) if b)
        self._sorted = [b for b, _ in order]
        self._ids = torch.tensor([i for _, i in order], dtype=torch.long)
        self._masks: dict[bytes, torch.Tensor] = {}

    def allowed(self, prefix: bytes) -> torch.Tensor:
        mask = self._masks.get(prefix)
        if mask is None:
            if len(self._masks) >= 16:  # 151 KB a mask for Qwen; building one costs 0.15 ms, so keep only a few
                self._masks.clear()
            # Cutting every token to len(prefix) bytes keeps the order, so the tokens starting with prefix are
            # the run of equal cut keys.
            def cut(b: bytes) -> bytes:
                return b[:len(prefix)]
            lo = bisect_left(self._sorted, prefix, key=cut)
            hi = bisect_right(self._sorted, prefix, lo=lo, key=cut)
            mask = torch.zeros(len(self.table), dtype=torch.bool)
            mask[self._ids[lo:hi]] = True
            self._masks[prefix] = mask
        return mask


def mask_first(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """The first position's logits with every token that does not start with the healed bytes at -inf (an output
    layer wider than the tokenizer: its padding rows are never allowed)."""
    keep = torch.zeros(logits.shape[-1], dtype=torch.bool)
    n = min(allowed.numel(), logits.shape[-1])
    keep[:n] = allowed[:n]
    logits = logits.clone()
    logits[0, ~keep.to(logits.device)] = float("-inf")
    return logits
