"""The answers of known sessions that wait for a connection together, sent in one statement
(PostgreSQL).

A server process has :data:`~app.db.loop_connections.SIZE` connections per event loop; under
load most answers wait for one. Each connection has one sender here: it takes every answer
waiting when it is free, up to :data:`MAX_BATCH` (of distinct sessions and participants of
one project, under one plan), and sends them in one statement
(``round_trip_sql.answer_held_batch``), or a lone answer in the single statement
(``round_trip_sql.answer_held``). Nothing waits for a batch to fill: an answer that finds a
sender free goes at once, alone. The statement's own cost on the server (bind, locks,
starting its plan, commit) is then paid once per batch, not per answer
(bench/results/answer_batches.txt).

Each answer's result is what the single statement would have returned for it; where it is
None (nothing changed), or the whole statement failed (a race the unique index refused, a
connection lost: nothing changed), the request takes the usual way, as with the single
statement; any other failure of a batch of several sends each of its answers the usual way,
where only one that cannot be taken fails. The quality review due after an answer runs on
the same connection after the batch's commit, as it does after the single statement's. A
batch is taken once its connection is lent: a request cancelled while its answer waits is
left out; one cancelled while its batch runs leaves the answer stored and unacknowledged
(sent again, the usual way recognises it). The answers of a batch share one time (``now``:
the latest of theirs), which their rows record as answered and the next questions as
issued.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any
from weakref import WeakKeyDictionary

import psycopg

from app.db.driver import run_async
from app.db.loop_connections import SIZE, LoopConnections
from app.schemas.plans import Plan
from app.services import round_trip_sql
from app.services.quality import SET_AUTOMATIC_FLAG, flag_change

log = logging.getLogger(__name__)

# Answers in one statement at most: a batch's statement runs longer with each answer it
# holds, and the answers of every process's connections wait behind it.
MAX_BATCH = 16

Row = round_trip_sql.Answered | None


class Waiting:
    """An answer waiting to be sent: its statement's parameters, its project's plan (for the
    review), whether the review is due after it, and the future its request awaits."""

    __slots__ = ("future", "params", "plan", "review_due")

    def __init__(
        self,
        params: dict[str, Any],
        plan: Plan,
        review_due: Callable[[Row], bool],
        future: asyncio.Future[Row],
    ) -> None:
        self.params = params
        self.plan = plan
        self.review_due = review_due
        self.future = future


class AnswerBatches:
    """The answers waiting for one event loop's connections to one database, and their
    senders (one per connection)."""

    def __init__(self, connections: LoopConnections) -> None:
        self._connections = connections
        self._waiting: list[Waiting] = []
        self._sending = 0  # senders running (counted here, not by their tasks: a task
        # that has returned is in the set until its callback runs)
        self._senders: set[asyncio.Task[None]] = set()  # held: the loop keeps weak ones

    async def answer(
        self, params: dict[str, Any], plan: Plan, review_due: Callable[[Row], bool]
    ) -> Row:
        """Send the answer (``params`` as ``round_trip_sql.answer_held`` takes them, no
        ``draw``) with the others waiting; what the statement returned for it, or None if
        it changed nothing for it or failed. The review follows if ``review_due`` says so."""
        future: asyncio.Future[Row] = asyncio.get_running_loop().create_future()
        self._waiting.append(Waiting(params, plan, review_due, future))
        if self._sending < SIZE:
            self._sending += 1
            sender = asyncio.get_running_loop().create_task(self._send())
            self._senders.add(sender)
            sender.add_done_callback(self._senders.discard)
        return await future

    async def _send(self) -> None:
        """Send batches while answers wait."""
        try:
            await self._send_waiting()
        finally:
            self._sending -= 1

    async def _send_waiting(self) -> None:
        while self._waiting:
            batch: list[Waiting] = []
            try:
                async with self._connections.connection() as connection:
                    # Taken once the connection is lent: an answer whose request was
                    # cancelled while it waited for one is left out.
                    batch = self._take()
                    rows = await _send(connection, batch) if batch else []
            except (psycopg.IntegrityError, psycopg.OperationalError):
                # A race the statement lost, or the connection lost (or not opened):
                # nothing was changed, and the usual way takes each answer.
                batch = batch or self._take()
                rows = [None] * len(batch)
            except Exception as error:
                batch = batch or self._take()
                if len(batch) > 1:
                    # Nothing was changed (or the answers were stored, and the usual way
                    # takes them as sent again): each answer goes the usual way, where only
                    # one that cannot be taken fails, not the others of its batch.
                    log.warning("a batch of %d answers failed", len(batch), exc_info=True)
                    rows = [None] * len(batch)
                else:  # the request fails as it would have alone
                    for waiting in batch:
                        if not waiting.future.done():
                            waiting.future.set_exception(error)
                    continue
            except BaseException:  # cancelled (the loop shuts down): the requests too
                for waiting in batch or self._take():
                    waiting.future.cancel()
                raise
            for waiting, row in zip(batch, rows, strict=True):
                if not waiting.future.done():
                    waiting.future.set_result(row)

    def _take(self) -> list[Waiting]:
        """The answers to send next: the first waiting and, after it, those of the same
        project and plan, of other sessions and other participants, up to
        :data:`MAX_BATCH`; the rest wait on, in their order."""
        batch: list[Waiting] = []
        left: list[Waiting] = []
        sessions: set[str] = set()
        participants: set[int] = set()
        for waiting in self._waiting:
            if waiting.future.done():  # its request was cancelled
                continue
            params = waiting.params
            if batch and (
                len(batch) == MAX_BATCH
                or params["project"] != batch[0].params["project"]
                or params["plan"] != batch[0].params["plan"]
                or params["session"] in sessions
                or params["participant"] in participants
            ):
                left.append(waiting)
                continue
            batch.append(waiting)
            sessions.add(params["session"])
            participants.add(params["participant"])
        self._waiting = left
        return batch


async def _send(connection: psycopg.AsyncConnection[Any], batch: list[Waiting]) -> list[Row]:
    """The batch's statement (a lone answer's own), then the reviews due, on ``connection``."""
    if len(batch) == 1:
        rows = [await round_trip_sql.answer_held(connection, batch[0].params)]
    else:
        params = [waiting.params for waiting in batch]
        rows = await round_trip_sql.answer_held_batch(connection, params)
    for index, (waiting, row) in enumerate(zip(batch, rows, strict=True)):
        if waiting.review_due(row) and not await _review(connection, waiting, row):
            rows[index] = None  # stored: the usual way takes it as sent again
    return rows


async def _review(
    connection: psycopg.AsyncConnection[Any], waiting: Waiting, row: round_trip_sql.Answered
) -> bool:
    """The quality review after an answer, after its commit: written only if the
    participant's counters have not moved since. False if it failed: the answer stays
    stored, and the next review, five answers on, decides from the counters then."""
    try:
        change = flag_change(row, waiting.plan)  # type: ignore[arg-type]
        if change is not None:
            await run_async(connection, SET_AUTOMATIC_FLAG, change)
    except psycopg.IntegrityError:
        return False
    return True


_batches: WeakKeyDictionary[LoopConnections, AnswerBatches] = WeakKeyDictionary()


def answer_batches(connections: LoopConnections) -> AnswerBatches:
    """The batches sent on ``connections`` (an event loop's, to one database)."""
    found = _batches.get(connections)
    if found is None:
        found = _batches[connections] = AnswerBatches(connections)
    return found
