"""The remote backend: completions from an OpenAI-compatible server (vLLM, llama-server) over /v1/completions.

It stands behind the same interface as completer.Completer (prepare / submit -> Future / finish), so the scheduler,
type-through cache, post-processing and telemetry do not know which backend runs. A request:
- prompt: token ids when the pair's tokenizer.json is here (`codecue-models fetch`): user text encoded with
  special-token strings split (`<|fim_prefix|>` typed in a file is ordinary text), each template marker as its one
  special id, the ids the local engine would use (Engine.encode_prompt). /v1/completions takes `"prompt": [ids]`
  (llama-server, vLLM). Without the tokenizer the prompt is one string with the markers written out; the server
  tokenizes it with special tokens on (which the markers need), so marker strings inside the user's own text also
  become control tokens there (llama-server has no split-special option), and a warning says so once.
- streamed (SSE), temperature 0, max_tokens, stop = the template's markers; our own stop predicate (postprocess) is
  checked on the text so far and ends the stream early.
- cancel (the CancelToken) closes the connection at once: checked between events and by a watcher thread that
  shuts the socket down, so a stalled stream is closed too; vLLM and llama-server abort the sequence then.
- failures (endpoint down, 5xx, read timeout) end the request with an empty result; connect errors and 5xx before
  any token are retried with backoff. Health goes to `codecue.stats`; the first failure after a healthy state calls
  `on_unhealthy` once (the server shows one message), not once per keystroke.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Sequence

import httpx

from engine.prompt_ids import encode_pieces
from engine.types import CancelToken, CompletionResult, CompletionStats

from .config import Settings
from .postprocess import make_stop_predicate, postprocess
from .prompt import Layouts, OpenDocument, SyntaxCache, budget_for, build_prompt
from .prompt.sizing import DEFAULT_TOTAL, prompt_total

logger = logging.getLogger(__name__)

# Without the pair's tokenizer files, prompt budgets count tokens as characters / 3.5: code averages 3-4 characters
# per token with the Qwen2.5 / Llama BPE vocabularies, and counting a little high keeps the prompt inside the window.
CHARS_PER_TOKEN = 3.5


def render_prompt(pieces: Sequence[tuple[str, str]]) -> str:
    """The pieces as one string, markers written out (the remote server turns them into special tokens)."""
    return "".join(value for _kind, value in pieces)


class PromptEncoder:
    """The pair's tokenizer.json (the `tokenizers` library: no torch, no transformers in the server process) giving
    the prompt ids Engine.encode_prompt gives. engine/engine.py's method needs an Engine (torch, a loaded pair), so
    its rule is mirrored here, and tests/test_remote_units.py checks both give the same ids on the same prompts."""

    def __init__(self, tokenizer, markers: Sequence[str], name: str) -> None:
        # Same as transformers' split_special_tokens=True: special-token strings in user text are ordinary text.
        tokenizer.encode_special_tokens = True
        self.tokenizer = tokenizer
        self.lock = threading.Lock()  # a Rust tokenizer object must not be used from two threads at once
        self.special = {token.content: token_id for token_id, token in tokenizer.get_added_tokens_decoder().items()
                        if token.special}
        self.name = name
        for marker in markers:  # a template the tokenizer cannot express is refused at load, as the engine does
            if marker:
                self.special_token_id(marker)

    def encode(self, text: str) -> list[int]:
        with self.lock:
            return self.tokenizer.encode(text, add_special_tokens=False).ids

    def count_tokens(self, text: str) -> int:
        return len(self.encode(text))

    def special_token_id(self, marker: str) -> int:
        if marker not in self.special:
            raise ValueError(f"prompt marker {marker!r} is not one special token of the {self.name} tokenizer: "
                             f"fix the model's [fim] template in models.toml")
        return self.special[marker]

    def encode_prompt(self, pieces: Sequence[tuple[str, str]]) -> list[int]:
        """The engine's rule (engine/prompt_ids.py), with this process's torch-free tokenizer."""
        return encode_pieces(pieces, self.encode, self.special_token_id)


def parse_sse(lines: Iterable[str]) -> Iterator[dict]:
    """JSON payloads of a server-sent-event stream, in order; stops at `data: [DONE]`. An event's data may span
    several `data:` lines (joined by newlines); comments (`:`) and other fields are skipped."""
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                payload = "\n".join(data)
                data = []
                if payload.strip() == "[DONE]":
                    return
                yield json.loads(payload)
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)
    if data and "\n".join(data).strip() != "[DONE]":
        yield json.loads("\n".join(data))


class RetryableError(Exception):
    """A failure before any token arrived that a retry may fix (connect error, 5xx)."""


@dataclass
class RetryPolicy:
    attempts: int = 3  # the first try and two retries
    backoff_s: float = 0.25  # doubled after every failed try

    def retryable(self, exc: BaseException) -> bool:
        return isinstance(exc, (RetryableError, httpx.ConnectError, httpx.ConnectTimeout))

    def delays(self) -> list[float]:
        return [self.backoff_s * (2 ** i) for i in range(self.attempts - 1)]


@dataclass
class RemotePrepared:
    built: object  # prompt.BuiltPrompt
    prompt: str | list[int]  # token ids when the tokenizer is here, else the string with markers written out
    max_tokens: int
    stop: Callable[[str], bool] | None


@dataclass
class Health:
    healthy: bool | None = None  # None: no request has finished yet
    last_error: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class RemoteBackend:
    """Talks to one OpenAI-compatible endpoint. Attributes `sessions`, `workspace`, `busy` and `phase` mirror the
    local engine's, so the server's stats read the same whichever backend runs."""

    def __init__(self, url: str, *, model: str | None = None, api_key_env: str = "CODECUE_API_KEY",
                 connect_timeout_s: float = 3.0, read_timeout_s: float = 10.0, stop: Sequence[str] = (),
                 retry: RetryPolicy | None = None, transport: httpx.BaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.stop = [s for s in stop if s]
        self.retry = retry or RetryPolicy()
        headers = {}
        api_key = os.environ.get(api_key_env)
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"  # never logged: the client's headers stay in here
        # read: the longest wait for the next chunk of a stream; write/pool bounded too, so nothing can hang.
        timeout = httpx.Timeout(connect=connect_timeout_s, read=read_timeout_s, write=read_timeout_s,
                                pool=connect_timeout_s)
        self.client = httpx.Client(headers=headers, timeout=timeout, verify=True, transport=transport)
        # Several workers: a superseded request closes its stream at once, but the newer one need not wait for that.
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="codecue-remote")
        self.health = Health()
        self.on_unhealthy: Callable[[str], None] | None = None
        self.sessions: dict = {}
        self.workspace: tuple = ()
        self.busy = False
        self.phase = "idle"

    # --- interface of the local engine the server uses -------------------------------------------------------------
    def submit(self, prepared: RemotePrepared, token: CancelToken) -> Future:
        return self.pool.submit(self.complete, prepared, token)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()

    def info(self) -> dict:
        return {"kind": "remote", "url": self.url, "healthy": self.health.healthy, "last_error": self.health.last_error}

    # --- requests --------------------------------------------------------------------------------------------------
    def model_name(self) -> str:
        """The `remote_model` setting, else the first model GET /v1/models lists (asked once)."""
        if self.model is None:
            response = self.client.get(f"{self.url}/models")
            if response.status_code >= 500:
                raise RetryableError(f"GET /models answered {response.status_code}")
            response.raise_for_status()
            models = response.json().get("data") or []
            if not models:
                raise RuntimeError(f"{self.url}/models lists no model; set the remote_model setting")
            self.model = str(models[0]["id"])
        return self.model

    def complete(self, prepared: RemotePrepared, token: CancelToken) -> CompletionResult:
        """One completion on the calling thread; never raises: a failure is an empty result and a health report."""
        started = time.perf_counter()
        text, finish, error = "", "cancelled", None
        delays = self.retry.delays()
        for attempt in range(self.retry.attempts):
            if token.is_set():
                break
            try:
                text, finish = self._stream(prepared, token)
                error = None
                break
            except Exception as exc:
                error = exc
                if attempt < len(delays) and self.retry.retryable(exc):
                    logger.info("remote completion attempt %d failed (%s); retrying", attempt + 1, describe(exc))
                    # The backoff ends early on cancel: a superseded request must not hold a worker.
                    deadline = time.monotonic() + delays[attempt]
                    while not token.is_set() and time.monotonic() < deadline:
                        time.sleep(0.01)
                    continue
                break
        if error is not None and not token.is_set():
            self._report_failure(describe(error))
            text, finish = "", "cancelled"
        elif error is None and finish != "cancelled":
            self._report_success()
        stats = CompletionStats(seconds_total=time.perf_counter() - started)
        return CompletionResult(text=text, token_ids=[], finish_reason=finish, stats=stats)

    def _stream(self, prepared: RemotePrepared, token: CancelToken) -> tuple[str, str]:
        body = {"model": self.model_name(), "prompt": prepared.prompt, "max_tokens": prepared.max_tokens,
                "temperature": 0, "stream": True}
        if self.stop:
            body["stop"] = self.stop
        text = ""
        with self.client.stream("POST", f"{self.url}/completions", json=body) as response:
            if response.status_code >= 500:
                raise RetryableError(f"POST /completions answered {response.status_code}")
            if response.status_code >= 400:
                response.read()
                raise RuntimeError(f"POST /completions answered {response.status_code}: {response.text[:200]}")
            watcher = _CancelWatcher(token, response)
            try:
                for event in parse_sse(response.iter_lines()):
                    if token.is_set():
                        return text, "cancelled"
                    choice = (event.get("choices") or [{}])[0]
                    text += choice.get("text") or ""
                    if prepared.stop is not None and prepared.stop(text):
                        return text, "stop"  # closing the stream (leaving `with`) ends generation there
                    reason = choice.get("finish_reason")
                    if reason:
                        return text, "length" if reason == "length" else "eos"
            except (httpx.ReadError, httpx.RemoteProtocolError, httpx.StreamClosed):
                if token.is_set():  # the watcher shut the socket down
                    return text, "cancelled"
                raise
            finally:
                watcher.stop()
        return text, "cancelled" if token.is_set() else "eos"

    def _report_failure(self, message: str) -> None:
        with self.health.lock:
            first = self.health.healthy is not False
            self.health.healthy, self.health.last_error = False, message
        logger.warning("remote completion from %s failed: %s", self.url, message)
        if first and self.on_unhealthy is not None:
            self.on_unhealthy(f"CodeCue: the completion endpoint {self.url} failed ({message}). Completions stay "
                              f"empty until it answers; `codecue-lsp --check --engine {self.url}` checks it.")

    def _report_success(self) -> None:
        with self.health.lock:
            self.health.healthy = True


def describe(exc: BaseException) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out ({type(exc).__name__})"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect ({exc})"
    return str(exc) or type(exc).__name__


class _CancelWatcher:
    """Closes a stream as soon as its token is set, also while the reader is blocked in a read of a stalled stream:
    shutdown() wakes that read and sends the server a FIN (close() from another thread would do neither)."""

    def __init__(self, token: CancelToken, response: httpx.Response) -> None:
        self.token, self.response = token, response
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="codecue-remote-cancel", daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.done.wait(0.01):
            if self.token.is_set():
                stream = self.response.extensions.get("network_stream")
                sock = stream.get_extra_info("socket") if stream is not None else None
                if sock is not None:
                    try:
                        sock.shutdown(socket.SHUT_RDWR)
                    except OSError:  # already closed
                        pass
                return

    def stop(self) -> None:
        self.done.set()


class RemoteCompleter:
    """completer.Completer's interface over a RemoteBackend: same prompt builder, same post-processing."""

    def __init__(self, backend: RemoteBackend, fim, count_tokens: Callable[[str], int],
                 syntax: SyntaxCache | None = None, encoder: PromptEncoder | None = None) -> None:
        self.engine = backend  # the server reads `engine` for stats and closes it on shutdown
        self.fim = fim
        self.count_tokens = count_tokens
        self.syntax = syntax
        self.encoder = encoder
        self.layouts = Layouts()  # llama-server's cache_prompt reuses the prompt's start too

    def prepare(self, doc: OpenDocument, line: int, character_utf16: int, settings: Settings,
                other_docs: Sequence[OpenDocument] = ()) -> RemotePrepared:
        # Always the plain PSM split: a serving engine cannot heal the last token (engine/healing.py), and without
        # healing the line split completes badly (docs/benchmarks.md).
        built = build_prompt(doc, line, character_utf16, self.fim, self.count_tokens, other_docs=other_docs,
                             budget=budget_for(self.prompt_tokens(settings)), syntax=self.syntax,
                             previous=self.layouts.get(doc.uri))
        self.layouts.remember(built.layout)
        prompt = self.encoder.encode_prompt(built.pieces) if self.encoder else render_prompt(built.pieces)
        return RemotePrepared(built=built, prompt=prompt, max_tokens=settings.max_tokens,
                              stop=make_stop_predicate(built))

    def prompt_tokens(self, settings: Settings) -> int:
        """"auto" is the default here: a serving engine's prefill rate is not measured (GPUs prefill it in ms)."""
        return prompt_total(settings.prompt_tokens, DEFAULT_TOTAL)

    def submit(self, prepared: RemotePrepared, token: CancelToken) -> Future:
        return self.engine.submit(prepared, token)

    def finish(self, prepared: RemotePrepared, result: CompletionResult) -> str:
        return postprocess(result.text, prepared.built)

    def complete(self, prepared: RemotePrepared, token: CancelToken | None = None) -> tuple[str, CompletionResult]:
        result = self.engine.complete(prepared, token or CancelToken())
        return self.finish(prepared, result), result


def fim_markers(fim) -> list[str]:
    return [fim.prefix, fim.suffix, fim.middle, fim.file_sep or "", fim.repo_name or ""]


def load_prompt_encoder(model, fim) -> PromptEncoder | None:
    """The model's tokenizer.json when `codecue-models fetch` has put it here (or, for a models.toml entry with
    `path`, in the user's own model directory), else None. model: a ModelSpec, or a name in the cache."""
    from engine.models import model_dir

    path = model_dir(model) / "tokenizer.json"
    if not path.is_file():
        return None
    from tokenizers import Tokenizer

    return PromptEncoder(Tokenizer.from_file(str(path)), fim_markers(fim), getattr(model, "name", model))


def estimate_tokens(text: str) -> int:
    return int(len(text) / CHARS_PER_TOKEN) + 1


def build_remote_completer(settings: Settings, syntax: SyntaxCache | None = None) -> RemoteCompleter:
    """The pair's target family gives the FIM template (models.toml) and the tokenizer for budgets and prompt ids;
    no weights load. The served model must share that tokenizer (true within a family: Qwen2.5-Coder 0.5B..32B)."""
    from engine.models import load_config

    target = load_config().pair(settings.pair).target
    fim = target.fim
    encoder = load_prompt_encoder(target, fim)
    if encoder is not None:
        count = encoder.count_tokens
        logger.info("remote engine %s: %s FIM template, prompt sent as token ids of the %s tokenizer",
                    settings.engine, fim.prefix, target.name)
    else:
        count = estimate_tokens
        logger.warning("remote engine %s: no tokenizer for %s here (`codecue-models fetch` puts it there), so the "
                       "prompt goes as text and marker strings in user text (e.g. %s in a file) cannot be protected: "
                       "the server reads them as control tokens; prompt tokens estimated at %s characters per token",
                       settings.engine, target.name, fim.prefix, CHARS_PER_TOKEN)
    backend = RemoteBackend(settings.engine, model=settings.remote_model, api_key_env=settings.api_key_env,
                            connect_timeout_s=settings.remote_connect_timeout_s,
                            read_timeout_s=settings.remote_read_timeout_s, stop=fim_markers(fim))
    return RemoteCompleter(backend, fim, count, syntax, encoder)
