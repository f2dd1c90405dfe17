"""`codecue-bench alternatives`: what several suggestions cost. At cursors across a real file (the end of lines with
code, from the middle on), an automatic request (triggerKind Automatic: one suggestion, the prompt prefilled), then
at the same cursor the request a user makes to cycle (Invoked): its first item comes from the type-through cache, so
its time is the alternatives' own cost (codecue_lsp/alternatives.py). Each answered before the next is sent.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

from lsprotocol import types as lsp

from .lsp_session import running
from .server_bench import BenchClient
from .timing import latency_summary


def cursor_positions(text: str, count: int) -> list[tuple[int, int]]:
    """The ends of up to `count` lines with code, from the middle of the file on (UTF-16 characters)."""
    lines = text.split("\n")
    middle = len(lines) // 2
    chosen = [i for i in range(middle, len(lines)) if lines[i].strip()][:count]
    return [(i, len(lines[i].encode("utf-16-le")) // 2) for i in chosen]


def request(uri: str, line: int, character: int, kind: lsp.InlineCompletionTriggerKind) -> lsp.InlineCompletionParams:
    return lsp.InlineCompletionParams(text_document=lsp.TextDocumentIdentifier(uri=uri),
                                      position=lsp.Position(line=line, character=character),
                                      context=lsp.InlineCompletionContext(trigger_kind=kind))


def items_in(result) -> int:
    items = result.items if isinstance(result, lsp.InlineCompletionList) else (result or [])
    return len(items)


async def _bench(text: str, language: str, server_args: list[str], env: dict, cursors: int) -> dict:
    from pytest_lsp import ClientServerConfig, client_capabilities

    config = ClientServerConfig(server_command=[sys.executable, "-m", "codecue_lsp", "--stdio", *server_args],
                                server_env=env)
    async with running(config) as client:
        await client.initialize_session(lsp.InitializeParams(capabilities=client_capabilities("visual-studio-code")))
        bench = BenchClient(client, language)
        while not (stats := await bench.stats())["ready"]:
            if stats["load_error"]:
                raise RuntimeError(stats["load_error"])
            await asyncio.sleep(0.2)
        uri = "file:///codecue-bench/alternatives"
        bench.open(uri, text)
        rows = []
        for line, character in cursor_positions(text, cursors):
            timed = {}
            for name, kind in (("automatic", lsp.InlineCompletionTriggerKind.Automatic),
                               ("invoked", lsp.InlineCompletionTriggerKind.Invoked)):
                started = time.perf_counter()
                result = await client.text_document_inline_completion_async(request(uri, line, character, kind))
                timed[name] = ((time.perf_counter() - started) * 1000.0, items_in(result))
            rows.append({"line": line, "automatic_ms": timed["automatic"][0], "invoked_ms": timed["invoked"][0],
                         "automatic_items": timed["automatic"][1], "invoked_items": timed["invoked"][1]})
        stats = await bench.stats()
    with_first = [r for r in rows if r["automatic_items"]]  # where there is a first item there can be alternatives
    return {
        "cursors": rows,
        "automatic_ms": latency_summary([r["automatic_ms"] for r in with_first]),
        "invoked_ms": latency_summary([r["invoked_ms"] for r in with_first]),
        "mean_items_invoked": (sum(r["invoked_items"] for r in with_first) / len(with_first)) if with_first else 0.0,
        "alternatives": stats.get("alternatives", 0),
    }


def run_alternatives_bench(path: str | Path, pair: str = "default", cursors: int = 20, language: str = "python",
                           extra_args: tuple[str, ...] = (), env: dict | None = None) -> dict:
    text = Path(path).read_text(encoding="utf-8")
    # No next line or warm-up in the background: the two requests are timed alone.
    args = ["--pair", pair, "--debounce-ms", "0", "--next-line", "off", "--prepare-at-cursor", "off", *extra_args]
    full_env = dict(os.environ, **(env or {}))
    repo = str(Path(__file__).resolve().parents[1])
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, full_env.get("PYTHONPATH", "")) if p)
    return asyncio.run(_bench(text, language, args, full_env, cursors))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="codecue-bench alternatives", description=__doc__.split("\n")[0])
    parser.add_argument("file", help="a real source file")
    parser.add_argument("--pair", default="default")
    parser.add_argument("--cursors", type=int, default=20, help="cursors measured (line ends from the middle on)")
    parser.add_argument("--language", default="python")
    parser.add_argument("--json", help="also write the full result here")
    args, server_args = parser.parse_known_args(argv)
    result = run_alternatives_bench(args.file, args.pair, args.cursors, args.language, tuple(server_args))
    print(json.dumps({k: v for k, v in result.items() if k != "cursors"}, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
