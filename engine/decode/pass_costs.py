"""What a pass costs on this machine (engine/decode/policy.py's input): the target's pass by width, the draft model's
step and catch-ups, the lookup; from a calibration (engine/loading/choice.pass_costs_from) or a neutral guess,
learned online from the loop's own timings either way."""
from __future__ import annotations

from dataclasses import dataclass, field

# Without a calibration: the shape of a bandwidth-bound verify pass (ms, K+1 tokens -> about the cost of one),
# rescaled by the first real timings; and c = draft pass / target pass ≈ 0.4 (0.5B vs 1.5B on CPU).
NEUTRAL_VERIFY_MS = {1: 100.0, 2: 104.0, 4: 112.0, 8: 135.0, 16: 190.0}
NEUTRAL_DRAFT_RATIO = 0.4
# Without a calibration on a GPU (its dense bf16 format is not calibrated): the H200's compiled passes of the 1.5B /
# 0.5B shapes (docs/performance.md, "GPU: one NVIDIA H200"): launch-bound, so a 9-token verify costs little more than
# a one-token pass and the draft model's pass nearly the target's: there the draft model rarely pays, lookup drafts do.
GPU_VERIFY_MS = {1: 3.34, 4: 4.47, 9: 4.48}
GPU_DRAFT_RATIO = 0.82
NEUTRAL_LOOKUP_MS = 0.2
OUTLIER_RATIO = 2.0  # a timing counts as at most this many times the estimate it updates (PassCosts._learn)
NEUTRAL_PREFILL_RATIO = 0.1  # the draft model's catch-up, ms per token ÷ its one-token pass
PREFILL_MIN_TOKENS = 16  # catch-ups at least this long teach the prefill cost per token (engine/quant.PREFILL_ROWS)


@dataclass
class PassCosts:
    """What one pass costs on this machine, in milliseconds.

    verify_ms: target pass cost by width (tokens in the pass: 1 = plain decoding, K+1 = verify K drafts); widths
    in between are interpolated, beyond the largest extrapolated along the last segment.
    draft_ms: the draft model's one-token pass (None: no draft model, or not measured).
    draft_pass_ms: the draft model's pass by width (None: not measured; then the target's shape, scaled).
    draft_prefill_ms: the draft model's prefill, ms per token (None: not measured).
    A catch-up (tokens the draft model has not seen, fed in its first pass) is priced by width up to the widest
    pass measured, and by the prefill rate beyond: a short catch-up costs more than the prefill rate says (under the
    AVX2 emulation an 8-token one costs about four one-token passes).
    The draft model's K tokens cost 1 + (K − 1)·extra_passes one-token passes' worth: 1 without its lookup
    extension, less where the extension fills drafts for free or a step's lookup guesses were the model's tokens
    (engine/decode/step_guesses.py; a step over 1 + g tokens counts draft_width(1 + g) ÷ draft()), learned online
    (`observe_extra_passes`).
    The observed_* fields are learned online (exponential moving averages of the loop's own timings); estimates
    prefer them and rescale the prior's shape to them where a width was never seen. calibrated: the prior was
    measured on this machine, so the first timing of a width moves it by the EMA's weight rather than replacing it
    (a first call's one-time costs made the draft model's pass look far dearer than it is, and the policy, drafting
    with it no more, never saw it cheaper; the neutral guess is only a shape, and the first timing replaces it). The
    draft model's calibrated figures the loop has not timed yet move with the target's timings (`drift`)."""
    verify_ms: dict[int, float] = field(default_factory=lambda: dict(NEUTRAL_VERIFY_MS))
    draft_ms: float | None = None
    draft_pass_ms: dict[int, float] | None = None
    draft_prefill_ms: float | None = None
    draft_ratio: float = NEUTRAL_DRAFT_RATIO  # draft pass ÷ target pass where draft_ms is not known
    observed_verify: dict[int, float] = field(default_factory=dict)
    observed_draft: float | None = None
    observed_draft_widths: dict[int, float] = field(default_factory=dict)  # the draft model's passes over 2-15 tokens
    observed_prefill: float | None = None
    observed_lookup: float | None = None
    observed_extra_passes: float | None = None
    ema_weight: float = 0.2
    calibrated: bool = False
    _verify_cache: dict[int, float] = field(default_factory=dict, repr=False, compare=False)
    _draft_width_cache: dict[int, float] = field(default_factory=dict, repr=False, compare=False)

    def verify(self, width: int) -> float:
        cached = self._verify_cache.get(width)
        if cached is None:
            cached = self._verify_cache[width] = interpolate(self._verify_table(), width)
        return cached

    def _verify_table(self) -> dict[int, float]:
        return rescaled(self.verify_ms, self.observed_verify)

    def catchup(self, tokens: int) -> float:
        """What feeding `tokens` the draft model has not seen costs beyond the one-token pass it replaces."""
        return max(0.0, self.draft_width(tokens) - self.draft()) if tokens > 1 else 0.0

    def draft_width(self, width: int) -> float:
        """The draft model's pass over `width` tokens (a catch-up, or a step that checks lookup guesses): by the
        widths measured up to the widest, at the prefill rate beyond."""
        cached = self._draft_width_cache.get(width)
        if cached is None:
            cached = self._draft_width_cache[width] = self._draft_width(width)
        return cached

    def _draft_width(self, width: int) -> float:
        if self.draft_pass_ms is not None:
            prior = {w: ms * self.drift() for w, ms in self.draft_pass_ms.items()}
        else:  # not measured: the target's shape at the draft model's one-token cost
            prior = {w: ms * self.draft() / self.verify(1) for w, ms in self._verify_table().items()}
        observed = dict(self.observed_draft_widths)
        if self.observed_draft is not None:
            observed[1] = self.observed_draft
        table = rescaled(prior, observed)
        widest = max(table)
        return interpolate(table, min(width, widest)) + (width - min(width, widest)) * self.prefill()

    def draft(self) -> float:
        if self.observed_draft is not None:
            return self.observed_draft
        return self.draft_ms * self.drift() if self.draft_ms is not None else self.draft_ratio * self.verify(1)

    def prefill(self) -> float:
        if self.observed_prefill is not None:
            return self.observed_prefill
        if self.draft_prefill_ms is not None:
            return self.draft_prefill_ms * self.drift()
        return NEUTRAL_PREFILL_RATIO * self.draft()

    def drift(self) -> float:
        """How much dearer the target's passes run now than the calibration timed them (< 1: cheaper), at the width
        measured nearest to one token. The draft model's calibrated figures not yet timed here move with it: both
        were timed in the same minute, so their ratio holds where the absolute figures do not (under the AVX2
        emulation a calibration on a busy host priced both high; the loop then timed the target cheaper, and the
        draft model, still priced at its busy figure and so never drafting, never showed it was cheaper too)."""
        return self.verify(1) / interpolate(self.verify_ms, 1)  # the learned table is the prior rescaled this way

    def draft_passes(self, k: int) -> float:
        """Draft model passes (in one-token passes' worth) a K-token draft costs."""
        extra = 1.0 if self.observed_extra_passes is None else self.observed_extra_passes
        return 1.0 + (k - 1) * extra if k > 0 else 0.0

    def lookup(self) -> float:
        return self.observed_lookup if self.observed_lookup is not None else NEUTRAL_LOOKUP_MS

    def observe_verify(self, width: int, ms: float) -> None:
        self.observed_verify[width] = self._learn(self.observed_verify.get(width), lambda: self.verify(width), ms)
        self._verify_cache.clear()
        self._draft_width_cache.clear()  # an unmeasured draft model's widths take the target's shape

    def observe_draft(self, ms: float) -> None:
        self.observed_draft = self._learn(self.observed_draft, self.draft, ms)
        self._draft_width_cache.clear()

    def observe_draft_width(self, width: int, ms: float) -> None:
        self.observed_draft_widths[width] = self._learn(self.observed_draft_widths.get(width),
                                                        lambda: self.draft_width(width), ms)
        self._draft_width_cache.clear()

    def observe_prefill(self, ms_per_token: float) -> None:
        self.observed_prefill = self._learn(self.observed_prefill, self.prefill, ms_per_token)
        self._draft_width_cache.clear()

    def observe_extra_passes(self, ratio: float) -> None:
        self.observed_extra_passes = self._ema(self.observed_extra_passes, ratio)

    def observe_lookup(self, ms: float) -> None:
        self.observed_lookup = self._ema(self.observed_lookup, ms)

    def _learn(self, old: float | None, prior, new: float) -> float:
        """The EMA of a cost the loop timed; its first timing moves a calibrated prior (prior()) rather than
        replacing it. A timing over OUTLIER_RATIO x the estimate counts as that much: a process's first passes
        (lazy set-up: several times a steady pass) took the estimates far up at the EMA's weight, and a policy that
        then drafted one token a pass never timed a draft step again (the confidence rule's first completions drafted
        one token each). A real slowdown is still followed, at up to +20 % a timing."""
        base = prior() if old is None and self.calibrated else old
        return self._ema(base, new if base is None else min(new, OUTLIER_RATIO * base))

    def _ema(self, old: float | None, new: float) -> float:
        return new if old is None else old + self.ema_weight * (new - old)


def uncalibrated_costs(device_type: str) -> PassCosts:
    """The prior where no calibration ran: the H200's measured shape on a GPU, the neutral guess elsewhere."""
    if device_type == "cuda":
        return PassCosts(verify_ms=dict(GPU_VERIFY_MS), draft_ratio=GPU_DRAFT_RATIO)
    return PassCosts()


def rescaled(prior: dict[int, float], observed: dict[int, float]) -> dict[int, float]:
    """The prior's shape, each width scaled to match the nearest width measured here; measured widths as measured."""
    if not observed:
        return prior
    table = {}
    for w, ms in prior.items():
        near = min(observed, key=lambda o: (abs(o - w), o))
        table[w] = ms * observed[near] / interpolate(prior, near)
    table.update(observed)
    return table


def interpolate(table: dict[int, float], width: int) -> float:
    """Piecewise-linear in width; below the smallest width its cost, beyond the largest along the last segment."""
    points = sorted(table.items())
    if len(points) == 1:  # one width measured: assume cost grows in proportion (pessimistic for drafting)
        w, ms = points[0]
        return ms * max(width, w) / w
    if width <= points[0][0]:
        return points[0][1]
    for (w0, ms0), (w1, ms1) in zip(points, points[1:]):
        if width <= w1:
            return ms0 + (ms1 - ms0) * (width - w0) / (w1 - w0)
    (w0, ms0), (w1, ms1) = points[-2], points[-1]
    return max(ms1, ms1 + (ms1 - ms0) * (width - w1) / (w1 - w0))
