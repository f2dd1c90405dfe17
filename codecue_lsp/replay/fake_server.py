"""A fake inline-completion server with known behaviour, to check the replay harness (and the proxy) exactly.

    python -m codecue_lsp.replay.fake_server [--delay-ms 50] [--text TEXT | --oracle FILE] [--log FILE] [--leak-kb N]

It answers `textDocument/inlineCompletion` after a fixed delay with a fixed text, or with the rest of the line at
the same position in an oracle file (the file a synthetic trace was typed from: every answer is then right).
It honours `$/cancelRequest` (pygls cancels the waiting task and answers -32800), answers
`workspace/executeCommand codecue.stats` with its counters, and can log every message it receives to a file.
With --leak-kb it keeps N KB per request forever and reports how many under "resources", as a leaking server would:
the soak verdict must catch it.
"""
from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from ..telemetry import plain
from .trace import utf16_to_index


def make_server(delay_ms: float, text: str | None, oracle: str | None, log: str | None,
                leak_kb: int = 0) -> LanguageServer:
    server = LanguageServer("codecue-fake", "0.1")
    counters = {"requests": 0, "completed": 0, "cancelled": 0}
    leaked: list[bytes] = []
    oracle_lines = Path(oracle).read_text(encoding="utf-8").split("\n") if oracle else None

    if log:
        log_file = open(log, "a", encoding="utf-8")
        handle = server.protocol.handle_message

        def logged(message):
            # Received message as plain JSON, for tests that compare what two sessions sent.
            raw = server.protocol._converter.unstructure(message) if hasattr(message, "__attrs_attrs__") \
                else dict(message)
            if hasattr(getattr(message, "params", None), "_asdict"):  # a custom method's: nested namedtuples
                raw["params"] = plain(message.params)
            log_file.write(json.dumps(raw, sort_keys=True) + "\n")
            log_file.flush()
            return handle(message)

        server.protocol.handle_message = logged

    def answer(params: types.InlineCompletionParams) -> str:
        if oracle_lines is None:
            return text or ""
        line = oracle_lines[params.position.line] if params.position.line < len(oracle_lines) else ""
        return line[utf16_to_index(line, params.position.character):]

    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(ls: LanguageServer, params: types.InlineCompletionParams):
        counters["requests"] += 1
        if leak_kb:
            leaked.append(b"x" * (leak_kb * 1024))  # written, so resident (zero pages would not count)
        try:
            await asyncio.sleep(delay_ms / 1000.0)
        except asyncio.CancelledError:
            counters["cancelled"] += 1
            raise
        counters["completed"] += 1
        suggestion = answer(params)
        items = [types.InlineCompletionItem(insert_text=suggestion)] if suggestion else []
        return types.InlineCompletionList(items=items)

    @server.command("codecue.stats")
    def stats(ls: LanguageServer, *args):
        return dict(counters, resources={"leaked_buffers": len(leaked)}) if leak_kb else dict(counters)

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--delay-ms", type=float, default=50.0)
    parser.add_argument("--text", default="pass", help="the suggestion for every request")
    parser.add_argument("--oracle", help="answer with the rest of the line at the cursor in this file")
    parser.add_argument("--log", help="append every received message (JSON) to this file")
    parser.add_argument("--leak-kb", type=int, default=0, help="keep this many KB per request, forever")
    parser.add_argument("--stdio", action="store_true", help="accepted for command-line compatibility")
    args = parser.parse_args(argv)
    make_server(args.delay_ms, args.text, args.oracle, args.log, args.leak_kb).start_io()


if __name__ == "__main__":
    main()
