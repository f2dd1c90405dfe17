"""`codecue-bench server`: replay typing a real file through the real server and measure it end to end.

For a cursor in the middle of the file, types the file's next characters one keystroke at a time (incremental
didChange + inlineCompletion each), then measures `$/cancelRequest` turnaround. Reports cold vs warm latency,
prompt tokens re-run vs reused per request (from `codecue.stats`), and the time from sending `$/cancelRequest`
to receiving the answer. Call `run_server_bench(...)` (returns a dict) or `main()`.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

from lsprotocol import types as lsp


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 1)


def _pct(values: list[float], pct: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered)) - 1))]


async def _bench(text: str, language: str, server_args: list[str], env: dict, keystrokes: int,
                 cancel_trials: int) -> dict:
    from pytest_lsp import ClientServerConfig, client_capabilities

    config = ClientServerConfig(server_command=[sys.executable, "-m", "codecue_lsp", "--stdio", *server_args],
                                server_env=env)
    client = await config.start()
    try:
        await client.initialize_session(lsp.InitializeParams(capabilities=client_capabilities("visual-studio-code")))

        async def stats() -> dict:
            return await client.workspace_execute_command_async(lsp.ExecuteCommandParams(command="codecue.stats"))

        t0 = time.perf_counter()
        while not (s := await stats())["ready"]:
            if s["load_error"]:
                raise RuntimeError(s["load_error"])
            await asyncio.sleep(0.2)
        load_s = time.perf_counter() - t0

        # Cursor: start of the line nearest the middle; the rest of that line is what gets "typed".
        start = text.rfind("\n", 0, len(text) // 2) + 1
        line = text.count("\n", 0, start)
        typed = text[start:text.find("\n", start) if "\n" in text[start:] else len(text)][:keystrokes]
        doc = text[:start] + text[start + len(typed):]
        uri = "file:///codecue-bench/" + f"bench.{ {'python': 'py'}.get(language, 'txt') }"
        client.text_document_did_open(lsp.DidOpenTextDocumentParams(
            text_document=lsp.TextDocumentItem(uri=uri, language_id=language, version=1, text=doc)))

        def params(character: int) -> lsp.InlineCompletionParams:
            return lsp.InlineCompletionParams(
                text_document=lsp.TextDocumentIdentifier(uri=uri), position=lsp.Position(line, character),
                context=lsp.InlineCompletionContext(trigger_kind=lsp.InlineCompletionTriggerKind.Automatic))

        rows = []
        for i in range(len(typed) + 1):
            if i:
                client.text_document_did_change(lsp.DidChangeTextDocumentParams(
                    text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=i + 1),
                    content_changes=[lsp.TextDocumentContentChangePartial(
                        range=lsp.Range(lsp.Position(line, i - 1), lsp.Position(line, i - 1)),
                        text=typed[i - 1])]))
            before = await stats()
            t = time.perf_counter()
            result = await client.text_document_inline_completion_async(params(i))
            latency = time.perf_counter() - t
            after = await stats()
            eb, ea = before["engine"], after["engine"]
            rows.append({
                "keystroke": i, "latency_ms": _ms(latency),
                "typethrough": after["typethrough_hits"] > before["typethrough_hits"],
                "prompt_tokens_new": ea["prompt_tokens_new"] - eb["prompt_tokens_new"],
                "prompt_tokens_reused": ea["prompt_tokens_reused"] - eb["prompt_tokens_reused"],
                "chars": len(result.items[0].insert_text) if result and result.items else 0,
            })

        cancel_ms, after_cancel_ms, finished_first = [], [], 0
        column, version = len(typed), len(typed) + 1
        for trial in range(cancel_trials):
            # Type a character no suggestion starts with, so the type-through cache cannot answer.
            version += 1
            client.text_document_did_change(lsp.DidChangeTextDocumentParams(
                text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[lsp.TextDocumentContentChangePartial(
                    range=lsp.Range(lsp.Position(line, column), lsp.Position(line, column)), text="\u00a7")]))
            column += 1
            msg_id = f"bench-cancel-{trial}"
            future = client.protocol.send_request(lsp.TEXT_DOCUMENT_INLINE_COMPLETION, params(column),
                                                  msg_id=msg_id)
            await asyncio.sleep(0.05 + 0.02 * trial)
            t = time.perf_counter()
            client.protocol.notify(lsp.CANCEL_REQUEST, lsp.CancelParams(id=msg_id))
            try:
                await asyncio.wrap_future(future)
                finished_first += 1  # answered normally: the generation ended before the cancel arrived
            except Exception:
                cancel_ms.append(_ms(time.perf_counter() - t))
            # The engine must be idle again (stopped within one step) before the next request is answered.
            t = time.perf_counter()
            await client.text_document_inline_completion_async(params(column))
            after_cancel_ms.append(_ms(time.perf_counter() - t))

        final = await stats()
        await client.shutdown_session()
    finally:
        await client.stop()

    model_rows = [r for r in rows if not r["typethrough"]]
    warm = [r["latency_ms"] for r in model_rows[1:]]
    return {
        "load_s": round(load_s, 2),
        "cold_ms": model_rows[0]["latency_ms"] if model_rows else None,
        "warm_ms": {"mean": round(statistics.fmean(warm), 1) if warm else None, "p50": _pct(warm, 50),
                    "p90": _pct(warm, 90)},
        "warm_prompt_tokens_new_mean": round(statistics.fmean(r["prompt_tokens_new"] for r in model_rows[1:]), 1)
        if len(model_rows) > 1 else None,
        "warm_prompt_tokens_reused_mean": round(statistics.fmean(r["prompt_tokens_reused"]
                                                                 for r in model_rows[1:]), 1)
        if len(model_rows) > 1 else None,
        "typethrough_hits": sum(r["typethrough"] for r in rows),
        "cancel_response_ms": {"p50": _pct(cancel_ms, 50), "p99": _pct(cancel_ms, 99), "all": cancel_ms},
        "cancel_finished_before_cancel": finished_first,
        "next_request_after_cancel_ms": {"p50": _pct(after_cancel_ms, 50), "p99": _pct(after_cancel_ms, 99)},
        "requests": rows,
        "server_stats": final,
    }


def run_server_bench(path: str | Path, pair: str = "default", keystrokes: int = 16, cancel_trials: int = 10,
                     language: str = "python", extra_args: tuple[str, ...] = (), env: dict | None = None) -> dict:
    text = Path(path).read_text(encoding="utf-8")
    args = ["--pair", pair, "--debounce-ms", "0", *extra_args]
    full_env = dict(os.environ, **(env or {}))
    repo = str(Path(__file__).resolve().parents[1])
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, full_env.get("PYTHONPATH", "")) if p)
    return asyncio.run(_bench(text, language, args, full_env, keystrokes, cancel_trials))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="codecue-bench server", description=__doc__.split("\n")[0])
    parser.add_argument("file", help="a real source file to type into")
    parser.add_argument("--pair", default="default")
    parser.add_argument("--keystrokes", type=int, default=16)
    parser.add_argument("--cancel-trials", type=int, default=10)
    parser.add_argument("--language", default="python")
    parser.add_argument("--json", help="also write the full result here")
    args, server_args = parser.parse_known_args(argv)
    result = run_server_bench(args.file, args.pair, args.keystrokes, args.cancel_trials, args.language,
                              tuple(server_args))
    summary = {k: v for k, v in result.items() if k not in ("requests", "server_stats")}
    print(json.dumps(summary, indent=2))
    print("keystroke  latency_ms  typethrough  prompt_new  prompt_reused  chars")
    for r in result["requests"]:
        print(f"{r['keystroke']:9d}  {r['latency_ms']:10.1f}  {str(r['typethrough']):11s}  "
              f"{r['prompt_tokens_new']:10d}  {r['prompt_tokens_reused']:13d}  {r['chars']:5d}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
