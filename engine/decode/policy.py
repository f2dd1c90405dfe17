"""Drafting by expected gain (drafter "auto"): per pass, pick the drafter and K that maximise expected tokens per
second on this machine, from what a pass costs here and how often this session's drafts have been accepted.

With per-token acceptance α and K drafted tokens, a target pass yields E = (1 − α^(K+1)) / (1 − α) tokens on
average and costs T_verify(K+1) + K·T_draft (fewer draft passes where the model's lookup extension fills the
draft). Target alone yields 1 token per T_verify(1). Drafting is chosen only when it beats that by a margin, so on
a machine where drafting does not pay nothing is drafted (apart from rare, ever rarer probes that keep the
acceptance estimate honest).

The draft model's own draft length is decided as it drafts (`GainPolicy.keep_drafting`): its probability of each
token it drafts predicts acceptance far better than a mean rate (at >= 0.9 nearly always), so it drafts on while one
more token raises the pass's expected tokens per ms, up to the request's budget.

Pass costs (engine/decode/pass_costs.py) come from a calibration (attached to the loaded pair as `pair.costs`) or from
a neutral guess, and are refined online from the loop's own timings either way.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from engine.decode.pass_costs import PREFILL_MIN_TOKENS, PassCosts

LOOKUP_SOURCES = ("prompt", "workspace", "history")
# A lookup draft's acceptance by how many context tokens its match spans (Draft.matched): over the bench prompts and
# holes cut from this repository's code, the longer the match the likelier each drafted token is right (nearly always
# from 16 tokens on). One rate for every lookup cut the long matches to the short ones' length.
MATCH_BUCKETS = ((16, "match16"), (8, "match8"), (4, "match4"), (0, "match2"))
# A draft-model token's acceptance by the model's own probability of it (its confidence): teacher-forced over the bench
# prompts (the target's greedy text, the draft model's pick at each position) nearly every token drafted at >= 0.9
# was the target's, and fewer the lower the confidence. So the draft model drafts on while it is sure, not to a K
# fixed before it starts (`GainPolicy.keep_drafting`).
CONFIDENCE_BUCKETS = ((0.9, "conf90"), (0.8, "conf80"), (0.5, "conf50"), (0.0, "conf00"))
CONFIDENCE_SEEDS = {"conf90": 0.95, "conf80": 0.85, "conf50": 0.6, "conf00": 0.3}


def confidence_bucket(confidence: float) -> str:
    """The acceptance a draft-model token drafted with this probability is counted under."""
    return next((name for least, name in CONFIDENCE_BUCKETS if confidence >= least), "conf00")  # NaN: the lowest


def match_bucket(matched: int) -> str | None:
    """The acceptance a lookup draft matching `matched` context tokens is counted under; None for no match."""
    return next(name for least, name in MATCH_BUCKETS if matched >= least) if matched else None


def expected_tokens(alpha: float, k: int) -> float:
    """Mean tokens per target pass: accepted drafts plus the target's own token."""
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def rate(costs: PassCosts, drafter: str, k: int, alpha: dict[str, float], hit: float, catchup_tokens: int = 0,
         remaining: int = 64, model_k: int | None = None) -> float:
    """Expected tokens per millisecond of one pass with this drafter and K.

    lookup: finds a match with probability `hit` (K tokens offered); otherwise the pass is a plain one. hybrid:
    the same, but a miss falls back to the draft model with model_k tokens. The draft model first catches up on
    the tokens it has not seen (priced by width, engine/decode/pass_costs.py); that cost is spread over the `remaining`
    tokens of the request. (Charging short catch-ups, the lookups' tokens since the model last drafted, to the pass
    alone measured no different: docs/performance.md, "Levers measured and set aside".)"""
    def model(kk: int) -> tuple[float, float]:  # (tokens, ms) of a pass drafted by the model
        tokens = expected_tokens(alpha["draft"], kk)
        catchup_ms = costs.catchup(catchup_tokens) * min(1.0, tokens / max(remaining, 1))
        return tokens, costs.verify(kk + 1) + costs.draft_passes(kk) * costs.draft() + catchup_ms

    plain = (1.0, costs.verify(1))
    if drafter == "none" or k == 0:
        tokens, ms = plain
    elif drafter == "draft":
        tokens, ms = model(k)
    elif drafter in ("lookup", "hybrid"):
        model_k = k if model_k is None else model_k
        miss_tokens, miss_ms = model(model_k) if drafter == "hybrid" and model_k > 0 else plain
        tokens = hit * expected_tokens(alpha["lookup"], k) + (1 - hit) * miss_tokens
        ms = costs.lookup() + hit * costs.verify(k + 1) + (1 - hit) * miss_ms
    else:
        raise ValueError(f"unknown drafter {drafter!r}")
    return tokens / ms


@dataclass
class Choice:
    drafter: str
    k: int  # tokens to ask the drafter for (for lookup and hybrid: the lookup's)
    model_k: int  # tokens the draft model drafts when it drafts (hybrid: after a lookup miss)
    rate: float  # expected tokens per ms


def best_choice(costs: PassCosts, drafters, max_k: int, alpha: dict[str, float], hit: float,
                catchup_tokens: int = 0, remaining: int = 64, margin: float = 1.05) -> Choice:
    """The (drafter, K) with the highest expected rate; drafting must beat target alone by `margin`.

    Two decisions, each conditional on what the pass finds: does the draft model beat plain decoding where the
    lookup finds nothing (its K on its own), and is a lookup first worth its cost given how often it hits.
    (Not one rate over a blend of hits and misses: matches come in runs, where the text repeats, so a miss says
    "here the text is new", and there the model is the only help.)"""
    plain = rate(costs, "none", 0, alpha, hit)
    best = Choice("none", 0, 0, plain)
    if "draft" in drafters:
        for k in range(1, max_k + 1):
            r = rate(costs, "draft", k, alpha, hit, catchup_tokens, remaining)
            if r > max(best.rate, plain * margin):
                best = Choice("draft", k, k, r)
    lookup = "hybrid" if best.drafter == "draft" and "hybrid" in drafters else "lookup"
    if lookup in drafters:
        floor = max(best.rate, plain * margin)
        for k in range(1, max_k + 1):
            r = rate(costs, lookup, k, alpha, hit, catchup_tokens, remaining, best.model_k)
            if r > floor:
                best, floor = Choice(lookup, k, best.model_k, r), r
    return best


@dataclass
class SharedAcceptance:
    """Acceptance and lookup hit counts pooled over every session of an engine, decaying slowly: a new document
    starts from what drafting has been earning on this machine and this user's code, not from an optimistic guess
    (the bench's fresh sessions showed the guess costing a draft-model prefill on every new document)."""
    trials: dict[str, list[float]] = field(default_factory=dict)
    hits: list[float] = field(default_factory=lambda: [0.0, 0.0])
    # Decaying [tokens, completions] finished, per request kind (CompletionRequest.kind): single lines stop after
    # ~5-15 tokens, blocks run to 50-64, and priced over the lines' lengths a block's draft-model catch-up never
    # paid under AVX2.
    lengths: dict[str, list[float]] = field(default_factory=dict)
    decay: float = 0.98
    min_tried: float = 4.0  # below this much evidence a source keeps the session's optimistic seed
    # Trials' worth of the pooled rate a new session starts from. The draft model's acceptance (overall and by its
    # confidence) is the pair's on this user's code, much the same in every document: at 2 trials one miss at a
    # line's start took it from 0.9 to 0.64 and the model's K to 2, a third target pass on a 5-9-token line. How often
    # the prompt repeats itself is the document's own: the lookups' seed stays light.
    seed_weights: dict[str, float] = field(
        default_factory=lambda: {"draft": 8.0, **{name: 8.0 for _, name in CONFIDENCE_BUCKETS}})

    def add(self, source: str, accepted: float, tried: float) -> None:
        old = self.trials.get(source, [0.0, 0.0])
        self.trials[source] = [self.decay * old[0] + accepted, self.decay * old[1] + tried]

    def add_hit(self, found: bool) -> None:
        self.hits = [self.decay * self.hits[0] + found, self.decay * self.hits[1] + 1]

    def add_length(self, tokens: int, kind: str = "") -> None:
        old = self.lengths.get(kind, (0.0, 0.0))
        self.lengths[kind] = [self.decay * old[0] + tokens, self.decay * old[1] + 1]

    def typical_length(self, kind: str = "") -> float | None:
        """Tokens a completion of this kind has been running to (a single line stops after ~5-15 of its 64
        allowed); None before a few have finished."""
        tokens, count = self.lengths.get(kind, (0.0, 0.0))
        return tokens / count if count >= self.min_tried else None

    def seed(self, source: str, default: list[float]) -> list[float]:
        """A session's starting counts: the pooled rate, weighted by `seed_weights` (else like the optimistic
        seed)."""
        accepted, tried = self.trials.get(source, (0.0, 0.0))
        weight = self.seed_weights.get(source, default[1])
        return [weight * accepted / tried, weight] if tried >= self.min_tried else list(default)


@dataclass
class Shadow:
    """A lookup draft nobody verified: scored against the tokens the target then wrote, so measuring how often the
    lookup is right costs no pass (a probe pass costs well over a plain one where verifying is compute-bound)."""
    start: int  # len(tokens) when proposed: guesses[i] guesses tokens[start + i]
    guesses: list[int]
    source: str
    before: list[int]  # the tokens just before start: a new request (another prompt) drops the shadow
    matched: int = 0  # the lookup's match length (Draft.matched)

    TAIL = 16

    @classmethod
    def of(cls, tokens: list[int], guesses: list[int], source: str, matched: int = 0) -> "Shadow":
        return cls(len(tokens), list(guesses), source, tokens[-cls.TAIL:], matched)

    def same_text(self, tokens: list[int]) -> bool:
        return len(tokens) >= self.start and tokens[max(self.start - self.TAIL, 0):self.start] == self.before

    def score(self, tokens: list[int]) -> tuple[int, int] | None:
        """(accepted, tried) as a verify pass would have counted them, once known; None while it still matches."""
        written = tokens[self.start:self.start + len(self.guesses)]
        for i, (guess, actual) in enumerate(zip(self.guesses, written)):
            if guess != actual:
                return i, i + 1
        return (len(written), len(written)) if len(written) == len(self.guesses) else None


class GainPolicy:
    """One session's drafting policy: asked for (drafter, K) before each pass, told what happened after it.

    Acceptance is a per-token estimate per source: every drafted token up to and including the first rejection
    is one trial (the geometric model behind E), kept as decaying counts seeded optimistically so that drafting
    gets tried. When the policy settles on target alone it still probes a drafter now and then, with K = 2 and
    with the gap between probes doubling each time, so a session whose drafts are never accepted does O(log n)
    probe passes. Given the request's lookup drafter (`lookup`), it never probes the lookup: while the lookup is
    not drafting, its proposals are scored in the shadow against what the target writes (`Shadow`). While lookups
    alone carry the session, the draft model is probed the same way, on a lookup miss
    (`_probe_model_under_lookup`)."""

    def __init__(self, costs: PassCosts, drafters=("none", "lookup", "draft", "hybrid"), max_k: int = 8,
                 draft_lag=None, seed_alpha: float = 0.8, decay: float = 0.9, probe_every: int = 8,
                 max_probe_every: int = 512, shared: SharedAcceptance | None = None,
                 length_by_confidence: bool = True):
        self.costs, self.drafters, self.max_k = costs, tuple(drafters), max_k
        self.draft_lag = draft_lag  # tokens -> how many of them the draft model has not seen yet
        self.decay = decay
        self.shared = shared
        self.kind = ""  # the request's kind (CompletionRequest.kind, set by the engine): completion lengths per kind
        seeds = {s: seed_alpha for s in ("draft", "lookup", "extension", *LOOKUP_SOURCES,
                                          *(b for _, b in MATCH_BUCKETS))} | CONFIDENCE_SEEDS
        self.trials = {s: shared.seed(s, [2 * a, 2.0]) if shared else [2 * a, 2.0]  # [accepted, tried]
                       for s, a in seeds.items()}
        # The draft model drafts while keep_drafting says another token pays, up to max_k; False: up to the K the gain
        # model picks from the model's mean acceptance, stopping below the drafter's min_confidence.
        self.length_by_confidence = length_by_confidence
        # Decaying count of lookup calls that found a match, of calls.
        self.hits = ([shared.hits[0] / shared.hits[1], 1.0] if shared and shared.hits[1] >= shared.min_tried
                     else [0.5, 1.0])
        self.min_probe_every, self.max_probe_every = probe_every, max_probe_every
        self.probe_every, self.since_drafting = probe_every, 0
        self.enabled = True  # False while the policy prefers target alone
        self.probes = 0
        # Lookup-only passes since the draft model last drafted, and the gap before it is probed under a lookup.
        self.since_model, self.model_probe_every = 0, probe_every
        self.model_probes = 0
        self.model_k = 0  # the draft model's K in the pass just chosen (hybrid: its K after a lookup miss)
        self.lookup = None  # the request's LookupDrafter (set by the engine): enables the shadow
        self.shadow: Shadow | None = None
        self.shadow_scored = 0  # shadow drafts scored (for tests and stats)

    def alpha(self, source: str) -> float:
        accepted, tried = self.trials[source]
        return accepted / tried

    def hit_rate(self) -> float:
        return self.hits[0] / self.hits[1]

    def choose(self, tokens: list[int], max_k: int) -> tuple[str, int]:
        if max_k <= 0:
            return "none", 0
        self._score_shadow(tokens)
        drafter, k = self._choose(tokens, max_k)
        if self.model_k and self.length_by_confidence:  # keep_drafting sizes the model's draft, within the budget
            self.model_k = min(max_k, self.max_k)
            k = self.model_k if drafter == "draft" else k
        if drafter in ("lookup", "hybrid"):
            self.shadow = None  # the real draft measures the lookup now
            k = min(max_k, self.max_k)  # a lookup's tokens cost nothing to propose: `review` cuts by its match
        elif self.lookup is not None and self.shadow is None:
            self._propose_shadow(tokens, min(max_k, self.max_k))
        return drafter, k

    def _choose(self, tokens: list[int], max_k: int) -> tuple[str, int]:
        remaining, max_k = self.expected_remaining(max_k + 1), min(max_k, self.max_k)
        alpha = {"draft": self.alpha("draft"), "lookup": self.alpha("lookup")}
        lag = self.draft_lag(tokens) if self.draft_lag and any(d in ("draft", "hybrid") for d in self.drafters) else 0
        choice = best_choice(self.costs, self.drafters, max_k, alpha, self.hit_rate(), lag, remaining)
        self.enabled = choice.drafter != "none"
        if self.enabled:
            self.since_drafting, self.probe_every = 0, self.min_probe_every
            choice = self._probe_model_under_lookup(choice, max_k, lag, remaining)
        else:
            self.since_drafting += 1
            if self.since_drafting < self.probe_every:
                return "none", 0
            # Probe what would pay best if its drafts were mostly right; never what could not pay even then. The
            # shadow measures the lookup for free: then only the draft model is worth a probe.
            hopeful = {"draft": 0.9, "lookup": 0.9}
            probed = [d for d in self.drafters if self.lookup is None or d not in ("lookup", "hybrid")]
            choice = best_choice(self.costs, probed, min(max_k, 2), hopeful, max(self.hit_rate(), 0.5),
                                 lag, remaining)
            self.since_drafting, self.probe_every = 0, min(2 * self.probe_every, self.max_probe_every)
            self.probes += choice.drafter != "none"
        self.model_k = choice.model_k
        return choice.drafter, choice.k

    def _probe_model_under_lookup(self, choice: Choice, max_k: int, lag: int, remaining: int) -> Choice:
        """While lookups carry the session the draft model is not measured: two rejections at a completion's start
        (its first tokens are its hardest) took its estimate from 0.9 to 0.41 and kept it off for the rest of a
        64-token hole, where it would have been right 3 times in 4 (the lookup-only passes after a miss each gave
        one token). So after a run of lookup-only passes the model drafts where the lookup next misses (hybrid
        passes until it has drafted once: `report` disarms), with the gap between such probes doubling while
        they do not win it back; never where the model could not pay even if mostly right."""
        if choice.drafter != "lookup" or "hybrid" not in self.drafters:
            if choice.model_k:
                self.since_model, self.model_probe_every = 0, self.min_probe_every
            return choice
        self.since_model += 1
        if self.since_model < self.model_probe_every:
            return choice
        hopeful = best_choice(self.costs, ("none", "draft"), min(max_k, 2), {"draft": 0.9, "lookup": 0.0}, 0.0,
                              lag, remaining)
        if hopeful.drafter != "draft":
            self.since_model = 0
            return choice
        return Choice("hybrid", choice.k, hopeful.k, choice.rate)

    def keep_drafting(self, confidences: list[float]) -> bool:
        """After the draft model's tokens drafted with these confidences: does one more raise the expected tokens
        per ms of the pass? Each token is accepted with its confidence bucket's rate once all before it were; the
        next token's confidence is not known yet, so it is taken to be the last one's bucket (the model is sure in
        runs: a name's first token is the hard one). Costs: one more draft step, and a verify one token wider."""
        drafted = len(confidences)
        if drafted == 0:
            return True
        chances = [self.alpha(confidence_bucket(c)) for c in confidences]
        reach, tokens = 1.0, 1.0  # P(every draft so far accepted), expected tokens of the pass
        for chance in chances:
            reach *= chance
            tokens += reach
        step = self.costs.draft()
        ms, more_ms = (drafted * step + self.costs.verify(drafted + 1),
                       (drafted + 1) * step + self.costs.verify(drafted + 2))
        return (tokens + reach * chances[-1]) / more_ms > tokens / ms

    def expected_remaining(self, allowed: int) -> int:
        """The tokens a draft model's catch-up is spread over: what completions of this kind have been running to,
        not what the request allows (a catch-up of a 300-token prompt priced over 64 tokens looked cheap, and the line
        stopped after 9: auto ran slower than target alone on single-line holes)."""
        typical = self.shared.typical_length(self.kind) if self.shared is not None else None
        return allowed if typical is None else max(1, min(allowed, round(typical)))

    def _score_shadow(self, tokens: list[int]) -> None:
        shadow = self.shadow
        if shadow is None:
            return
        if not shadow.same_text(tokens):
            self.shadow = None  # another request's text: its guesses say nothing here
            return
        outcome = shadow.score(tokens)
        if outcome is not None:
            self._add_trials(shadow.source, *outcome, matched=shadow.matched)
            self.shadow, self.shadow_scored = None, self.shadow_scored + 1

    def _propose_shadow(self, tokens: list[int], k: int) -> None:
        draft = self.lookup.propose(tokens, k, lambda: False)
        self.costs.observe_lookup(1000.0 * draft.lookup_seconds)
        self._add_hit(bool(draft.tokens))
        if draft.tokens:
            self.shadow = Shadow.of(tokens, draft.tokens, draft.source, draft.matched)

    def _add_hit(self, found: bool) -> None:
        self.hits = [self.decay * self.hits[0] + found, self.decay * self.hits[1] + 1]
        if self.shared is not None:
            self.shared.add_hit(found)

    def _add_trials(self, source: str, accepted: int, tried: int, matched: int = 0) -> None:
        bucket = match_bucket(matched) if source in LOOKUP_SOURCES else None
        for name in [source] + (["lookup"] if source in LOOKUP_SOURCES else []) + ([bucket] if bucket else []):
            if name in self.trials:
                old = self.trials[name]
                self.trials[name] = [self.decay * old[0] + accepted, self.decay * old[1] + tried]
                if self.shared is not None:
                    self.shared.add(name, accepted, tried)

    def review(self, draft):
        """Cut a lookup draft to the length its match's acceptance pays for (by how many context tokens the match
        spans, else by its source; at least one token: the acceptance must keep being measured, and the drafter
        choice itself already paid off on average). A model draft's lookup extension is cut the same way, to none at
        all where it has been wrong."""
        if draft.extended:
            return self._review_extension(draft)
        if draft.source not in LOOKUP_SOURCES or len(draft.tokens) <= 1:
            return draft
        alpha = self.alpha(match_bucket(draft.matched) or draft.source)
        best = max(range(1, len(draft.tokens) + 1),
                   key=lambda k: expected_tokens(alpha, k) / self.costs.verify(k + 1))
        return draft.cut(best)

    def _review_extension(self, draft):
        """Keep e of the extension's tokens where that gives the most tokens per ms: the model's m tokens yield
        E(α_draft, m); only when all m are accepted (α_draft^m) do the extension's tokens count. The draft
        passes are spent either way, but belong in the rate."""
        m = draft.own
        alpha_model, alpha_ext = self.alpha("draft"), self.alpha("extension")
        spent = draft.passes * self.costs.draft()

        def rate(e: int) -> float:
            tokens = expected_tokens(alpha_model, m) + alpha_model ** m * (expected_tokens(alpha_ext, e) - 1.0)
            return tokens / (spent + self.costs.verify(m + e + 1))
        return draft.cut(m + max(range(draft.extended + 1), key=rate))

    def report(self, drafter: str, draft, accepted: int, verify_seconds: float) -> None:
        self.costs.observe_verify(len(draft.tokens) + 1, 1000.0 * verify_seconds)
        if draft.catchup_tokens >= PREFILL_MIN_TOKENS:
            self.costs.observe_prefill(1000.0 * draft.catchup_seconds / draft.catchup_tokens)
        elif draft.catchup_tokens:  # one pass over that many tokens (not a step: under AVX2 it cost four)
            self.costs.observe_draft_width(draft.catchup_tokens, 1000.0 * draft.catchup_seconds)
        if draft.steps:
            self.costs.observe_draft(1000.0 * draft.step_seconds / draft.steps)
        for width, seconds in draft.wide_steps:  # steps that checked lookup guesses (engine/decode/step_guesses.py)
            self.costs.observe_draft_width(width, 1000.0 * seconds)
        if draft.source == "draft" and draft.passes and len(draft.tokens) > 1:
            # In one-token steps' worth: a step over 1 + g tokens costs more than one but may yield g + 1 tokens.
            passes = draft.passes + sum(self.costs.draft_width(width) / self.costs.draft() - 1.0
                                        for width, _ in draft.wide_steps)
            extra = (passes - 1) / (len(draft.tokens) - 1)
            self.costs.observe_extra_passes(min(2.0, max(0.0, extra)))
        if drafter in ("lookup", "hybrid"):
            self.costs.observe_lookup(1000.0 * draft.lookup_seconds)
            self._add_hit(draft.source in LOOKUP_SOURCES)
        if draft.source == "draft" and self.since_model:
            if self.since_model >= self.model_probe_every:  # a probe under lookups: the next one waits longer
                self.model_probes += 1
                self.model_probe_every = min(2 * self.model_probe_every, self.max_probe_every)
            self.since_model = 0
        if draft.tokens:
            self._add_trials(draft.source, accepted, accepted + (accepted < len(draft.tokens)), draft.matched)
        by_bucket: dict[str, list[int]] = {}  # [accepted, tried] per confidence bucket, up to the first rejection
        for position, confidence in enumerate(draft.confidences[:accepted + 1]):
            counts = by_bucket.setdefault(confidence_bucket(confidence), [0, 0])
            counts[0], counts[1] = counts[0] + (position < accepted), counts[1] + 1
        for bucket, (kept, tried) in by_bucket.items():
            self._add_trials(bucket, kept, tried)
        if draft.extended and accepted >= draft.own:  # the extension was reached: its own trials
            kept = accepted - draft.own
            self._add_trials("extension", kept, kept + (kept < draft.extended))
