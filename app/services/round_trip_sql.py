"""The worker round trip's SQL: every statement named here once, its rules written once as
fragments and composed.

Three rules of the pool live in SQL, each in one fragment below: a participant never sees a
question twice (:func:`not_seen`), a question is handed out while it has places left
(:func:`places_left`), a lease runs until it expires (:func:`lease_running`); and the plan's
``max_object_views`` (:func:`views_left`). Everything else the round trip decides (a repeat
or not, the order shown, the token, when the lease ends) is decided in Python
(``app.active.rules``) and arrives as parameters.

An answer is stored one way per database:

* PostgreSQL: :data:`ANSWER_BATCH`, one statement of data-modifying CTEs for the answers
  that wait together (a batch of one is the ordinary case). It authenticates each session
  by its token's hash and count, claims the query, stores the answer, counts it on the
  question, the session (finishing it) and the participant, and claims the next open
  question of each answer that wants one, in the answers' order;
* SQLite (no data-modifying CTEs): the same parts as statements of their own, one per table
  written (:data:`HELD` … :data:`COUNTS`), in a transaction that holds the write lock.

The next question, when the answer's statement does not claim it (SQLite always; a
repeat; a pool that was empty), and a session's question on load, are issued by
:data:`OPEN_QUESTION`, :data:`LEASE` and :data:`QUERY`, or :data:`REPEAT`, on both
databases. The pool is filled by :data:`NEW_QUESTIONS` and freed by :data:`EXPIRE_LEASES`.

Parameters are ``:name``; on PostgreSQL each is cast where PostgreSQL could not infer its
type (``app.db.driver.Statement`` drops the casts SQLite cannot read).
"""

from __future__ import annotations

from app.active.rules import DRAW_RANGE, REPEAT_WINDOW
from app.db.driver import Statement

# -- the rules, once -----------------------------------------------------------------------


def not_seen(participant: str, question: str) -> str:
    """``participant`` has never been given ``question`` (its mirrored repeat aside, which
    :data:`REPEAT` picks among the questions the session answered)."""
    return f"""NOT EXISTS (SELECT 1 FROM queries AS seen
        WHERE seen.participant_id = {participant} AND seen.question_id = {question})"""


def places_left(answered: str = "0", live: str = "0") -> str:
    """Whether a question (``questions``) has a place left once its answers grow by
    ``answered`` and its running leases by ``live``: what ``is_open`` keeps."""
    return f"questions.answered + {answered} + questions.live + {live} < questions.wanted"


def lease_running(query: str, now: str = "CAST(:now AS TIMESTAMPTZ)") -> str:
    """The query ``query`` is issued and its lease has not ended at ``now``."""
    return f"{query}.status = 'issued' AND {query}.expires_at > {now}"


def _listed(column: str, alias: str, dialect: str) -> str:
    """The object indices of the JSON list ``column`` (a shaped question's or query's
    ``objects``; none for NULL), as rows of ``{alias}.value``."""
    if dialect == "postgresql":
        return f"""SELECT CAST({alias}.value AS INTEGER) FROM
            json_array_elements_text({column}) AS {alias}(value)"""
    return f"SELECT {alias}.value FROM json_each({column}) AS {alias}"


def views_left(participant: str, question: str, dialect: str = "postgresql") -> str:
    """Each object of ``question`` (its ``o1``…``o3`` and, shaped, every one of its
    ``objects``) was shown to ``participant`` fewer than the plan's ``max_object_views``
    times (``:max_views``; NULL: no cap), in any query (a shaped one shows its ``objects``)."""
    shown = " UNION ALL ".join(f"SELECT {question}.o{i} AS o" for i in (1, 2, 3))
    listed = _listed(f"{question}.objects", "listed", dialect)
    seen = _listed("viewed.objects", "seen", dialect)
    return f"""(CAST(:max_views AS INTEGER) IS NULL OR NOT EXISTS (
        SELECT 1 FROM ({shown} UNION ALL {listed}) AS objects_of
        WHERE objects_of.o IS NOT NULL AND (
            SELECT count(*) FROM queries AS viewed
            WHERE viewed.participant_id = {participant}
              AND (objects_of.o IN (viewed.o1, viewed.o2, viewed.o3)
                   OR (viewed.objects IS NOT NULL AND objects_of.o IN ({seen})))
        ) >= CAST(:max_views AS INTEGER)))"""


def askable(participant: str, dialect: str = "postgresql") -> str:
    """An open question (``questions``) ``participant`` may be given now."""
    return f"""questions.is_open = true AND {not_seen(participant, "questions.id")}
      AND {views_left(participant, "questions", dialect)}"""


# The choice is one the query offered: a triplet's candidate, a pair's −1 / 0 / 1, one of an
# odd-one-out's three objects; or (``picks``, a JSON list) a ranked grid's ``k`` different
# candidates (``app.learning.shapes.check_choice`` in SQL: :func:`picks_offered`).
_CHOICE_OFFERED = """(
    (queries.kind = 'triplet' AND {picks} IS NULL
     AND (queries.o2 = {choice} OR queries.o3 = {choice}))
    OR (queries.kind = 'pair' AND {picks} IS NULL AND {choice} IN (-1, 0, 1))
    OR (queries.kind = 'odd_one_out' AND {picks} IS NULL
        AND {choice} IN (queries.o1, queries.o2, queries.o3))
    OR (queries.kind = 'rank' AND {picks_offered}))"""


def picks_offered(picks: str, dialect: str) -> str:
    """The ranked grid's ``picks`` (JSON text) are ``queries.k`` different candidates of the
    query (its ``objects`` after the anchor)."""
    if dialect == "postgresql":
        return f"""json_array_length(CAST({picks} AS JSON)) = queries.k
        AND (SELECT count(DISTINCT picked.value)
             FROM json_array_elements_text(CAST({picks} AS JSON)) AS picked
             WHERE picked.value IN (
                SELECT shown.value FROM json_array_elements_text(queries.objects)
                    WITH ORDINALITY AS shown(value, ord)
                WHERE shown.ord > 1)) = queries.k"""
    return f"""json_array_length({picks}) = queries.k
        AND (SELECT count(DISTINCT picked.value) FROM json_each({picks}) AS picked
             WHERE picked.value IN (
                SELECT shown.value FROM json_each(queries.objects) AS shown
                WHERE shown.key > 0)) = queries.k"""


def _offered(choice: str, picks: str, dialect: str) -> str:
    return _CHOICE_OFFERED.format(
        choice=choice, picks=picks, picks_offered=picks_offered(picks, dialect)
    )


# -- the answer, in parts ------------------------------------------------------------------

_CLAIM = """
    UPDATE queries SET status = 'answered', answered_at = CAST(:now AS TIMESTAMPTZ)
    {source}WHERE queries.token = {token} AND queries.session_id = {session}
      AND {running} AND {offered}
    RETURNING queries.id, queries.question_id, queries.kind, queries.o1, queries.o2,
        queries.o3, queries.objects, queries.is_repeat, queries.issued_at{carried}
"""
# From leased to answered; a repeat never held a place.
_PLACE = f"""
    UPDATE questions SET live = questions.live - {{n}}, answered = questions.answered + {{n}},
        is_open = {places_left()}
"""
# A repeat's first answer: looked up by participant and question (an index lookup).
# (``CROSS JOIN``: SQLite then searches the queries for the claim's question, not the claim
# for each of the participant's queries.)
_FIRST = """
    SELECT {claim_id} answers.a, answers.b, answers.c, answers.outcome
    FROM claim CROSS JOIN queries
    JOIN answers ON answers.query_id = queries.id
    WHERE claim.is_repeat AND queries.participant_id = {participant}
      AND queries.question_id = claim.question_id AND NOT queries.is_repeat
"""
# The answer's row from its query: the objects chosen, where the choice was shown, whether it
# was right (gold) and agrees with the first answer (a repeat). A triplet (a, chosen, other);
# a pair (left, right) and its outcome; an odd-one-out (the two kept as shown, the odd one);
# a ranked grid (anchor, first pick), its objects as shown and its picks (``choices``). A
# ranked grid's gold and repeat are judged by its first pick (``choice``).
_ANSWER = """
    SELECT claim.id AS query_id, claim.kind,
        CASE WHEN claim.kind = 'odd_one_out' AND claim.o1 = {choice} THEN claim.o2
             ELSE claim.o1 END AS a,
        CASE WHEN claim.kind IN ('triplet', 'rank') THEN {choice}
             WHEN claim.kind = 'odd_one_out' AND claim.o3 <> {choice} THEN claim.o3
             ELSE claim.o2 END AS b,
        CASE WHEN claim.kind = 'triplet' THEN
                CASE WHEN claim.o2 = {choice} THEN claim.o3 ELSE claim.o2 END
             WHEN claim.kind = 'odd_one_out' THEN {choice}
        END AS c,
        CASE WHEN claim.kind = 'pair' THEN {choice} END AS outcome,
        CASE WHEN claim.kind = 'pair' THEN {choice}
             WHEN claim.kind = 'rank' THEN NULL
             WHEN claim.kind = 'odd_one_out' AND claim.o1 = {choice} THEN -1
             WHEN claim.kind = 'odd_one_out' AND claim.o2 = {choice} THEN 0
             WHEN claim.kind = 'odd_one_out' THEN 1
             WHEN claim.o2 = {choice} THEN -1 ELSE 1 END AS position,
        questions.strategy,
        {choice} = questions.gold_choice AS gold_correct,
        CASE WHEN claim.kind IN ('triplet', 'rank') THEN first.b = {choice}
             WHEN claim.kind = 'odd_one_out' THEN first.c = {choice}
             ELSE CASE WHEN first.a = claim.o1 THEN first.outcome ELSE -first.outcome END
                  = {choice}
        END AS consistent,
        claim.objects, CASE WHEN claim.kind = 'rank' THEN {picks} END AS choices,
        {server_ms} AS server_ms{carried}
    FROM claim
    JOIN questions ON questions.id = claim.question_id
    LEFT JOIN first ON {first_of_claim}
"""
_SERVER_MS = {
    "postgresql": "CAST(EXTRACT(EPOCH FROM CAST(:now AS TIMESTAMPTZ) - claim.issued_at) * 1000"
    " AS DOUBLE PRECISION)",
    # SQLite's date functions round to the millisecond: whole seconds and the fraction are
    # taken apart from the stored text (always six digits), exact to the microsecond.
    "sqlite": "(CAST(strftime('%s', substr(:now, 1, 19)) AS INTEGER)"
    " - CAST(strftime('%s', substr(claim.issued_at, 1, 19)) AS INTEGER)) * 1000.0"
    " + (CAST(substr(:now, 20) AS REAL) - CAST(substr(claim.issued_at, 20) AS REAL)) * 1000.0",
}
_STORE_INTO = """
    INSERT INTO answers (project_id, query_id, kind, a, b, c, outcome, position, choice,
        source, strategy, gold_correct, consistent, session_id, participant_id, server_ms,
        client_ms, created_at, objects, choices)
"""
_STORE_VALUES = """
    SELECT CAST(:project AS INTEGER), answer.query_id, answer.kind, answer.a, answer.b,
        answer.c, answer.outcome, answer.position, {choice}, {source}, answer.strategy,
        answer.gold_correct, answer.consistent, {session}, {participant}, answer.server_ms,
        {client_ms}, CAST(:now AS TIMESTAMPTZ), answer.objects, answer.choices
    FROM answer
"""
# Counted in SQL; the answer that reaches the session's total finishes it.
_SESSION = """
    UPDATE sessions SET answered = sessions.answered + 1,
        finished_at = CASE WHEN sessions.answered + 1 >= sessions.total
            THEN CAST(:now AS TIMESTAMPTZ) ELSE sessions.finished_at END,
        completion_code_hash = CASE WHEN sessions.answered + 1 >= sessions.total
            THEN {code_hash} ELSE sessions.completion_code_hash END
"""
_SESSION_RETURNING = """RETURNING sessions.id AS session_id, sessions.answered,
    sessions.total, sessions.finished_at"""
# The participant's quality counters, from the answer's row.
_COUNTS = """
    UPDATE participants SET n_answers = participants.n_answers + 1,
        gold_answers = participants.gold_answers
            + CASE WHEN answer.gold_correct IS NOT NULL THEN 1 ELSE 0 END,
        gold_correct = participants.gold_correct + CASE WHEN answer.gold_correct THEN 1 ELSE 0 END,
        fast_answers = participants.fast_answers + CASE
            WHEN COALESCE({client_ms}, answer.server_ms) < CAST(:min_ms AS INTEGER)
            THEN 1 ELSE 0 END,
        left_answers = participants.left_answers + CASE WHEN answer.position = -1 THEN 1 ELSE 0 END,
        sided_answers = participants.sided_answers
            + CASE WHEN answer.position IN (-1, 1) THEN 1 ELSE 0 END,
        repeats = participants.repeats + CASE WHEN answer.consistent IS NOT NULL THEN 1 ELSE 0 END,
        consistent_repeats = participants.consistent_repeats
            + CASE WHEN answer.consistent THEN 1 ELSE 0 END
"""
_COUNTS_RETURNING = """RETURNING participants.id, participants.flagged,
    participants.flag_reason, participants.flag_manual, participants.n_answers,
    participants.gold_answers,
    participants.gold_correct, participants.fast_answers, participants.left_answers,
    participants.sided_answers, participants.repeats, participants.consistent_repeats"""
# An answer is taken when its session is the one its token names (``token_ok``), counted as
# when the query was issued and unfinished (``count_ok``), and its project's plan the one the
# caller decided the next question with (``plan_ok``, compared as JSON).
_SAME_PLAN = {
    "postgresql": "CAST(projects.plan AS JSONB) = CAST(:plan AS JSONB)",
    "sqlite": "json(projects.plan) = json(:plan)",
}
# The objects a query shows, by index, for its reply.
_OBJECT_COLUMNS = 'objects."index", objects.name, objects.text, objects.image_url'

# -- PostgreSQL: the answers waiting, in one statement ---------------------------------------

_BATCH_COLUMNS = {
    "session": "VARCHAR", "token": "VARCHAR", "token_hash": "VARCHAR", "answered": "INTEGER",
    "choice": "INTEGER", "client_ms": "DOUBLE PRECISION", "code_hash": "VARCHAR",
    "swap": "BOOLEAN", "issued_token": "VARCHAR", "claim_next": "BOOLEAN", "picks": "VARCHAR",
    "order_keys": "VARCHAR",
}  # fmt: skip
_BATCH = "SELECT * FROM unnest({arrays}) WITH ORDINALITY AS batch({names}, ord)".format(
    arrays=", ".join(f"CAST(:batch_{name} AS {kind}[])" for name, kind in _BATCH_COLUMNS.items()),
    names=", ".join(_BATCH_COLUMNS),
)
# Every session row of the batch and its participant's are held, in the order of the
# sessions' ids (a batch waits for a request's transaction that holds one: those are short),
# and what the answer needs checked: its token, the session's count and the plan.
_HELD_ALL = f"""
    SELECT batch.*, sessions.participant_id AS participant, sessions.source,
        sessions.token_hash = batch.token_hash AS token_ok,
        sessions.answered = batch.answered AND sessions.finished_at IS NULL AS count_ok,
        sessions.project_id = CAST(:project AS INTEGER) AND {_SAME_PLAN["postgresql"]}
            AS plan_ok
    FROM batch JOIN sessions ON sessions.id = batch.session
    JOIN participants ON participants.id = sessions.participant_id
    JOIN projects ON projects.id = sessions.project_id
    ORDER BY sessions.id
    FOR NO KEY UPDATE OF sessions, participants
"""
# One answer per participant per statement (a participant's row is updated once): another
# session of the same participant waits for the next batch.
_HELD = """
    SELECT DISTINCT ON (held_all.participant) * FROM held_all
    WHERE held_all.token_ok AND held_all.count_ok AND held_all.plan_ok
    ORDER BY held_all.participant, held_all.ord
"""
_CLAIM_BATCH = _CLAIM.format(
    source="FROM held ",
    token="held.token",
    session="held.session",
    running=lease_running("queries"),
    offered=_offered("held.choice", "held.picks", "postgresql"),
    carried=", held.*",
)
# The questions answered are held in id order and counted before any open question is
# claimed: a batch never holds an open question while it waits for an answered one (with
# redundancy 2+, two batches could otherwise wait for each other until the deadlock check).
_ANSWERED_QUESTIONS = """
    SELECT questions.id FROM questions
    WHERE questions.id IN (SELECT claim.question_id FROM claim WHERE NOT claim.is_repeat)
    ORDER BY questions.id FOR NO KEY UPDATE
"""
_PLACE_BATCH = f"""{_PLACE.format(n="claimed.n")}
    FROM (SELECT question_id, count(*) AS n FROM claim WHERE NOT claim.is_repeat
          GROUP BY question_id) AS claimed
    WHERE questions.id = claimed.question_id
      AND (SELECT count(*) FROM answered_questions) >= 0
    RETURNING questions.id
"""
_ANSWER_BATCH = _ANSWER.format(
    choice="claim.choice",
    server_ms=_SERVER_MS["postgresql"],
    carried=", claim.choice, claim.session, claim.participant, claim.source, claim.client_ms",
    first_of_claim="first.claim_id = claim.id",
    picks="CAST(claim.picks AS JSON)",
)
# The first open questions no other statement is claiming, for the answers that want one.
_CANDIDATES = """
    SELECT questions.id, questions.kind, questions.o1, questions.o2, questions.o3,
        questions.objects, questions.k,
        questions.wanted - questions.answered - questions.live AS places
    FROM questions
    WHERE questions.project_id = CAST(:project AS INTEGER) AND questions.is_open = true
      AND EXISTS (SELECT FROM stored) AND (SELECT count(*) FROM place) >= 0
      AND questions.id NOT IN (SELECT claim.question_id FROM claim)
    ORDER BY questions.id LIMIT CAST(:candidates AS INTEGER)
    FOR NO KEY UPDATE OF questions SKIP LOCKED
"""
# The answers stored that want a question from the pool, numbered in the batch's order;
# then, one after another, the question each is given (``picks``: an array, as a recursive
# step reads only the row before): the first candidate with a place left after the earlier
# picks that its participant may be given.
_PICKERS = """
    SELECT row_number() OVER (ORDER BY claim.ord) AS n, claim.ord, claim.participant
    FROM claim JOIN session ON session.session_id = claim.session
    WHERE claim.claim_next AND session.finished_at IS NULL
"""
_ASSIGN = f"""
    SELECT 0 AS n, CAST(ARRAY[] AS BIGINT[]) AS picks
    UNION ALL
    SELECT assign.n + 1, assign.picks || (
        SELECT questions.id FROM candidates AS questions, pickers
        WHERE pickers.n = assign.n + 1
          AND cardinality(array_positions(assign.picks, questions.id)) < questions.places
          AND {not_seen("pickers.participant", "questions.id")}
          AND {views_left("pickers.participant", "questions")}
        ORDER BY questions.id LIMIT 1)
    FROM assign WHERE assign.n < (SELECT count(*) FROM pickers)
"""
_PICKED = """
    SELECT pickers.ord, pickers.participant,
        (SELECT assign.picks FROM assign ORDER BY assign.n DESC LIMIT 1)[pickers.n] AS id
    FROM pickers
"""
_LEASE_BATCH = f"""
    UPDATE questions SET live = questions.live + leasing.n,
        is_open = {places_left(live="leasing.n")}
    FROM (SELECT id, count(*) AS n FROM picked WHERE id IS NOT NULL GROUP BY id) AS leasing
    WHERE questions.id = leasing.id
    RETURNING questions.id
"""


def _shown(question: str, swap: str) -> str:
    """The kind and the objects in the order shown (s1, s2, s3) of ``question`` (with kind,
    o1, o2, o3), from the draw ``swap``: ``app.active.rules.shown_order`` in SQL."""
    return f"""{question}.kind,
    CASE WHEN {question}.kind <> 'triplet' AND {swap} THEN {question}.o2 ELSE {question}.o1 END
        AS s1,
    CASE WHEN {question}.kind = 'triplet' THEN
            CASE WHEN {swap} THEN {question}.o3 ELSE {question}.o2 END
        ELSE CASE WHEN {swap} THEN {question}.o1 ELSE {question}.o2 END END AS s2,
    CASE WHEN {question}.kind = 'triplet' THEN
        CASE WHEN {swap} THEN {question}.o2 ELSE {question}.o3 END END AS s3"""


def _shown_all(question: str, keys: str) -> str:
    """A shaped question's ``objects`` in the order shown (a JSON list; NULL for a triplet
    or a pair), from the sort keys ``keys`` (``NextQuestion.order``: one digit per object):
    ``app.active.rules.shown_order`` in SQL (PostgreSQL)."""
    return f"""(SELECT json_agg(listed.value ORDER BY
            CASE WHEN {question}.kind = 'rank' AND listed.ord = 1 THEN '-'
                 ELSE substr({keys}, CAST(listed.ord AS INTEGER), 1) END)
        FROM json_array_elements({question}.objects) WITH ORDINALITY AS listed(value, ord))"""


_INSERT_QUERY = """
    INSERT INTO queries (project_id, question_id, session_id, participant_id, kind, o1, o2,
        o3, status, is_repeat, token, issued_at, expires_at, objects, k)
"""
_QUERY_BATCH = f"""{_INSERT_QUERY}
    SELECT CAST(:project AS INTEGER), question.id, question.session, question.participant,
        question.kind, COALESCE(CAST(question.shown ->> 0 AS INTEGER), question.s1),
        COALESCE(CAST(question.shown ->> 1 AS INTEGER), question.s2),
        COALESCE(CAST(question.shown ->> 2 AS INTEGER), question.s3), 'issued', false,
        question.issued_token, CAST(:now AS TIMESTAMPTZ), CAST(:expires AS TIMESTAMPTZ),
        question.shown, question.k
    FROM (SELECT candidates.id, {_shown("candidates", "claim.swap")}, claim.session,
            claim.participant, claim.issued_token, candidates.k,
            {_shown_all("candidates", "claim.order_keys")} AS shown
        FROM picked JOIN candidates ON candidates.id = picked.id
        JOIN claim ON claim.ord = picked.ord
        WHERE picked.id IN (SELECT leased.id FROM leased)) AS question
    RETURNING id, session_id, o1, o2, o3, objects, k
"""
_PG_ANSWER_BATCH = f"""
WITH RECURSIVE batch AS ({_BATCH}),
held_all AS ({_HELD_ALL}),
held AS ({_HELD}),
claim AS ({_CLAIM_BATCH}),
answered_questions AS ({_ANSWERED_QUESTIONS}),
place AS ({_PLACE_BATCH}),
first AS ({
    _FIRST.format(
        claim_id="DISTINCT ON (claim.id) claim.id AS claim_id,", participant="claim.participant"
    )
}),
answer AS ({_ANSWER_BATCH}),
stored AS ({_STORE_INTO} {
    _STORE_VALUES.format(
        choice="answer.choice",
        source="answer.source",
        session="answer.session",
        participant="answer.participant",
        client_ms="answer.client_ms",
    )
} RETURNING session_id),
session AS ({_SESSION.format(code_hash="claim.code_hash")}
    FROM claim WHERE sessions.id = claim.session AND EXISTS (SELECT FROM stored)
    {_SESSION_RETURNING}),
counts AS ({_COUNTS.format(client_ms="answer.client_ms")}
    FROM answer WHERE participants.id = answer.participant AND EXISTS (SELECT FROM stored)
    {_COUNTS_RETURNING}),
candidates AS ({_CANDIDATES}),
pickers AS ({_PICKERS}),
assign AS ({_ASSIGN}),
picked AS ({_PICKED}),
leased AS ({_LEASE_BATCH}),
query AS ({_QUERY_BATCH})
SELECT batch.ord, held_all.token_ok, held_all.count_ok, held_all.plan_ok,
    held.ord IS NOT NULL AS taken, claim.id IS NOT NULL AS stored,
    session.answered, session.total, session.finished_at, counts.*,
    query.id AS query_id, query.o1 AS s1, query.o2 AS s2, query.o3 AS s3, candidates.kind,
    candidates.id AS question_id, query.objects AS shown, query.k,
    (SELECT json_agg(json_build_array({_OBJECT_COLUMNS})) FROM objects
     WHERE objects.project_id = CAST(:project AS INTEGER)
       AND objects."index" = ANY(CASE WHEN query.objects IS NULL
            THEN ARRAY[query.o1, query.o2, query.o3]
            ELSE ARRAY(SELECT CAST(listed AS INTEGER)
                       FROM json_array_elements_text(query.objects) AS listed) END))
        AS shown_objects
FROM batch
LEFT JOIN held_all ON held_all.ord = batch.ord
LEFT JOIN held ON held.ord = batch.ord
LEFT JOIN claim ON claim.ord = batch.ord
LEFT JOIN session ON session.session_id = claim.session
LEFT JOIN counts ON counts.id = claim.participant
LEFT JOIN query ON query.session_id = claim.session
LEFT JOIN picked ON picked.ord = batch.ord
LEFT JOIN candidates ON candidates.id = picked.id
ORDER BY batch.ord
"""
ANSWER_BATCH = Statement(_PG_ANSWER_BATCH, "")
BATCH_COLUMNS = tuple(_BATCH_COLUMNS)

# -- SQLite: the same parts, a statement per table written -----------------------------------

HELD = Statement(
    None,
    f"""SELECT sessions.participant_id AS participant, sessions.source,
        sessions.token_hash = :token_hash AS token_ok,
        sessions.answered = :answered AND sessions.finished_at IS NULL AS count_ok,
        sessions.project_id = :project AND {_SAME_PLAN["sqlite"]} AS plan_ok
    FROM sessions JOIN projects ON projects.id = sessions.project_id
    WHERE sessions.id = :session""",
)
CLAIM = Statement(
    *(
        _CLAIM.format(
            source="",
            token="CAST(:token AS VARCHAR)",
            session="CAST(:session AS VARCHAR)",
            running=lease_running("queries"),
            offered=_offered("CAST(:choice AS INTEGER)", "CAST(:picks AS VARCHAR)", dialect),
            carried="",
        )
        for dialect in ("postgresql", "sqlite")
    )
)
PLACE = Statement(f"{_PLACE.format(n='1')} WHERE questions.id = CAST(:question AS BIGINT)")
STORE = Statement(
    None,
    f"""{_STORE_INTO}
WITH claim AS (SELECT id, question_id, kind, o1, o2, o3, objects, is_repeat, issued_at
               FROM queries WHERE id = :query),
first AS ({_FIRST.format(claim_id="", participant=":participant")} LIMIT 1),
answer AS ({
        _ANSWER.format(
            choice=":choice",
            server_ms=_SERVER_MS["sqlite"],
            carried="",
            first_of_claim="true",
            picks=":picks",
        )
    })
{
        _STORE_VALUES.format(
            choice=":choice",
            source=":source",
            session=":session",
            participant=":participant",
            client_ms=":client_ms",
        )
    }
RETURNING id""",
)
SESSION = Statement(
    f"{_SESSION.format(code_hash='CAST(:code_hash AS VARCHAR)')}"
    f" WHERE sessions.id = CAST(:session AS VARCHAR) {_SESSION_RETURNING}"
)
COUNTS = Statement(
    None,
    f"""{_COUNTS.format(client_ms=":client_ms")}
    FROM (SELECT gold_correct, server_ms, position, consistent FROM answers WHERE id = :answer)
        AS answer
    WHERE participants.id = :participant
    {_COUNTS_RETURNING}""",
)

# -- the next question alone (both databases) ------------------------------------------------

# The first question the participant may be given, claimed: on PostgreSQL passing over those
# another statement is claiming now (``is_open = true``, not ``is_open``: SQLite searches an
# index only for a comparison).
OPEN_QUESTION = Statement(
    f"""SELECT questions.id, questions.kind, questions.o1, questions.o2, questions.o3,
        questions.objects, questions.k
    FROM questions
    WHERE questions.project_id = CAST(:project AS INTEGER)
      AND {askable("CAST(:participant AS INTEGER)")}
    ORDER BY questions.id LIMIT 1 FOR NO KEY UPDATE OF questions SKIP LOCKED""",
    f"""SELECT questions.id, questions.kind, questions.o1, questions.o2, questions.o3,
        questions.objects, questions.k
    FROM questions
    WHERE questions.project_id = :project AND {askable(":participant", "sqlite")}
    ORDER BY questions.id LIMIT 1""",
)
LEASE = Statement(
    f"""UPDATE questions SET live = questions.live + 1, is_open = {places_left(live="1")}
    WHERE questions.id = CAST(:question AS BIGINT)"""
)
QUERY = Statement(
    f"""{_INSERT_QUERY}
    VALUES (CAST(:project AS INTEGER), CAST(:question AS BIGINT), CAST(:session AS VARCHAR),
        CAST(:participant AS INTEGER), CAST(:kind AS VARCHAR), CAST(:s1 AS INTEGER),
        CAST(:s2 AS INTEGER), CAST(:s3 AS INTEGER), 'issued', CAST(:is_repeat AS BOOLEAN),
        CAST(:issued_token AS VARCHAR), CAST(:now AS TIMESTAMPTZ),
        CAST(:expires AS TIMESTAMPTZ), CAST(:objects AS JSON), CAST(:k AS SMALLINT))
    RETURNING id"""
)


# A repeat: one of the session's last REPEAT_WINDOW answered questions (not gold) not asked
# again yet, picked by ``:draw``: the candidate at ``draw * count // DRAW_RANGE`` in question
# order, integer arithmetic both databases compute alike. The window is read first, alone,
# through the session's index, newest first (over all the session's queries its cost grew
# with the session: bench/results/repeat_draw.txt).
def _repeat(dialect: str) -> str:
    return f"""WITH recent AS (
        SELECT queries.question_id, queries.o2, queries.o3, queries.objects, queries.is_repeat
        FROM queries
        WHERE queries.session_id = CAST(:session AS VARCHAR) AND queries.status = 'answered'
        ORDER BY queries.id DESC LIMIT {REPEAT_WINDOW}),
    candidates AS (
        SELECT questions.id, questions.kind, questions.o1, questions.o2, questions.o3,
            questions.objects, questions.k, recent.o2 AS shown_o2, recent.o3 AS shown_o3,
            recent.objects AS shown
        FROM recent JOIN questions ON questions.id = recent.question_id
        WHERE NOT recent.is_repeat AND questions.gold_choice IS NULL
          AND NOT EXISTS (SELECT 1 FROM queries AS again
            WHERE again.participant_id = CAST(:participant AS INTEGER)
              AND again.question_id = recent.question_id AND again.is_repeat)
          AND {views_left("CAST(:participant AS INTEGER)", "questions", dialect)})
    SELECT * FROM candidates ORDER BY candidates.id
    LIMIT 1 OFFSET (SELECT CAST(:draw AS BIGINT) * count(*) / {DRAW_RANGE} FROM candidates)"""


REPEAT = Statement(_repeat("postgresql"), _repeat("sqlite"))
OPEN_QUERY = Statement(
    f"""SELECT id, question_id, kind, o1, o2, o3, objects, k, token FROM queries
    WHERE queries.session_id = CAST(:session AS VARCHAR) AND {lease_running("queries")}
    ORDER BY queries.id DESC LIMIT 1"""
)
SHOWN_OBJECTS = Statement(
    f"""SELECT {_OBJECT_COLUMNS} FROM objects
    WHERE objects.project_id = CAST(:project AS INTEGER)
      AND objects."index" IN (CAST(:s1 AS INTEGER), CAST(:s2 AS INTEGER), CAST(:s3 AS INTEGER))"""
)
# The objects a shaped query shows (``:shown``, a JSON list of indices), for its reply.
SHOWN_LISTED = Statement(
    f"""SELECT {_OBJECT_COLUMNS} FROM objects
    WHERE objects.project_id = CAST(:project AS INTEGER)
      AND objects."index" IN (SELECT CAST(listed AS INTEGER)
                              FROM json_array_elements_text(CAST(:shown AS JSON)) AS listed)""",
    f"""SELECT {_OBJECT_COLUMNS} FROM objects
    WHERE objects.project_id = :project
      AND objects."index" IN (SELECT listed.value FROM json_each(:shown) AS listed)""",
)

# -- the pool ---------------------------------------------------------------------------------

QUESTION_FIELDS = (
    "key", "kind", "o1", "o2", "o3", "strategy", "strategy_position", "strategy_ref",
    "gold_choice", "wanted", "objects", "k",
)  # fmt: skip
_NEW_QUESTIONS_INTO = """
    INSERT INTO questions (project_id, key, kind, o1, o2, o3, strategy, strategy_position,
        strategy_ref, gold_choice, wanted, live, answered, is_open, created_at, objects, k)
"""
# A batch of new questions in one statement: ``:rows`` a JSON array of QUESTION_FIELDS rows,
# inserted in order (claims take the lowest id first); a key the project has is passed over.
NEW_QUESTIONS = Statement(
    f"""{_NEW_QUESTIONS_INTO}
    SELECT CAST(:project AS INTEGER), key, kind, o1, o2, o3, strategy, strategy_position,
        CAST(strategy_ref AS JSON), gold_choice, wanted, 0, 0, wanted > 0,
        CAST(:now AS TIMESTAMPTZ), objects, k
    FROM ROWS FROM (json_to_recordset(CAST(:rows AS JSON)) AS (key VARCHAR, kind VARCHAR,
        o1 INTEGER, o2 INTEGER, o3 INTEGER, strategy VARCHAR, strategy_position INTEGER,
        strategy_ref TEXT, gold_choice INTEGER, wanted INTEGER, objects JSON, k SMALLINT))
        WITH ORDINALITY AS batch
    ORDER BY batch.ordinality
    ON CONFLICT (project_id, key) DO NOTHING
    RETURNING key""",
    f"""{_NEW_QUESTIONS_INTO}
    SELECT :project, value ->> 'key', value ->> 'kind', value ->> 'o1', value ->> 'o2',
        value ->> 'o3', value ->> 'strategy', value ->> 'strategy_position',
        value ->> 'strategy_ref', value ->> 'gold_choice', value ->> 'wanted', 0, 0,
        (value ->> 'wanted') > 0, :now, value ->> 'objects', value ->> 'k'
    FROM json_each(:rows) WHERE true ORDER BY json_each.key
    ON CONFLICT (project_id, key) DO NOTHING
    RETURNING key""",
)
# The project's leases that ran out: their places are given back (a repeat never held one).
EXPIRE_LEASES = Statement(
    f"""UPDATE queries SET status = 'expired'
    WHERE queries.project_id = CAST(:project AS INTEGER) AND queries.status = 'issued'
      AND NOT ({lease_running("queries")})
    RETURNING queries.question_id, queries.is_repeat"""
)
FREE_PLACES = Statement(
    f"""UPDATE questions SET live = questions.live - CAST(:n AS INTEGER),
        is_open = {places_left(live="- CAST(:n AS INTEGER)")}
    WHERE questions.id = CAST(:question AS BIGINT)"""
)
