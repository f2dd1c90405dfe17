"""A fake serving engine on 127.0.0.1 that behaves as vLLM or llama-server document it, for the remote backend's tests.

- vLLM: `/v1/models` entries are `owned_by: "vllm"`; no `/props`; `POST /tokenize {model, prompt,
  add_special_tokens}`; a completion drops special tokens from its text unless `skip_special_tokens: false`, so a
  marker stop string never matches a special token; it stops on the model's EOS and on `stop_token_ids` (neither
  in the text); `stream_options.include_usage` adds a chunk with `usage` and no choices after the finish; an
  error during generation is a `data: {"error": {...}}` event, then `data: [DONE]`.
- llama-server: `owned_by: "llamacpp"`, `/props` with `default_generation_settings`, `POST /tokenize {content,
  add_special, parse_special}`; special tokens are in its text, so marker stop strings match; `usage` comes with
  the finishing chunk.
With `logprobs` in the body, each token's chunk carries its log probability (TOKEN_LOGPROB), in vLLM's
completions format (`tokens` + `token_logprobs`) or llama-server's (`content[{token, logprob}]`).
The model "writes" `script` (token id, text, special?). Each POST /v1/completions takes the next entry of `plan`
(then "stream"): "stream", "drop" (close the connection without an answer), ("status", code, headers, body),
("error_after", n), ("trickle", seconds) (a token every so often, never finishing), ("flood", bytes).
`echo_auth`: a gateway that refuses the credentials and repeats them in its 401 body. Every request is recorded
(method, path, headers, JSON body, time).
"""
from __future__ import annotations

import json
import ssl
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

EOS = 0  # the tiny pair's <|endoftext|> (engine/testing: special tokens 0..7, the Qwen markers)
FILE_SEP = 7
HANG_GUARD_S = 60
TOKEN_LOGPROB = -0.25  # every token's log probability, where the request asks for them


@dataclass(frozen=True)
class Token:
    id: int
    text: str
    special: bool = False


# The model completes "def add(a, b):\n    " with a line, then writes a file separator and another file, as a FIM
# model does at a repository-level prompt; it ends with EOS.
SCRIPT = (Token(101, "return"), Token(102, " a"), Token(103, " +"), Token(104, " b"), Token(105, "\n"),
          Token(FILE_SEP, "<|file_sep|>", special=True), Token(106, "junk.py\n"), Token(107, "import os\n"),
          Token(EOS, "<|endoftext|>", special=True))
ANSWER = "return a + b\n"  # the completion, stopped at the file separator


@dataclass
class Request:
    method: str
    path: str
    headers: dict
    body: object
    at: float


class FakeEngine:
    def __init__(self, kind: str = "vllm", *, script=SCRIPT, plan=(),
                 tokenize: Callable[[str], list[int]] | None = None, model: str = "Qwen/Qwen2.5-Coder-1.5B",
                 tls: ssl.SSLContext | None = None, echo_auth: bool = False, owned_by: str | None = None) -> None:
        self.kind, self.script, self.plan, self.model = kind, list(script), list(plan), model
        self.owned_by = owned_by or {"vllm": "vllm", "llama-server": "llamacpp"}.get(kind, "someone")
        self.tokenize, self.echo_auth = tokenize, echo_auth
        self.requests: list[Request] = []
        self.release = threading.Event()
        engine = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as both servers

            def log_message(self, *args):
                pass

            def do_GET(self):
                engine.record(self, None)
                engine.get(self)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"null")
                engine.record(self, body)
                engine.post(self, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        scheme = "http"
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FakeEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- what was asked ----------------------------------------------------------------------------------------
    def record(self, handler, body) -> None:
        self.requests.append(Request(handler.command, handler.path, dict(handler.headers), body, time.monotonic()))

    def completions(self) -> list[Request]:
        return [r for r in self.requests if r.path == "/v1/completions"]

    # --- answers -------------------------------------------------------------------------------------------------
    def get(self, h) -> None:
        if h.path == "/v1/models":
            entry = {"id": self.model, "object": "model", "owned_by": self.owned_by}
            send_json(h, 200, {"object": "list", "data": [entry]})
        elif h.path == "/props" and self.kind == "llama-server":
            send_json(h, 200, {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1})
        else:
            send_json(h, 404, {"detail": "Not Found"} if self.kind == "vllm" else {"error": {"code": 404}})

    def post(self, h, body) -> None:
        if h.path == "/tokenize" and self.tokenize is not None and self.kind in ("vllm", "llama-server"):
            text = body["prompt"] if self.kind == "vllm" else body["content"]
            send_json(h, 200, {"tokens": self.tokenize(text), "count": 0, "max_model_len": 4096})
            return
        if h.path != "/v1/completions":
            send_json(h, 404, {"detail": "Not Found"})
            return
        if self.echo_auth and h.headers.get("authorization"):  # a gateway that repeats what it refused
            send_json(h, 401, {"error": f"invalid credentials: {h.headers['authorization']} "
                                        f"{h.headers.get('x-api-key', '')}"})
            return
        answer = self.plan.pop(0) if self.plan else "stream"
        if answer == "drop":
            h.close_connection = True
            h.connection.shutdown(2)
            return
        if isinstance(answer, tuple) and answer[0] == "status":
            _, code, headers, payload = answer
            send_json(h, code, payload, headers)
            return
        h.send_response(200)
        h.send_header("content-type", "text/event-stream")
        h.send_header("connection", "close")
        h.end_headers()
        h.close_connection = True
        try:
            if isinstance(answer, tuple) and answer[0] == "trickle":
                while not self.release.wait(answer[1]):
                    event(h, self.chunk("x", None))
            elif isinstance(answer, tuple) and answer[0] == "flood":
                piece = "y" * 8192
                for _ in range(answer[1] // len(piece)):
                    event(h, self.chunk(piece, None))
            else:
                self.stream(h, body, error_after=answer[1] if isinstance(answer, tuple) else None)
        except (BrokenPipeError, ConnectionResetError):  # the client closed the stream: a cancel
            pass

    def chunk(self, text: str, finish: str | None, usage: dict | None = None, logprob: float | None = None) -> dict:
        logprobs = None
        if logprob is not None and self.kind == "vllm":
            logprobs = {"tokens": [text], "token_logprobs": [logprob], "top_logprobs": [{text: logprob}],
                        "text_offset": [0]}
        elif logprob is not None:
            logprobs = {"content": [{"token": text, "logprob": logprob, "bytes": list(text.encode()),
                                     "top_logprobs": []}]}
        out = {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": self.model,
               "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}]}
        if usage is not None:
            out["usage"] = usage
        return out

    def stream(self, h, body: dict, error_after: int | None) -> None:
        stop_ids = {EOS, *(body.get("stop_token_ids") or [])}
        skip_special = self.kind == "vllm" and body.get("skip_special_tokens", True)
        stops = body.get("stop") or []
        text, produced, finish = "", 0, "length"
        for token in self.script:
            if produced >= body.get("max_tokens", 16):
                break
            if error_after is not None and produced == error_after:
                event(h, {"error": {"message": "CUDA out of memory", "type": "InternalServerError", "code": 500}})
                h.wfile.write(b"data: [DONE]\n\n")
                return
            produced += 1
            if token.id in stop_ids:
                finish = "stop"
                break
            piece = "" if token.special and skip_special else token.text
            hit = next((s for s in stops if s in text + piece), None)
            if hit is not None:
                piece = (text + piece)[: (text + piece).index(hit)][len(text):]
                finish = "stop"
            text += piece
            if piece:
                event(h, self.chunk(piece, None, logprob=TOKEN_LOGPROB if body.get("logprobs") else None))
            if hit is not None:
                break
        prompt = body.get("prompt")
        usage = {"prompt_tokens": len(prompt) if isinstance(prompt, list) else len(prompt) // 4,
                 "completion_tokens": produced, "total_tokens": 0, "prompt_tokens_details": {"cached_tokens": 2}}
        if self.kind == "vllm":
            event(h, self.chunk("", finish))
            if (body.get("stream_options") or {}).get("include_usage"):
                event(h, {"id": "cmpl-1", "object": "text_completion", "choices": [], "usage": usage})
        else:
            event(h, self.chunk("", finish, usage if self.kind == "llama-server" else None))
        h.wfile.write(b"data: [DONE]\n\n")
        h.wfile.flush()


def event(h, payload: dict) -> None:
    h.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
    h.wfile.flush()


def send_json(h, code: int, payload, headers: dict | None = None) -> None:
    data = json.dumps(payload).encode()
    h.send_response(code)
    h.send_header("content-type", "application/json")
    h.send_header("content-length", str(len(data)))
    for name, value in (headers or {}).items():
        h.send_header(name, value)
    h.end_headers()
    h.wfile.write(data)
    h.wfile.flush()
