"""The draft model's output head over part of the vocabulary (FR-Spec): token ids [0, N) and every id of the text
the drafter has seen.

A draft step of the 0.5B streams its whole output head, 151,936 rows x 896 (85 MB of the ~310 MB a step reads in
the vnni4 format). Qwen's byte-level BPE numbers tokens roughly by how early they were merged, so the frequent ones
come first: with the head cut to ids below 32,768 (plus the text's own ids) a draft step costs ~11 % less on the
Zen 3, and the draft model's next token is the target's 92.8 % of the time on the bench prompts instead of 94.5 %,
87.5 % instead of 87.7 % on holes in this repository's code (docs/benchmarks.md, thirty-seventh). The drafter only
proposes, the target verifies every token, so a token outside the head's rows costs a rejected draft, never a wrong
output. The head's rows are the first N (a view of the weights, nothing copied); the ids of the session's text
beyond N are computed from the head's own rows (the kernel's blocks of 16 that hold them: a few thousand rows, their
logits bitwise the whole head's). Logits outside are -inf, so greedy drafts and sampled drafts (their q is zero
there, which the exact rejection rule allows) need no other change.

Set per pair in models.toml (`draft_vocab`); CODECUE_DRAFT_VOCAB=0 keeps the whole head (benchmarks compare).
"""
from __future__ import annotations

import logging
import os

import torch
from torch import nn

from .vnni import VnniLinear

log = logging.getLogger(__name__)

ROWS_MULTIPLE = 16  # the vnni kernel's rows come in blocks of 16: a cut there is a view


def wanted(configured: int | None) -> int:
    """The head's first rows to keep: models.toml's `draft_vocab`, unless CODECUE_DRAFT_VOCAB says otherwise (0 or
    "off": the whole head)."""
    env = os.environ.get("CODECUE_DRAFT_VOCAB", "").strip().lower()
    if not env:
        return int(configured or 0)
    if env in ("off", "false", "no"):
        return 0
    if not env.isdigit():
        raise ValueError(f"CODECUE_DRAFT_VOCAB={env!r}: give the number of token ids the draft head keeps, or 0")
    return int(env)


class TrimmedHead(nn.Module):
    """Logits over the whole vocabulary, computed for ids [0, first) and the ids `cover` was given; -inf elsewhere."""

    def __init__(self, head: nn.Module, first: int):
        super().__init__()
        self.full = head  # every row: for `whole`, and the rows of covered ids are taken from it
        self.rows = cut_rows(head, first)
        self.first, self.vocab = first, head.out_features
        self.text: list[int] = []  # the tokens last covered
        self.extra = torch.empty(0, dtype=torch.long)  # their ids past `first`, ascending
        self.extra_rows: nn.Module | None = None  # the head's rows that hold them
        self.extra_at = torch.empty(0, dtype=torch.long)  # where each covered id is among extra_rows' outputs
        self.whole = False  # True: every row, as before the cut (scripts/bench-draft-vocab.py times both in one run)

    @property
    def out_features(self) -> int:
        return self.vocab

    def cover(self, tokens: list[int]) -> None:
        """Make every id in `tokens` reachable, and only those past `first`. The drafter's text mostly grows between
        calls (its prompt, then the accepted tokens): then only the new tokens are read, and the rows are gathered
        again only when an id is new (reading the whole text each draft round cost ~0.13 ms at 3,000 tokens)."""
        n = len(self.text)
        if len(tokens) >= n and tokens[:n] == self.text:
            past = {t for t in tokens[n:] if self.first <= t < self.vocab}
            known = set(self.extra.tolist())
            ids = sorted(known | past) if not past <= known else None
        else:
            ids = sorted({t for t in tokens if self.first <= t < self.vocab})
            ids = ids if ids != self.extra.tolist() else None
        self.text = list(tokens)
        if ids is None:
            return
        self.extra = torch.tensor(ids, dtype=torch.long)
        self.extra_rows, self.extra_at = gather_rows(self.full, self.extra) if ids else (None, self.extra)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.whole:
            return self.full(h)
        kept = self.rows(h)
        out = kept.new_full((*kept.shape[:-1], self.vocab), float("-inf"))
        out[..., :self.first] = kept
        if self.extra_rows is not None:
            out[..., self.extra.to(out.device)] = self.extra_rows(h)[..., self.extra_at.to(out.device)].to(out.dtype)
        return out


def cut_rows(head: nn.Module, first: int) -> nn.Module:
    """The head's first `first` output rows as a module of the same kind, sharing its weights."""
    if isinstance(head, VnniLinear):
        return vnni_blocks(head, slice(0, first // ROWS_MULTIPLE), first)
    kept = nn.Linear(head.in_features, first, bias=False, device="meta")
    kept.weight = nn.Parameter(head.weight[:first], requires_grad=False)
    return kept


def gather_rows(head: nn.Module, ids: torch.Tensor) -> tuple[nn.Module, torch.Tensor]:
    """(a module computing the head's rows that hold `ids`, where each id is among its outputs). A vnni head gives
    whole blocks of 16 rows: the kernel's numbers for a row do not depend on the other blocks."""
    if isinstance(head, VnniLinear):
        blocks = torch.unique(ids // ROWS_MULTIPLE)
        at = torch.searchsorted(blocks, ids // ROWS_MULTIPLE) * ROWS_MULTIPLE + ids % ROWS_MULTIPLE
        return vnni_blocks(head, blocks, len(blocks) * ROWS_MULTIPLE), at
    rows = nn.Linear(head.in_features, len(ids), bias=False, device="meta")
    rows.weight = nn.Parameter(head.weight.detach()[ids], requires_grad=False)
    return rows, torch.arange(len(ids))


def vnni_blocks(head, blocks, rows: int):
    """A VnniLinear over some of `head`'s blocks of 16 rows (a slice: views; a list of blocks: a copy)."""
    part = VnniLinear(head.packed[blocks], head.d[blocks], head.m[blocks], head.bits, head.group, rows,
                      head.in_features, None, torch.float32)
    part.use_simd = head.use_simd
    return part


def trim(model: nn.Module, first: int) -> bool:
    """Give a draft model a TrimmedHead over ids [0, first) (rounded down to 16); False, with a log line, where its
    head is of another kind, has a bias (output heads here have none), or is no larger than that."""
    head = getattr(model, "lm_head", None)
    first -= first % ROWS_MULTIPLE
    if isinstance(head, TrimmedHead) or first <= 0:
        return isinstance(head, TrimmedHead)
    if (not isinstance(head, (VnniLinear, nn.Linear)) or getattr(head, "bias", None) is not None
            or head.out_features <= first):
        log.info("draft head not trimmed (%s, %s rows)", type(head).__name__, getattr(head, "out_features", "?"))
        return False
    model.lm_head = TrimmedHead(head, first)
    return True


def cover(model: nn.Module, tokens: list[int]) -> None:
    """Tell a trimmed draft head which ids the text holds (nothing to do for a whole head)."""
    head = getattr(model, "lm_head", None)
    if isinstance(head, TrimmedHead):
        head.cover(tokens)


def describe(model) -> str:
    """For `codecue-lsp --check`: how much of the vocabulary the draft model's head covers."""
    head = getattr(model, "lm_head", None)
    return f", head over ids < {head.first:,} and the text's" if isinstance(head, TrimmedHead) else ""
