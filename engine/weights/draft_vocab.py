"""The draft model's output head over part of the vocabulary (FR-Spec): N token ids (the first N, or the N most
frequent in code) and every id of the text the drafter has seen.

A draft step of the 0.5B streams its whole output head, 151,936 rows x 896 (85 MB of the ~310 MB a step reads in
the vnni4 format). Qwen's byte-level BPE numbers tokens roughly by how early they were merged, so the frequent ones
come first: with the head cut to ids below 32,768 (plus the text's own ids) a draft step measured cheaper, and the
draft model's next token was the target's only slightly less often, on the bench prompts and on holes in this
repository's code (docs/performance.md, "Drafting modes and switches"). The drafter only
proposes, the target verifies every token, so a token outside the head's rows costs a rejected draft, never a wrong
output. The head's rows are the first N (a view of the weights, nothing copied); the ids of the session's text
outside them are computed from the head's own rows, copied into blocks of their own (their logits bitwise the whole
head's). Logits outside are -inf, so greedy drafts and sampled drafts (their q is zero there, which the exact
rejection rule allows) need no other change; the drafter reads only the logits the head computes (`reached_logits`).

Which ids: the first N (`draft_vocab_order = "id"`), or the N most frequent in code (`"frequency"`, the default
pair's): ranked by their counts over the running Python's standard library sources (a few million tokens, counted
once per tokenizer, cached in $CODECUE_HOME/draft-vocab). Byte-level BPE's id order is its merge order on its own
training text; counts in code rank code's tokens better: with 16,384 rows the draft model's next token was the
target's at least as often as with the first 32,768 ids, on the bench prompts and on holes in Python, C and
JavaScript, for half the rows. A gathered head is a copy of those rows (~9 MB for the 0.5B), a first-N head a view.

Set per pair in models.toml (`draft_vocab`, `draft_vocab_order`); `draft_vocab = 0` keeps the whole head.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import sysconfig
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from engine.weights.vnni import VnniLinear

log = logging.getLogger(__name__)

ROWS_MULTIPLE = 16  # the vnni kernel's rows come in blocks of 16: a cut there is a view
RANKING_TOKENS = 3_000_000  # the standard library holds ~2.9 M tokens: all of it, in a stable file order


def wanted(configured: int | None) -> int:
    """The head's rows to keep: models.toml's `draft_vocab` (0 or unset: the whole head)."""
    return int(configured or 0)


class TrimmedHead(nn.Module):
    """Logits over the whole vocabulary, computed for the kept ids (the first N, or any N ids: `kept`) and the ids
    `cover` was given; -inf elsewhere. While `compact` is set (`reached_logits`), only the logits of `reach`, in its
    order: the drafter picks among them (filling and scattering a 151,936-wide row made every draft step measurably
    dearer)."""

    def __init__(self, head: nn.Module, first: int, kept: list[int] | None = None):
        super().__init__()
        self.full = head  # every row: the rows of covered ids are taken from it
        self.vocab = head.out_features
        self.first = first  # how many ids are kept
        self.prefix = kept is None  # the ids [0, first): a view of the head's first rows
        self.kept = torch.arange(first) if kept is None else torch.tensor(sorted(kept), dtype=torch.long)
        self.reached = frozenset(self.kept.tolist())
        self.rows = cut_rows(head, first) if self.prefix else pick_rows(head, self.kept)
        self.text: list[int] = []  # the tokens last covered
        self.extra = torch.empty(0, dtype=torch.long)  # their ids outside the kept ones, ascending
        self.extra_rows: nn.Module | None = None  # the head's rows of those ids, in that order (padded to 16)
        self.reach = self.kept  # every id with a logit: the kept ones and the covered ones, ascending
        self.order: torch.Tensor | None = None  # where each id of reach is among the kept rows' and extra rows' logits
        self.compact = False

    @property
    def out_features(self) -> int:
        return self.vocab

    def cover(self, tokens: list[int]) -> None:
        """Make every id in `tokens` reachable, and of the ids the kept ones leave out only those. The drafter's text
        mostly grows between calls (its prompt, then the accepted tokens): then only the new tokens are read, and the
        rows are gathered again only when an id is new (reading the whole text each draft round cost a measurable share
        of a draft step on long texts)."""
        n = len(self.text)
        if len(tokens) >= n and tokens[:n] == self.text:
            past = {t for t in tokens[n:] if 0 <= t < self.vocab and t not in self.reached}
            known = set(self.extra.tolist())
            ids = sorted(known | past) if not past <= known else None
        else:
            ids = sorted({t for t in tokens if 0 <= t < self.vocab and t not in self.reached})
            ids = ids if ids != self.extra.tolist() else None
        self.text = list(tokens)
        if ids is None:
            return
        self.extra = torch.tensor(ids, dtype=torch.long)
        self.extra_rows = pick_rows(self.full, padded(self.full, self.extra)) if ids else None
        self.reach, self.order = torch.sort(torch.cat([self.kept, self.extra]))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        kept = self.rows(h)
        extra = self.extra_rows(h)[..., :len(self.extra)].to(kept.dtype) if self.extra_rows is not None else None
        if self.compact:
            return kept if extra is None else torch.cat([kept, extra], dim=-1).index_select(-1, self.order.to(kept.device))
        out = kept.new_full((*kept.shape[:-1], self.vocab), float("-inf"))
        if self.prefix:
            out[..., :self.first] = kept
        else:
            out[..., self.kept.to(out.device)] = kept
        if extra is not None:
            out[..., self.extra.to(out.device)] = extra
        return out


def cut_rows(head: nn.Module, first: int) -> nn.Module:
    """The head's first `first` output rows as a module of the same kind, sharing its weights."""
    if isinstance(head, VnniLinear):
        return vnni_blocks(head, slice(0, first // ROWS_MULTIPLE), first)
    kept = nn.Linear(head.in_features, first, bias=False, device="meta")
    kept.weight = nn.Parameter(head.weight[:first], requires_grad=False)
    return kept


def pick_rows(head: nn.Module, ids: torch.Tensor) -> nn.Module:
    """The head's rows `ids` (a multiple of 16 of them for a vnni head), in that order, as a module of the same kind:
    a copy. A vnni head's rows are regrouped into new blocks of 16 byte for byte (a row's 4 or 8 bits and its
    scales): the kernel computes each row from its own bytes alone, so every logit is bitwise the whole head's."""
    if isinstance(head, VnniLinear):
        if len(ids) % ROWS_MULTIPLE:
            raise ValueError(f"a vnni head's rows are picked in blocks of {ROWS_MULTIPLE}, not {len(ids)}")
        block, channel = ids // ROWS_MULTIPLE, ids % ROWS_MULTIPLE
        blocks = len(ids) // ROWS_MULTIPLE
        # packed [blocks, steps, 64]: byte 4c + j of each step belongs to channel c
        lanes = head.packed.view(head.packed.shape[0], head.packed.shape[1], ROWS_MULTIPLE, 4)[block, :, channel]
        packed = lanes.view(blocks, ROWS_MULTIPLE, *lanes.shape[1:]).transpose(1, 2).reshape(
            blocks, head.packed.shape[1], 64).contiguous()

        def regroup(scales: torch.Tensor) -> torch.Tensor:  # [blocks, 16] or [blocks, groups, 16]
            if scales.dim() == 2:
                return scales[block, channel].view(blocks, ROWS_MULTIPLE).contiguous()
            picked = scales[block, :, channel]  # [rows, groups]
            return picked.view(blocks, ROWS_MULTIPLE, -1).transpose(1, 2).contiguous()

        return vnni_like(head, packed, regroup(head.d), regroup(head.m), len(ids))
    rows = nn.Linear(head.in_features, len(ids), bias=False, device="meta")
    rows.weight = nn.Parameter(head.weight.detach()[ids], requires_grad=False)
    return rows


def padded(head: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """ids, the last repeated up to a multiple of 16 for a vnni head (pick_rows' blocks); the extra rows are
    dropped from its output. The whole 16-row blocks that hold the ids are many times the rows (scattered ids rarely
    share a block), and computing them measured slower than picking the rows."""
    if not isinstance(head, VnniLinear) or len(ids) % ROWS_MULTIPLE == 0:
        return ids
    return torch.cat([ids, ids[-1:].expand(ROWS_MULTIPLE - len(ids) % ROWS_MULTIPLE)])


def vnni_blocks(head, blocks, rows: int):
    """A VnniLinear over some of `head`'s blocks of 16 rows (a slice: views; a list of blocks: a copy)."""
    return vnni_like(head, head.packed[blocks], head.d[blocks], head.m[blocks], rows)


def vnni_like(head, packed, d, m, rows: int) -> VnniLinear:
    """A VnniLinear of `head`'s kind (bits, group, vector path) over these weights and scales."""
    part = VnniLinear(packed, d, m, head.bits, head.group, rows, head.in_features, None, torch.float32)
    part.use_simd = head.use_simd
    return part


def trim(model: nn.Module, first: int, order: list[int] | None = None) -> bool:
    """Give a draft model a TrimmedHead over `first` ids (rounded down to 16): the first ones, or the first of
    `order` (ids, most wanted first: frequency_order); False, with a log line, where its head is of another kind, has
    a bias (output heads here have none), or is no larger than that."""
    head = getattr(model, "lm_head", None)
    first -= first % ROWS_MULTIPLE
    if isinstance(head, TrimmedHead) or first <= 0:
        return isinstance(head, TrimmedHead)
    if (not isinstance(head, (VnniLinear, nn.Linear)) or getattr(head, "bias", None) is not None
            or head.out_features <= first):
        log.info("draft head not trimmed (%s, %s rows)", type(head).__name__, getattr(head, "out_features", "?"))
        return False
    model.lm_head = TrimmedHead(head, first, None if order is None else kept_ids(order, first, head.out_features))
    return True


def kept_ids(order: list[int], first: int, vocab: int) -> list[int]:
    """The first `first` distinct ids of `order` inside the vocabulary; a ranking too short is filled up by id."""
    kept = [t for t in dict.fromkeys(order) if 0 <= t < vocab][:first]
    if len(kept) < first:
        chosen = set(kept)
        kept += [t for t in range(vocab) if t not in chosen][:first - len(kept)]
    return kept


def frequency_order(tokenizer, home: Path, corpus: Path | None = None, limit: int = RANKING_TOKENS) -> list[int]:
    """Token ids by their count in code, most frequent first (ids never seen are left out): the Python sources of
    `corpus` (default: this interpreter's standard library), file by file in sorted order, up to `limit` tokens.
    Cached under home/draft-vocab, keyed by the tokenizer's vocabulary, the corpus and the limit."""
    corpus = Path(corpus or sysconfig.get_paths()["stdlib"])
    key = hashlib.sha256(f"{tokenizer_text(tokenizer)}\0{corpus.resolve()}\0{limit}".encode()).hexdigest()[:16]
    cached = home / "draft-vocab" / f"frequency-{key}.json"
    try:
        return json.loads(cached.read_text())["ids"]
    except (OSError, ValueError, KeyError):
        pass
    counts: Counter[int] = Counter()
    seen = 0
    paths = sorted(corpus.rglob("*.py"))
    for start in range(0, len(paths), 64):
        if seen >= limit:
            break
        texts = []
        for path in paths[start:start + 64]:
            try:
                texts.append(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError):
                continue
        for ids in encode_all(tokenizer, texts):
            if seen >= limit:
                break
            counts.update(ids)
            seen += len(ids)
    ids = [t for t, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps({"corpus": str(corpus), "tokens": seen, "ids": ids}))
    partial.replace(cached)  # whole or absent: another process may be reading it
    return ids


def cover(model: nn.Module, tokens: list[int]) -> None:
    """Tell a trimmed draft head which ids the text holds (nothing to do for a whole head)."""
    head = getattr(model, "lm_head", None)
    if isinstance(head, TrimmedHead):
        head.cover(tokens)


@contextmanager
def reached_logits(model: nn.Module):
    """Within: the model's logits are those of `reach` only, in its order (yielded; None and whole rows for a whole
    head). A pick among them is the pick over the whole row: the others are -inf (engine/decode/drafters.py)."""
    head = getattr(model, "lm_head", None)
    if not isinstance(head, TrimmedHead):
        yield None
        return
    head.compact = True
    try:
        yield head.reach
    finally:
        head.compact = False


def tokenizer_text(tokenizer) -> str:
    """What identifies a tokenizer: a fast one's own serialisation (vocabulary, merges, normalisation; several times
    cheaper for Qwen's than sorting and dumping its vocabulary at every load), else its vocabulary."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return backend.to_str()
    return json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False)


def encode_all(tokenizer, texts: list[str]) -> list[list[int]]:
    """Token ids of each text, no special tokens; a fast tokenizer's Rust side encodes them in parallel (and without
    transformers' warning about texts longer than the model's context)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return [encoding.ids for encoding in backend.encode_batch(texts, add_special_tokens=False)]
    return [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]


def describe(model) -> str:
    """For `codecue-lsp --check`: how much of the vocabulary the draft model's head covers."""
    head = getattr(model, "lm_head", None)
    if not isinstance(head, TrimmedHead):
        return ""
    if head.prefix:
        return f", head over ids < {head.first:,} and the text's"
    return f", head over the {head.first:,} most frequent ids in code and the text's"
