"""The worker round trip in few statements, one SQL text per step for both databases.

A round trip (an answer whose reply carries the next question) holds its session and its
participant from its first statement to its commit, never the project: two workers of a
project run their round trips side by side. Questions are created ahead by the plan, in
batches (``issuance.fill_pool``, under the project's hold), and a round trip claims one
open question with ``FOR NO KEY UPDATE SKIP LOCKED`` on PostgreSQL: a question another
round trip is leasing now is passed over, not waited for. On SQLite the write lock
serialises every transaction anyway. The steps:

1. lock the session and its participant and read them with the project, unlocked
   (``sessions._SESSION_IN_PROJECT_HELD``). It stays a statement of its own: under READ
   COMMITTED a statement reads the snapshot taken when it started, so what follows the
   lock must start after the lock is granted, or it would miss a question another session
   of the same participant was just given;
2. :func:`answer`: claim the query, count its question's place, store the answer, count it
   on the session (finishing it) and on the participant, and claim the first open question
   this participant has not seen;
3. :func:`issue`: lease one more place of the open question; issue the query and read the
   objects shown.

On PostgreSQL the usual case is two statements between ``BEGIN`` and ``COMMIT``: step 3
runs within step 2's statement when what it needs was decided before it
(``issuance.Ticket``: not a repeat, not the session's last answer, no comprf strategy),
the order shown drawn ahead and applied in SQL (``_SHOWN_OPEN``). Otherwise, and on SQLite,
step 3 is run by ``issuance.next_query`` after step 2. For a session the server process knows
(``app.services.known_sessions``) the first step is left out: on PostgreSQL the answer's
statement holds the session itself (:func:`answer_held`), on SQLite the claim checks it
(:func:`answer_held_in`), and either issues the next question as drawn ahead.

On PostgreSQL, answers of known sessions that wait for a connection together are sent in
one statement (:func:`answer_held_batch`, ``app.services.answer_batches``), made of the same
parts.

On PostgreSQL each step is one statement of data-modifying CTEs. They run on one snapshot
and do not see each other's changes, only what they return; each below reads what it
depends on from the ``RETURNING`` of the one before, and the reads of other rows (the
question's facts, a repeat's first answer, the open question) are of rows these statements
do not change in a way that matters (answering moves a place from leased to answered: a
question's ``is_open`` stays as it was). A row locked by ``SKIP LOCKED`` is re-read as last
committed and its conditions checked again, so a question claimed is open now. SQLite has
``RETURNING`` but no data-modifying CTEs: it runs the same parts (the same SQL text, see the
fragments below) as separate statements, one per table written, in-process calls rather
than network round trips; what PostgreSQL reads in a CTE or a join, SQLite reads in a
subquery of ``RETURNING``.

Statements run on the driver's cursor (:mod:`app.db.driver`); psycopg prepares a statement
on the server after its fifth run on a connection. Parameters are cast where PostgreSQL
could not infer their type (``NULL`` in a ``SELECT`` list would be text).
"""

from __future__ import annotations

import json
from collections import namedtuple
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import psycopg
from sqlalchemy import Connection
from sqlalchemy.orm import Session

from app.db.driver import Statement, bind, first, first_async, rows, rows_async, run, timestamp

# -- the parts, written once -----------------------------------------------------------------

# Mark the session's query answered, if still leased and the choice is one it offered.
_CLAIM_UPDATE = """
    UPDATE queries SET status = 'answered', answered_at = CAST(:now AS TIMESTAMPTZ)
    WHERE queries.token = CAST(:token AS VARCHAR)
      AND queries.session_id = CAST(:session AS VARCHAR)
      AND queries.status = 'issued' AND queries.expires_at > CAST(:now AS TIMESTAMPTZ)
      AND ((queries.kind = 'triplet' AND (queries.o2 = CAST(:choice AS INTEGER)
                                          OR queries.o3 = CAST(:choice AS INTEGER)))
           OR (queries.kind <> 'triplet' AND CAST(:choice AS INTEGER) IN (-1, 0, 1)))
"""
_CLAIM_RETURNING = "RETURNING id, question_id, kind, o1, o2, o3, is_repeat, issued_at"
_CLAIM = f"{_CLAIM_UPDATE} {_CLAIM_RETURNING}"
# The answer's statement run alone (autocommit) for a session the server process knows
# (app.services.known_sessions): it holds the session and its participant itself, as the
# first step does otherwise, and claims the query only if the session is as the process
# remembers it (its token, its count of answers, not finished) and its project's plan
# unchanged (compared as JSONB: the same plan whatever its spacing or key order; not by the
# project's ``updated_at``, which every fill of the pool moves). Its snapshot is taken
# before the rows are held, so a question just given to another session of the
# participant may be unseen: the unique index on (participant, question, is_repeat)
# refuses it then, and the round trip is run the usual way.
_HELD = """
    SELECT sessions.id FROM sessions
    JOIN participants ON participants.id = sessions.participant_id
    JOIN projects ON projects.id = sessions.project_id
    WHERE sessions.id = CAST(:session AS VARCHAR)
      AND sessions.token_hash = CAST(:token_hash AS VARCHAR)
      AND sessions.answered = CAST(:answered AS INTEGER) AND sessions.finished_at IS NULL
      AND CAST(projects.plan AS JSONB) = CAST(:plan AS JSONB)
    FOR NO KEY UPDATE OF sessions, participants
"""
_CLAIM_HELD = f"{_CLAIM_UPDATE} AND EXISTS (SELECT FROM held) {_CLAIM_RETURNING}"
# From leased to answered; a repeat never held a place (see issuance.count_places).
_PLACE = """
    UPDATE questions SET live = questions.live - 1, answered = questions.answered + 1,
        is_open = questions.answered + questions.live < questions.wanted
"""
# A repeat: the session's first answer to the same question. A question is asked of a
# participant in one session only (and again there, as a repeat), so the first answer is
# looked up by participant and question, an index lookup (``CROSS JOIN``: SQLite then
# searches the queries for the claim's question, not the claim for each of the
# participant's queries); by session SQLite read all of the session's queries for every
# answer, repeat or not.
_FIRST = """
    SELECT answers.a, answers.b, answers.outcome
    FROM claim CROSS JOIN queries
    JOIN answers ON answers.query_id = queries.id
    WHERE claim.is_repeat AND queries.participant_id = CAST(:participant AS INTEGER)
      AND queries.question_id = claim.question_id AND NOT queries.is_repeat
    LIMIT 1
"""
# The answer's row from its query: which objects were chosen, where the choice was shown,
# whether it was right (gold) and agrees with the first answer (a repeat).
_ANSWER = """
    SELECT claim.id AS query_id, claim.kind, claim.o1 AS a,
        CASE WHEN claim.kind = 'triplet' THEN CAST(:choice AS INTEGER) ELSE claim.o2 END AS b,
        CASE WHEN claim.kind = 'triplet' THEN
            CASE WHEN claim.o2 = CAST(:choice AS INTEGER) THEN claim.o3 ELSE claim.o2 END
        END AS c,
        CASE WHEN claim.kind <> 'triplet' THEN CAST(:choice AS INTEGER) END AS outcome,
        CASE WHEN claim.kind <> 'triplet' THEN CAST(:choice AS INTEGER)
             WHEN claim.o2 = CAST(:choice AS INTEGER) THEN -1 ELSE 1 END AS position,
        questions.strategy,
        CAST(:choice AS INTEGER) = questions.gold_choice AS gold_correct,
        CASE WHEN claim.kind = 'triplet' THEN first.b = CAST(:choice AS INTEGER)
             ELSE CASE WHEN first.a = claim.o1 THEN first.outcome ELSE -first.outcome END
                  = CAST(:choice AS INTEGER)
        END AS consistent,
        {server_ms} AS server_ms{carried}
    FROM claim
    JOIN questions ON questions.id = claim.question_id
    LEFT JOIN first ON {first_of_claim}
"""
# One answer (the single statement, SQLite): the first answer, if any, is its claim's.
_ONE = {"carried": "", "first_of_claim": "true"}
_SERVER_MS = {
    "postgresql": "CAST(EXTRACT(EPOCH FROM CAST(:now AS TIMESTAMPTZ) - claim.issued_at) * 1000"
    " AS DOUBLE PRECISION)",
    # SQLite's date functions round to the millisecond, which put server_ms up to 1 ms off.
    # Whole seconds and the fraction are taken apart from the stored text (always
    # driver.SQLITE_TIMESTAMP, six digits), so the difference is exact to the microsecond.
    "sqlite": "(CAST(strftime('%s', substr(:now, 1, 19)) AS INTEGER)"
    " - CAST(strftime('%s', substr(claim.issued_at, 1, 19)) AS INTEGER)) * 1000.0"
    " + (CAST(substr(:now, 20) AS REAL) - CAST(substr(claim.issued_at, 20) AS REAL)) * 1000.0",
}
_STORE_INTO = """
    INSERT INTO answers (project_id, query_id, kind, a, b, c, outcome, position, choice,
        source, strategy, gold_correct, consistent, session_id, participant_id, server_ms,
        client_ms, created_at)
"""
_STORE = """
    SELECT CAST(:project AS INTEGER), query_id, kind, a, b, c, outcome, position,
        CAST(:choice AS INTEGER), CAST(:source AS VARCHAR), strategy, gold_correct,
        consistent, CAST(:session AS VARCHAR), CAST(:participant AS INTEGER), server_ms,
        CAST(:client_ms AS DOUBLE PRECISION), CAST(:now AS TIMESTAMPTZ)
    FROM answer
"""
# Counted in SQL, so two answers of one session racing cannot lose a count; the answer
# that reaches the session's total finishes it (issuance.finish_session).
_SESSION = """
    UPDATE sessions SET answered = sessions.answered + 1,
        finished_at = CASE
            WHEN sessions.finished_at IS NULL AND sessions.answered + 1 >= sessions.total
            THEN CAST(:now AS TIMESTAMPTZ) ELSE sessions.finished_at END,
        completion_code_hash = CASE
            WHEN sessions.finished_at IS NULL AND sessions.answered + 1 >= sessions.total
            THEN CAST(:code_hash AS VARCHAR) ELSE sessions.completion_code_hash END
"""
_SESSION_RETURNING = """
    RETURNING sessions.answered, sessions.finished_at, sessions.completion_code_hash
"""
# The participant's quality counters (each the number of answers quality._figures counts),
# from the answer's row (``answer``).
_COUNTS = """
    UPDATE participants SET n_answers = participants.n_answers + 1,
        gold_answers = participants.gold_answers
            + CASE WHEN answer.gold_correct IS NOT NULL THEN 1 ELSE 0 END,
        gold_correct = participants.gold_correct + CASE WHEN answer.gold_correct THEN 1 ELSE 0 END,
        fast_answers = participants.fast_answers + CASE
            WHEN COALESCE(CAST(:client_ms AS DOUBLE PRECISION), answer.server_ms)
                 < CAST(:min_ms AS INTEGER) THEN 1 ELSE 0 END,
        left_answers = participants.left_answers + CASE WHEN answer.position = -1 THEN 1 ELSE 0 END,
        sided_answers = participants.sided_answers
            + CASE WHEN answer.position IN (-1, 1) THEN 1 ELSE 0 END,
        repeats = participants.repeats + CASE WHEN answer.consistent IS NOT NULL THEN 1 ELSE 0 END,
        consistent_repeats = participants.consistent_repeats
            + CASE WHEN answer.consistent THEN 1 ELSE 0 END
"""
_COUNTS_RETURNING = """
    RETURNING participants.id, participants.flagged, participants.flag_reason,
        participants.flag_manual, participants.n_answers, participants.gold_answers,
        participants.gold_correct, participants.fast_answers, participants.left_answers,
        participants.sided_answers, participants.repeats, participants.consistent_repeats
"""
# The open question a participant is asked next: still wanted, and not seen by this
# participant; on PostgreSQL claimed (``{lock}``), passing over those other round trips
# are claiming now. ``is_open = true``, not ``is_open``: SQLite searches an index only for
# a comparison, and with the bare column it read all of the project's questions and
# sorted them, for every claim.
_OPEN = """
    SELECT {columns} FROM questions
    WHERE questions.project_id = CAST(:project AS INTEGER) AND questions.is_open = true {stored}
      AND NOT EXISTS (
        SELECT 1 FROM queries
        WHERE queries.participant_id = CAST(:participant AS INTEGER)
          AND queries.question_id = questions.id)
    ORDER BY questions.id LIMIT 1 {lock}
"""
_CLAIM_OPEN = "FOR NO KEY UPDATE OF questions SKIP LOCKED"
# In the answer's statement: only if it stored, and once the question answered is counted
# (``place``: PostgreSQL runs a data-modifying CTE that no other reads at the statement's
# end, so the open question was held while it waited for the answered one; with a
# redundancy of 2 or more, where an answered question stays open, two statements could
# wait for each other until the deadlock check ended one, after 1 s).
_IF_STORED = "AND EXISTS (SELECT FROM stored) AND (SELECT count(*) FROM place) >= 0"
# Questions of the plan, created ahead of the round trips that issue them (no place taken),
# a fill's batch in one statement: ``:rows`` is a JSON array of rows (``_QUESTION_FIELDS``),
# inserted in its order (claims take the lowest id first). A key the project has already,
# or that an earlier row of the batch has, is passed over.
_QUESTION_FIELDS = (
    "key", "kind", "o1", "o2", "o3", "strategy", "strategy_position", "strategy_ref",
    "gold_choice", "wanted",
)  # fmt: skip
_NEW_QUESTIONS_INTO = """
    INSERT INTO questions (project_id, key, kind, o1, o2, o3, strategy, strategy_position,
        strategy_ref, gold_choice, wanted, live, answered, is_open, created_at)
"""
_PG_NEW_QUESTIONS = f"""
{_NEW_QUESTIONS_INTO}
    SELECT CAST(:project AS INTEGER), key, kind, o1, o2, o3, strategy, strategy_position,
        CAST(strategy_ref AS JSON), gold_choice, wanted, 0, 0, wanted > 0,
        CAST(:now AS TIMESTAMPTZ)
    FROM ROWS FROM (json_to_recordset(CAST(:rows AS JSON)) AS (key VARCHAR, kind VARCHAR,
        o1 INTEGER, o2 INTEGER, o3 INTEGER, strategy VARCHAR, strategy_position INTEGER,
        strategy_ref TEXT, gold_choice INTEGER, wanted INTEGER)) WITH ORDINALITY AS batch
    ORDER BY batch.ordinality
    ON CONFLICT (project_id, key) DO NOTHING
    RETURNING key
"""
_SQLITE_NEW_QUESTIONS = f"""
{_NEW_QUESTIONS_INTO}
    SELECT :project, value ->> 'key', value ->> 'kind', value ->> 'o1', value ->> 'o2',
        value ->> 'o3', value ->> 'strategy', value ->> 'strategy_position',
        value ->> 'strategy_ref', value ->> 'gold_choice', value ->> 'wanted', 0, 0,
        (value ->> 'wanted') > 0, :now
    FROM json_each(:rows) WHERE true ORDER BY json_each.key
    ON CONFLICT (project_id, key) DO NOTHING
    RETURNING key
"""
# One more place of an open question leased (issuance.count_places).
_LEASE = """
    UPDATE questions SET live = questions.live + 1,
        is_open = questions.answered + questions.live + 1 < questions.wanted
"""
_LEASE_ONE = f"{_LEASE} WHERE questions.id = CAST(:question AS BIGINT) RETURNING questions.id"
# The query of a leased question: ``{question}`` gives its id, kind and the objects in the
# order shown (s1, s2, s3); ``{is_repeat}``: false, or true for a repeat (no place leased).
_QUERY = """
    INSERT INTO queries (project_id, question_id, session_id, participant_id, kind, o1, o2,
        o3, status, is_repeat, token, issued_at, expires_at)
    SELECT CAST(:project AS INTEGER), question.id, CAST(:session AS VARCHAR),
        CAST(:participant AS INTEGER), question.kind, question.s1, question.s2, question.s3,
        'issued', {is_repeat}, CAST(:issued_token AS VARCHAR), CAST(:now AS TIMESTAMPTZ),
        CAST(:expires AS TIMESTAMPTZ)
    FROM {question}
"""
# The shown order passed in (s1, s2, s3: issuance._shown drew it).
_SHOWN_GIVEN = """CAST(:kind AS VARCHAR) AS kind, CAST(:s1 AS INTEGER) AS s1,
    CAST(:s2 AS INTEGER) AS s2, CAST(:s3 AS INTEGER) AS s3"""


def _shown(question: str, swap: str) -> str:
    """The kind and the order shown (s1, s2, s3) of the open question ``question`` (a table
    or CTE with kind, o1, o2, o3), from the draw ``swap`` (issuance._shown) made before the
    statement."""
    return f"""{question}.kind,
    CASE WHEN {question}.kind <> 'triplet' AND {swap} THEN {question}.o2 ELSE {question}.o1 END
        AS s1,
    CASE WHEN {question}.kind = 'triplet' THEN
            CASE WHEN {swap} THEN {question}.o3 ELSE {question}.o2 END
        ELSE CASE WHEN {swap} THEN {question}.o1 ELSE {question}.o2 END END AS s2,
    CASE WHEN {question}.kind = 'triplet' THEN
        CASE WHEN {swap} THEN {question}.o2 ELSE {question}.o3 END END AS s3"""


# The shown order of the open question claimed, in SQL: issuance._shown, the draw ``:swap``
# made before the statement.
_SHOWN_OPEN = _shown("open", "CAST(:swap AS BOOLEAN)")
# A repeat: a question this session answered (not gold) among its last REPEAT_WINDOW answered
# queries, and was not asked again, picked by a draw, in one statement. The candidates come
# from the session's own queries (one non-repeat query per question). The window bounds a
# repeat's cost: over all the session's queries it grew with the session, and a session of
# ~1,700 answers made SQLite with 2 processes fall from 1,306 to 855 round trips/s at 50
# workers (bench/results/worker_throughput_steady.txt). The window is read first, alone,
# through the session's index, newest first; its questions are then joined and whether each
# was repeated looked up by participant and question (a question is asked of a participant in
# one session only). Bounded instead by the id of the window's oldest query, in a count and
# a pick of two statements, PostgreSQL read every query of the table past that id: twice the
# time at every session length, 2.3 against 1.1 ms at 4,000 answers
# (bench/results/repeat_draw.txt). The ``draw`` (0 <= draw < DRAW_RANGE) picks the candidate
# at ``draw * count // DRAW_RANGE`` in question order, integer arithmetic both databases
# compute alike.
REPEAT_WINDOW = 256
DRAW_RANGE = 2**31
_RECENT = f"""
        SELECT queries.id, queries.question_id, queries.o2, queries.o3, queries.is_repeat
        FROM queries
        WHERE queries.session_id = CAST(:session AS VARCHAR) AND queries.status = 'answered'
        ORDER BY queries.id DESC LIMIT {REPEAT_WINDOW}
"""
_CANDIDATES = """
        SELECT questions.id, questions.kind, questions.o1, questions.o2, questions.o3,
            recent.o2 AS shown_o2, recent.o3 AS shown_o3
        FROM recent JOIN questions ON questions.id = recent.question_id
        WHERE NOT recent.is_repeat AND questions.gold_choice IS NULL
          AND NOT EXISTS (
            SELECT 1 FROM queries AS again
            WHERE again.participant_id = CAST(:participant AS INTEGER)
              AND again.question_id = recent.question_id AND again.is_repeat)
"""
_PICK = f"""
    SELECT * FROM candidates
    ORDER BY candidates.id
    LIMIT 1 OFFSET (
        SELECT CAST(:draw AS BIGINT) * count(*) / {DRAW_RANGE} FROM candidates)
"""
_REPEAT = f"WITH recent AS ({_RECENT}), candidates AS ({_CANDIDATES}) {_PICK}"
# The same pick within the answer's statement (a repeat drawn for a session the process
# knows): the answer just claimed (``claim``) is among the window, as the separate steps
# see it after the answer; the statement's snapshot shows it still leased. The order shown
# as issuance._issue_repeat makes it: a triplet mirrored, a pair swapped by ``:swap``.
_RECENT_WITH_CLAIM = f"""
    SELECT * FROM ({_RECENT}) AS answered_before
    UNION ALL SELECT claim.id, claim.question_id, claim.o2, claim.o3, claim.is_repeat FROM claim
    ORDER BY id DESC LIMIT {REPEAT_WINDOW}
"""
_SHOWN_REPEAT = """pick.kind,
    CASE WHEN pick.kind <> 'triplet' AND CAST(:swap AS BOOLEAN) THEN pick.o2 ELSE pick.o1 END
        AS s1,
    CASE WHEN pick.kind = 'triplet' THEN pick.shown_o3
         WHEN CAST(:swap AS BOOLEAN) THEN pick.o1 ELSE pick.o2 END AS s2,
    CASE WHEN pick.kind = 'triplet' THEN pick.shown_o2 END AS s3"""
_OBJECT_COLUMNS = 'objects."index", objects.name, objects.text, objects.image_url'
_OPEN_COLUMNS = "questions.id, questions.kind, questions.o1, questions.o2, questions.o3"
_OPEN_IF_STORED = _OPEN.format(columns=_OPEN_COLUMNS, lock=_CLAIM_OPEN, stored=_IF_STORED)

# -- PostgreSQL: one statement per step ------------------------------------------------------


def _pg_answer(first_steps: str, *, repeat: bool = False) -> str:
    """The answer's statement on PostgreSQL, from ``first_steps`` (the CTEs up to
    ``claim``). Its next question: the open question claimed (issued with ``:issue``), or,
    with ``repeat``, a repeat picked by ``:draw``; ``q_o1``… are then in the order shown."""
    if repeat:
        next_steps = f"""recent AS ({_RECENT_WITH_CLAIM}),
candidates AS ({_CANDIDATES}),
pick AS ({_PICK}),
question AS (SELECT pick.id, {_SHOWN_REPEAT} FROM pick WHERE EXISTS (SELECT FROM stored)),
query AS ({_QUERY.format(question="question", is_repeat="true")} RETURNING id, o1, o2, o3)"""
        next_columns = "question.id AS q_id, question.kind AS q_kind, question.s1 AS q_o1, "
        next_columns += "question.s2 AS q_o2, question.s3 AS q_o3"
        next_join = "question"
    else:
        next_steps = f"""open AS ({_OPEN_IF_STORED}),
question AS ({_LEASE} FROM open WHERE questions.id = open.id AND CAST(:issue AS BOOLEAN)
    RETURNING questions.id, {_SHOWN_OPEN}),
query AS ({_QUERY.format(question="question", is_repeat="false")} RETURNING id, o1, o2, o3)"""
        next_columns = "open.id AS q_id, open.kind AS q_kind, open.o1 AS q_o1, "
        next_columns += "open.o2 AS q_o2, open.o3 AS q_o3"
        next_join = "open"
    return f"""
WITH {first_steps},
place AS ({_PLACE} FROM claim WHERE questions.id = claim.question_id AND NOT claim.is_repeat
    RETURNING questions.id),
first AS ({_FIRST}),
answer AS ({_ANSWER.format(server_ms=_SERVER_MS["postgresql"], **_ONE)}),
stored AS ({_STORE_INTO} {_STORE} RETURNING id),
session AS ({_SESSION} FROM stored WHERE sessions.id = CAST(:session AS VARCHAR)
    {_SESSION_RETURNING}),
counts AS ({_COUNTS} FROM answer, stored WHERE participants.id = CAST(:participant AS INTEGER)
    {_COUNTS_RETURNING}),
{next_steps}
SELECT session.answered AS session_answered, session.finished_at AS session_finished_at,
    session.completion_code_hash AS session_code_hash, counts.*, {next_columns},
    query.id AS query_id, query.o1 AS s1, query.o2 AS s2, query.o3 AS s3,
    (SELECT json_agg(json_build_array({_OBJECT_COLUMNS})) FROM objects
     WHERE objects.project_id = CAST(:project AS INTEGER)
       AND objects."index" IN (query.o1, query.o2, query.o3)) AS shown_objects
FROM session CROSS JOIN counts
LEFT JOIN {next_join} ON true
LEFT JOIN query ON true
"""


_PG_ANSWER = _pg_answer(f"claim AS ({_CLAIM})")
_HELD_STEPS = f"held AS ({_HELD}), claim AS ({_CLAIM_HELD})"
_PG_ANSWER_HELD = _pg_answer(_HELD_STEPS)
_PG_ANSWER_HELD_REPEAT = _pg_answer(_HELD_STEPS, repeat=True)
_PG_ISSUE = f"""
WITH leased AS ({_LEASE_ONE}),
question AS (SELECT leased.id, {_SHOWN_GIVEN} FROM leased),
query AS ({_QUERY.format(question="question", is_repeat="false")} RETURNING id, question_id)
SELECT query.id AS query_id, query.question_id, {_OBJECT_COLUMNS}
FROM query
LEFT JOIN objects ON objects.project_id = CAST(:project AS INTEGER)
    AND objects."index" = ANY(CAST(:shown AS INTEGER[]))
"""

# -- PostgreSQL: the answers waiting, in one statement -----------------------------------------

# Answers of known sessions (app.services.known_sessions) that wait for a loop connection
# together are sent together: one statement per batch, not per answer. A statement's own cost
# on the server (bind, the plan's locks, starting its ~60 steps, commit) was more than half
# of PostgreSQL's CPU per round trip; the work per answer (finding rows, writing them) is the
# rest (bench/results/answer_batches.txt). The batch statement is made of the single
# statement's parts, each per-answer parameter read from the answer's row of ``batch``
# instead (:func:`_per_answer`); rows of the tables it writes are reached through that row.
# What the single statement does once, it does for every answer whose session is as
# remembered and whose query it claims; an answer not done leaves nothing changed and is
# taken the usual way. The caller sends answers of distinct sessions and distinct
# participants of one project, none due a repeat: a sessions or participants row is then
# updated once, and a questions row answered by several answers of the batch, or leased to
# several, is counted once per answer (``GROUP BY``: a row is updated at most once per
# statement in PostgreSQL). A question answered in the batch is not leased in it: its row is
# updated once. The next questions are assigned in the answers' order, each the first
# candidate with a place left that its participant has not seen, as the single statements
# sent in that order would, among the first ``:candidates`` open questions not being claimed
# by another statement (``SKIP LOCKED``): a participant who has seen them all gets none, and
# takes the usual way.
_BATCH_COLUMNS = {
    "session": "VARCHAR", "token": "VARCHAR", "token_hash": "VARCHAR", "answered": "INTEGER",
    "choice": "INTEGER", "participant": "INTEGER", "source": "VARCHAR",
    "client_ms": "DOUBLE PRECISION", "code_hash": "VARCHAR", "swap": "BOOLEAN",
    "issued_token": "VARCHAR",
}  # fmt: skip
_BATCH = "SELECT * FROM unnest({arrays}) WITH ORDINALITY AS batch({names}, ord)".format(
    arrays=", ".join(f"CAST(:batch_{name} AS {kind}[])" for name, kind in _BATCH_COLUMNS.items()),
    names=", ".join(_BATCH_COLUMNS),
)


def _per_answer(fragment: str, row: str) -> str:
    """``fragment`` with each per-answer parameter (``CAST(:choice AS INTEGER)``…) read from
    the column of the same name of ``row``."""
    for name, kind in _BATCH_COLUMNS.items():
        fragment = fragment.replace(f"CAST(:{name} AS {kind})", f"{row}.{name}")
    return fragment


_HELD_BATCH = """
    SELECT batch.* FROM batch
    JOIN sessions ON sessions.id = batch.session
    JOIN participants ON participants.id = sessions.participant_id
    JOIN projects ON projects.id = sessions.project_id
    WHERE sessions.token_hash = batch.token_hash AND sessions.answered = batch.answered
      AND sessions.finished_at IS NULL AND sessions.participant_id = batch.participant
      AND sessions.project_id = CAST(:project AS INTEGER)
      AND CAST(projects.plan AS JSONB) = CAST(:plan AS JSONB)
    ORDER BY sessions.id
    FOR NO KEY UPDATE OF sessions, participants SKIP LOCKED
"""
# A session or participant that another transaction holds is passed over: that answer is
# not taken (None: the usual way takes it, and waits there). A batch never waits for one
# request's transaction, so a slow one does not hold up the other answers of the batch,
# and a batch never waits in a cycle with one (in ``make test``'s races, a batch and a
# request taking the usual way for the same session once waited for each other until the
# deadlock check ended the batch, after 1 s). The rows are held in the order of the
# sessions' ids.
_CLAIM_FROM_HELD = _per_answer(_CLAIM_UPDATE, "held").replace(
    "WHERE queries.token", "FROM held WHERE queries.token"
)
_CLAIM_BATCH = f"""
    {_CLAIM_FROM_HELD}
    RETURNING queries.id, queries.question_id, queries.kind, queries.o1, queries.o2,
        queries.o3, queries.is_repeat, queries.issued_at, held.*
"""
# The questions answered are held in the order of their ids, then counted, before any open
# question is claimed (``candidates`` waits for ``place``): a batch then never holds an open
# question while it waits for an answered one, and two batches hold the answered ones in the
# same order. (PostgreSQL runs a data-modifying CTE that no other reads at the statement's
# end: after the claims, with the redundancy of 2 or more that leaves an answered question
# open, two batches could wait for each other, until the deadlock check ended one after 1 s.)
_ANSWERED_QUESTIONS = """
    SELECT questions.id FROM questions
    WHERE questions.id IN (SELECT claim.question_id FROM claim WHERE NOT claim.is_repeat)
    ORDER BY questions.id
    FOR NO KEY UPDATE
"""
_PLACE_BATCH = """
    UPDATE questions SET live = questions.live - claimed.n,
        answered = questions.answered + claimed.n,
        is_open = questions.answered + questions.live < questions.wanted
    FROM (SELECT question_id, count(*) AS n FROM claim WHERE NOT claim.is_repeat
          GROUP BY question_id) AS claimed
    WHERE questions.id = claimed.question_id
      AND (SELECT count(*) FROM answered_questions) >= 0
    RETURNING questions.id
"""
_FIRST_BATCH = """
    SELECT DISTINCT ON (claim.id) claim.id AS claim_id, answers.a, answers.b, answers.outcome
    FROM claim JOIN queries ON queries.participant_id = claim.participant
        AND queries.question_id = claim.question_id AND NOT queries.is_repeat
    JOIN answers ON answers.query_id = queries.id
    WHERE claim.is_repeat
"""
# Each answer carries its own values on, for the rows written from it.
_ANSWER_BATCH = _per_answer(
    _ANSWER.format(
        server_ms=_SERVER_MS["postgresql"],
        carried=",\n        claim.choice, claim.session, claim.participant, claim.source,"
        " claim.client_ms",
        first_of_claim="first.claim_id = claim.id",
    ),
    "claim",
)
_STORE_BATCH = _per_answer(_STORE, "answer")
_CANDIDATES_BATCH = """
    SELECT questions.id, questions.kind, questions.o1, questions.o2, questions.o3,
        questions.wanted - questions.answered - questions.live AS places
    FROM questions
    WHERE questions.project_id = CAST(:project AS INTEGER) AND questions.is_open = true
      AND EXISTS (SELECT FROM stored) AND (SELECT count(*) FROM place) >= 0
      AND questions.id NOT IN (SELECT claim.question_id FROM claim)
    ORDER BY questions.id LIMIT CAST(:candidates AS INTEGER)
    FOR NO KEY UPDATE OF questions SKIP LOCKED
"""
# The answers stored, numbered in the batch's order; then, one answer after another, the
# questions picked so far (``picks``, an array: a recursive step reads only the row before).
_PICKERS = """
    SELECT row_number() OVER (ORDER BY batch.ord) AS n, batch.ord, batch.participant
    FROM stored JOIN batch ON batch.session = stored.session_id
"""
_ASSIGN = """
    SELECT 0 AS n, CAST(ARRAY[] AS BIGINT[]) AS picks
    UNION ALL
    SELECT assign.n + 1, assign.picks || (
        SELECT candidates.id FROM candidates, pickers
        WHERE pickers.n = assign.n + 1
          AND cardinality(array_positions(assign.picks, candidates.id)) < candidates.places
          AND NOT EXISTS (
            SELECT 1 FROM queries
            WHERE queries.participant_id = pickers.participant
              AND queries.question_id = candidates.id)
        ORDER BY candidates.id LIMIT 1)
    FROM assign WHERE assign.n < (SELECT count(*) FROM pickers)
"""
_PICKED = """
    SELECT pickers.ord, pickers.participant,
        (SELECT assign.picks FROM assign ORDER BY assign.n DESC LIMIT 1)[pickers.n] AS id
    FROM pickers
"""
_LEASE_BATCH = """
    UPDATE questions SET live = questions.live + leasing.n,
        is_open = questions.answered + questions.live + leasing.n < questions.wanted
    FROM (SELECT id, count(*) AS n FROM picked WHERE id IS NOT NULL GROUP BY id) AS leasing
    WHERE questions.id = leasing.id
    RETURNING questions.id
"""
_QUERY_BATCH = _per_answer(
    _QUERY.format(
        question=f"""(SELECT candidates.id, {_shown("candidates", "batch.swap")},
            batch.session, batch.participant, batch.issued_token
        FROM picked JOIN candidates ON candidates.id = picked.id
        JOIN batch ON batch.ord = picked.ord
        WHERE picked.id IN (SELECT leased.id FROM leased)) AS question""",
        is_repeat="false",
    ),
    "question",
)
_PG_ANSWER_BATCH = f"""
WITH RECURSIVE batch AS ({_BATCH}),
held AS ({_HELD_BATCH}),
claim AS ({_CLAIM_BATCH}),
answered_questions AS ({_ANSWERED_QUESTIONS}),
place AS ({_PLACE_BATCH}),
first AS ({_FIRST_BATCH}),
answer AS ({_ANSWER_BATCH}),
stored AS ({_STORE_INTO} {_STORE_BATCH} RETURNING session_id),
session AS ({_per_answer(_SESSION, "batch")}
    FROM stored JOIN batch ON batch.session = stored.session_id
    WHERE sessions.id = stored.session_id {_SESSION_RETURNING.rstrip()}, sessions.id),
counts AS ({_per_answer(_COUNTS, "answer")}
    FROM answer WHERE participants.id = answer.participant {_COUNTS_RETURNING}),
candidates AS ({_CANDIDATES_BATCH}),
pickers AS ({_PICKERS}),
assign AS ({_ASSIGN}),
picked AS ({_PICKED}),
leased AS ({_LEASE_BATCH}),
query AS ({_QUERY_BATCH} RETURNING id, session_id, o1, o2, o3)
SELECT session.answered AS session_answered, session.finished_at AS session_finished_at,
    session.completion_code_hash AS session_code_hash, counts.*,
    candidates.id AS q_id, candidates.kind AS q_kind, candidates.o1 AS q_o1,
    candidates.o2 AS q_o2, candidates.o3 AS q_o3,
    query.id AS query_id, query.o1 AS s1, query.o2 AS s2, query.o3 AS s3,
    (SELECT json_agg(json_build_array({_OBJECT_COLUMNS})) FROM objects
     WHERE objects.project_id = CAST(:project AS INTEGER)
       AND objects."index" IN (query.o1, query.o2, query.o3)) AS shown_objects,
    batch.ord
FROM session JOIN batch ON batch.session = session.id
JOIN counts ON counts.id = batch.participant
LEFT JOIN picked ON picked.ord = batch.ord
LEFT JOIN candidates ON candidates.id = picked.id
LEFT JOIN query ON query.session_id = batch.session
"""

# -- SQLite: the same parts, one statement per table written ---------------------------------

_SQLITE_STORE = f"""
{_STORE_INTO}
WITH claim AS (SELECT id, question_id, kind, o1, o2, o3, is_repeat, issued_at FROM queries
               WHERE id = :query),
first AS ({_FIRST}),
answer AS ({_ANSWER.format(server_ms=_SERVER_MS["sqlite"], **_ONE)})
{_STORE}
RETURNING id
"""
# What PostgreSQL reads in the answer's statement, read with the participant's counts.
_SQLITE_COUNTS = f"""
{_COUNTS}
FROM (SELECT gold_correct, server_ms, position, consistent FROM answers WHERE id = :answer)
    AS answer
WHERE participants.id = :participant
{_COUNTS_RETURNING},
    ({_OPEN.format(columns=f"json_array({_OPEN_COLUMNS})", lock="", stored="")}) AS open_question
"""
# The query inserted, with its objects (as JSON) and the order shown.
_SQLITE_ISSUED = f"""
RETURNING id AS query_id, question_id, kind, o1, o2, o3,
    (SELECT json_group_array(json_array({_OBJECT_COLUMNS})) FROM objects
     WHERE objects.project_id = :project
       AND objects."index" IN (queries.o1, queries.o2, queries.o3)) AS objects
"""
_SQLITE_QUERY = f"""
{
    _QUERY.format(
        question=f"(SELECT CAST(:question AS INTEGER) AS id, {_SHOWN_GIVEN}) AS question",
        is_repeat="false",
    )
}
{_SQLITE_ISSUED}
"""
# A known session's round trip (app.services.known_sessions) on SQLite: its answer claimed
# only if the session is as the process remembers it (as ``_HELD``; SQLite's write lock,
# held since the transaction began, serialises the rest), then its next question: a repeat
# picked by ``:draw`` (if drawn and there is one to pick), else the open question the
# answer's steps read, its order shown from ``:swap`` in SQL as on PostgreSQL.
_SQLITE_HELD = """
    SELECT 1 FROM sessions JOIN projects ON projects.id = sessions.project_id
    WHERE sessions.id = :session AND sessions.token_hash = :token_hash
      AND sessions.answered = :answered AND sessions.finished_at IS NULL
      AND json(projects.plan) = json(:plan)
"""
_SQLITE_OPEN_GIVEN = """(SELECT CAST(:question AS INTEGER) AS id, CAST(:kind AS VARCHAR) AS kind,
    CAST(:o1 AS INTEGER) AS o1, CAST(:o2 AS INTEGER) AS o2, CAST(:o3 AS INTEGER) AS o3) AS open"""
_SQLITE_QUERY_OPEN = f"""
{
    _QUERY.format(
        question=f"(SELECT open.id, {_SHOWN_OPEN} FROM {_SQLITE_OPEN_GIVEN}) AS question",
        is_repeat="false",
    )
}
{_SQLITE_ISSUED}
"""
_SQLITE_PICKED = f"(SELECT pick.id, {_SHOWN_REPEAT} FROM pick) AS question"
_SQLITE_QUERY_REPEAT = f"""
WITH recent AS ({_RECENT}), candidates AS ({_CANDIDATES}), pick AS ({_PICK})
{_QUERY.format(question=_SQLITE_PICKED, is_repeat="true")}
{_SQLITE_ISSUED}
"""

ANSWER = Statement(_PG_ANSWER, "")
ANSWER_HELD = Statement(_PG_ANSWER_HELD, "")
ANSWER_HELD_REPEAT = Statement(_PG_ANSWER_HELD_REPEAT, "")
ISSUE = Statement(_PG_ISSUE, "")
ANSWER_BATCH = Statement(_PG_ANSWER_BATCH, "")
OPEN_QUESTION = Statement(
    _OPEN.format(columns=_OPEN_COLUMNS, lock=_CLAIM_OPEN, stored=""),
    _OPEN.format(columns=_OPEN_COLUMNS, lock="", stored=""),
)
CLAIM = Statement(_CLAIM)
PLACE = Statement(f"{_PLACE} WHERE questions.id = CAST(:question AS BIGINT)")
STORE = Statement(None, _SQLITE_STORE)
SESSION = Statement(
    f"{_SESSION} WHERE sessions.id = CAST(:session AS VARCHAR) {_SESSION_RETURNING}"
)
COUNTS = Statement(None, _SQLITE_COUNTS)
NEW_QUESTIONS = Statement(_PG_NEW_QUESTIONS, _SQLITE_NEW_QUESTIONS)
LEASE = Statement(_LEASE_ONE)
QUERY = Statement(None, _SQLITE_QUERY)
REPEAT = Statement(_REPEAT)
CLAIM_HELD = Statement(None, f"{_CLAIM_UPDATE} AND EXISTS ({_SQLITE_HELD}) {_CLAIM_RETURNING}")
QUERY_OPEN = Statement(None, _SQLITE_QUERY_OPEN)
QUERY_REPEAT = Statement(None, _SQLITE_QUERY_REPEAT)

# -- the steps -------------------------------------------------------------------------------

Answered = namedtuple(
    "Answered",
    "session_answered session_finished_at session_code_hash id flagged flag_reason "
    "flag_manual n_answers gold_answers gold_correct fast_answers left_answers sided_answers "
    "repeats consistent_repeats open_question issued",
)
"""What :func:`answer` changed and read: the session's count, end and code hash; the
participant's counters and flags after the answer (what ``quality.review_counts`` reads);
the open question (id, kind, o1, o2, o3), or None; and, if it issued that question's query
too (PostgreSQL, ``issue``), the query's id and the objects shown, else None."""

ShownObject = namedtuple("ShownObject", "index name text image_url")
IssuedWith = namedtuple("IssuedWith", "query_id objects shown")
"""The query :func:`answer` issued with the answer: its id, the objects shown by index, and
their indices in the order shown."""
Repeatable = namedtuple("Repeatable", "id kind o1 o2 o3 shown_o2 shown_o3")
"""A question the session could be asked again, and its candidates as they were shown."""


def answer(db: Session, params: dict[str, Any]) -> Answered | None:
    """Store the answer to the session's query (``params``: token, session, now, choice,
    project, participant, source, client_ms, min_ms, code_hash); None if the query was not
    claimed (nothing changed). ``IntegrityError`` if another request stored it first.

    On PostgreSQL, with ``issue`` true, the open question claimed is issued in the same
    statement: ``swap`` (issuance's draw of the order shown), ``issued_token`` and
    ``expires`` are the new query's; without, the caller issues (SQLite always)."""
    conn = db.connection()
    params = bind(conn, params)
    if conn.dialect.name == "postgresql":
        return _answered(first(conn, ANSWER, params))
    return _sqlite_answer(conn, params, CLAIM)


def _sqlite_answer(conn: Connection, params: dict[str, Any], claim: Statement) -> Answered | None:
    """:func:`answer`'s steps on SQLite, the query claimed by ``claim``."""
    claimed = first(conn, claim, params)
    if claimed is None:
        return None
    params["question"], params["query"] = claimed.question_id, claimed.id
    if not claimed.is_repeat:
        run(conn, PLACE, params)
    stored = first(conn, STORE, params)
    session = first(conn, SESSION, params)
    params["answer"] = stored.id
    counts = first(conn, COUNTS, params)
    open_question = None if counts.open_question is None else json.loads(counts.open_question)
    return Answered(
        session.answered,
        timestamp(session.finished_at),
        session.completion_code_hash,
        *counts[:12],
        open_question and tuple(open_question),
        None,
    )


async def answer_held(
    connection: psycopg.AsyncConnection[Any], params: dict[str, Any]
) -> Answered | None:
    """:func:`answer` with ``issue``, on PostgreSQL, as one statement on ``connection`` (of
    psycopg's asyncio driver, in autocommit) that holds the session and its participant
    itself (``_HELD``): None, and nothing changed, unless the session is as ``params``
    remember it (token_hash, answered, plan: the project's, as JSON) and the query was
    claimed. ``psycopg.IntegrityError`` (nothing changed) if another request stored the
    answer first or another session of the participant was given the same question. With a
    ``draw`` (not None), the next question is a repeat picked by it (as :func:`repeat`), its
    objects in ``q_o1``… in the order shown."""
    statement = ANSWER_HELD if params.get("draw") is None else ANSWER_HELD_REPEAT
    return _answered(await first_async(connection, statement, params))


SPARE_CANDIDATES = 2  # open questions a batch claims beyond one per answer


async def answer_held_batch(
    connection: psycopg.AsyncConnection[Any], batch: Sequence[dict[str, Any]]
) -> list[Answered | None]:
    """:func:`answer_held` for several answers in one statement (see ``_PG_ANSWER_BATCH``):
    ``batch``, their parameters as :func:`answer_held` takes them, none with a ``draw``, of
    distinct sessions and distinct participants, of one project under one plan. Returns, in
    ``batch``'s order, what each did: None where nothing changed (the session is not as
    remembered, or the query was not claimed), ``issued`` None where the answer was stored
    but no question was assigned. ``psycopg.IntegrityError`` (nothing changed) as
    :func:`answer_held`."""
    shared = max(batch, key=lambda params: params["now"])  # the lease starts when it is sent
    params: dict[str, Any] = {
        f"batch_{name}": [answer[name] for answer in batch] for name in _BATCH_COLUMNS
    }
    params.update(
        project=shared["project"],
        plan=shared["plan"],
        now=shared["now"],
        expires=shared["expires"],
        min_ms=shared["min_ms"],
        candidates=len(batch) + SPARE_CANDIDATES,
    )
    done: list[Answered | None] = [None] * len(batch)
    for row in await rows_async(connection, ANSWER_BATCH, params):
        done[row.ord - 1] = _answered(row)
    return done


def answer_held_in(db: Session, params: dict[str, Any]) -> Answered | None:
    """:func:`answer_held` on SQLite, in ``db``'s writing transaction (a group's, see
    ``app.api.worker.AnswerGroups``): None, and nothing changed, unless the session is as
    ``params`` remember it and the query was claimed. The next question is issued unless
    none is open for the participant (``issued`` None: the caller issues it); with a
    ``draw``, a repeat if one qualifies (as :func:`repeat`), else the open question."""
    conn = db.connection()
    params = bind(conn, params)
    answered = _sqlite_answer(conn, params, CLAIM_HELD)
    if answered is None:
        return None
    if params["draw"] is not None:
        issued = first(conn, QUERY_REPEAT, params)
        if issued is not None:
            return _issued_in(answered, issued)
    if answered.open_question is None:
        return answered
    question, kind, o1, o2, o3 = answered.open_question
    params.update(question=question, kind=kind, o1=o1, o2=o2, o3=o3)
    run(conn, LEASE, params)
    return _issued_in(answered, first(conn, QUERY_OPEN, params))


def _issued_in(answered: Answered, issued: Any) -> Answered:
    """``answered`` with the query SQLite issued after it (a row of ``_SQLITE_ISSUED``)."""
    open_question = (issued.question_id, issued.kind, issued.o1, issued.o2, issued.o3)
    objects = json.loads(issued.objects)
    shown = (issued.o1, issued.o2, issued.o3)
    return answered._replace(
        open_question=open_question, issued=_issued_with(issued.query_id, objects, shown)
    )


def _issued_with(query_id: int, objects: list[list[Any]], shown: tuple[Any, ...]) -> IssuedWith:
    """:class:`IssuedWith` from the query's id, its objects (rows of ``_OBJECT_COLUMNS``) and
    its o1, o2, o3 (in the order shown; o3 None for a pair)."""
    by_index = {row[0]: ShownObject(*row) for row in objects}
    return IssuedWith(query_id, by_index, tuple(i for i in shown if i is not None))


def _answered(row: Any) -> Answered | None:
    """What PostgreSQL's answer statement returned, as :class:`Answered`."""
    if row is None:
        return None
    open_question = None
    if row.q_id is not None:
        open_question = (row.q_id, row.q_kind, row.q_o1, row.q_o2, row.q_o3)
    issued = None
    if row.query_id is not None:
        issued = _issued_with(row.query_id, row.shown_objects, (row.s1, row.s2, row.s3))
    return Answered(*row[:15], open_question, issued)


def open_question(db: Session, project_id: int, participant_id: int) -> tuple | None:
    """The first open question ``participant_id`` has not seen, claimed on PostgreSQL (see
    the module): (id, kind, o1, o2, o3), or None."""
    params = {"project": project_id, "participant": participant_id}
    return first(db.connection(), OPEN_QUESTION, params)


def repeat(db: Session, session_id: str, participant_id: int, draw: int) -> Repeatable | None:
    """The question the session (of ``participant_id``) is asked again, picked by ``draw``
    (``0 <= draw < DRAW_RANGE``) among those of its last :data:`REPEAT_WINDOW` answered
    queries that qualify (see ``_REPEAT``); None if none does."""
    params = {"session": session_id, "participant": participant_id, "draw": draw}
    row = first(db.connection(), REPEAT, params)
    return None if row is None else Repeatable(*row)


def new_questions(
    db: Session, project_id: int, batch: Sequence[dict[str, Any]], now: datetime
) -> set[str]:
    """Create the questions of ``batch`` (rows of ``_QUESTION_FIELDS``), in its order, open,
    no place taken; the keys of those created (the project had none of them yet)."""
    values = json.dumps([{name: row[name] for name in _QUESTION_FIELDS} for row in batch])
    params = {"project": project_id, "rows": values, "now": now}
    return {row.key for row in rows(db.connection(), NEW_QUESTIONS, params)}


def issue(
    db: Session, params: dict[str, Any], shown: Sequence[int]
) -> tuple[int, int, list[ShownObject]]:
    """Issue a query of an open question, one more place leased. Returns the query's id, its
    question's and the objects shown, in the order shown. ``params``: project, session,
    participant, kind, s1, s2, s3 (the objects shown), issued_token, now, expires, question."""
    conn = db.connection()
    params = bind(conn, params)
    if conn.dialect.name == "postgresql":
        found = rows(conn, ISSUE, {**params, "shown": list(shown)})
        by_index = {row.index: ShownObject(*row[2:]) for row in found}
        return found[0].query_id, found[0].question_id, [by_index[i] for i in shown]
    run(conn, LEASE, params)
    query = first(conn, QUERY, params)
    by_index = {row[0]: ShownObject(*row) for row in json.loads(query.objects)}
    return query.query_id, query.question_id, [by_index[i] for i in shown]
