"""The engine's public data types: what a caller sends, what it gets back, and how it cancels."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable, Literal, Sequence

FinishReason = Literal["eos", "stop", "length", "cancelled"]
# "auto" picks among the others pass by pass, by expected tokens per second on this machine (engine/decode/policy.py).
DrafterName = Literal["auto", "none", "draft", "lookup", "hybrid"]


class CancelToken:
    """Set from any thread; the decode loop checks it before every draft step and every verify pass, and every model
    pass checks it between two decoder layers (engine/interrupt.py), so a long prefill stops within one layer."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []

    def set(self) -> None:
        with self._lock:
            self._event.set()
            listeners = list(self._listeners)
        for listener in listeners:
            listener()

    def is_set(self) -> bool:
        return self._event.is_set()

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call listener when the token is set (at once if it already is): for code that cannot ask is_set() itself,
        such as llama.cpp's compute threads (engine/weights/llamacpp.py)."""
        with self._lock:
            self._listeners.append(listener)
            already = self._event.is_set()
        if already:
            listener()

    def remove_listener(self, listener: Callable[[], None]) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)


@dataclass
class CompletionRequest:
    prompt_ids: Sequence[int]
    max_new_tokens: int = 64
    temperature: float = 0.0  # 0 = greedy (exact); > 0 = sampling with the exact rejection rule
    top_p: float = 1.0
    seed: int | None = None
    # Called with the decoded text generated so far; True ends generation with finish_reason "stop".
    stop: Callable[[str], bool] | None = None
    session: str | None = None  # e.g. the document URI: KV caches are reused between requests of one session
    drafter: DrafterName = "auto"
    max_draft_tokens: int = 8  # upper bound for adaptive K
    adaptive_k: bool = True  # False pins K = max_draft_tokens and keeps drafting on (explicit drafters only)
    # Token healing (engine/decode/healing.py): the bytes of the prompt's backed-off last token. The first generated
    # token must start with them, and the text returned (and seen by `stop`) is what follows them.
    heal: bytes = b""
    # The first this-many prompt tokens are what the next keystroke's request will likely share (the whole prompt when
    # the typed line comes after the FIM middle): a cancelled prefill pass inside them ends rather than losing its
    # work, unless the request that follows does not share it after all (kvcache.SharedPasses).
    shared_prefix: int = 0
    # What the client asks for ("line" or "block": the server's prompt mode; "" unknown). The auto policy expects a
    # completion to run as long as earlier ones of its kind: single lines stop after ~5-15 tokens, blocks run to 50-64.
    kind: str = ""
    # 0: the target's own first token (greedy's). r > 0: the first generated token is the target's (r+1)-th most likely
    # at the first position (after healing's mask), and the rest continues as usual: another suggestion for a user who
    # asks for more (the server's alternatives). No such token (healing allows fewer): an empty result, reason "eos".
    first_rank: int = 0


@dataclass
class CompletionStats:
    prompt_tokens: int = 0
    reused_prompt_tokens: int = 0  # prompt tokens whose KV came from the session cache (target)
    new_prompt_tokens: int = 0  # prompt tokens the target had to prefill
    target_passes: int = 0  # target forward passes after prefill (each verifies up to K+1 positions)
    drafted: int = 0
    accepted: int = 0
    draft_passes: int = 0
    seconds_prefill: float = 0.0
    seconds_draft: float = 0.0
    seconds_verify: float = 0.0
    seconds_total: float = 0.0
    # When the first pass's tokens were committed, and how many it gave: decode speed is counted after them, as
    # llama.cpp counts its own (its first token comes with the prompt's last batch).
    seconds_first_token: float = 0.0
    first_pass_tokens: int = 0
    speculation_enabled: bool = True  # False when the session's acceptance collapsed and drafting was switched off
    passes_by_drafter: dict[str, int] = field(default_factory=dict)  # target passes by the drafter chosen for them
    drafted_by_source: dict[str, int] = field(default_factory=dict)  # "draft", "prompt", "workspace", "history"
    accepted_by_source: dict[str, int] = field(default_factory=dict)

    def count_pass(self, drafter: str, source: str, drafted: int, accepted: int, verify_seconds: float,
                   extended: int = 0) -> None:
        """extended: the last of the drafted tokens came from the draft model's lookup extension (counted apart, as
        source "extension")."""
        self.target_passes += 1
        self.seconds_verify += verify_seconds
        self.drafted += drafted
        self.accepted += accepted
        self.passes_by_drafter[drafter] = self.passes_by_drafter.get(drafter, 0) + 1
        own = drafted - extended
        for name, tried, kept in ((source, own, min(accepted, own)), ("extension", extended, max(accepted - own, 0))):
            if tried:
                self.drafted_by_source[name] = self.drafted_by_source.get(name, 0) + tried
                self.accepted_by_source[name] = self.accepted_by_source.get(name, 0) + kept

    @property
    def mean_accepted(self) -> float:
        """Mean tokens produced per target pass (accepted drafts + the target's own token)."""
        return self.produced / self.target_passes if self.target_passes else 0.0

    @property
    def produced(self) -> int:
        """Tokens the target passes produced, a stop token included."""
        return self.accepted + self.target_passes

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def as_dict(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["mean_accepted"] = self.mean_accepted
        out["acceptance_rate"] = self.acceptance_rate
        return out


@dataclass
class CompletionResult:
    text: str
    token_ids: list[int]
    finish_reason: FinishReason
    stats: CompletionStats = field(default_factory=CompletionStats)
    # The target's probability (softmax of its logits, temperature 1) of each token of token_ids, from the verify
    # passes that chose them; the first token's under healing's mask, when there is one.
    token_probs: list[float] = field(default_factory=list)
