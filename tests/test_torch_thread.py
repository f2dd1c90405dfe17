"""Every model pass of the process on one thread (engine/weights/torch_thread.py): two threads that start OpenMP work
leave libgomp throttling its helpers for the life of the process."""
import threading
import time

import pytest

from engine import CancelToken, CompletionRequest
from engine.decode.kvcache import TrackedCache
from engine.weights import torch_thread


def test_loading_prefill_and_completions_run_on_the_one_torch_thread(monkeypatch, tiny_pair_env):
    import engine.loading.pair
    from engine import Engine, load_pair

    for key, value in tiny_pair_env.items():
        monkeypatch.setenv(key, value)
    threads = []
    load_model, forward = engine.loading.pair.load_model, TrackedCache.forward
    monkeypatch.setattr(engine.loading.pair, "load_model",
                        lambda *a, **k: threads.append(("load", threading.get_ident())) or load_model(*a, **k))
    monkeypatch.setattr(TrackedCache, "forward",
                        lambda self, *a, **k: threads.append(("pass", threading.get_ident())) or forward(self, *a, **k))
    eng = Engine(load_pair("tiny"))
    try:
        ids = eng.encode_fim("def add(a, b):\n    return", "\n")
        eng.prefill("doc", ids).result()
        direct = eng.complete(CompletionRequest(ids, 6, session="doc", drafter="draft"))  # called from this thread
        queued = eng.submit(CompletionRequest(ids, 6, drafter="auto")).result()
        eng.heal_prompt(ids)
        assert direct.token_ids == queued.token_ids
    finally:
        eng.close()
    kinds = {kind for kind, _ in threads}
    assert kinds == {"load", "pass"}
    assert len({ident for _, ident in threads}) == 1
    assert threads[0][1] != threading.get_ident()


def test_run_from_the_torch_thread_calls_directly_and_exceptions_come_back():
    assert torch_thread.run(lambda: torch_thread.run(lambda: threading.get_ident())) == \
        torch_thread.run(threading.get_ident)
    with pytest.raises(ZeroDivisionError):
        torch_thread.run(lambda: 1 / 0)


def test_a_queue_shut_down_cancels_its_own_pending_work_and_no_other_queues():
    gate, started = threading.Event(), threading.Event()
    mine, other = torch_thread.Queue(), torch_thread.Queue()
    blocker = mine.submit(lambda: started.set() or gate.wait(5))
    started.wait(5)
    pending_mine = mine.submit(lambda: "mine")
    pending_other = other.submit(lambda: "other")
    closer = threading.Thread(target=mine.shutdown, kwargs={"wait": True, "cancel_futures": True})
    closer.start()
    deadline = time.monotonic() + 5
    while not pending_mine.cancelled() and time.monotonic() < deadline:  # shutdown cancels its pending work first...
        time.sleep(0.01)
    assert pending_mine.cancelled() and closer.is_alive()  # ... then waits for its running work
    gate.set()
    closer.join(5)
    assert not closer.is_alive() and blocker.result() is True
    assert pending_mine.cancelled() and pending_other.result(5) == "other"
    with pytest.raises(RuntimeError, match="after shutdown"):
        mine.submit(lambda: None)
    assert other.submit(lambda: 7).result(5) == 7


def test_an_engine_closed_with_work_queued_cancels_it():
    from engine_helpers import tiny_engine

    eng = tiny_engine("random")
    gate = threading.Event()
    blocker = torch_thread.executor().submit(gate.wait, 5)  # the torch thread busy elsewhere
    queued = eng.prefill("doc", [5, 6, 7], CancelToken())
    closer = threading.Thread(target=eng.close)
    closer.start()
    deadline = time.monotonic() + 5
    while not queued.cancelled() and time.monotonic() < deadline:
        time.sleep(0.01)
    gate.set()
    closer.join(5)
    assert blocker.result() is True and queued.cancelled() and not closer.is_alive()
