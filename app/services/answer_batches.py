"""The answers of known sessions sent on the event loop's own connections (PostgreSQL): one
alone (:func:`answer_alone`, a repeat's), or with the others that wait for a connection
together, in one statement (:class:`AnswerBatches`).

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
from collections.abc import Sequence
from typing import Any
from weakref import WeakKeyDictionary

import psycopg

from app.db.driver import run_async
from app.db.loop_connections import SIZE, LoopConnections
from app.schemas.plans import Plan
from app.services import round_trip_sql
from app.services.quality import SET_AUTOMATIC_FLAG, flag_change
from app.services.responses import QUALITY_REVIEW_EVERY

log = logging.getLogger(__name__)

# Answers in one statement at most: a batch's statement runs longer with each answer it
# holds, and the answers of every process's connections wait behind it.
MAX_BATCH = 16

Row = round_trip_sql.Answered | None


class Waiting:
    """An answer waiting to be sent: its statement's parameters, its project's plan (for the
    review after it) and the future its request awaits."""

    __slots__ = ("future", "params", "plan")

    def __init__(self, params: dict[str, Any], plan: Plan, future: asyncio.Future[Row]) -> None:
        self.params = params
        self.plan = plan
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

    async def answer(self, params: dict[str, Any], plan: Plan) -> Row:
        """Send the answer (``params`` as ``round_trip_sql.answer_held`` takes them, no
        ``draw``) with the others waiting, and the review due after it; what the statement
        returned for it, or None if it changed nothing for it or failed."""
        future: asyncio.Future[Row] = asyncio.get_running_loop().create_future()
        self._waiting.append(Waiting(params, plan, future))
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
                    answers = [(waiting.params, waiting.plan) for waiting in batch]
                    rows = await _send(connection, answers) if batch else []
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


async def answer_alone(connections: LoopConnections, params: dict[str, Any], plan: Plan) -> Row:
    """Send the answer (``params`` as ``round_trip_sql.answer_held`` takes them) alone, on a
    connection of ``connections``, and the review due after it; what the statement returned,
    or None if it changed nothing or failed on a race or a lost connection (nothing
    changed)."""
    try:
        async with connections.connection() as connection:
            return (await _send(connection, [(params, plan)]))[0]
    except (psycopg.IntegrityError, psycopg.OperationalError):
        return None


async def _send(
    connection: psycopg.AsyncConnection[Any], answers: Sequence[tuple[dict[str, Any], Plan]]
) -> list[Row]:
    """The statement of ``answers`` (their parameters and plans), a lone answer's own or a
    batch's, then the reviews due, on ``connection``."""
    if len(answers) == 1:
        rows = [await round_trip_sql.answer_held(connection, answers[0][0])]
    else:
        params = [params for params, _ in answers]
        rows = await round_trip_sql.answer_held_batch(connection, params)
    for index, ((_, plan), row) in enumerate(zip(answers, rows, strict=True)):
        if review_due(row) and not await _review(connection, plan, row):  # type: ignore[arg-type]
            rows[index] = None  # stored: the usual way takes it as sent again
    return rows


def review_due(row: Row) -> bool:
    """Whether the answer stored (``row``) is one after which the participant is reviewed
    (every :data:`~app.services.responses.QUALITY_REVIEW_EVERY` th of the session; the known
    way never takes a session's last answer, which the usual way reviews too)."""
    return row is not None and row.session_answered % QUALITY_REVIEW_EVERY == 0


async def _review(
    connection: psycopg.AsyncConnection[Any], plan: Plan, row: round_trip_sql.Answered
) -> bool:
    """The quality review after an answer, after its commit: written only if the
    participant's counters have not moved since. False if it failed: the answer stays
    stored, and the next review, five answers on, decides from the counters then."""
    try:
        change = flag_change(row, plan)  # type: ignore[arg-type]
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
