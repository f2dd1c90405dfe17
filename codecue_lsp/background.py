"""Work the engine does while nobody waits for it, one piece at a time: the line after the user's (next_line.py),
the prompt where the cursor rests (warmup.py) and a cold prompt's full size (growth.py).

BackgroundWork holds what is planned and what runs, and decides what goes next; the three modules do the work. The
scheduler's background ticket says which piece holds the engine; any request that needs the engine stops it
(Scheduler.stop_background). docs/architecture.md#background-work gives the order and why.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Callable

from .growth import GrowthPlan, plan_growth, start_growth
from .next_line import NextLine, ends_its_line, next_line, start_next_line
from .warmup import STARTED, WAITING, RestingCursor, start_warmup

logger = logging.getLogger(__name__)


class BackgroundWork:
    def __init__(self, server) -> None:
        self.server = server
        self.tasks: set[asyncio.Task] = set()  # running work (held here so that it is not garbage-collected)
        self.next_lines: dict[str, str] = {}  # uri -> the document after the engine's line and Enter (next_line.py)
        self.writer: tuple[NextLine, asyncio.Task] | None = None  # the last next-line writer started
        self.pending_growth: GrowthPlan | None = None  # the full-size prompt to make ready when nothing else runs
        self.resting_cursor: RestingCursor | None = None  # where to make the prompt ready when the engine is free
        self.line_after_rest: NextLine | None = None  # Enter at the resting cursor, once its prompt is ready

    # --- what to do next ----------------------------------------------------------------------------------------
    def start_idle(self) -> None:
        """Give the free engine the prompt at the resting cursor (the user's latest move), else the line after it
        (when it rests at a line's end), else the pending growth."""
        if self._start_warmup() or self._start_line_after_rest():
            return
        start_growth(self.server, self.pending_growth)

    def write_next_line(self, plan: NextLine) -> bool:
        """Write the line after `plan`'s suggestion, then go on with whatever is idle; True if it started."""
        return start_next_line(self.server, plan, then=self.start_idle)

    def run(self, ticket, work, what: str, then: Callable[[], None] | None = None) -> asyncio.Task:
        """Run the coroutine `work` under the scheduler's background `ticket`: a cancelled task stops the engine
        through the ticket, an error is logged, and the ticket is finished either way, then `then()` runs."""
        scheduler = self.server.scheduler

        async def run() -> None:
            try:
                await work
            except asyncio.CancelledError:
                ticket.token.set()
            except Exception:
                logger.exception("%s failed", what)
            finally:
                scheduler.finish(ticket)
                if then is not None:
                    then()
        task = asyncio.ensure_future(run())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    # --- plans, from what happened ------------------------------------------------------------------------------
    def cursor_rested(self, where: RestingCursor) -> None:
        self.resting_cursor = where
        self.start_idle()

    def engine_answered(self, snap, cursor, character_utf16: int, prepared, completion, text: str) -> NextLine | None:
        """After the engine's answer: its growth is pending (the user is here now), and the next line to write when
        the answer ends its line (returned; remembered so that the type-through answer there follows it too)."""
        self.pending_growth = plan_growth(snap, cursor.line, character_utf16, prepared)
        plan = next_line(snap, cursor, text) if ends_its_line(prepared, completion) else None
        if plan is not None:
            self.next_lines[snap.uri] = plan.text
        return plan

    def typethrough_answered(self, snap, cursor, rest: str) -> NextLine | None:
        """After a type-through answer: the next line to write, only after a line the engine ended itself."""
        plan = next_line(snap, cursor, rest)
        return plan if plan is not None and self.next_lines.get(snap.uri) == plan.text else None

    def line_written(self, plan: NextLine, line: str) -> None:
        """The writer ended `plan`'s next line too: Enter after it is the next plan."""
        self.next_lines[plan.uri] = plan.taken(line)

    def writing(self, plan: NextLine, task: asyncio.Task) -> None:
        self.writer = (plan, task)

    def ready_at_rest(self, growth: GrowthPlan | None, line: NextLine | None) -> None:
        """The prompt at the resting cursor is ready: its growth and the line Enter there opens come next."""
        self.pending_growth, self.line_after_rest = growth, line

    def growth_done(self, plan: GrowthPlan) -> None:
        if self.pending_growth is plan:
            self.pending_growth = None

    # --- lifecycle ------------------------------------------------------------------------------------------------
    def forget(self, uri: str) -> None:
        """A closed document: nothing is planned for it any more."""
        self.next_lines.pop(uri, None)
        if self.writer is not None and self.writer[0].uri == uri:
            self.writer = None
        if self.pending_growth is not None and self.pending_growth.uri == uri:
            self.pending_growth = None
        if self.resting_cursor is not None and self.resting_cursor.uri == uri:
            self.resting_cursor = None
        if self.line_after_rest is not None and self.line_after_rest.uri == uri:
            self.line_after_rest = None

    def stop(self) -> None:
        """Shutting down: a piece of work that ends now must not start another one."""
        self.pending_growth = self.resting_cursor = self.line_after_rest = None

    # --- the pieces -----------------------------------------------------------------------------------------------
    def _start_warmup(self) -> bool:
        """The prompt at the resting cursor; the rest stays planned while it has to wait, and goes once stale."""
        if self.resting_cursor is None:
            return False
        state = start_warmup(self.server, self.resting_cursor, then=self.start_idle)
        if state != WAITING:
            self.resting_cursor = None
        return state == STARTED

    def _start_line_after_rest(self) -> bool:
        """Write the line Enter at the resting cursor would open, once its own prompt is ready; True if it started."""
        plan, self.line_after_rest = self.line_after_rest, None
        if plan is None or self.server.current_version(plan.uri) != plan.version:
            return False  # typed in since: the keystroke's request took over
        if not self.write_next_line(plan):
            return False
        self.server.telemetry.count("next_line_at_rest")
        return True
