"""Wait until a local inference server can serve: its /health answers 503 while the models load and 200 once a
request can be served (llama-server and vLLM alike). The benchmarks call `wait_healthy`; the shell benchmark
scripts/bench-vllm-clients.sh runs `python -m codecue_bench.health URL PID`.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable

import httpx


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def http_client(url: str, timeout: float = 600.0) -> httpx.Client:
    # trust_env=False: a proxy from the environment must never sit between us and 127.0.0.1.
    return httpx.Client(base_url=url, timeout=timeout, trust_env=False)


def wait_healthy(url: str, alive: Callable[[], bool], timeout_s: float, poll_s: float = 0.25,
                 name: str = "server") -> None:
    """Return once GET url/health is 200; RuntimeError when `alive()` says the process ended first, TimeoutError
    after timeout_s."""
    deadline = time.monotonic() + timeout_s
    with http_client(url, timeout=5.0) as client:
        while True:
            if not alive():
                raise RuntimeError(f"{name} exited while starting")
            try:
                if client.get("/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} not ready after {timeout_s:.0f} s")
            time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codecue_bench.health", description=__doc__)
    parser.add_argument("url", help="the server's base URL, e.g. http://127.0.0.1:8080")
    parser.add_argument("pid", type=int, help="its process: stop waiting when it exits")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds (default 300)")
    parser.add_argument("--poll", type=float, default=0.25, help="seconds between tries")
    parser.add_argument("--name", default="server", help="what to call it in the error")
    args = parser.parse_args(argv)
    try:
        wait_healthy(args.url, lambda: pid_alive(args.pid), args.timeout, args.poll, args.name)
    except (RuntimeError, TimeoutError) as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
