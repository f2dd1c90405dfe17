"""The client of one OpenAI-compatible endpoint (vLLM, llama-server): POST /v1/completions, streamed.

remote.RemoteCompleter builds the prompt and hands it here as a RemotePrepared. A request:
- first (once): the model name and what serves it (remote_server.py), and whether it shares the pair's vocabulary
  (a probe through /tokenize); a different one gets text prompts from then on, with one message.
- streamed (SSE), temperature 0, max_tokens; stops as the server kind needs them; our own stop predicate
  (postprocess) is checked on the text so far and ends the stream early.
- cancel (the CancelToken) closes the connection at once: checked between events and by a watcher thread that
  shuts the socket down, so a stalled stream is closed too; vLLM and llama-server abort the sequence then.
- bounded: an overall deadline (remoteDeadlineS, retries included), a read timeout per chunk, a size cap.
- failures (endpoint down, 4xx/5xx, an error event mid-stream, a timeout) end it with outcome "failed" and no text,
  also when a keystroke supersedes it while it waits to retry. Connect errors and 5xx before any token are retried
  with backoff, a 429 after its Retry-After (later requests wait it out too), a connection dropped before the first
  token once at once. Health goes to `codecue.stats`; the first failure after a healthy state calls `on_unhealthy`
  once (the server shows one message), not once per keystroke. No message, log or stat holds the API key or a
  header value: they are scrubbed (redact.py), and an engine URL with credentials is refused.
"""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Sequence

import httpx

from engine.types import CancelToken, CompletionStats

from .backend import Completion
from .confidence import from_logprobs
from .config import api_key as environment_api_key
from .config import header_values
from .redact import has_credentials, scrub
from .remote_http import (  # parse_sse and describe: also this module's names (tests, __main__)
    ConnectionDropped,
    DeadlineExceeded,
    RateLimited,
    RetryableError,
    StreamError,
    StreamWatcher,
    TooLarge,
    capped_lines,
    check_status,
    describe,
    error_message,
    make_client,
    parse_sse,
    read_json,
    sleep_unless_cancelled,
)
from .remote_server import (
    Stops,
    VocabularyProbe,
    completion_body,
    kind_from_models,
    kind_from_props,
    root_url,
    token_logprobs,
    tokenize_body,
    usage_counts,
)

logger = logging.getLogger(__name__)

# A stream's size cap: an SSE event per token is ~300 bytes (vLLM, llama-server); 4 KB a token leaves room for
# verbose servers, and a hostile one stops there instead of filling the memory.
STREAM_BYTES_BASE = 64 * 1024
STREAM_BYTES_PER_TOKEN = 4096
MAX_RETRY_AFTER_S = 300.0  # a gateway that asks for a day's pause gets five minutes: completions come back by then


@dataclass
class RetryPolicy:
    attempts: int = 3  # the first try and two retries (connect errors, 5xx, 429)
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
    text: str | None = None  # the prompt as text, sent instead of ids to an engine of another vocabulary

    grows = False  # the budget is the full one at once: nothing to grow
    reranks = False  # nothing is made ready ahead of a request, so a re-ranked context waits for the next prompt
    ready_tokens = 0  # nothing is made ready ahead of a request


@dataclass
class HealthState:
    healthy: bool | None = None  # None: no request has finished yet
    last_error: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class Streamed:
    """What one streamed answer gave."""
    text: str = ""
    finish: str = "cancelled"  # the engine's FinishReason; "cancelled" until the stream ends otherwise
    ended: bool = False  # the server (a finish_reason, the end of the stream) or our stop predicate ended it
    usage: dict | None = None
    sent_ids: int = 0  # prompt tokens sent as ids (0: sent as text)
    logprobs: list[tuple[str, float | None]] = field(default_factory=list)  # per token, where the engine sent them


class RemoteBackend:
    """The HTTP client of one OpenAI-compatible endpoint (RemoteCompleter is the server's backend over it)."""

    def __init__(self, url: str, *, model: str | None = None, api_key_env: str = "CODECUE_API_KEY",
                 connect_timeout_s: float = 3.0, read_timeout_s: float = 10.0, deadline_s: float = 60.0,
                 stop: Sequence[str] = (), stop_token_ids: Sequence[int] = (), server: str = "auto",
                 ca_bundle: str | None = None, headers_env: Sequence[tuple[str, str]] = (),
                 probe: VocabularyProbe | None = None, count_tokens: Callable[[str], int] | None = None,
                 retry: RetryPolicy | None = None, transport: httpx.BaseTransport | None = None) -> None:
        if has_credentials(url):  # refused, not used: the URL is shown in messages, logs and codecue.stats
            raise ValueError("the engine URL holds credentials (user:password@): give the URL without them and "
                             "the key in the environment variable apiKeyEnv names")
        self.url = url.rstrip("/")
        self.model = model
        self.kind = None if server == "auto" else server  # None: asked on the first request
        self.stops = Stops(tuple(s for s in stop if s), tuple(stop_token_ids))
        self.probe = probe
        self.vocabulary: str | None = None  # "same", "different" or "unchecked", after the first request
        self.count_tokens = count_tokens
        self.retry = retry or RetryPolicy()
        self.deadline_s, self.timeouts = deadline_s, (connect_timeout_s, read_timeout_s)
        headers = header_values(tuple(headers_env))  # a gateway's own headers, from the environment
        key = environment_api_key(api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self.secrets = [key, *headers.values()]  # scrubbed from every message, log and stat
        self.client = make_client(headers=headers, connect_timeout_s=connect_timeout_s,
                                  read_timeout_s=read_timeout_s, ca_bundle=ca_bundle, transport=transport)
        # Several workers: a superseded request closes its stream at once, but the newer one need not wait for that.
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="codecue-remote")
        self.health = HealthState()
        self.on_unhealthy: Callable[[str], None] | None = None
        self.first_contact = threading.Lock()
        self.rate_limited_until = 0.0  # monotonic time a 429's Retry-After asked every request to wait for

    def submit(self, prepared: RemotePrepared, token: CancelToken,
               on_text: Callable[[str], None] | None = None) -> Future[Completion]:
        return self.pool.submit(self.complete, prepared, token, on_text)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()

    def info(self) -> dict:
        return {"kind": "remote", "url": self.url, "healthy": self.health.healthy, "last_error": self.health.last_error}

    # --- first contact ---------------------------------------------------------------------------------------------
    def model_name(self) -> str:
        """The `remote_model` setting, else the first model GET /v1/models lists (asked once)."""
        with self.first_contact:
            if self.model is None or self.kind is None:
                self._read_models()
        return self.model

    def _discover(self) -> None:
        """Once, before the first completion: the model, what serves it, whether it shares our vocabulary. A
        connect error or 5xx leaves it to the next try."""
        self.model_name()
        with self.first_contact:
            if self.vocabulary is None:
                self.vocabulary = self._check_vocabulary()

    def _read_models(self) -> None:
        try:
            listed = self._get_json(f"{self.url}/models", "GET /models")
        except (StreamError, ValueError):  # 4xx or not JSON: needed only without the model's name
            if self.model is None:
                raise
            listed = {}
        entries = [e for e in listed.get("data") or [] if isinstance(e, dict)] if isinstance(listed, dict) else []
        if self.model is None:
            if not entries:
                raise RuntimeError(f"{self.url}/models lists no model; set the remoteModel setting")
            self.model = str(entries[0]["id"])
        if self.kind is None:
            self.kind = kind_from_models(entries) or kind_from_props(self._props())
            logger.info("remote engine %s serves %s (%s)", self.url, self.model, self.kind)

    def _props(self) -> object:
        """llama-server's /props, or None from a server without it."""
        try:
            return self._get_json(f"{root_url(self.url)}/props", "GET /props")
        except (StreamError, RetryableError, ValueError, TooLarge, httpx.HTTPError):
            return None

    def _check_vocabulary(self) -> str:
        if self.probe is None or self.kind not in ("vllm", "llama-server"):
            return "unchecked"
        try:
            answer = self._post_json(f"{root_url(self.url)}/tokenize", "POST /tokenize",
                                     tokenize_body(self.kind, self.model, self.probe.text))
        except (StreamError, ValueError, TooLarge) as exc:  # no /tokenize there (a proxy that passes /v1 only)
            logger.info("remote engine %s: vocabulary not checked (/tokenize: %s)", self.url, self._describe(exc))
            return "unchecked"
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if tokens == list(self.probe.ids):
            logger.info("remote engine %s shares the %s vocabulary: prompts go as token ids", self.url,
                        self.probe.tokenizer)
            return "same"
        message = (f"CodeCue: the model {self.model} at {self.url} does not share the {self.probe.tokenizer} "
                   f"tokenizer (a probe string gave other token ids), so prompts go to it as text: marker strings "
                   f"inside files then reach the model as control tokens. Serve a model of the pair's family, or "
                   f"choose the pair that matches the served model.")
        logger.warning("%s", message)
        if self.on_unhealthy is not None:
            self.on_unhealthy(message)
        return "different"

    def _get_json(self, url: str, what: str) -> object:
        with self.client.stream("GET", url) as response:
            check_status(response, what)
            return read_json(response)

    def _post_json(self, url: str, what: str, body: dict) -> object:
        with self.client.stream("POST", url, json=body) as response:
            check_status(response, what)
            return read_json(response)

    # --- a completion ----------------------------------------------------------------------------------------------
    def complete(self, prepared: RemotePrepared, token: CancelToken,
                 on_text: Callable[[str], None] | None = None) -> Completion:
        """One completion on the calling thread; never raises: a failure is outcome "failed" and a health report."""
        started, deadline = time.perf_counter(), time.monotonic() + self.deadline_s
        reply, error, failures, dropped = Streamed(), None, 0, False
        while not token.is_set():
            try:
                self._wait_out_rate_limit(token, deadline)
                if token.is_set():  # superseded while it waited: nothing is sent
                    break
                self._discover()
                reply, error = self._stream(prepared, token, on_text, deadline), None
                break
            except Exception as exc:  # noqa: BLE001 - every failure becomes outcome "failed"
                error, reply = exc, Streamed()
                dropped_now = isinstance(exc, ConnectionDropped)
                if not dropped_now:
                    failures += 1  # a drop has its own one retry, outside the retry policy's count
                wait = self._next_try(exc, failures, dropped, deadline)
                if wait is None:
                    break
                dropped = dropped or dropped_now
                logger.info("remote completion attempt failed (%s); retrying", self._describe(exc))
                sleep_unless_cancelled(token, wait)  # ends early on cancel: a superseded request must not hold a worker
        stats, generated = self._stats(reply, started)
        if error is not None:  # a failure stays one when a keystroke superseded the request during the wait after it
            message = self._describe(error)
            self._report_failure(message)
            return Completion.failed(message, stats)
        if reply.finish != "cancelled":
            self._report_success()
        texts, logprobs = [text for text, _ in reply.logprobs], [value for _, value in reply.logprobs]
        return Completion(text=reply.text, outcome="cancelled" if reply.finish == "cancelled" else "completed",
                          finish_reason=reply.finish, stats=stats, reported_tokens=generated,
                          confidence=from_logprobs(texts, logprobs))

    def _next_try(self, exc: Exception, failures: int, dropped: bool, deadline: float) -> float | None:
        """Seconds to wait before trying again, or None: the request fails now."""
        if isinstance(exc, ConnectionDropped):
            return None if dropped else 0.0  # once, at once: a keep-alive connection the server had closed
        if isinstance(exc, RateLimited) and exc.wait_s is not None:  # every request waits it out, not only this one
            until = time.monotonic() + min(exc.wait_s, MAX_RETRY_AFTER_S)
            self.rate_limited_until = max(self.rate_limited_until, until)
        if not self.retry.retryable(exc) or failures >= self.retry.attempts:
            return None
        wait = self.retry.delays()[failures - 1]
        if isinstance(exc, RateLimited) and exc.wait_s is not None:
            wait = min(exc.wait_s, MAX_RETRY_AFTER_S)
        return wait if time.monotonic() + wait < deadline else None

    def _wait_out_rate_limit(self, token: CancelToken, deadline: float) -> None:
        """Every request waits out a 429's Retry-After (or fails now when that is past its deadline)."""
        left = self.rate_limited_until - time.monotonic()
        if left <= 0:
            return
        if time.monotonic() + left >= deadline:
            raise RateLimited(f"rate limited (429) for {left:.0f} s more", left)
        sleep_unless_cancelled(token, left)

    def _stream(self, prepared: RemotePrepared, token: CancelToken, on_text: Callable[[str], None] | None,
                deadline: float) -> Streamed:
        body = self._body(prepared)
        reply = Streamed(sent_ids=len(body["prompt"]) if isinstance(body["prompt"], list) else 0)
        left = deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded(f"no answer within {self.deadline_s:g} s")
        connect, read = self.timeouts
        timeout = httpx.Timeout(connect=connect, read=min(read, left), write=read, pool=connect)
        try:
            with self.client.stream("POST", f"{self.url}/completions", json=body, timeout=timeout) as response:
                check_status(response, "POST /completions")
                watcher = StreamWatcher(token, deadline, response)
                try:
                    self._read_events(response, prepared, token, on_text, deadline, reply)
                finally:
                    watcher.stop()
        except (httpx.ReadError, httpx.RemoteProtocolError, httpx.StreamClosed, httpx.TimeoutException) as exc:
            if token.is_set() or reply.ended:  # the watcher closed it, or only the usage chunk was lost
                return reply
            if time.monotonic() >= deadline - 0.05:
                raise DeadlineExceeded(f"no full answer within {self.deadline_s:g} s") from exc
            if not reply.text and not isinstance(exc, httpx.TimeoutException):
                raise ConnectionDropped(f"the connection closed before the first token ({describe(exc)})") from exc
            raise
        if not reply.ended and not token.is_set():
            if time.monotonic() >= deadline:
                raise DeadlineExceeded(f"no full answer within {self.deadline_s:g} s")
            reply.finish, reply.ended = "eos", True  # the stream ended ([DONE]) without a reason
        return reply

    def _read_events(self, response: httpx.Response, prepared: RemotePrepared, token: CancelToken,
                     on_text: Callable[[str], None] | None, deadline: float, reply: Streamed) -> None:
        limit = STREAM_BYTES_BASE + STREAM_BYTES_PER_TOKEN * prepared.max_tokens
        for event in parse_sse(capped_lines(response, limit)):
            if token.is_set():
                return
            if time.monotonic() >= deadline:
                raise DeadlineExceeded(f"no full answer within {self.deadline_s:g} s")
            if (message := error_message(event)) is not None:
                raise StreamError(f"the engine failed mid-stream: {message}")
            if isinstance(event.get("usage"), dict):
                reply.usage = event["usage"]
            if reply.ended:  # after the finish: only vLLM's usage chunk is still awaited
                if reply.usage is not None:
                    return
                continue
            choice = (event.get("choices") or [None])[0]
            if not isinstance(choice, dict):
                continue
            reply.text += choice.get("text") or ""
            reply.logprobs += token_logprobs(choice)
            if on_text is not None:
                on_text(reply.text)
            if prepared.stop is not None and prepared.stop(reply.text):
                reply.finish, reply.ended = "stop", True
                return  # closing the stream (leaving `with`) ends generation there
            reason = choice.get("finish_reason")
            if reason:
                reply.finish, reply.ended = ("length" if reason == "length" else "eos"), True
                if reply.usage is not None or self.kind != "vllm":  # vLLM sends the counts in a chunk after this
                    return

    def _body(self, prepared: RemotePrepared) -> dict:
        same = self.vocabulary != "different"
        prompt = prepared.prompt if same or prepared.text is None else prepared.text
        return completion_body(self.kind or "openai", model=self.model, prompt=prompt,
                               max_tokens=prepared.max_tokens, stops=self.stops, same_vocabulary=same)

    def _stats(self, reply: Streamed, started: float) -> tuple[CompletionStats, int]:
        """The request's stats and its generated tokens: the server's counts where it sent them (usage), else
        the prompt ids sent and the text's tokens by the pair's tokenizer."""
        prompt, cached, generated = usage_counts(reply.usage)
        prompt = prompt if prompt is not None else reply.sent_ids
        if generated is None:
            generated = self.count_tokens(reply.text) if reply.text and self.count_tokens else 0
        stats = CompletionStats(prompt_tokens=prompt, reused_prompt_tokens=cached,
                                new_prompt_tokens=max(prompt - cached, 0),
                                seconds_total=time.perf_counter() - started)
        return stats, generated

    # --- health ----------------------------------------------------------------------------------------------------
    def _describe(self, exc: BaseException) -> str:
        return scrub(describe(exc), self.secrets)

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
