"""The HTTP client of one OpenAI-compatible endpoint (vLLM, llama-server): POST /v1/completions, streamed.

remote.RemoteCompleter builds the prompt and hands it here as a RemotePrepared. A request:
- streamed (SSE), temperature 0, max_tokens, stop = the template's markers; our own stop predicate (postprocess) is
  checked on the text so far and ends the stream early.
- cancel (the CancelToken) closes the connection at once: checked between events and by a watcher thread that
  shuts the socket down, so a stalled stream is closed too; vLLM and llama-server abort the sequence then.
- failures (endpoint down, 5xx, read timeout) end the request with outcome "failed" and no text; connect errors and
  5xx before any token are retried with backoff. Health goes to `codecue.stats`; the first failure after a healthy
  state calls `on_unhealthy` once (the server shows one message), not once per keystroke.
"""
from __future__ import annotations

import json
import logging
import socket
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Sequence

import httpx

from engine.types import CancelToken, CompletionStats

from .backend import Completion
from .config import api_key as environment_api_key

logger = logging.getLogger(__name__)


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

    grows = False  # the budget is the full one at once: nothing to grow
    reranks = False  # nothing is made ready ahead of a request, so a re-ranked context waits for the next prompt
    ready_tokens = 0  # nothing is made ready ahead of a request


@dataclass
class HealthState:
    healthy: bool | None = None  # None: no request has finished yet
    last_error: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class RemoteBackend:
    """The HTTP client of one OpenAI-compatible endpoint (RemoteCompleter is the server's backend over it)."""

    def __init__(self, url: str, *, model: str | None = None, api_key_env: str = "CODECUE_API_KEY",
                 connect_timeout_s: float = 3.0, read_timeout_s: float = 10.0, stop: Sequence[str] = (),
                 retry: RetryPolicy | None = None, transport: httpx.BaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.stop = [s for s in stop if s]
        self.retry = retry or RetryPolicy()
        headers = {}
        api_key = environment_api_key(api_key_env)
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"  # never logged: the client's headers stay in here
        # read: the longest wait for the next chunk of a stream; write/pool bounded too, so nothing can hang.
        timeout = httpx.Timeout(connect=connect_timeout_s, read=read_timeout_s, write=read_timeout_s,
                                pool=connect_timeout_s)
        self.client = httpx.Client(headers=headers, timeout=timeout, verify=True, transport=transport)
        # Several workers: a superseded request closes its stream at once, but the newer one need not wait for that.
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="codecue-remote")
        self.health = HealthState()
        self.on_unhealthy: Callable[[str], None] | None = None

    def submit(self, prepared: RemotePrepared, token: CancelToken,
               on_text: Callable[[str], None] | None = None) -> Future[Completion]:
        return self.pool.submit(self.complete, prepared, token, on_text)

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

    def complete(self, prepared: RemotePrepared, token: CancelToken,
                 on_text: Callable[[str], None] | None = None) -> Completion:
        """One completion on the calling thread; never raises: a failure is outcome "failed" and a health report."""
        started = time.perf_counter()
        text, finish, error = "", "cancelled", None
        delays = self.retry.delays()
        for attempt in range(self.retry.attempts):
            if token.is_set():
                break
            try:
                text, finish = self._stream(prepared, token, on_text)
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
        stats = CompletionStats(seconds_total=time.perf_counter() - started)
        if error is not None and not token.is_set():
            message = describe(error)
            self._report_failure(message)
            return Completion.failed(message, stats)
        if error is None and finish != "cancelled":
            self._report_success()
        return Completion(text=text, outcome="cancelled" if finish == "cancelled" else "completed",
                          finish_reason=finish, stats=stats)

    def _stream(self, prepared: RemotePrepared, token: CancelToken,
                on_text: Callable[[str], None] | None = None) -> tuple[str, str]:
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
                    if on_text is not None:
                        on_text(text)
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
