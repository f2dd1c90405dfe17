"""A self-contained HTML report: summary table, latency CDF and per-request timelines (PNG embedded as base64), and
for runs sampled during the replay the soak curve (RSS and resource sizes against request number) as inline SVG."""
from __future__ import annotations

import base64
import html
import io

from .report import comparison_table, summarize, summarize_all
from .runner import RunResult
from .soak import RSS_TOLERANCE, RSS_WINDOW, rolling_median, sizes, verdict_lines

OUTCOME_STYLE = {  # outcome -> (colour, marker, legend)
    "shown": ("tab:green", "o", "shown in time"),
    "late": ("tab:orange", "o", "answered after the next keystroke"),
    "empty": ("tab:gray", ".", "empty answer"),
    "cancelled": ("tab:blue", "x", "cancelled (cancel latency)"),
    "error": ("tab:red", "X", "error"),
    "timeout": ("black", "X", "no answer"),
}


def figure_png(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def latency_cdf(results: list[RunResult]) -> str:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for result in results:
        latencies = sorted(r.latency_ms for r in result.records if r.latency_ms is not None)
        if latencies:
            ax.step(latencies, [(i + 1) / len(latencies) for i in range(len(latencies))], where="post",
                    label=result.label)
    ax.set_xlabel("latency (ms, request -> response)")
    ax.set_ylabel("fraction of answered requests")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend()
    png = figure_png(fig)
    plt.close(fig)
    return png


def timeline_kind(record) -> str:
    if record.outcome == "answered":
        return "late" if record.shown_in_time is False else "shown"
    return record.outcome


def timeline(result: RunResult) -> str:
    """One point per request: x = when it was sent, y = how long until its answer (or its cancel's answer)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 3.5))
    for kind, (colour, marker, legend) in OUTCOME_STYLE.items():
        points = [(r.t_sent, r.latency_ms if r.latency_ms is not None else (r.cancel_latency_ms or 0.0))
                  for r in result.records if timeline_kind(r) == kind]
        if points:
            ax.scatter([p[0] for p in points], [p[1] for p in points], s=12, c=colour, marker=marker,
                       label=f"{legend} ({len(points)})")
    ax.set_xlabel("replay time (s)")
    ax.set_ylabel("ms")
    ax.set_title(result.label)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    png = figure_png(fig)
    plt.close(fig)
    return png


def figure_svg(fig) -> str:
    """The figure as an <svg> element to put straight into the page (text stays text: smaller, searchable)."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buffer, format="svg", bbox_inches="tight")
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # without the XML declaration and DOCTYPE


def soak_curve(result: RunResult, soak: dict) -> str:
    """RSS (with the warm-up point and the allowed band) and every resource size, against request number."""
    import matplotlib.pyplot as plt

    requests = [s["request"] for s in result.samples]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    rss = [s["rss_mb"] for s in result.samples]
    if all(v is not None for v in rss):
        top.plot(requests, rss, color="tab:purple", alpha=0.4, linewidth=1, label="server RSS (MB)")
        top.plot(requests, rolling_median(rss, RSS_WINDOW), color="tab:purple",
                 label=f"median of {RSS_WINDOW} samples (judged)")
    baseline = (soak.get("rss_mb") or {}).get("at_warmup")
    if baseline is not None:
        top.axhspan(baseline * (1 - RSS_TOLERANCE), baseline * (1 + RSS_TOLERANCE), color="tab:green", alpha=0.12,
                    label=f"warm-up value +-{RSS_TOLERANCE:.0%}")
    for ax in (top, bottom):
        if soak.get("warmup_request") is not None:
            ax.axvline(soak["warmup_request"], color="gray", linestyle="--", linewidth=1)
        ax.grid(alpha=0.3)
    top.set_ylabel("MB")
    top.set_title(f"{result.label}: soak {'passed' if soak['passed'] else 'FAILED'} (dashed line: end of warm-up)")
    top.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    names = sorted({name for s in result.samples for name in sizes(s)})
    for name in names:
        bottom.step(requests, [sizes(s).get(name, 0) for s in result.samples], where="post", label=name)
    bottom.set_yscale("symlog", linthresh=10)  # sizes from 0-1 (in flight) to thousands (latency samples)
    bottom.set_xlabel("requests sent")
    bottom.set_ylabel("entries")
    if names:
        bottom.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    svg = figure_svg(fig)
    plt.close(fig)
    return svg


def soak_sections(results: list[RunResult]) -> str:
    parts = []
    for result in results:
        soak = summarize(result)["soak"]
        if soak is None or len(result.samples) < 2:
            continue
        parts.append(f"<h2>Soak: {html.escape(result.label)}</h2>\n{soak_curve(result, soak)}\n"
                     f"<pre>{html.escape(chr(10).join(verdict_lines(result.label, soak)))}</pre>")
    return "\n".join(parts)


def render(results: list[RunResult], trace_path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    table = comparison_table(summarize_all(results))
    images = [("Latency CDF", latency_cdf(results))] + [(f"Timeline: {r.label}", timeline(r)) for r in results]
    body = "\n".join(f"<h2>{html.escape(title)}</h2>\n<img alt='{html.escape(title)}' src='data:image/png;base64,"
                     f"{png}'>" for title, png in images)
    body += "\n" + soak_sections(results)
    commands = "\n".join(f"<li><b>{html.escape(r.label)}</b>: <code>{html.escape(' '.join(r.command))}</code></li>"
                         for r in results)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>codecue-replay: {html.escape(trace_path)}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}} pre{{background:#f4f4f4;padding:1em}}</style>
</head><body>
<h1>codecue-replay</h1>
<p>Trace <code>{html.escape(trace_path)}</code></p>
<ul>{commands}</ul>
<pre>{html.escape(table)}</pre>
{body}
</body></html>
"""


def write_html(path: str, results: list[RunResult], trace_path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(render(results, trace_path))
