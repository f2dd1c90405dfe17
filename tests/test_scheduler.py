import asyncio
import concurrent.futures
import threading

import pytest

from codecue_lsp.scheduler import Scheduler, await_engine, debounce


def test_newer_request_supersedes_older_of_same_document():
    s = Scheduler()
    first, older = s.begin("file:///a.py", 1)
    assert older is None and first.live
    second, older = s.begin("file:///a.py", 1)
    assert older is first
    assert first.superseded and first.token.is_set() and not first.live
    assert second.live and s.in_flight("file:///a.py") is second


def test_other_documents_are_independent():
    s = Scheduler()
    a, _ = s.begin("file:///a.py", 1)
    b, older = s.begin("file:///b.py", 1)
    assert older is None and a.live and b.live


def test_edit_supersedes_in_flight_request():
    s = Scheduler()
    t, _ = s.begin("file:///a.py", 3)
    assert s.supersede("file:///a.py") is t
    assert not t.live
    assert s.supersede("file:///a.py") is None  # nothing left in flight


def test_finish_only_removes_its_own_ticket():
    s = Scheduler()
    first, _ = s.begin("u", 1)
    second, _ = s.begin("u", 1)
    s.finish(first)  # the superseded handler finishing late must not drop the newer request
    assert s.in_flight("u") is second
    s.finish(second)
    assert s.in_flight("u") is None


def test_cancel_all():
    s = Scheduler()
    tickets = [s.begin(u, 1)[0] for u in ("a", "b", "c")]
    s.cancel_all()
    assert not any(t.live for t in tickets)


@pytest.mark.asyncio
async def test_debounce_reports_superseded_request():
    s = Scheduler()
    first, _ = s.begin("u", 1)

    async def later_request():
        await asyncio.sleep(0.01)
        s.begin("u", 1)

    task = asyncio.ensure_future(later_request())
    assert await debounce(first, 0.05) is False
    await task
    second = s.in_flight("u")
    assert await debounce(second, 0) is True


@pytest.mark.asyncio
async def test_task_cancel_sets_the_engine_token():
    """$/cancelRequest cancels the handler's task: the token must be set so the worker stops."""
    s = Scheduler()
    ticket, _ = s.begin("u", 1)
    release = threading.Event()
    pool = concurrent.futures.ThreadPoolExecutor(1)

    running = threading.Event()

    def fake_generation():
        # A fake engine loop: runs steps until its token is set (or it is released by the test).
        running.set()
        while not ticket.token.is_set() and not release.wait(0.005):
            pass
        return "cancelled" if ticket.token.is_set() else "done"

    future = pool.submit(fake_generation)
    task = asyncio.ensure_future(await_engine(future, ticket.token))
    await asyncio.to_thread(running.wait)  # the generation runs, and the task awaits it
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ticket.token.is_set()
    assert future.result(timeout=2) == "cancelled"
    pool.shutdown()


@pytest.mark.asyncio
async def test_await_engine_returns_result():
    s = Scheduler()
    ticket, _ = s.begin("u", 1)
    future = concurrent.futures.Future()
    future.set_result(42)
    assert await await_engine(future, ticket.token) == 42
    assert not ticket.token.is_set()



def test_background_work_yields_to_requests_not_to_edits():
    s = Scheduler()
    work = s.begin_background("file:///a.py", 1, "plan 1")
    assert work.live and s.background is work and s.in_flight("file:///a.py") is None
    assert s.begin_background("file:///a.py", 1, "plan 1") is None and work.live  # already being written
    assert s.supersede("file:///a.py") is None and work.live  # an edit: it goes on (its result is keyed by text)
    request, older = s.begin("file:///b.py", 1)
    assert older is None and work.live  # a type-through answer would not need the engine: only its caller stops it
    s.stop_background()
    assert not work.live and s.background is None and request.live
    assert s.begin_background("file:///c.py", 1, "plan 2") is None  # a request is in flight: it goes first
    s.finish(request)
    other = s.begin_background("file:///c.py", 1, "plan 2")
    newer = s.begin_background("file:///d.py", 1, "plan 3")
    assert not other.live and newer.live and s.background is newer  # one piece of background work at a time
    s.stop_background("file:///c.py")
    assert newer.live  # another document's close does not stop it
    s.finish(newer)
    assert s.background is None
    last = s.begin_background("file:///d.py", 1, "plan 3")
    s.cancel_all()
    assert not last.live
