"""Numbers from a replay: latency percentiles, timeliness, accuracy; and the side-by-side table for --compare.

Definitions (per inline-completion request):
- latency: request sent -> result received, over requests answered without being cancelled first.
- shown in time: a non-empty result arrived before the next keystroke (the editor could show it).
- line exact match: the suggestion's first line equals the first line of what the user typed next (trailing
  whitespace ignored), over requests whose truth's first line has code and that the server answered.
  `line_exact_match_shown` counts only suggestions shown in time, over all such requests.
- line exact match where all answered (runs compared): the same, over the requests every run answered. A faster
  server answers requests a slower one lets the next keystroke cancel, often mid-word ones that are harder to get
  right, so over its own answers it can score lower with the very same completions (`make demo` has shown
  speculative below target alone, though their outputs are identical).
- accepted: a suggestion shown in time (answered, under --as-fast-as-possible) whose first line matches exactly;
  chars saved: the length of the common prefix of suggestion and truth (truth spans up to a few lines).
- cancel latency: `$/cancelRequest` sent -> the server's response to the cancelled request.
- soak: RSS and resource sizes after warm-up, from the samples taken during the run (see soak.py).
"""
from __future__ import annotations

import json
import math

from .runner import RunResult
from .soak import verdict


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), q in [0, 100]."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def fraction(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def summarize(result: RunResult) -> dict:
    records = result.records
    outcomes = {name: sum(1 for r in records if r.outcome == name)
                for name in ("answered", "empty", "cancelled", "error", "timeout")}
    latencies = [r.latency_ms for r in records if r.latency_ms is not None]
    cancel_latencies = [r.cancel_latency_ms for r in records if r.cancel_latency_ms is not None]
    timed = result.speed is not None
    shown = sum(1 for r in records if r.shown_in_time)
    scored = [r for r in records if r.scored]
    scored_answered = [r for r in scored if r.exact_match is not None]
    visible = (lambda r: r.shown_in_time) if timed else (lambda r: r.outcome == "answered")
    accepted = [r for r in records if r.exact_match and visible(r)]
    return {
        "label": result.label,
        "requests": len(records),
        "keystrokes": result.keystrokes,
        **outcomes,
        "cancels_sent": sum(1 for r in records if r.t_cancel is not None),
        "latency_ms": {f"p{q}": percentile(latencies, q) for q in (50, 90, 99)}
        | {"mean": sum(latencies) / len(latencies) if latencies else None, "n": len(latencies)},
        "cancel_latency_ms": {f"p{q}": percentile(cancel_latencies, q) for q in (50, 90, 99)}
        | {"n": len(cancel_latencies)},
        "shown_in_time": fraction(shown, len(records)) if timed else None,
        "scored_requests": len(scored),
        "line_exact_match": fraction(sum(1 for r in scored_answered if r.exact_match), len(scored_answered)),
        "line_exact_match_shown": fraction(sum(1 for r in scored if r.exact_match and visible(r)), len(scored)),
        "accepted": len(accepted),
        "chars_saved_per_accepted": (sum(r.chars_saved for r in accepted) / len(accepted)) if accepted else None,
        "chars_saved_total": sum(r.chars_saved for r in accepted),
        "peak_rss_mb": result.peak_rss_mb,
        "wall_s": result.wall_s,
        "server_error": result.server_error,
        "server_stats": result.server_stats,
        "soak": verdict(result.samples, len(records)) if result.samples else None,
    }


def summarize_all(results: list[RunResult]) -> list[dict]:
    """summarize() of each run, with line exact match over the requests that every run answered (by request
    index: the runs replay the same trace)."""
    summaries = [summarize(r) for r in results]
    answered = [{r.index: r for r in result.records if r.scored and r.exact_match is not None} for result in results]
    common = set.intersection(*(set(by_index) for by_index in answered)) if answered else set()
    for summary, by_index in zip(summaries, answered):
        summary["answered_by_all"] = len(common)
        summary["line_exact_match_all_answered"] = fraction(sum(1 for i in common if by_index[i].exact_match),
                                                            len(common))
    return summaries


def report_json(results: list[RunResult], trace_path: str) -> dict:
    return {
        "trace": trace_path,
        "runs": [{"summary": summary, **r.as_dict()} for summary, r in zip(summarize_all(results), results)],
    }


def write_json(path: str, results: list[RunResult], trace_path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report_json(results, trace_path), f, indent=1)


# (row title, how to get it from a summary, format, compare as a ratio to the first run)
TABLE_ROWS = [
    ("requests", lambda s: s["requests"], "{:d}", False),
    ("latency p50 ms", lambda s: s["latency_ms"]["p50"], "{:.1f}", True),
    ("latency p90 ms", lambda s: s["latency_ms"]["p90"], "{:.1f}", True),
    ("latency p99 ms", lambda s: s["latency_ms"]["p99"], "{:.1f}", True),
    ("shown in time", lambda s: s["shown_in_time"], "{:.1%}", True),
    ("line exact match", lambda s: s["line_exact_match"], "{:.1%}", True),
    ("... where all answered", lambda s: s.get("line_exact_match_all_answered"), "{:.1%}", True),
    ("exact match shown", lambda s: s["line_exact_match_shown"], "{:.1%}", True),
    ("chars saved/accepted", lambda s: s["chars_saved_per_accepted"], "{:.1f}", True),
    ("cancelled", lambda s: s["cancelled"], "{:d}", False),
    ("cancel p50 ms", lambda s: s["cancel_latency_ms"]["p50"], "{:.1f}", True),
    ("errors+timeouts", lambda s: s["error"] + s["timeout"], "{:d}", False),
    ("peak RSS MB", lambda s: s["peak_rss_mb"], "{:.0f}", True),
]


def cell(value, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def ratio_cell(value, first) -> str:
    if value is None or first in (None, 0):
        return ""
    return f" ({value / first:.2f}x)"


def comparison_table(summaries: list[dict]) -> str:
    """Plain-text table, one column per run, with each later run's ratio to the first."""
    header = ["", *[s["label"] for s in summaries]]
    rows = [header]
    for title, get, fmt, as_ratio in TABLE_ROWS:
        first = get(summaries[0])
        row = [title]
        for index, summary in enumerate(summaries):
            value = get(summary)
            text = cell(value, fmt)
            if as_ratio and index > 0:
                text += ratio_cell(value, first)
            row.append(text)
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(text.ljust(widths[i]) if i == 0 else text.rjust(widths[i]) for i, text in enumerate(row))
             for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    for summary in summaries:
        if summary["server_error"]:
            lines.append(f"{summary['label']}: {summary['server_error']}")
    return "\n".join(lines)
