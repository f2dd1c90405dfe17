"""What a cancel costs the engine, measured through the real server (`codecue-bench server`, after the keystrokes).

Trials cancel a request while the engine prefills or decodes, then measure how long until the engine is idle, or
until the next request (the same document, or another one) is answered. Called from server_bench._bench.
"""
from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import TYPE_CHECKING

from .timing import distribution, ms

if TYPE_CHECKING:
    from .server_bench import BenchClient

# What `codecue.stats` -> resources.engine_phase says while a cancel is meant to land in each phase.
CANCEL_PHASES = {"prefill": ("prefill",), "decode": ("draft", "verify")}
# After a cancel: wait for the engine to be idle; send the next request for the same document and cursor; or (in
# prefill) send it for another document, which must not wait for the cancelled request's shared prefill pass.
MEASURES = {"prefill": ("idle", "next", "elsewhere"), "decode": ("idle", "next")}
POLL_S = 0.005  # between two codecue.stats polls: fine next to a model pass, light on the server's event loop
HANG_S = 600.0  # a guard against a server that never answers, not a measurement


async def cancel_trials_run(bench: BenchClient, uri: str, doc: str, line: int, typed_line: str, trials: int) -> list:
    """`trials` caught cancels per phase and per measure (MEASURES), in two blocks.

    decode: at the end of the typed line of the open document, insert either a comment line and an empty line below
    it (an empty line in a body asks for a block) or one character no suggestion starts with (the rest of a line),
    in turn; the prompt stays mostly cached. Wait until the engine drafts or verifies, cancel, delete the insertion.
    prefill: open a fresh copy of the document (nothing cached), wait until the engine prefills, cancel. Each trial
    measures one of
      - idle: from `$/cancelRequest` until codecue.stats says engine_busy is false (in prefill this includes the
        shared pass the engine lets end for a next request that never comes);
      - next: the next request (same document and cursor) is sent right after the cancel, as an editor's next
        keystroke would be; from the cancel to its result, and that minus the next request's own engine time
        (codecue.stats engine.last_seconds): how long the next request waited for the engine, prompt building and
        messages included;
      - elsewhere (prefill only): the same, for a request in the open document (a character no suggestion starts
        with added at the end of the typed line): the user jumped back; it must not wait for the cancelled prefill.
    A trial whose generation ended before the cancel reached the engine (the engine's result was not "cancelled")
    is discarded and retried, up to 20 x trials attempts per phase."""
    rows = []
    indent = typed_line[:len(typed_line) - len(typed_line.lstrip())]
    for phase in ("decode", "prefill"):  # decode first: the fresh prefill documents would change its context
        done = Counter()
        for attempt in range(20 * trials):
            measure = min(MEASURES[phase], key=lambda m: done[m])
            if done[measure] >= trials:
                break
            if phase == "decode" and attempt % 2 == 0:  # a block: the real models write long ones here
                end_of_line = len(typed_line)
                bench.insert(uri, line, end_of_line, f"\n{indent}# step {attempt}\n{indent}")
                row = await cancel_trial(bench, phase, measure, uri, line + 2, len(indent), f"cancel-{phase}-{attempt}")
                bench.delete(uri, (line, end_of_line), (line + 2, len(indent)))
            elif phase == "decode":  # the rest of a line (a random model rarely ends a block, but soon ends a line)
                # different each time: the same text would be answered from the type-through cache after a "next"
                mark = f"\u00a7d{attempt}"
                bench.insert(uri, line, len(typed_line), mark)
                end = len(typed_line) + len(mark)
                row = await cancel_trial(bench, phase, measure, uri, line, end, f"cancel-{phase}-{attempt}")
                bench.delete(uri, (line, len(typed_line)), (line, end))
            else:
                fresh = uri.replace("/bench.", f"/cancel-{attempt}.")
                bench.open(fresh, doc)
                # The open document gets a mark only when the next request goes there; not a decode trial's mark:
                # that text's answer would come from the type-through cache.
                mark, elsewhere = f"\u00a7p{attempt}", None
                if measure == "elsewhere":
                    bench.insert(uri, line, len(typed_line), mark)
                    elsewhere = (uri, line, len(typed_line) + len(mark))
                row = await cancel_trial(bench, phase, measure, fresh, line, 0, f"cancel-{phase}-{attempt}", elsewhere)
                if elsewhere:
                    bench.delete(uri, (line, len(typed_line)), (line, len(typed_line) + len(mark)))
                bench.close(fresh)
            rows.append(row)
            done[measure] += row["caught"]
    return rows


async def cancel_trial(bench: BenchClient, phase: str, measure: str, uri: str, line: int, character: int,
                       msg_id: str, next_at: tuple[str, int, int] | None = None) -> dict:
    """One cancel; the next request (measures other than idle) goes to next_at (uri, line, character), or to the
    cancelled request's own place."""
    row = {"phase": phase, "measure": measure, "caught": False}
    stats = await bench.stats()
    before, typethrough_before = stats["engine"], stats["typethrough_hits"]
    sent = bench.send(uri, line, character, msg_id)
    request = asyncio.wrap_future(sent)
    row["phase_seen"] = await wait_for_phase(bench, request, CANCEL_PHASES[phase])
    if row["phase_seen"] is None:  # the generation ended before it was seen in this phase
        await request
        return row

    replied = []
    sent.add_done_callback(lambda _: replied.append(time.perf_counter()))
    t0 = time.perf_counter()
    bench.cancel(msg_id)
    if measure == "idle":
        while (await bench.stats())["resources"]["engine_busy"]:
            await asyncio.sleep(POLL_S)
            if time.perf_counter() - t0 > HANG_S:
                raise TimeoutError("the engine stayed busy after a cancel")
        row["cancel_to_engine_idle_ms"] = ms(time.perf_counter() - t0)
    else:
        await bench.complete(*(next_at or (uri, line, character)))
        if (await bench.stats())["typethrough_hits"] > typethrough_before:  # no engine result would ever come
            raise RuntimeError(f"{msg_id}: the next request was answered from the type-through cache")
        row["cancel_to_next_result_ms"] = ms(time.perf_counter() - t0)
        row["next_engine_ms"] = ms(await next_engine_seconds(bench, before))
        row["cancel_to_next_start_ms"] = round(row["cancel_to_next_result_ms"] - row["next_engine_ms"], 1)
    try:
        await request
        row["answered"] = "result"  # the handler had its answer before the cancel arrived
    except Exception:
        row["answered"] = "cancelled"
    if replied:
        row["pygls_cancel_reply_ms"] = ms(replied[0] - t0)
    # The engine's own verdict: did the cancel stop this generation, or had it ended already?
    row["caught"] = await engine_cancelled_since(bench, before)
    return row


async def settled_stats(bench: BenchClient) -> dict:
    """codecue.stats once the engine is idle. An answer that ends its line starts the next line's writer in the
    background (codecue_lsp/next_line.py), which ends by itself; read at once, the stats caught it mid-pass."""
    started = time.perf_counter()
    while (stats := await bench.stats())["resources"]["engine_busy"]:
        await asyncio.sleep(POLL_S)
        if time.perf_counter() - started > HANG_S:
            raise TimeoutError("the engine stayed busy after the last request")
    return stats


async def wait_for_phase(bench: BenchClient, request, phases: tuple[str, ...]) -> str | None:
    """Poll codecue.stats until the engine reports one of `phases` (returns it) or the request is answered."""
    while not request.done():
        phase = (await bench.stats())["resources"]["engine_phase"]
        if phase in phases:
            return phase
        await asyncio.sleep(POLL_S)
    return None


async def engine_results(bench: BenchClient, count: int) -> dict:
    """The server's engine totals once it has counted `count` results. It counts each on its event loop just after
    the engine finishes, in request order (one worker)."""
    started = time.perf_counter()
    while (engine := (await bench.stats())["engine"])["results"] < count:
        await asyncio.sleep(POLL_S)
        if time.perf_counter() - started > HANG_S:
            raise TimeoutError(f"the server never counted {count} engine results")
    return engine


async def next_engine_seconds(bench: BenchClient, before: dict) -> float:
    """The engine time of the request after the cancelled one."""
    return (await engine_results(bench, before["results"] + 2))["last_seconds"]


async def engine_cancelled_since(bench: BenchClient, before: dict) -> bool:
    """Whether the cancelled request's engine result ended "cancelled"."""
    return (await engine_results(bench, before["results"] + 1))["cancelled"] > before["cancelled"]


def cancel_summary(rows: list[dict]) -> dict:
    caught = [r for r in rows if r["caught"]]
    out = {
        "note": "cancel_to_next_result_ms includes the next request's own work; cancel_to_next_start_ms is that "
                "minus the next request's engine time (what it waited for the engine, prompt building and messages)",
        # Only pygls's -32800 answer to the cancelled request: says nothing about when the engine stopped.
        "pygls_cancel_reply_ms": distribution([r["pygls_cancel_reply_ms"] for r in caught
                                               if "pygls_cancel_reply_ms" in r]),
    }
    for phase in CANCEL_PHASES:
        mine = [r for r in rows if r["phase"] == phase]
        got = [r for r in mine if r["caught"]]
        def of(measure: str, key: str) -> dict:
            return distribution([r[key] for r in got if r["measure"] == measure and key in r])

        out[phase] = {
            "cancel_to_engine_idle_ms": of("idle", "cancel_to_engine_idle_ms"),
            "cancel_to_next_result_ms": of("next", "cancel_to_next_result_ms"),
            "cancel_to_next_start_ms": of("next", "cancel_to_next_start_ms"),
        }
        if "elsewhere" in MEASURES[phase]:
            out[phase]["cancel_to_elsewhere_result_ms"] = of("elsewhere", "cancel_to_next_result_ms")
            out[phase]["cancel_to_elsewhere_start_ms"] = of("elsewhere", "cancel_to_next_start_ms")
        out[phase] |= {
            "caught_trials": len(got),
            "caught_in": dict(Counter(r["phase_seen"] for r in got)),
            "discarded_ended_first": len(mine) - len(got),
        }
    return out


