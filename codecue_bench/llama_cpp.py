"""llama.cpp as the benchmark peer: a `llama-server` on 127.0.0.1 with the same GGUF files, spoken to over HTTP.

The server is built by scripts/build-llama-cpp.sh into $CODECUE_HOME/llama.cpp/build/bin (never in CI). It runs in
its own process group, so stopping it also stops anything it started, and `LlamaServer` always stops it on exit.
Requests are greedy (temperature 0, top_k 1) with the prompt cache on, like CodeCue's session KV reuse.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from engine.paths import codecue_home
from engine.weights.llamacpp_probe import peer_arguments

from .health import http_client, wait_healthy  # noqa: F401 (http_client: used through this module too)


def build_dir(home: Path | None = None) -> Path:
    return (home or codecue_home()) / "llama.cpp" / "build" / "bin"


def server_binary(home: Path | None = None) -> Path | None:
    """The built llama-server, or None when scripts/build-llama-cpp.sh has not run on this machine."""
    path = build_dir(home) / "llama-server"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """A llama-server for one GGUF: started on enter, its whole process group killed on exit.
    With `url`, uses a server someone else started and manages nothing."""

    def __init__(self, model: Path | None = None, *, url: str | None = None, threads: int = 2, ctx: int = 8192,
                 extra_args: tuple[str, ...] = (), binary: Path | None = None, ready_timeout: float = 300.0):
        self.model, self.threads, self.ctx, self.extra_args = model, threads, ctx, tuple(extra_args)
        self.binary = binary or server_binary()
        self.url = url
        self.ready_timeout = ready_timeout
        self.process: subprocess.Popen | None = None
        self.log_path: Path | None = None

    def __enter__(self) -> "LlamaServer":
        if self.url is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def command(self, port: int) -> list[str]:
        if self.binary is None:
            raise RuntimeError("llama-server is not built: run scripts/build-llama-cpp.sh")
        return [str(self.binary), "-m", str(self.model), "--host", "127.0.0.1", "--port", str(port),
                "-t", str(self.threads), "-tb", str(self.threads), "-c", str(self.ctx), "-np", "1",
                "--temp", "0", "--top-k", "1", *peer_arguments(self.model), *self.extra_args]

    def start(self) -> None:
        port = free_port()
        fd, log_path = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
        self.log_path = Path(log_path)
        with os.fdopen(fd, "w") as log:
            # start_new_session: its own process group, killed as a whole in stop().
            self.process = subprocess.Popen(self.command(port), stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        self.url = f"http://127.0.0.1:{port}"
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def wait_ready(self) -> None:
        """/health answers 503 while the model loads and 200 once it can serve."""
        def alive() -> bool:
            return self.process is None or self.process.poll() is None
        try:
            wait_healthy(self.url, alive, self.ready_timeout, name="llama-server")
        except RuntimeError:
            raise RuntimeError(f"llama-server exited with {self.process.returncode}: {self.log_tail()}") from None
        except TimeoutError as exc:
            raise RuntimeError(f"{exc}: {self.log_tail()}") from None

    def log_tail(self, chars: int = 2000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path else ""

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        if self.log_path:
            self.log_path.unlink(missing_ok=True)


@dataclass
class Answer:
    """One llama-server answer: the token ids (cut at the first stop id), the text, its own timings, and the
    wall time the client waited (HTTP included: what a caller of llama.cpp waits for)."""
    token_ids: list[int]
    text: str
    seconds: float
    prompt_n: int = 0  # prompt tokens it evaluated (the rest came from its prompt cache)
    prompt_ms: float = 0.0
    predicted_n: int = 0
    predicted_ms: float = 0.0
    raw: dict = field(default_factory=dict, repr=False)


def _answer(body: dict, seconds: float, stop_ids: set[int]) -> Answer:
    ids = [int(t) for t in body.get("tokens") or []]
    cut = next((i for i, t in enumerate(ids) if t in stop_ids), len(ids))
    timings = body.get("timings") or {}
    return Answer(token_ids=ids[:cut], text=body.get("content", ""), seconds=seconds,
                  prompt_n=int(timings.get("prompt_n", 0)), prompt_ms=float(timings.get("prompt_ms", 0.0)),
                  predicted_n=int(timings.get("predicted_n", 0)),
                  predicted_ms=float(timings.get("predicted_ms", 0.0)), raw=body)


GREEDY = {"temperature": 0.0, "top_k": 1, "cache_prompt": True, "stream": False}


def complete(client: httpx.Client, prompt_ids: list[int], n_predict: int, stop_ids: set[int]) -> Answer:
    """POST /completion with the prompt as token ids, so llama.cpp sees exactly the tokens CodeCue's modes see.
    It stops by itself on the model's end-of-generation tokens (which include the pair's stop ids); the returned
    ids are cut at the first stop id as well."""
    payload = {"prompt": list(prompt_ids), "n_predict": n_predict, "return_tokens": True, **GREEDY}
    started = time.perf_counter()
    response = client.post("/completion", json=payload)
    seconds = time.perf_counter() - started
    response.raise_for_status()
    return _answer(response.json(), seconds, stop_ids)


def infill(client: httpx.Client, prefix: str, suffix: str, n_predict: int, stop: list[str] | None = None) -> Answer:
    """POST /infill: llama-server builds the model's own FIM prompt from the text around the cursor."""
    payload = {"input_prefix": prefix, "input_suffix": suffix, "n_predict": n_predict, "return_tokens": True,
               **GREEDY}
    if stop:
        payload["stop"] = stop
    started = time.perf_counter()
    response = client.post("/infill", json=payload)
    seconds = time.perf_counter() - started
    response.raise_for_status()
    return _answer(response.json(), seconds, set())
