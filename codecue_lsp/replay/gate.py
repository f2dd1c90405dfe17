"""Choosing minConfidence offline: from replay reports (`codecue-replay run --json`, each request's suggestion with the
server's confidence for it, item `codecue.confidence`), which threshold raises accepted ÷ shown without costing
characters saved per keystroke, chosen on one set of traces and reported on another.

A threshold t holds back every suggestion whose confidence is below t, as the server's gate does for automatic
requests: the suggestion is no longer shown, so neither accepted nor saving characters. Suggestions without a
confidence (type-through answers, a backend without probabilities) are never held back. Not simulated: a held-back
suggestion is not remembered for type-through either, so in a live run the keystrokes typed into it would ask the
engine afresh; replaying with --compare "gate=--min-confidence T" measures that too.
Definitions as in report.py: shown = shown in time (answered, without a clock); accepted = shown and its first line
exactly what was typed next; chars saved per keystroke = characters saved by accepted suggestions ÷ keystrokes.
"""
from __future__ import annotations

import json

MAX_SAVED_DROP = 0.05  # the gate may cost at most this fraction of the characters saved per keystroke


def run_of(report: dict, label: str | None = None) -> dict:
    """The report's run with this label (default: its first)."""
    runs = report.get("runs") or []
    for run in runs:
        if label is None or run.get("label") == label:
            return run
    raise ValueError(f"no run labelled {label!r} in the report" if label else "the report has no runs")


def outcome(run: dict, threshold: float) -> dict:
    """shown / accepted / chars saved per keystroke of a run had the gate held back suggestions below threshold."""
    records, keystrokes = run["records"], run.get("keystrokes") or 0
    timed = run.get("speed") is not None

    def visible(record: dict) -> bool:
        return bool(record["shown_in_time"]) if timed else record["outcome"] == "answered"

    def kept(record: dict) -> bool:
        confidence = record.get("confidence")
        return confidence is None or confidence >= threshold
    shown = [r for r in records if visible(r) and kept(r)]
    accepted = [r for r in shown if r.get("exact_match")]
    saved = sum(r.get("chars_saved", 0) for r in accepted)
    return {
        "threshold": threshold,
        "requests": len(records),
        "shown": len(shown),
        "shown_in_time": len(shown) / len(records) if timed and records else None,
        "accepted": len(accepted),
        "accepted_per_shown": len(accepted) / len(shown) if shown else None,
        "chars_saved_per_keystroke": saved / keystrokes if keystrokes else None,
    }


def choose_threshold(run: dict, max_drop: float = MAX_SAVED_DROP) -> float:
    """The threshold (0: off, or one of the run's confidences) with the highest accepted ÷ shown among those whose
    chars saved per keystroke is at least (1 - max_drop) of no gate's; the lowest such threshold on a tie."""
    base = outcome(run, 0.0)
    floor = (base["chars_saved_per_keystroke"] or 0.0) * (1.0 - max_drop)
    best, best_rate = 0.0, base["accepted_per_shown"] or 0.0
    confidences = sorted({r["confidence"] for r in run["records"] if r.get("confidence") is not None})
    for threshold in confidences:
        result = outcome(run, threshold)
        rate = result["accepted_per_shown"] or 0.0
        if (result["chars_saved_per_keystroke"] or 0.0) >= floor and rate > best_rate:
            best, best_rate = threshold, rate
    return best


def gate_report(choose_from: dict, report_on: dict, label: str | None = None) -> dict:
    threshold = choose_threshold(run_of(choose_from, label))
    run = run_of(report_on, label)
    return {"threshold": threshold, "chosen_on": choose_from.get("trace"), "reported_on": report_on.get("trace"),
            "without_gate": outcome(run, 0.0), "with_gate": outcome(run, threshold)}


def gate_table(result: dict) -> str:
    def cell(value, fmt: str) -> str:
        return "-" if value is None else fmt.format(value)
    rows = [("minConfidence", "0 (off)", f"{result['threshold']:.4g}")]
    for title, key, fmt in (("shown in time", "shown_in_time", "{:.1%}"), ("shown", "shown", "{:d}"),
                            ("accepted / shown", "accepted_per_shown", "{:.1%}"),
                            ("chars saved / keystroke", "chars_saved_per_keystroke", "{:.3f}")):
        rows.append((title, cell(result["without_gate"][key], fmt), cell(result["with_gate"][key], fmt)))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [f"chosen on {result['chosen_on']}, reported on {result['reported_on']}"]
    lines += ["  ".join(text.ljust(widths[0]) if i == 0 else text.rjust(widths[i]) for i, text in enumerate(row))
              for row in [("", "no gate", "gate")] + rows]
    return "\n".join(lines)


def read_report(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)
