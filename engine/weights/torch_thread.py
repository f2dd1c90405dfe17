"""One thread runs every model pass of the process: loading, calibration, prefill and decoding.

Why: torch's CPU kernels (and CodeCue's own, engine/weights/kernels) run in OpenMP, and GNU OpenMP keeps one pool of
helper threads per thread that starts parallel work. Once two threads have done so (the server loaded the pair on
its loader thread and decoded on the engine's worker), the process has more OpenMP threads than CPUs and libgomp
throttles its spin-waits: a helper sleeps after ~100 spins between two parallel regions and is woken through the
kernel for the next, hundreds of times a pass. On a 2-core Zen 4 VM this made one-token target and draft passes
far slower, for as long as the process lives. So load_pair and every Engine queue their work here.
"""
from __future__ import annotations

import functools
import threading
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, TypeVar

T = TypeVar("T")
NAME = "codecue-torch"

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_ident: int | None = None  # the torch thread's, once it has run something


def _remember_ident() -> None:
    global _ident
    _ident = threading.get_ident()


def executor() -> ThreadPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=NAME, initializer=_remember_ident)
        return _executor


def on_torch_thread() -> bool:
    return _ident is not None and threading.get_ident() == _ident


def run(fn: Callable[..., T], *args, **kwargs) -> T:
    """fn(*args, **kwargs) computed on the torch thread (directly when called from it), its result or exception."""
    if on_torch_thread():
        return fn(*args, **kwargs)
    return executor().submit(fn, *args, **kwargs).result()


def runs_on_torch_thread(fn: Callable[..., T]) -> Callable[..., T]:
    """Decorator: every call of fn runs on the torch thread."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return run(fn, *args, **kwargs)
    return wrapper


class Queue:
    """One engine's share of the torch thread, closed with the engine: like a one-worker ThreadPoolExecutor whose
    worker is the torch thread. shutdown cancels this queue's pending work and waits for its running work only."""

    def __init__(self) -> None:
        self._futures: set[Future] = set()
        self._closed = False
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., T], *args, **kwargs) -> "Future[T]":
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            future = executor().submit(fn, *args, **kwargs)
            self._futures.add(future)
        future.add_done_callback(self._done)
        return future

    def _done(self, future: Future) -> None:
        with self._lock:
            self._futures.discard(future)

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        with self._lock:
            self._closed = True
            pending = list(self._futures)
        if cancel_futures:
            for future in pending:
                future.cancel()
        if wait and not on_torch_thread():  # on the torch thread, waiting for its own queue would hang
            futures.wait(pending)
