"""The HTTP side of the remote backend: the client (TLS through the OS trust store, a CA bundle, headers), reading a
body or an SSE stream with a size cap, the watcher that closes a stream on cancel or deadline, Retry-After, and the
errors a request can end with (remote_endpoint.py sorts them into retry or fail)."""
from __future__ import annotations

import codecs
import email.utils
import json
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Iterable, Iterator, Mapping

import httpx
import truststore

from engine.types import CancelToken

MAX_JSON_BYTES = 1 << 20  # GET /models, /props, /tokenize answers and error bodies: a few KB in practice
ERROR_BODY_CHARS = 200  # of an error answer, shown to the user


class RetryableError(Exception):
    """A failure before any token arrived that a retry may fix (5xx)."""


class RateLimited(RetryableError):
    """429: the server said when to come back (`wait_s`, from Retry-After), or not (None)."""

    def __init__(self, message: str, wait_s: float | None) -> None:
        super().__init__(message)
        self.wait_s = wait_s


class ConnectionDropped(Exception):
    """The connection closed before the first token: retried once (a keep-alive connection the server had closed)."""


class StreamError(Exception):
    """The server said the request failed: a 4xx, or an `{"error": ...}` event inside the stream."""


class DeadlineExceeded(Exception):
    """The request ran past its overall deadline (remoteDeadlineS)."""


class TooLarge(Exception):
    """An answer passed its size cap: a broken or hostile server must not fill the memory."""


def tls_context(ca_bundle: str | None) -> ssl.SSLContext:
    """Certificates checked against the OS trust store (a company's root CA installed there counts, unlike with
    certifi's list), plus the CA bundle file when one is set."""
    context = truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if ca_bundle:
        path = Path(ca_bundle).expanduser()
        if not path.is_file():
            raise ValueError(f"remoteCaBundle: no file {path}")
        context.load_verify_locations(cafile=str(path))
    return context


def make_client(*, headers: Mapping[str, str], connect_timeout_s: float, read_timeout_s: float,
                ca_bundle: str | None, transport: httpx.BaseTransport | None = None) -> httpx.Client:
    # read: the longest wait for the next chunk of a stream; write/pool bounded too, so nothing can hang.
    timeout = httpx.Timeout(connect=connect_timeout_s, read=read_timeout_s, write=read_timeout_s,
                            pool=connect_timeout_s)
    # httpx takes HTTPS_PROXY / NO_PROXY from the environment (a company's outbound proxy); redirects are not
    # followed: one could take the code and the key to another host.
    return httpx.Client(headers=dict(headers), timeout=timeout, verify=tls_context(ca_bundle), transport=transport,
                        follow_redirects=False)


def capped_lines(response: httpx.Response, limit: int) -> Iterator[str]:
    """The lines of a streamed body (LF or CRLF), stopping with TooLarge past `limit` bytes: a line that never
    ends cannot grow without bound, as it could with httpx's iter_lines."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    received, pending = 0, ""
    for chunk in response.iter_bytes():
        received += len(chunk)
        if received > limit:
            raise TooLarge(f"the answer passed {limit} bytes")
        pending += decoder.decode(chunk)
        *lines, pending = pending.split("\n")
        for line in lines:
            yield line.removesuffix("\r")
    pending += decoder.decode(b"", final=True)
    if pending:
        yield pending.removesuffix("\r")


def read_json(response: httpx.Response, limit: int = MAX_JSON_BYTES) -> object:
    """A streamed response's JSON body, at most `limit` bytes."""
    return json.loads("\n".join(capped_lines(response, limit)))


def read_text(response: httpx.Response, limit: int = MAX_JSON_BYTES) -> str:
    try:
        return "\n".join(capped_lines(response, limit))
    except TooLarge:
        return "(a body too large to show)"


def retry_after_s(value: str | None) -> float | None:
    """Retry-After as seconds from now: a number of seconds or an HTTP date (RFC 9110); None when absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def check_status(response: httpx.Response, what: str) -> None:
    """Raise for a failed answer: 429 RateLimited, 5xx RetryableError, 4xx StreamError (body shown, shortened)."""
    status = response.status_code
    if status == 429:
        wait = retry_after_s(response.headers.get("retry-after"))
        raise RateLimited(f"{what} answered 429 (rate limited)", wait)
    if status >= 500:
        raise RetryableError(f"{what} answered {status}")
    if status >= 400:
        raise StreamError(f"{what} answered {status}: {read_text(response)[:ERROR_BODY_CHARS]}")
    if status >= 300:  # redirects are not followed: a redirect could take the code and the key elsewhere
        raise StreamError(f"{what} answered {status} (a redirect to {response.headers.get('location')!r}); "
                          f"set the engine URL to where it points")


def error_message(event: dict) -> str | None:
    """The message of an `{"error": ...}` event inside a stream (vLLM and llama-server send one when generation
    fails after the stream started), else None."""
    error = event.get("error")
    if error is None and event.get("object") == "error":  # older vLLM: the error object itself
        error = event
    if error is None:
        return None
    if isinstance(error, dict):
        return str(error.get("message") or error.get("type") or error)
    return str(error)


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


def describe(exc: BaseException) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out ({type(exc).__name__})"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect ({exc})"
    return str(exc) or type(exc).__name__


def sleep_unless_cancelled(token: CancelToken, seconds: float) -> None:
    end = time.monotonic() + seconds
    while not token.is_set() and time.monotonic() < end:
        time.sleep(0.01)


class StreamWatcher:
    """Closes a stream as soon as its token is set or its deadline passes, also while the reader is blocked in a
    read of a stalled stream: shutdown() wakes that read and sends the server a FIN (close() from another thread
    would do neither)."""

    def __init__(self, token: CancelToken, deadline: float, response: httpx.Response) -> None:
        self.token, self.deadline, self.response = token, deadline, response
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="codecue-remote-cancel", daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.done.wait(0.01):
            if self.token.is_set() or time.monotonic() >= self.deadline:
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
