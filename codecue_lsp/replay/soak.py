"""The soak verdict: after warm-up, does the server's memory stay flat and does none of its structures grow?

Input: the runner's samples, each {"request": requests sent so far, "rss_mb", "resources": {name: size}}.
- Warm-up ends at the first sample at or after WARMUP_FRACTION of the run's requests; its values are the baseline.
- RSS: the level it settles at must not move by more than RSS_TOLERANCE after warm-up. A level is the median of
  RSS_WINDOW consecutive samples: one sample can catch the transient buffers of the request just answered (a
  prefill's attention scores), and glibc's allocator keeps or returns freed memory in steps of a few %, neither of
  which is memory the server keeps growing. Judged: the level at the end against the level just after warm-up, and
  the median of the second half of the samples after warm-up against the first half (a leak moves both; a step up
  that stays flat moves neither much). The raw min/max/last and the largest single deviation are reported too.
- Resources: each size's value at warm-up and its max after warm-up are reported. A size "grows" when the second
  half of the samples after warm-up reaches a higher max than the first half, unless it stays within the cap the
  server puts on that structure (CodeCue's latency window and type-through LRU, one piece of background work; a
  short run may still be filling them). A bounded structure that fills up levels off and passes; a leak keeps
  setting new highs and fails.
  Non-numeric states (engine_busy, engine_phase) are not sizes and are left out.
"""
from __future__ import annotations

import statistics

from ..telemetry import LATENCY_WINDOW
from ..typethrough import TypeThroughCache

WARMUP_FRACTION = 0.2
RSS_TOLERANCE = 0.05
RSS_WINDOW = 9
MIN_SAMPLES_AFTER_WARMUP = 4


def known_caps() -> dict[str, int]:
    """Sizes that CodeCue's own structures fill up to by design: reaching them is not growth."""

    # background: at most one piece of background work at a time (scheduler.Scheduler), a next line or a growth
    return {"latency_samples": LATENCY_WINDOW, "typethrough_entries": TypeThroughCache().max_entries,
            "background": 1}


def warmup_index(samples: list[dict], requests: int, warmup_fraction: float = WARMUP_FRACTION) -> int | None:
    """Index of the first sample at or after the warm-up point, or None when no sample is."""
    point = warmup_fraction * requests
    return next((i for i, s in enumerate(samples) if s["request"] >= point), None)


def sizes(sample: dict) -> dict[str, float]:
    return {name: value for name, value in (sample.get("resources") or {}).items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)}


def rolling_median(values: list[float], window: int) -> list[float]:
    return [statistics.median(values[max(0, i - window + 1):i + 1]) for i in range(len(values))]


def rss_verdict(samples: list[dict], start: int, tolerance: float) -> dict:
    """RSS from sample `start` (the warm-up point) on."""
    values = [s["rss_mb"] for s in samples]
    if any(v is None for v in values):
        return {"ok": False, "error": "no RSS reading (needs /proc or psutil)"}
    raw = values[start:]
    window = min(RSS_WINDOW, max(1, len(raw) // 2))
    baseline = statistics.median(raw[:window])  # the level just after warm-up
    end = statistics.median(raw[-window:])
    half = len(raw) // 2
    halves = statistics.median(raw[half:]) - statistics.median(raw[:half]) if half else 0.0
    drift, shift = (end - baseline) / baseline, halves / baseline
    smooth = rolling_median(raw, window)
    return {
        "at_warmup": baseline, "min": min(raw), "max": max(raw), "last": raw[-1],
        "drift_pct": drift * 100.0,
        "halves_shift_pct": shift * 100.0,
        "max_deviation_pct": max(abs(v - baseline) for v in smooth) / baseline * 100.0,
        "raw_max_deviation_pct": max(abs(v - baseline) for v in raw) / baseline * 100.0,
        "window": window,
        "tolerance_pct": tolerance * 100.0,
        "ok": abs(drift) <= tolerance and abs(shift) <= tolerance,
    }


def resource_verdicts(after: list[dict], caps: dict[str, int]) -> dict[str, dict]:
    half = (len(after) + 1) // 2
    out = {}
    for name in sizes(after[0]):
        series = [sizes(s).get(name, 0) for s in after]
        first_max, second_max = max(series[:half]), max(series[half:])
        cap = caps.get(name)
        out[name] = {"at_warmup": series[0], "max_after_warmup": max(series), "last": series[-1],
                     "first_half_max": first_max, "second_half_max": second_max, "cap": cap,
                     "grew": second_max > first_max and (cap is None or second_max > cap)}
    return out


def verdict(samples: list[dict], requests: int, warmup_fraction: float = WARMUP_FRACTION,
            rss_tolerance: float = RSS_TOLERANCE, caps: dict[str, int] | None = None) -> dict:
    start = warmup_index(samples, requests, warmup_fraction)
    after = samples[start:] if start is not None else []
    out: dict = {"requests": requests, "samples": len(samples), "warmup_fraction": warmup_fraction,
                 "warmup_request": after[0]["request"] if after else None, "samples_after_warmup": len(after)}
    if len(after) < MIN_SAMPLES_AFTER_WARMUP:
        out.update(passed=False, failures=[f"{len(after)} samples after warm-up; needs "
                                           f"{MIN_SAMPLES_AFTER_WARMUP} (sample more often or replay more requests)"])
        return out
    out["rss_mb"] = rss_verdict(samples, start, rss_tolerance)
    out["resources"] = resource_verdicts(after, known_caps() if caps is None else caps)
    failures = []
    if not out["rss_mb"]["ok"]:
        rss = out["rss_mb"]
        failures.append(rss.get("error") or f"RSS level moved {rss['drift_pct']:+.1f} % by the end and "
                                             f"{rss['halves_shift_pct']:+.1f} % between the halves after warm-up "
                                             f"(from {rss['at_warmup']:.0f} MB; allowed {rss['tolerance_pct']:.0f} %)")
    failures += [f"{name} grew: {r['first_half_max']} -> {r['second_half_max']} (at warm-up {r['at_warmup']})"
                 for name, r in out["resources"].items() if r["grew"]]
    out.update(passed=not failures, failures=failures)
    return out


def verdict_lines(label: str, soak: dict) -> list[str]:
    """A few lines for the terminal."""
    lines = [f"[{label}] soak {'PASSED' if soak['passed'] else 'FAILED'}: {soak['samples_after_warmup']} samples "
             f"after warm-up (request {soak['warmup_request']} of {soak['requests']})"]
    rss = soak.get("rss_mb") or {}
    if "at_warmup" in rss:
        lines.append(f"  RSS MB at warm-up {rss['at_warmup']:.1f}, min {rss['min']:.1f}, max {rss['max']:.1f}, "
                     f"last {rss['last']:.1f}; level (median of {rss['window']} samples) at the end {rss['drift_pct']:+.2f} %, "
                     f"second half vs first {rss['halves_shift_pct']:+.2f} %; largest level deviation {rss['max_deviation_pct']:.2f} % (single samples "
                     f"{rss['raw_max_deviation_pct']:.2f} %)")
    for name, r in (soak.get("resources") or {}).items():
        lines.append(f"  {name}: at warm-up {r['at_warmup']}, max after {r['max_after_warmup']}"
                     f"{'  GREW' if r['grew'] else ''}")
    lines += [f"  failure: {failure}" for failure in soak["failures"]]
    return lines
