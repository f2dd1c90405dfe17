"""Server settings: one dataclass filled from command-line flags, `initializationOptions` and the client's
`workspace/configuration` section "codecue" (later sources win, unknown or ill-typed keys are ignored and logged),
rebuilt when the user's settings change; and the engine's options (engine/options.py) from the environment and the
engine flags. The one module of codecue_lsp that reads the environment (docs/configuration.md lists it all).
"""
from __future__ import annotations

import dataclasses
import logging
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from engine.options import EngineOptions, parse_prefill_chunk
from engine.paths import codecue_home

from .redact import has_credentials, redact_urls

logger = logging.getLogger(__name__)

CONFIG_SECTION = "codecue"
DRAFTERS = ("auto", "none", "draft", "lookup", "hybrid")  # auto: by expected gain on this machine
# Settings that only take effect when the model pair is loaded; changing them later needs a restart.
LOAD_SETTINGS = ("pair", "device", "dtype", "engine")
# Where code and keys go, which file is read or written: a workspace's configuration (a repository's
# .vscode/settings.json, say) cannot set them; only the command line or initializationOptions do.
USER_ONLY_SETTINGS = ("engine", "api_key_env", "log_file", "remote_ca_bundle", "remote_headers_env")
# Larger documents get no completions and no syntax tree: generated or data files, not code being typed.
MAX_DOCUMENT_CHARS = 1_000_000
DEFAULT_LANGUAGES = ("python", "javascript", "javascriptreact", "typescript", "typescriptreact", "go", "rust",
                     "java", "c", "cpp")


@dataclass
class Settings:
    pair: str = "default"
    device: str | None = None
    dtype: str | None = None
    max_tokens: int = 64
    debounce_ms: int = 30
    drafter: str = "auto"
    # Where the FIM middle starts: "line" (the cursor line's typed part goes after the middle marker and the local
    # engine heals its last token: a keystroke mid-file re-runs that line, not the suffix) or "cursor" (plain PSM).
    # Remote engines cannot heal and always get "cursor". See prompt/__init__ and docs/benchmarks.md.
    middle_from: str = "line"
    # In the line split, the most lines the middle may span before it starts again at the cursor's line (1: only
    # that line). Lines typed since it started stay after the marker, so Enter does not re-run the suffix.
    middle_lines: int = 8
    # After a suggestion that ends the cursor's line, or a rest at the end of a line (with prepare_at_cursor), write
    # the next line in the background (next_line.py): it is ready when the suggestion is taken or Enter pressed.
    # Local engine only (a shared server gets no extra load).
    next_line: bool = True
    # Most tokens in a prompt: "auto" (the local engine: what this machine prefills in ~12 s, measured by the
    # calibration, 1024..1536; prompt/sizing.py) or a number. A prompt not seen before costs all of them first.
    # Where the cursor rests after a move that was not typing (the clients send codecue/didMoveCursor), prefill the
    # prompt a keystroke there would get while the user reads (warmup.py). Local engine only.
    prepare_at_cursor: bool = True
    prompt_tokens: int | str = "auto"
    # A prompt nothing is cached for (a file just opened, a jump elsewhere) starts this small, and the full one is
    # prefilled while the user pauses, then taken over (growth.py): "auto" (what this machine prefills in ~12 s, at
    # least 512; the full size where the rate is not measured), a number, or "off" (always the full size).
    cold_prompt_tokens: int | str = "auto"
    # Empty tuple = every language. "*" in the list also means every language.
    enabled_languages: tuple[str, ...] = DEFAULT_LANGUAGES
    log_level: str = "INFO"
    log_file: str | None = None
    # "local" = this process's engine; else an OpenAI-compatible base URL (vLLM, llama-server), see remote.py.
    engine: str = "local"
    remote_model: str | None = None  # None: the first model GET /v1/models lists
    api_key_env: str = "CODECUE_API_KEY"  # the env var that holds the API key (the key itself is never a setting)
    remote_connect_timeout_s: float = 3.0
    remote_read_timeout_s: float = 10.0  # longest wait for the next streamed chunk
    remote_deadline_s: float = 60.0  # longest a whole remote request may take (retries, waits): a slow CPU engine too
    # A PEM file of CA certificates trusted for an https engine besides the OS trust store (a company's proxy).
    remote_ca_bundle: str | None = None
    # Request headers for a gateway, each value from the environment variable named here (("X-API-Key", "VAR"),):
    # a setting names the variable, never holds the value.
    remote_headers_env: tuple[tuple[str, str], ...] = ()
    # What serves the engine URL: auto (asked: /v1/models owned_by, /props), vllm, llama-server or openai (any
    # other OpenAI-compatible server). vLLM gets stop token ids, the others stop strings (remote_server.py).
    remote_server: str = "auto"
    # Project context (codecue_lsp/context/): other files of the workspace in the prompt, from an index of the
    # workspace folders. Off: the current file and the open documents' outlines only.
    context: bool = True
    # Tokens of the prompt (out of promptTokens) for context: other files' definitions and similar code, the open
    # documents' outlines, this file's own imports and signatures. "auto": a third of the prompt.
    context_tokens: int | str = "auto"
    # Extra gitignore-style patterns (relative to a workspace folder) never indexed nor sent, beside .gitignore,
    # .codecueignore and the secret-looking files that are never read.
    exclude_globs: tuple[str, ...] = ()
    # Most files indexed per server; past it, files near the open ones and recently modified win.
    max_indexed_files: int = 5000
    # Keep the index on disk under $CODECUE_HOME/context (it holds code snippets) so a restart does not re-parse.
    index_cache: bool = True
    # An automatic suggestion whose confidence (confidence.py: the target's probability of its first line) is below
    # this is not shown; 0 = off; None ("auto") = the pair's measured threshold (models.toml min_confidence). Requests
    # the user made (Invoked) are never held back. Where a backend gives no probabilities (a remote engine without
    # logprobs) nothing is held back either.
    min_confidence: float | None = None

    def language_enabled(self, language_id: str | None) -> bool:
        langs = self.enabled_languages
        return not langs or "*" in langs or (language_id or "") in langs

    def merged(self, options: Mapping[str, Any] | None) -> "Settings":
        """A copy with every valid key of `options` applied (camelCase or snake_case keys)."""
        if not options:
            return dataclasses.replace(self)
        if not isinstance(options, Mapping):
            logger.warning("ignoring settings that are not an object: %r", options)
            return dataclasses.replace(self)
        if isinstance(options.get(CONFIG_SECTION), Mapping):  # {"codecue": {...}} as well as {...}
            options = options[CONFIG_SECTION]
        changes: dict[str, Any] = {}
        for raw_key, value in options.items():
            key = snake_case(str(raw_key))
            if key not in _PARSERS:
                logger.warning("ignoring unknown setting %r", raw_key)
                continue
            if value is None:
                continue
            try:
                changes[key] = _PARSERS[key](value)
            except (TypeError, ValueError) as exc:
                logger.warning("ignoring setting %s=%s: %s", raw_key, _shown(key, value), exc)
        return dataclasses.replace(self, **changes)


def workspace_layer(workspace: Any, trusted: Settings) -> Any:
    """The workspace's configuration without the user-only settings that differ from `trusted` (the flags' and
    initializationOptions'); each one dropped is logged by name (its value may hold a secret)."""
    if not isinstance(workspace, Mapping):
        return workspace  # merged() logs what is not an object
    if isinstance(workspace.get(CONFIG_SECTION), Mapping):  # the same section merged() reads
        workspace = workspace[CONFIG_SECTION]
    kept = {}
    for raw_key, value in workspace.items():
        key = snake_case(str(raw_key))
        if key in USER_ONLY_SETTINGS and value is not None and not _same(key, value, getattr(trusted, key)):
            logger.warning("ignoring %s from the workspace configuration: only the command line or the "
                           "initializationOptions set it", raw_key)
            continue
        kept[raw_key] = value
    return kept


def _same(key: str, value: Any, trusted: Any) -> bool:
    try:
        return _PARSERS[key](value) == trusted
    except (TypeError, ValueError):
        return False  # an unparsable value never matches


def _shown(key: str, value: Any) -> str:
    """A refused setting's value for the log: a URL without its credentials; a header map not at all (a value
    pasted where a variable name belongs is a secret)."""
    return "(not shown)" if key == "remote_headers_env" else redact_urls(repr(value))


def parse_setting(key: str, value: Any) -> Any:
    """One setting's value as `merged` would take it; raises TypeError/ValueError where it would be ignored."""
    return _PARSERS[key](value)


def snake_case(name: str) -> str:
    out = []
    for ch in name:
        if ch.isupper():
            out.append("_")
        out.append(ch.lower())
    return "".join(out).replace("-", "_")


def _int_in(lo: int, hi: int):
    def parse(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError("expected a number")
        number = int(value)
        if not lo <= number <= hi:
            raise ValueError(f"expected {lo}..{hi}")
        return number
    return parse


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TypeError("expected a non-empty string")
    return value.strip()


def _one_of(choices: tuple[str, ...]):
    def parse(value: Any) -> str:
        value = _text(value)
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
        return value
    return parse


def _languages(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [v for v in value.split(",")]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise TypeError("expected a list of language ids")
    return tuple(v.strip() for v in value if v.strip())


def _log_level(value: Any) -> str:
    value = _text(value).upper()
    if value not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise ValueError("expected DEBUG, INFO, WARNING or ERROR")
    return value


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("on", "true", "1", "off", "false", "0"):
        return value.strip().lower() in ("on", "true", "1")
    raise TypeError("expected true/false (or on/off)")


def _prompt_tokens(value: Any) -> int | str:
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    if isinstance(value, str) and not value.strip().isdigit():
        raise ValueError("expected auto or a number of tokens, 256..32768")
    return _int_in(256, 32768)(value)


def _cold_prompt_tokens(value: Any) -> int | str:
    if isinstance(value, str) and value.strip().lower() in ("auto", "off"):
        return value.strip().lower()
    if isinstance(value, str) and not value.strip().isdigit():
        raise ValueError("expected auto, off or a number of tokens, 128..32768")
    return _int_in(128, 32768)(value)


def _context_tokens(value: Any) -> int | str:
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    if isinstance(value, str) and not value.strip().isdigit():
        raise ValueError("expected auto or a number of tokens, 0..16384")
    return _int_in(0, 16384)(value)


def _globs(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise TypeError("expected a list of glob patterns")
    return tuple(v.strip() for v in value if v.strip())


def _engine(value: Any) -> str:
    value = _text(value)
    if value != "local" and not value.startswith(("http://", "https://")):
        raise ValueError("expected 'local' or an http(s):// base URL such as http://127.0.0.1:8080/v1")
    if has_credentials(value):  # a URL is shown and logged in many places: a key never goes in one
        raise ValueError("the URL holds credentials (user:password@); give the key in the environment variable "
                         "that apiKeyEnv names (CODECUE_API_KEY by default) and the URL without them")
    return value.rstrip("/")


def _fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError("expected a number from 0 to 1")
    number = float(value)
    if not 0.0 <= number <= 1.0:
        raise ValueError("expected a number from 0 to 1")
    return number


def _fraction_or_auto(value: Any) -> float | None:
    if isinstance(value, str) and value.strip().lower() == "auto":
        return None
    return _fraction(value)


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError("expected a number of seconds")
    number = float(value)
    if not 0.05 <= number <= 600:
        raise ValueError("expected 0.05..600 seconds")
    return number


_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP token (RFC 9110)
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PROTOCOL_HEADERS = {"host", "content-length", "content-type", "transfer-encoding", "connection"}


def _headers_env(value: Any) -> tuple[tuple[str, str], ...]:
    """{"X-API-Key": "GATEWAY_KEY"} or ["X-API-Key=GATEWAY_KEY"]: header names and the variables holding values."""
    if isinstance(value, str):
        value = [value]
    if isinstance(value, (list, tuple)):
        if not all(isinstance(v, str) and "=" in v for v in value):
            raise TypeError("expected NAME=VARIABLE entries")
        value = dict(v.split("=", 1) for v in value)
    if not isinstance(value, Mapping):
        raise TypeError("expected an object of header name: environment variable")
    pairs = []
    for name, variable in value.items():
        name, variable = str(name).strip(), str(variable).strip()
        if not _HEADER_NAME.match(name) or name.lower() in _PROTOCOL_HEADERS:
            raise ValueError(f"{name!r} is not a header a gateway can take")
        if not _VARIABLE.match(variable):  # not echoed: a value pasted here is a secret
            raise ValueError(f"the {name} entry is not an environment variable name (the value stays in the "
                             f"environment, never in a setting)")
        pairs.append((name, variable))
    return tuple(pairs)


_PARSERS = {
    "pair": _text,
    "device": _text,
    "dtype": _one_of(("float32", "bfloat16", "float16")),
    "max_tokens": _int_in(1, 4096),
    "debounce_ms": _int_in(0, 5000),
    "drafter": _one_of(DRAFTERS),
    "middle_from": _one_of(("line", "cursor")),
    "middle_lines": _int_in(1, 200),
    "next_line": _flag,
    "prepare_at_cursor": _flag,
    "prompt_tokens": _prompt_tokens,
    "cold_prompt_tokens": _cold_prompt_tokens,
    "enabled_languages": _languages,
    "log_level": _log_level,
    "log_file": _text,
    "engine": _engine,
    "remote_model": _text,
    "api_key_env": _text,
    "remote_connect_timeout_s": _seconds,
    "remote_read_timeout_s": _seconds,
    "remote_deadline_s": _seconds,
    "remote_ca_bundle": _text,
    "remote_headers_env": _headers_env,
    "remote_server": _one_of(("auto", "vllm", "llama-server", "openai")),
    "context": _flag,
    "context_tokens": _context_tokens,
    "exclude_globs": _globs,
    "max_indexed_files": _int_in(0, 200_000),
    "index_cache": _flag,
    "min_confidence": _fraction_or_auto,
}
assert set(_PARSERS) == {f.name for f in dataclasses.fields(Settings)}
assert set(USER_ONLY_SETTINGS) <= set(_PARSERS)


def restart_needed(old: Settings, new: Settings) -> list[str]:
    """Names of changed settings that only apply when the pair is (re)loaded."""
    return [name for name in LOAD_SETTINGS if getattr(old, name) != getattr(new, name)]


def configure_logging(level: str, log_file: str | None = None) -> None:
    """Log to stderr (and a file when asked). Never stdout: in stdio mode stdout carries the protocol."""
    import sys

    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file:
        handlers.append(logging.FileHandler(log_file, encoding="utf-8"))
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=handlers, force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_pygls(level)


def quiet_pygls(level: str) -> None:
    # pygls logs every message body at INFO: the user's code in the log. Only show it when debugging.
    logging.getLogger("pygls").setLevel(logging.DEBUG if level.upper() == "DEBUG" else logging.WARNING)


def engine_options(torch_prefill: str | None = None, prefill_chunk: str | None = None,
                   env: Mapping[str, str] | None = None) -> EngineOptions:
    """The engine's options: the environment's (CODECUE_*, engine/options.py; a retired variable is named in a
    warning), then `--torch-prefill` and `--prefill-chunk`. Raises ValueError for a malformed flag."""
    options = EngineOptions.from_environment(env)
    changes: dict[str, Any] = {}
    if torch_prefill:
        changes["torch_prefill"] = torch_prefill
    if prefill_chunk:
        changes["prefill_chunk"] = parse_prefill_chunk(prefill_chunk)
    return dataclasses.replace(options, **changes)


def context_cache_dir() -> Path:
    """Where the workspace index is cached ($CODECUE_HOME/context; the `indexCache` setting turns it off)."""
    return codecue_home() / "context"


def api_key(variable: str) -> str | None:
    """The remote engine's API key, from the environment variable the `apiKeyEnv` setting names (never a setting)."""
    return os.environ.get(variable) or None


def header_values(headers_env: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """The gateway headers' values, each from its environment variable; an unset variable is logged by name."""
    values = {}
    for name, variable in headers_env:
        if os.environ.get(variable):
            values[name] = os.environ[variable]
        else:
            logger.warning("header %s not sent: the environment variable %s is not set", name, variable)
    return values


STEP_DELAY_ENV = "CODECUE_TEST_STEP_DELAY_MS"


def step_delay_for_tests() -> float:
    """Test knob: $CODECUE_TEST_STEP_DELAY_MS makes every engine step that many ms slower (completer.py), so that
    end-to-end tests can watch cancellation with the fast tiny model. Never set in normal use."""
    return float(os.environ.get(STEP_DELAY_ENV) or 0) / 1000.0


def quiet_progress_bars() -> None:
    """No progress bars from huggingface_hub or transformers: each writes one endless line (carriage returns) to
    stderr, which a client reading stderr by lines can choke on."""
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()  # transformers, imported later, starts with its bars off too
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
