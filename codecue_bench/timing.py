"""Latency summaries shared by the server and cancel benchmarks."""
from __future__ import annotations


def ms(seconds: float) -> float:
    return round(seconds * 1000.0, 1)


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered)) - 1))]


def latency_summary(values: list[float]) -> dict:
    return {"p50": percentile(values, 50), "p90": percentile(values, 90), "max": max(values) if values else 0.0}


def distribution(values: list[float]) -> dict:
    return {"n": len(values), "p50": percentile(values, 50), "p99": percentile(values, 99),
            "max": max(values, default=0.0)}
