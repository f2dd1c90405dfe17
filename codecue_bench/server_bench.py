"""`codecue-bench server`: replay typing a real file through the real server and measure it end to end.

For a cursor in the middle of the file, types the file's next characters one keystroke at a time (incremental
didChange + inlineCompletion each), then measures `$/cancelRequest` turnaround. Reports cold vs warm latency,
prompt tokens re-run vs reused per request (from `codecue.stats`), and the time from sending `$/cancelRequest`
to receiving the answer. Then, when llama.cpp is built (scripts/build-llama-cpp.sh) or --llama-server URL is given,
the same keystrokes go to llama-server's `/infill` with its prompt cache on, each answered before the next, so the
per-keystroke latencies stand side by side. Call `run_server_bench(...)` (returns a dict) or `main()`.
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


def typing_plan(text: str, keystrokes: int) -> tuple[int, int, str, str]:
    """Cursor: start of the line nearest the middle; the rest of that line (up to `keystrokes` characters) is what
    gets "typed". Returns (offset of the cursor, its line, the typed characters, the document before typing)."""
    start = text.rfind("\n", 0, len(text) // 2) + 1
    line = text.count("\n", 0, start)
    typed = text[start:text.find("\n", start) if "\n" in text[start:] else len(text)][:keystrokes]
    return start, line, typed, text[:start] + text[start + len(typed):]


def latency_summary(values: list[float]) -> dict:
    return {"p50": _pct(values, 50), "p90": _pct(values, 90), "max": max(values) if values else 0.0}


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

        start, line, typed, doc = typing_plan(text, keystrokes)
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
        # Every keystroke after the first, type-through answers included: what the user feels while typing.
        "keystroke_ms": latency_summary([r["latency_ms"] for r in rows[1:]]),
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


def infill_keystrokes(client, text: str, keystrokes: int, n_predict: int = 64) -> dict:
    """The same keystrokes as CodeCue gets, sent to a llama-server's /infill one by one (each answered before
    the next), with its prompt cache on. The typed characters sit inside one line, so the answer is the rest of
    that line: it stops at a newline, like CodeCue's single-line completions."""
    from .llama_cpp import infill

    start, _, typed, _ = typing_plan(text, keystrokes)
    suffix = text[start + len(typed):]
    rows = []
    for i in range(len(typed) + 1):
        answer = infill(client, text[:start] + typed[:i], suffix, n_predict, stop=["\n"])
        rows.append({"keystroke": i, "latency_ms": _ms(answer.seconds), "prompt_evaluated": answer.prompt_n,
                     "chars": len(answer.text)})
    return {"cold_ms": rows[0]["latency_ms"], "keystroke_ms": latency_summary([r["latency_ms"] for r in rows[1:]]),
            "prompt_evaluated_mean": round(statistics.fmean(r["prompt_evaluated"] for r in rows[1:]), 1)
            if len(rows) > 1 else None, "requests": rows}


def run_llama_infill(path: str | Path, pair: str = "default", keystrokes: int = 16, url: str | None = None,
                     threads: int = 2, n_predict: int = 64) -> dict:
    """Start llama-server on the pair's target GGUF (or use `url`), run the keystrokes, always stop it."""
    from engine.fetch import gguf_path
    from engine.models import load_config

    from .llama_cpp import LlamaServer, http_client

    text = Path(path).read_text(encoding="utf-8")
    model = None if url else gguf_path(load_config().pair(pair).target)
    with LlamaServer(model, url=url, threads=threads) as server, http_client(server.url) as client:
        return infill_keystrokes(client, text, keystrokes, n_predict)


def main(argv=None) -> int:
    from .llama_cpp import server_binary

    parser = argparse.ArgumentParser(prog="codecue-bench server", description=__doc__.split("\n")[0])
    parser.add_argument("file", help="a real source file to type into")
    parser.add_argument("--pair", default="default")
    parser.add_argument("--keystrokes", type=int, default=16)
    parser.add_argument("--cancel-trials", type=int, default=10)
    parser.add_argument("--language", default="python")
    parser.add_argument("--llama-server", metavar="URL", help="a running llama-server to compare with")
    parser.add_argument("--no-llama-cpp", action="store_true", help="leave llama-server out even when it is built")
    parser.add_argument("--threads", type=int, default=2, help="llama-server threads (-t)")
    parser.add_argument("--max-tokens", type=int, default=64, help="llama-server's n_predict per keystroke")
    parser.add_argument("--json", help="also write the full result here")
    args, server_args = parser.parse_known_args(argv)
    result = run_server_bench(args.file, args.pair, args.keystrokes, args.cancel_trials, args.language,
                              tuple(server_args))
    # One after the other, never at once: the two would share the same cores.
    if not args.no_llama_cpp and (args.llama_server or server_binary()):
        result["llama_server_infill"] = run_llama_infill(args.file, args.pair, args.keystrokes, args.llama_server,
                                                         args.threads, args.max_tokens)
    summary = {k: v for k, v in result.items() if k not in ("requests", "server_stats")}
    if "llama_server_infill" in summary:
        summary["llama_server_infill"] = {k: v for k, v in summary["llama_server_infill"].items() if k != "requests"}
    print(json.dumps(summary, indent=2))
    print("keystroke  latency_ms  typethrough  prompt_new  prompt_reused  chars")
    for r in result["requests"]:
        print(f"{r['keystroke']:9d}  {r['latency_ms']:10.1f}  {str(r['typethrough']):11s}  "
              f"{r['prompt_tokens_new']:10d}  {r['prompt_tokens_reused']:13d}  {r['chars']:5d}")
    llama = result.get("llama_server_infill")
    if llama:
        print(f"\nper keystroke after the first (ms)   {'p50':>8s} {'p90':>8s} {'max':>8s} {'cold':>8s}")
        for name, r in (("CodeCue", result), ("llama-server /infill", llama)):
            k = r["keystroke_ms"]
            print(f"{name:34s} {k['p50']:8.1f} {k['p90']:8.1f} {k['max']:8.1f} {r['cold_ms'] or 0:8.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
