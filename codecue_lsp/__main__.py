"""`codecue-lsp`: run the language server (stdio by default), or `--check` that the model pair works."""
from __future__ import annotations

import argparse
import sys
import time

from engine import options

from .config import DRAFTERS, engine_options

CHECK_DOCUMENT = "def fibonacci(n):\n    if n <= 1:\n        return n\n    "


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="codecue-lsp", description="CodeCue code-completion language server")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--stdio", action="store_true", help="talk LSP over stdin/stdout (default)")
    mode.add_argument("--tcp", action="store_true", help="listen on 127.0.0.1:--port")
    mode.add_argument("--check", action="store_true",
                      help="load the model pair, run one completion, print timings and exit")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument("--port", type=int, default=2087, help="TCP port for --tcp (default 2087)")
    parser.add_argument("--pair", help="model pair from models.toml (default: default)")
    parser.add_argument("--device", help="cpu, cuda, cuda:1, ... (default: cuda when available)")
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"),
                        help="activation dtype (default: auto, measured on this machine)")
    parser.add_argument("--max-tokens", type=int, help="most tokens per completion (default 64)")
    parser.add_argument("--debounce-ms", type=int, help="wait this long for more typing (default 30)")
    parser.add_argument("--drafter", choices=DRAFTERS, help="speculative drafter (default auto: chosen per document by expected tokens per second)")
    parser.add_argument("--middle-from", choices=("line", "cursor"),
                        help="where the FIM middle starts: line (default: typing mid-file re-runs only the cursor's "
                             "line, its last token healed) or cursor (plain PSM; remote engines always use it)")
    parser.add_argument("--middle-lines", type=int, metavar="N",
                        help="with --middle-from line: the most lines the middle may span before it starts again at "
                             "the cursor's line (default 8; 1 = only that line, so Enter re-runs the suffix)")
    parser.add_argument("--next-line", choices=("on", "off"),
                        help="after a suggestion that ends its line, write the next line in the background, ready "
                             "when the suggestion is taken or Enter pressed (default on; local engine only)")
    parser.add_argument("--prepare-at-cursor", choices=("on", "off"),
                        help="where the cursor rests after a move that was not typing (the editor clients say so), "
                             "prefill the prompt a keystroke there would get, while you read (default on; local "
                             "engine only)")
    parser.add_argument("--prompt-tokens", metavar="N|auto",
                        help="most tokens in a prompt (default auto: what this machine prefills in ~12 s, 1024..1536; "
                             "remote engines 1536); a prompt the engine has not seen costs all of them first")
    parser.add_argument("--cold-prompt-tokens", metavar="N|auto|off",
                        help="a prompt nothing is cached for (a file just opened, a jump) starts this small and the "
                             "full one is prefilled while you pause (default auto: what this machine prefills in "
                             "~12 s, at least 512; off: always the full size)")
    parser.add_argument("--min-confidence", metavar="P",
                        help="do not show an automatic suggestion whose first line the model gives a probability "
                             "below P, 0..1 (0: off; default auto: the pair's threshold in models.toml); "
                             "suggestions asked for are always shown")
    parser.add_argument("--languages", help="comma-separated languageIds to complete ('*' = all)")
    parser.add_argument("--engine", help="'local' (default: this process's engine) or an OpenAI-compatible base URL, "
                        "e.g. http://127.0.0.1:8080/v1 (vLLM, llama-server); its API key is read from $CODECUE_API_KEY")
    parser.add_argument("--remote-model", help="model name for --engine URL (default: the first one /v1/models lists)")
    parser.add_argument("--remote-server", choices=("auto", "vllm", "llama-server", "openai"),
                        help="what serves --engine URL (default auto: asked; vLLM gets stop token ids)")
    parser.add_argument("--ca-bundle", metavar="PEM",
                        help="CA certificates trusted for an https engine besides the OS trust store")
    parser.add_argument("--header-env", action="append", metavar="HEADER=VARIABLE",
                        help="send HEADER with the value of environment variable VARIABLE (a gateway's key); "
                             "repeatable")
    parser.add_argument("--torch-prefill", choices=("auto", "on", "off"),
                        help="a llama.cpp target's long prompts prefilled in torch int8 (default auto: where the "
                             "calibration measured it faster; overrides $CODECUE_TORCH_PREFILL)")
    parser.add_argument("--prefill-chunk", metavar="N|auto",
                        help="tokens per llama.cpp prefill pass (default auto: what this machine prefills in 3 s, "
                             "at most 128: bounds what a cancelled pass wastes; overrides $CODECUE_PREFILL_CHUNK)")
    parser.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR (default INFO)")
    parser.add_argument("--log-file", help="also log to this file (logs never go to stdout)")
    return parser.parse_args(argv)


def cli_settings(args: argparse.Namespace) -> dict:
    """Only the flags the user gave: they override editor settings."""
    given = {
        "pair": args.pair, "device": args.device, "dtype": args.dtype, "max_tokens": args.max_tokens,
        "debounce_ms": args.debounce_ms, "drafter": args.drafter, "middle_from": args.middle_from,
        "middle_lines": args.middle_lines, "next_line": args.next_line, "prompt_tokens": args.prompt_tokens,
        "cold_prompt_tokens": args.cold_prompt_tokens, "prepare_at_cursor": args.prepare_at_cursor,
        "enabled_languages": args.languages,
        "log_level": args.log_level, "log_file": args.log_file, "engine": args.engine,
        "remote_model": args.remote_model, "remote_server": args.remote_server, "remote_ca_bundle": args.ca_bundle,
        "remote_headers_env": args.header_env, "min_confidence": args.min_confidence,
    }
    return {k: v for k, v in given.items() if v is not None}


def check(settings) -> int:
    """Load the pair, complete CHECK_DOCUMENT twice (cold, then warm), print timings. 0 = working."""
    from engine.store.config import ModelsError

    if settings.engine != "local":
        return check_remote(settings)
    from .loading import build_completer
    from .prompt import OpenDocument

    print(f"codecue-lsp --check: pair {settings.pair!r}", flush=True)
    started = time.perf_counter()
    try:
        completer = build_completer(settings, None)
    except ModelsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        print(f"error: could not load model pair {settings.pair!r}: {exc}. "
              f"Run `codecue-models fetch` (or `codecue-models verify`).", file=sys.stderr)
        return 2
    from engine.weights.draft_vocab import describe as describe_draft_head

    pair = completer.engine.pair
    print(f"loaded in {time.perf_counter() - started:.2f} s (device {pair.device}, target {pair.target_weights} "
          f"weights / {pair.activations} activations, draft "
          f"{pair.draft_weights or 'not loaded'}{describe_draft_head(pair.draft)}; "
          f"{'compiled' if pair.compiled else 'eager'} steps)")
    if pair.calibration is not None:
        from engine.calibration.report import format_table
        from engine.paths import codecue_home
        from engine.weights.llamacpp_probe import pair_line

        print(format_table(pair.calibration, pair.choice))
        if line := pair_line(pair.spec, codecue_home()):
            print(line)
    rate = completer.engine.prefill_tokens_per_s
    total, cold = completer.prompt_tokens(settings), completer.cold_prompt_tokens(settings)
    print(f"prompts: at most {total} tokens (promptTokens {settings.prompt_tokens}"
          + (f"; this machine prefills {rate:.0f} tok/s, a new prompt of that size {total / rate:.1f} s)"
             if rate else ")"))
    print(f"a prompt nothing is cached for: {cold} tokens (coldPromptTokens {settings.cold_prompt_tokens}"
          + (f", {cold / rate:.1f} s; the full one is prefilled while you pause)" if cold < total and rate
             else ")"))
    doc = OpenDocument(uri="file:///codecue-check.py", language_id="python", text=CHECK_DOCUMENT)
    lines = CHECK_DOCUMENT.split("\n")
    for label in ("cold", "warm"):
        t0 = time.perf_counter()
        prepared = completer.prepare(doc, len(lines) - 1, len(lines[-1]), settings)
        text, result = completer.complete(prepared)
        ms = (time.perf_counter() - t0) * 1000
        s = result.stats
        print(f"{label}: {ms:.0f} ms, prompt {s.prompt_tokens} tokens ({s.reused_prompt_tokens} reused), "
              f"{len(result.token_ids)} new tokens in {s.target_passes} target passes, "
              f"acceptance {s.acceptance_rate:.2f}, finish {result.finish_reason}")
    print(f"completion: {text!r}")
    completer.engine.close()
    return 0


def check_remote(settings) -> int:
    """Ask the endpoint for its models, then complete CHECK_DOCUMENT once. 0 = working."""
    from .prompt import OpenDocument
    from .redact import scrub
    from .remote import build_remote_completer
    from .remote_endpoint import describe

    print(f"codecue-lsp --check: engine {settings.engine} (FIM template of pair {settings.pair!r})", flush=True)
    try:
        completer = build_remote_completer(settings, None)
    except Exception as exc:
        print(f"error: {describe(exc)}", file=sys.stderr)
        return 2
    backend = completer.engine
    try:
        t0 = time.perf_counter()
        model = backend.model_name()
    except Exception as exc:
        print(f"error: {settings.engine} did not answer GET /models: {scrub(describe(exc), backend.secrets)}",
              file=sys.stderr)
        return 2
    print(f"model {model!r} ({(time.perf_counter() - t0) * 1000:.0f} ms)")
    doc = OpenDocument(uri="file:///codecue-check.py", language_id="python", text=CHECK_DOCUMENT)
    lines = CHECK_DOCUMENT.split("\n")
    t0 = time.perf_counter()
    prepared = completer.prepare(doc, len(lines) - 1, len(lines[-1]), settings)
    text, result = completer.complete(prepared)
    backend.close()
    if backend.health.healthy is not True:
        print(f"error: completion failed: {backend.health.last_error}", file=sys.stderr)
        return 2
    print(f"completion in {(time.perf_counter() - t0) * 1000:.0f} ms, finish {result.finish_reason}: {text!r}")
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.version:
        from .server import server_version

        print(f"codecue-lsp {server_version()}")
        return 0
    settings_in = cli_settings(args)
    from .config import parse_setting
    from .redact import redact_urls

    for flag, key in (("--prompt-tokens", "prompt_tokens"), ("--cold-prompt-tokens", "cold_prompt_tokens"),
                      ("--engine", "engine"), ("--header-env", "remote_headers_env")):
        value = settings_in.get(key)
        if value is None:
            continue
        try:
            parse_setting(key, value)
        except (TypeError, ValueError) as exc:  # a URL's credentials are never printed back
            print(f"codecue-lsp: {flag}: {exc}, not {redact_urls(repr(value))}", file=sys.stderr)
            return 2
    try:  # the engine's options: the environment's, then the engine flags (codecue_lsp/config.py)
        options.use(engine_options(args.torch_prefill, args.prefill_chunk))
    except ValueError:
        print(f"codecue-lsp: --prefill-chunk takes a number of tokens or auto, not {args.prefill_chunk!r}",
              file=sys.stderr)
        return 2
    if args.check:
        from .config import Settings, configure_logging

        settings = Settings().merged(settings_in)
        configure_logging("WARNING" if args.log_level is None else settings.log_level, settings.log_file)
        return check(settings)
    from .server import run

    run(settings_in, tcp_port=args.port if args.tcp else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
