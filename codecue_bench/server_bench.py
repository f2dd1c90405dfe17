"""`codecue-bench server`: replay typing a real file through the real server and measure it end to end.

For a cursor in the middle of the file, types the file's next characters one keystroke at a time (incremental
didChange + inlineCompletion each) and reports cold vs warm latency and prompt tokens re-run vs reused per request
(from `codecue.stats`). Then it measures what a cancel costs the engine (see `cancel_trials`). Then, when llama.cpp
is built (scripts/build-llama-cpp.sh) or --llama-server URL is given, the same keystrokes go to llama-server's
`/infill` with its prompt cache on, each answered before the next, so the per-keystroke latencies stand side by
side. Call `run_server_bench(...)` (returns a dict) or `main()`.
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

from engine.store.config import load_config
from engine.store.fetch import gguf_path

from .cancel_bench import (  # noqa: F401 (tests import CANCEL_PHASES)
    CANCEL_PHASES,
    cancel_summary,
    cancel_trials_run,
    settled_stats,
)
from .lsp_session import running
from .llama_cpp import LlamaServer, http_client, infill, server_binary
from .timing import latency_summary, ms, percentile


def typing_plan(text: str, keystrokes: int) -> tuple[int, int, str, str]:
    """Cursor: start of the line nearest the middle that has code on it (a blank middle line would give nothing to
    type: the bench measured the cold request alone); that line (up to `keystrokes` characters) is what gets
    "typed". Returns (offset of the cursor, its line, the typed characters, the document before typing)."""
    lines = text.split("\n")
    middle = text.count("\n", 0, len(text) // 2)
    with_code = [i for i, line in enumerate(lines) if line.strip()]
    if not with_code:
        raise SystemExit("codecue-bench server: the file has no line to type (every line is blank)")
    line = min(with_code, key=lambda i: (abs(i - middle), i))
    start = sum(len(before) + 1 for before in lines[:line])
    typed = lines[line][:keystrokes]
    return start, line, typed, text[:start] + text[start + len(typed):]


class BenchClient:
    """The few LSP calls the benchmark makes, on one pytest-lsp client."""

    def __init__(self, client, language: str):
        self.client, self.language, self.versions = client, language, {}

    async def stats(self) -> dict:
        return await self.client.workspace_execute_command_async(lsp.ExecuteCommandParams(command="codecue.stats"))

    def open(self, uri: str, text: str) -> None:
        self.versions[uri] = 1
        self.client.text_document_did_open(lsp.DidOpenTextDocumentParams(
            text_document=lsp.TextDocumentItem(uri=uri, language_id=self.language, version=1, text=text)))

    def insert(self, uri: str, line: int, character: int, text: str) -> None:
        self.versions[uri] += 1
        at = lsp.Position(line, character)
        self.client.text_document_did_change(lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
            content_changes=[lsp.TextDocumentContentChangePartial(range=lsp.Range(at, at), text=text)]))

    def delete(self, uri: str, start: tuple[int, int], end: tuple[int, int]) -> None:
        self.versions[uri] += 1
        self.client.text_document_did_change(lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
            content_changes=[lsp.TextDocumentContentChangePartial(
                range=lsp.Range(lsp.Position(*start), lsp.Position(*end)), text="")]))

    def close(self, uri: str) -> None:
        del self.versions[uri]
        self.client.text_document_did_close(lsp.DidCloseTextDocumentParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri)))

    @staticmethod
    def params(uri: str, line: int, character: int) -> lsp.InlineCompletionParams:
        return lsp.InlineCompletionParams(
            text_document=lsp.TextDocumentIdentifier(uri=uri), position=lsp.Position(line, character),
            context=lsp.InlineCompletionContext(trigger_kind=lsp.InlineCompletionTriggerKind.Automatic))

    def send(self, uri: str, line: int, character: int, msg_id: str):
        """Send an inlineCompletion now; returns its future (result, or an error once cancelled)."""
        return self.client.protocol.send_request(lsp.TEXT_DOCUMENT_INLINE_COMPLETION,
                                                 self.params(uri, line, character), msg_id=msg_id)

    async def complete(self, uri: str, line: int, character: int):
        return await self.client.text_document_inline_completion_async(self.params(uri, line, character))

    def cancel(self, msg_id: str) -> None:
        self.client.protocol.notify(lsp.CANCEL_REQUEST, lsp.CancelParams(id=msg_id))


async def _bench(text: str, language: str, server_args: list[str], env: dict, keystrokes: int,
                 cancel_trials: int, root: Path | None = None, index_while_typing: Path | None = None,
                 uri: str | None = None) -> dict:
    """root: the workspace folder (its index is built, and idle, before typing starts); index_while_typing: a
    folder added as a workspace folder just before typing (indexCache off), so the keystrokes meet the build."""
    from pytest_lsp import ClientServerConfig, client_capabilities

    config = ClientServerConfig(server_command=[sys.executable, "-m", "codecue_lsp", "--stdio", *server_args],
                                server_env=env)
    async with running(config) as client:
        folders = [lsp.WorkspaceFolder(uri=root.as_uri(), name=root.name)] if root else None
        await client.initialize_session(lsp.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"), root_uri=root.as_uri() if root else None,
            workspace_folders=folders, initialization_options={"indexCache": False} if index_while_typing else None))
        bench = BenchClient(client, language)

        t0 = time.perf_counter()
        while not (s := await bench.stats())["ready"]:
            if s["load_error"]:
                raise RuntimeError(s["load_error"])
            await asyncio.sleep(0.2)
        load_s = time.perf_counter() - t0
        while (await bench.stats()).get("context", {}).get("indexing"):
            await asyncio.sleep(0.2)
        if index_while_typing is not None:
            client.workspace_did_change_workspace_folders(lsp.DidChangeWorkspaceFoldersParams(
                event=lsp.WorkspaceFoldersChangeEvent(removed=[], added=[
                    lsp.WorkspaceFolder(uri=index_while_typing.as_uri(), name=index_while_typing.name)])))
            while not (await bench.stats()).get("context", {}).get("indexing"):
                await asyncio.sleep(0.02)

        start, line, typed, doc = typing_plan(text, keystrokes)
        uri = uri or "file:///codecue-bench/" + f"bench.{ {'python': 'py'}.get(language, 'txt') }"
        bench.open(uri, doc)
        rows = []
        for i in range(len(typed) + 1):
            if i:
                bench.insert(uri, line, i - 1, typed[i - 1])
            before = await bench.stats()
            t = time.perf_counter()
            result = await bench.complete(uri, line, i)
            latency = time.perf_counter() - t
            after = await bench.stats()
            indexing = bool(after.get("context", {}).get("indexing"))
            eb, ea = before["engine"], after["engine"]
            rows.append({
                "keystroke": i, "latency_ms": ms(latency),
                "typethrough": after["typethrough_hits"] > before["typethrough_hits"],
                "prompt_tokens_new": ea["prompt_tokens_new"] - eb["prompt_tokens_new"],
                "prompt_tokens_reused": ea["prompt_tokens_reused"] - eb["prompt_tokens_reused"],
                "chars": len(result.items[0].insert_text) if result and result.items else 0,
                "indexing": indexing,
            })

        cancels = await cancel_trials_run(bench, uri, doc, line, text.split("\n")[line], cancel_trials) \
            if cancel_trials else []
        final = await settled_stats(bench)

    model_rows = [r for r in rows if not r["typethrough"]]
    warm = [r["latency_ms"] for r in model_rows[1:]]
    return {
        "load_s": round(load_s, 2),
        "cold_ms": model_rows[0]["latency_ms"] if model_rows else None,
        "warm_ms": {"mean": round(statistics.fmean(warm), 1) if warm else None, "p50": percentile(warm, 50),
                    "p90": percentile(warm, 90)},
        "warm_prompt_tokens_new_mean": round(statistics.fmean(r["prompt_tokens_new"] for r in model_rows[1:]), 1)
        if len(model_rows) > 1 else None,
        "warm_prompt_tokens_reused_mean": round(statistics.fmean(r["prompt_tokens_reused"]
                                                                 for r in model_rows[1:]), 1)
        if len(model_rows) > 1 else None,
        # Every keystroke after the first, type-through answers included: what the user feels while typing.
        "keystroke_ms": latency_summary([r["latency_ms"] for r in rows[1:]]),
        "typethrough_hits": sum(r["typethrough"] for r in rows),
        "keystrokes_while_indexing": sum(r["indexing"] for r in rows[1:]),
        "cancel": cancel_summary(cancels),
        "requests": rows,
        "cancel_trials": cancels,
        "server_stats": final,
    }


def run_server_bench(path: str | Path, pair: str = "default", keystrokes: int = 16, cancel_trials: int = 30,
                     language: str = "python", extra_args: tuple[str, ...] = (), env: dict | None = None,
                     root: str | None = None, index_while_typing: str | None = None) -> dict:
    text = Path(path).read_text(encoding="utf-8")
    args = ["--pair", pair, "--debounce-ms", "0", *extra_args]
    full_env = dict(os.environ, **(env or {}))
    repo = str(Path(__file__).resolve().parents[1])
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, full_env.get("PYTHONPATH", "")) if p)
    root_dir = Path(root).resolve() if root else None
    uri = Path(path).resolve().as_uri() if root_dir else None  # the typed file is the project's own
    return asyncio.run(_bench(text, language, args, full_env, keystrokes, cancel_trials, root_dir,
                              Path(index_while_typing).resolve() if index_while_typing else None, uri))


def infill_keystrokes(client, text: str, keystrokes: int, n_predict: int = 64) -> dict:
    """The same keystrokes as CodeCue gets, sent to a llama-server's /infill one by one (each answered before
    the next), with its prompt cache on. The typed characters sit inside one line, so the answer is the rest of
    that line: it stops at a newline, like CodeCue's single-line completions."""

    start, _, typed, _ = typing_plan(text, keystrokes)
    suffix = text[start + len(typed):]
    rows = []
    for i in range(len(typed) + 1):
        answer = infill(client, text[:start] + typed[:i], suffix, n_predict, stop=["\n"])
        rows.append({"keystroke": i, "latency_ms": ms(answer.seconds), "prompt_evaluated": answer.prompt_n,
                     "chars": len(answer.text)})
    return {"cold_ms": rows[0]["latency_ms"], "keystroke_ms": latency_summary([r["latency_ms"] for r in rows[1:]]),
            "prompt_evaluated_mean": round(statistics.fmean(r["prompt_evaluated"] for r in rows[1:]), 1)
            if len(rows) > 1 else None, "requests": rows}


def run_llama_infill(path: str | Path, pair: str = "default", keystrokes: int = 16, url: str | None = None,
                     threads: int = 2, n_predict: int = 64) -> dict:
    """Start llama-server on the pair's target GGUF (or use `url`), run the keystrokes, always stop it."""


    text = Path(path).read_text(encoding="utf-8")
    model = None if url else gguf_path(load_config().pair(pair).target)
    with LlamaServer(model, url=url, threads=threads) as server, http_client(server.url) as client:
        return infill_keystrokes(client, text, keystrokes, n_predict)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="codecue-bench server", description=__doc__.split("\n")[0])
    parser.add_argument("file", help="a real source file to type into")
    parser.add_argument("--pair", default="default")
    parser.add_argument("--keystrokes", type=int, default=16)
    parser.add_argument("--cancel-trials", type=int, default=30,
                        help="caught cancels per phase (prefill, decode) and per measure (engine idle, next result; "
                             "in prefill also a next request elsewhere)")
    parser.add_argument("--language", default="python")
    parser.add_argument("--llama-server", metavar="URL", help="a running llama-server to compare with")
    parser.add_argument("--no-llama-cpp", action="store_true", help="leave llama-server out even when it is built")
    parser.add_argument("--threads", type=int, default=2, help="llama-server threads (-t)")
    parser.add_argument("--max-tokens", type=int, default=64, help="llama-server's n_predict per keystroke")
    parser.add_argument("--json", help="also write the full result here")
    parser.add_argument("--root", help="workspace folder sent at initialize (indexed before typing starts)")
    parser.add_argument("--index-while-typing", metavar="DIR",
                        help="a folder added as a workspace folder just before typing: the keystrokes meet its build")
    args, server_args = parser.parse_known_args(argv)
    result = run_server_bench(args.file, args.pair, args.keystrokes, args.cancel_trials, args.language,
                              tuple(server_args), root=args.root, index_while_typing=args.index_while_typing)
    # One after the other, never at once: the two would share the same cores.
    if not args.no_llama_cpp and (args.llama_server or server_binary()):
        result["llama_server_infill"] = run_llama_infill(args.file, args.pair, args.keystrokes, args.llama_server,
                                                         args.threads, args.max_tokens)
    summary = {k: v for k, v in result.items() if k not in ("requests", "cancel_trials", "server_stats")}
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
