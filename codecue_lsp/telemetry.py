"""Local usage counters (log + memory only; nothing is ever sent anywhere). `codecue.stats` returns `snapshot()`."""
from __future__ import annotations

import asyncio
import logging
import statistics
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

ID_MEMORY = 10_000  # suggestion ids remembered, so each is counted once; older ones fall off (a soak stays flat)
LATENCY_WINDOW = 2000  # latency percentiles cover the last this many requests (a soak sees it fill, then stay)

COUNTERS = ("requests", "completed", "empty", "cancelled", "superseded", "stale", "typethrough_hits", "not_ready",
            # shown / accepted / rejected: once per suggestion id (a notification without one counts once itself)
            "shown", "accepted", "rejected", "errors",
            # requests the user made (triggerKind Invoked), the alternatives returned to them (alternatives.py), and
            # automatic suggestions held back by minConfidence
            "invoked", "alternatives", "gated",
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


class SeenIds:
    """The last ID_MEMORY suggestion ids of one kind of event."""

    def __init__(self, size: int = ID_MEMORY) -> None:
        self.size, self.ids = size, OrderedDict()

    def first_time(self, suggestion_id: str) -> bool:
        if suggestion_id in self.ids:
            self.ids.move_to_end(suggestion_id)
            return False
        self.ids[suggestion_id] = None
        if len(self.ids) > self.size:
            self.ids.popitem(last=False)
        return True

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class Telemetry:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    latencies_ms: deque = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))
    accepted_chars: int = 0
    shown_chars: int = 0
    # retention.py: accepted characters still there 30 s later, of those checked; checks not yet run
    retained_chars: int = 0
    retention_checked_chars: int = 0
    retention_pending: int = 0
    engine: EngineTotals = field(default_factory=EngineTotals)
    seen: dict[str, SeenIds] = field(default_factory=lambda: {name: SeenIds() for name in ("shown", "accepted",
                                                                                          "rejected")})

    def first_time(self, kind: str, event: dict) -> bool:
        """Whether this event is the first of its kind for its suggestion: always for an event without an id."""
        suggestion_id = event.get("id")
        if not isinstance(suggestion_id, str) or not suggestion_id:
            return True
        return self.seen[kind].first_time(suggestion_id)

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def latency(self, seconds: float) -> None:
        self.latencies_ms.append(seconds * 1000.0)

    def on_shown(self, event: dict) -> None:
        if self.first_time("shown", event):
            self.count("shown")
            self.shown_chars += _int(event.get("length"))
        logger.info("completion shown: %s", _logged(event))

    def on_accepted(self, event: dict) -> None:
        """One accepted suggestion per id; every accept (a partial one too) adds the characters it took."""
        if self.first_time("accepted", event):
            self.count("accepted")
        self.accepted_chars += accepted_length(event)
        logger.info("completion accepted: %s", _logged(event))

    def on_rejected(self, event: dict) -> None:
        if self.first_time("rejected", event):
            self.count("rejected")
        logger.info("completion rejected: %s", _logged(event))

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
        out["retained_chars"] = self.retained_chars
        out["retention_checked_chars"] = self.retention_checked_chars
        out["retention_pending"] = self.retention_pending
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


def accepted_length(event: dict) -> int:
    """The characters one accept took: acceptedLength, else the accepted text's length, else the suggestion's."""
    if "acceptedLength" in event:
        return _int(event["acceptedLength"])
    if isinstance(event.get("text"), str):
        return len(event["text"])
    return _int(event.get("length"))


def _logged(event: dict) -> dict:
    """The event without the accepted text: the log says how much, not the user's code."""
    if isinstance(event.get("text"), str):
        return {**event, "text": f"<{len(event['text'])} characters>"}
    return event


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
