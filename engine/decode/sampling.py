"""Choosing tokens: greedy verification and the exact speculative-sampling rule (Leviathan et al. / Chen et al.).

Both take the target's logits for the K+1 positions of one verify pass and the K drafted tokens, and return
(n_accepted, next_token): the first n drafts are kept and next_token follows them (the target's correction at the
first mismatch, or its bonus token when all K were accepted).
"""
from __future__ import annotations

import torch


def warp(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Probabilities after temperature and nucleus (top-p) filtering; the same warp is applied to target and draft,
    so 'the target's distribution' that sampling preserves is this warped one."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        cumulative = torch.cumsum(sorted_probs, dim=-1)
        # Keep the smallest set whose mass reaches top_p (always at least the most likely token).
        drop_sorted = cumulative - sorted_probs >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.multinomial(probs, 1, generator=generator))


# torch.argmax walks a row one lane at a time (over 151,936 logits a few % of a draft step, per row of a verify
# pass), its amax is vectorised (an order of magnitude faster): so the max of each of this many chunks, then the first
# chunk that holds the row's max, then the first index within it.
ARGMAX_CHUNKS = 64


def first_argmax(logits: torch.Tensor) -> list[int]:
    """torch.argmax(logits, dim=-1) for each row, as a list: the first index of the largest value (of the first
    NaN where there is one), whatever the row's width."""
    width = logits.shape[-1]
    rows = logits.reshape(-1, width)
    if width % ARGMAX_CHUNKS or width < 4 * ARGMAX_CHUNKS:
        return torch.argmax(rows, dim=-1).tolist()
    chunks = rows.view(rows.shape[0], ARGMAX_CHUNKS, width // ARGMAX_CHUNKS)
    first_chunk = torch.argmax(chunks.amax(dim=-1), dim=-1)
    within = torch.argmax(chunks[torch.arange(rows.shape[0], device=rows.device), first_chunk], dim=-1)
    return (first_chunk * (width // ARGMAX_CHUNKS) + within).tolist()


def accept_greedy(target_logits: torch.Tensor, drafted: list[int]) -> tuple[int, int]:
    """Keep drafts while they equal the target's argmax; the output is exactly target-alone greedy."""
    choices = first_argmax(target_logits)
    n = 0
    while n < len(drafted) and drafted[n] == choices[n]:
        n += 1
    return n, choices[n]


def to_width(q: torch.Tensor | None, width: int) -> torch.Tensor | None:
    """The draft's distribution over the target's ids. Models of one family may pad their output layers to different
    widths (Qwen2.5-Coder 7B: 152,064, 0.5B: 151,936); the ids past the draft's width are never drafted (q = 0)."""
    if q is None or q.shape[-1] == width:
        return q
    if q.shape[-1] > width:
        return q[..., :width]
    return torch.nn.functional.pad(q, (0, width - q.shape[-1]))


def accept_sampled(target_logits: torch.Tensor, drafted: list[int], draft_probs: list[torch.Tensor | None],
                   temperature: float, top_p: float, generator: torch.Generator | None) -> tuple[int, int]:
    """Accept draft x with probability min(1, p(x)/q(x)); at the first rejection sample from norm(max(0, p - q));
    when all K are accepted sample the bonus token from p. A None in draft_probs means the drafter was
    deterministic (q is one-hot on its token), as for the n-gram lookup drafter."""
    p = warp(target_logits, temperature, top_p)
    for i, token in enumerate(drafted):
        p_i = p[i]
        q_i = to_width(draft_probs[i], p_i.shape[-1])
        q_x = 1.0 if q_i is None else float(q_i[token])
        p_x = float(p_i[token])
        u = float(torch.rand((), generator=generator))
        if q_x > 0 and u < min(1.0, p_x / q_x):
            continue
        if q_i is None:
            residual = p_i.clone()
            residual[token] = 0.0
        else:
            residual = torch.clamp(p_i - q_i, min=0.0)
        total = float(residual.sum())
        if total <= 0.0:  # p == q up to rounding: any sample from p is correct
            residual, total = p_i, float(p_i.sum())
        return i, sample(residual / total, generator)
    return len(drafted), sample(p[len(drafted)], generator)


def chosen_probs(target_logits: torch.Tensor, tokens: list[int]) -> list[float]:
    """The target's probability of tokens[i] at row i of a verify pass: exp(logit - logsumexp(row)), only over the
    rows committed (a few vectorised reductions per pass, next to the pass itself negligible)."""
    if not tokens:
        return []
    rows = target_logits.reshape(-1, target_logits.shape[-1])[:len(tokens)].float()
    index = torch.tensor(tokens, device=rows.device).unsqueeze(1)
    picked = rows.gather(1, index).squeeze(1)
    return torch.exp(picked - torch.logsumexp(rows, dim=-1)).tolist()


def ranked_first(target_logits: torch.Tensor, rank: int) -> int | None:
    """The first row's (rank+1)-th most likely token, or None where fewer tokens are possible (masked to -inf)."""
    row = target_logits.reshape(-1, target_logits.shape[-1])[0].float()
    if rank >= row.shape[-1]:
        return None
    values, ids = torch.topk(row, rank + 1)
    return int(ids[rank]) if bool(torch.isfinite(values[rank])) else None


def force_first(target_logits: torch.Tensor, token: int) -> torch.Tensor:
    """The logits with the first row allowing only `token`: greedy and sampling both choose it there."""
    forced = torch.full_like(target_logits[0], float("-inf"))
    forced[token] = 0.0
    logits = target_logits.clone()
    logits[0] = forced
    return logits
