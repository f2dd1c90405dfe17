"""Local usage counters (log + memory only; nothing is ever sent anywhere). `codecue.stats` returns `snapshot()`."""
from __future__ import annotations

import asyncio
import logging
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

LATENCY_WINDOW = 2000  # latency percentiles cover the last this many requests (a soak sees it fill, then stay)

COUNTERS = ("requests", "completed", "empty", "cancelled", "superseded", "stale", "typethrough_hits", "not_ready",
            "shown", "accepted", "rejected", "errors",
            # the backend could not answer (a remote engine down, a 5xx, a timeout): not a cancel, not an answer
            "failed",
            # the line after a taken suggestion or a resting cursor's line, written in the background (next_line.py):
            # started (of them: at a rest), written, answered
            "next_line_started", "next_line_at_rest", "next_line_ready", "next_line_hits",
            # a cold start's full-size prompt made ready in the background (growth.py): started, taken over
            "growth_started", "growth_taken",
            # the prompt where the cursor rests, made ready before a keystroke there (warmup.py): started, ready
            "warmup_started", "warmup_ready")


@dataclass
class EngineTotals:
    """Sums over every backend.Completion: `codecue.stats`' "engine"."""
    results: int = 0
    cancelled: int = 0
    failed: int = 0  # the backend could not answer (a remote endpoint down): not counted as cancelled
    drafted: int = 0
    accepted: int = 0
    target_passes: int = 0
    generated_tokens: int = 0
    prompt_tokens_reused: int = 0
    prompt_tokens_new: int = 0
    seconds: float = 0.0  # engine time of all results
    last_seconds: float = 0.0  # engine time of the latest result (one worker: results arrive in request order)

    def add(self, completion) -> None:
        stats = completion.stats
        self.results += 1
        self.seconds += stats.seconds_total
        self.last_seconds = stats.seconds_total
        self.cancelled += completion.outcome == "cancelled"
        self.failed += completion.outcome == "failed"
        self.drafted += stats.drafted
        self.accepted += stats.accepted
        self.target_passes += stats.target_passes
        self.generated_tokens += completion.generated_tokens
        self.prompt_tokens_reused += stats.reused_prompt_tokens
        self.prompt_tokens_new += stats.new_prompt_tokens

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["acceptance_rate"] = self.accepted / self.drafted if self.drafted else 0.0
        out["mean_tokens_per_pass"] = (self.generated_tokens / self.target_passes) if self.target_passes else 0.0
        return out


@dataclass
class Telemetry:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    latencies_ms: deque = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))
    accepted_chars: int = 0
    shown_chars: int = 0
    engine: EngineTotals = field(default_factory=EngineTotals)

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def latency(self, seconds: float) -> None:
        self.latencies_ms.append(seconds * 1000.0)

    def on_shown(self, event: dict) -> None:
        self.count("shown")
        self.shown_chars += _int(event.get("length"))
        logger.info("completion shown: %s", event)

    def on_accepted(self, event: dict) -> None:
        self.count("accepted")
        self.accepted_chars += _int(event.get("acceptedLength", event.get("length")))
        logger.info("completion accepted: %s", event)

    def on_rejected(self, event: dict) -> None:
        self.count("rejected")
        logger.info("completion rejected: %s", event)

    def snapshot(self) -> dict[str, Any]:
        lat = sorted(self.latencies_ms)
        out: dict[str, Any] = dict(self.counts)
        out["latency_ms"] = {
            "count": len(lat),
            "mean": statistics.fmean(lat) if lat else 0.0,
            "p50": percentile(lat, 50),
            "p90": percentile(lat, 90),
        }
        out["accepted_chars"] = self.accepted_chars
        out["shown_chars"] = self.shown_chars
        out["engine"] = self.engine.as_dict()
        return out


def count_engine_results(future, tel: Telemetry) -> None:
    """Count every backend result, also of requests whose handler was cancelled before the backend stopped."""
    loop = asyncio.get_running_loop()

    def done(f) -> None:
        if not f.cancelled() and f.exception() is None:
            try:
                loop.call_soon_threadsafe(tel.engine.add, f.result())
            except RuntimeError:  # the loop has closed: the server is exiting
                pass
    future.add_done_callback(done)


def percentile(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile of already sorted values (0.0 when empty)."""
    if not sorted_values:
        return 0.0
    rank = max(1, -(-len(sorted_values) * pct // 100))  # ceil
    return float(sorted_values[int(rank) - 1])


def _int(value: Any) -> int:
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def plain(value: Any) -> Any:
    """Custom methods' params as plain JSON values: pygls hands them over as (nested) namedtuples."""
    if hasattr(value, "_asdict"):
        value = value._asdict()
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def event_params(params: Any) -> dict:
    """Custom notification params as a dict; anything else counts as no fields."""
    params = plain(params)
    if isinstance(params, dict):
        return params
    return {}
