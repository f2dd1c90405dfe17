"""N simulated developers at once against one engine: `codecue-replay run TRACE --clients N` (or `--clients 1,2,4`).

Each client is a whole editor session of its own: its own server process (the same command, e.g. `codecue-lsp
--stdio --engine http://HOST:PORT/v1`, so all of them share that one engine), and its own copies of the trace's
documents under distinct URIs and file names. Nobody types until every client's server is ready (loading is not
load on the engine); then client k (1-based) starts (k - 1) * stagger seconds later, so the clients do not send
the same keystroke at the same instant.

Numbers, per client and overall (all clients pooled), for each client count:
- latency p50 / p90 / p99: request sent -> result, over requests answered before a keystroke cancelled them.
- completions: requests that got a result (non-empty or empty) without being cancelled first.
- completions per second: completions / the span the clients typed for, on the replay's clock (per client: from
  its first event to its last answer; overall: from the first client's start to the last client's last answer).
- cancelled: requests the next keystroke superseded before their answer came (`$/cancelRequest` was sent).
"""
from __future__ import annotations

import asyncio
import html
import json
from dataclasses import dataclass, field

from .report import percentile
from .runner import Replay, RunResult, ServerConfig


def parse_client_counts(text: str) -> list[int]:
    """`4` or `1,2,4`: the client counts to run, one after the other."""
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise ValueError(f"--clients wants positive counts like 4 or 1,2,4, got {text!r}")
    return counts


def client_uri(uri: str, client: int) -> str:
    """Client k's own copy of a document: its own folder and its own file name. The file name goes into the prompt
    (`<|file_sep|>name`), so a distinct name also keeps one simulated developer's prompts from matching another's in
    the engine's prefix cache, as different developers' files would not."""
    head, slash, name = uri.rpartition("/")
    if slash:
        return f"{head}/client{client}/client{client}-{name}"
    scheme, colon, rest = uri.partition(":")  # e.g. untitled:Untitled-1
    return f"{scheme}:client{client}-{rest}" if colon else f"client{client}-{uri}"


def client_events(events: list[dict], client: int) -> list[dict]:
    return [dict(event, uri=client_uri(event["uri"], client)) if "uri" in event else dict(event) for event in events]


class StartLine:
    """Holds every client until all servers are ready (or have failed), then lets client k go after its offset."""

    def __init__(self, clients: int, stagger_s: float) -> None:
        self.missing = set(range(1, clients + 1))
        self.all_ready = asyncio.Event()
        self.stagger_s = stagger_s

    def arrive(self, client: int) -> None:
        """Also called when a client's run ends, so a server that failed to start never holds the others."""
        self.missing.discard(client)
        if not self.missing:
            self.all_ready.set()

    def offset(self, client: int) -> float:
        return (client - 1) * self.stagger_s

    async def wait(self, replay: Replay, client: int) -> None:
        self.arrive(client)
        await self.all_ready.wait()
        if self.offset(client) > 0:
            await replay.sleep(self.offset(client))  # the replay's own sleep: virtual in tests


@dataclass
class ClientsRun:
    clients: int
    stagger_s: float
    results: list[RunResult] = field(default_factory=list)  # client 1..N in order
    offsets: list[float] = field(default_factory=list)


async def run_clients_async(events: list[dict], config: ServerConfig, clients: int, speed: float | None,
                            stagger_s: float, tail_timeout: float, sample_every: int = 50,
                            replay_class=Replay, **replay_kwargs) -> ClientsRun:
    start_line = StartLine(clients, stagger_s)
    run = ClientsRun(clients, stagger_s, offsets=[start_line.offset(k) for k in range(1, clients + 1)])

    async def one_client(client: int) -> RunResult:
        label = f"{config.label} client {client}/{clients}"
        replay = replay_class(client_events(events, client), ServerConfig(label, config.command), speed,
                              tail_timeout, sample_every=sample_every, **replay_kwargs)
        replay.before_play = lambda: start_line.wait(replay, client)
        try:
            return await replay.run()
        finally:
            start_line.arrive(client)

    run.results = list(await asyncio.gather(*(one_client(k) for k in range(1, clients + 1))))
    return run


def run_clients(events: list[dict], config: ServerConfig, clients: int, speed: float | None, stagger_s: float,
                tail_timeout: float = 60.0, sample_every: int = 50) -> ClientsRun:
    return asyncio.run(run_clients_async(events, config, clients, speed, stagger_s, tail_timeout, sample_every))


def load_numbers(results: list[RunResult], span_s: float | None) -> dict:
    """Latency, completions, throughput and cancellations over every request of `results`."""
    records = [record for result in results for record in result.records]
    latencies = [r.latency_ms for r in records if r.latency_ms is not None]
    completions = sum(1 for r in records if r.outcome in ("answered", "empty"))
    return {
        "requests": len(records),
        "completions": completions,
        "answered": sum(1 for r in records if r.outcome == "answered"),
        "cancelled": sum(1 for r in records if r.outcome == "cancelled"),
        "errors": sum(1 for r in records if r.outcome in ("error", "timeout")),
        "latency_ms": {f"p{q}": percentile(latencies, q) for q in (50, 90, 99)}
        | {"mean": sum(latencies) / len(latencies) if latencies else None, "n": len(latencies)},
        "completions_per_s": completions / span_s if span_s else None,
        "span_s": span_s,
    }


def clock_span(result: RunResult) -> float | None:
    return result.extra.get("clock_s")


def summarize_clients(run: ClientsRun) -> dict:
    per_client = []
    for client, (result, offset) in enumerate(zip(run.results, run.offsets), start=1):
        per_client.append({"client": client, "offset_s": offset, **load_numbers([result], clock_span(result)),
                           "wall_s": result.wall_s, "peak_rss_mb": result.peak_rss_mb,
                           "server_error": result.server_error})
    spans = [offset + clock_span(r) for r, offset in zip(run.results, run.offsets) if clock_span(r) is not None]
    return {"clients": run.clients, "stagger_s": run.stagger_s,
            "overall": load_numbers(run.results, max(spans) if spans else None), "per_client": per_client,
            "server_errors": [c["server_error"] for c in per_client if c["server_error"]]}


def cell(value, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


# (row title, how to get it from load_numbers' dict, format)
TABLE_ROWS = [
    ("requests", lambda n: n["requests"], "{:d}"),
    ("completions", lambda n: n["completions"], "{:d}"),
    ("cancelled", lambda n: n["cancelled"], "{:d}"),
    ("errors+timeouts", lambda n: n["errors"], "{:d}"),
    ("latency p50 ms", lambda n: n["latency_ms"]["p50"], "{:.0f}"),
    ("latency p99 ms", lambda n: n["latency_ms"]["p99"], "{:.0f}"),
    ("completions/s", lambda n: n["completions_per_s"], "{:.2f}"),
]


def clients_table(summaries: list[dict]) -> str:
    """One column per client count (all clients pooled), then one line per client."""
    rows = [["clients", *[str(s["clients"]) for s in summaries]]]
    for title, get, fmt in TABLE_ROWS:
        rows.append([title, *[cell(get(s["overall"]), fmt) for s in summaries]])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(text.ljust(widths[i]) if i == 0 else text.rjust(widths[i]) for i, text in enumerate(row))
             for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    for summary in summaries:
        lines += [client_line(summary["clients"], c) for c in summary["per_client"]]
    return "\n".join(lines)


def client_line(clients: int, c: dict) -> str:
    latency = c["latency_ms"]
    line = (f"N={clients} client {c['client']} (+{c['offset_s']:.1f} s): p50 {cell(latency['p50'], '{:.0f}')} ms, "
            f"p99 {cell(latency['p99'], '{:.0f}')} ms, {cell(c['completions_per_s'], '{:.2f}')} completions/s, "
            f"{c['cancelled']} cancelled, {c['errors']} errors")
    return line + (f"; server error: {c['server_error']}" if c["server_error"] else "")


def clients_report(summaries: list[dict], trace_path: str, command: list[str], speed: float | None) -> dict:
    return {"trace": trace_path, "command": command, "speed": speed, "runs": summaries}


def write_clients_json(path: str, report: dict) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)


def write_clients_html(path: str, report: dict) -> None:
    """The text table in a page: no plots, nothing fetched."""
    title = f"codecue-replay --clients: {report['trace']}"
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head><body>"
            f"<h1>{html.escape(title)}</h1><p>server: <code>{html.escape(' '.join(report['command']))}</code>, "
            f"speed {html.escape(str(report['speed'] or 'as fast as possible'))}</p>"
            f"<pre>{html.escape(clients_table(report['runs']))}</pre></body></html>\n")
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
