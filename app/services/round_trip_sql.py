"""The worker round trip on PostgreSQL in few statements: one per step, each a CTE.

A round trip (an answer whose reply carries the next question) holds the project's row
from its first statement to its commit, so every worker of a project waits behind it: on
PostgreSQL each statement is a network round trip made while the row is held. The usual
case is therefore three statements between ``BEGIN`` and ``COMMIT``:

1. lock and read the session and its project (``sessions._SESSION_IN_PROJECT_HELD``). It
   stays a statement of its own: under READ COMMITTED a statement reads the snapshot taken
   when it started, so what follows the lock must start after the lock is granted, or it
   would read rows as they were before the previous holder committed (a question another
   worker just took would look open);
2. :data:`ANSWER`: claim the question, count its place, store the answer, count it on the
   session (finishing it) and on the participant, and read the first open question this
   participant has not seen;
3. :data:`ISSUE_NEW` (or :data:`ISSUE_EXISTING`): create the question the plan proposed,
   save the plan's progress, issue the query and read the objects shown.

Data-modifying CTEs run on one snapshot and do not see each other's changes, only what
they return; each below reads what it depends on from the ``RETURNING`` of the one before,
and the reads of other rows (the question's facts, a repeat's first answer, the open
question) are of rows these statements do not change in a way that matters (answering
moves a place from leased to answered: a question's ``is_open`` stays as it was).
SQLite has ``RETURNING`` but no data-modifying CTEs: it runs the same steps as separate
statements (in-process calls, not network round trips). The SQL is text, built once;
psycopg prepares a statement on the server after its fifth run on a connection.
Parameters are cast where PostgreSQL could not infer their type (``NULL`` in a ``SELECT``
list would be text).
"""

from __future__ import annotations

from sqlalchemy import text

# Parameters: token, session, now, choice, project, participant, source, client_ms, min_ms,
# code_hash (the session's completion code hash, stored if this answer finishes it).
ANSWER = text("""
WITH claim AS (
    UPDATE queries SET status = 'answered', answered_at = CAST(:now AS TIMESTAMPTZ)
    WHERE token = CAST(:token AS VARCHAR) AND session_id = CAST(:session AS VARCHAR)
      AND status = 'issued' AND expires_at > CAST(:now AS TIMESTAMPTZ)
      AND ((kind = 'triplet' AND (o2 = CAST(:choice AS INTEGER) OR o3 = CAST(:choice AS INTEGER)))
           OR (kind <> 'triplet' AND CAST(:choice AS INTEGER) IN (-1, 0, 1)))
    RETURNING id, question_id, kind, o1, o2, o3, is_repeat, issued_at
),
place AS (
    -- from leased to answered; a repeat never held a place (see issuance.count_places)
    UPDATE questions SET live = questions.live - 1, answered = questions.answered + 1,
        is_open = questions.answered + questions.live < questions.wanted
    FROM claim WHERE questions.id = claim.question_id AND NOT claim.is_repeat
),
first AS (
    -- a repeat: the session's first answer to the same question
    SELECT answers.a, answers.b, answers.outcome
    FROM answers
    JOIN queries ON queries.id = answers.query_id
    JOIN claim ON claim.is_repeat AND queries.question_id = claim.question_id
    WHERE queries.session_id = CAST(:session AS VARCHAR) AND NOT queries.is_repeat
    LIMIT 1
),
answer AS (
    -- responses._answer_values, and _agrees_with_first_answer for a repeat
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
        CAST(EXTRACT(EPOCH FROM CAST(:now AS TIMESTAMPTZ) - claim.issued_at) * 1000
             AS DOUBLE PRECISION) AS server_ms
    FROM claim
    JOIN questions ON questions.id = claim.question_id
    LEFT JOIN first ON true
),
stored AS (
    INSERT INTO answers (project_id, query_id, kind, a, b, c, outcome, position, choice,
        source, strategy, gold_correct, consistent, session_id, participant_id, server_ms,
        client_ms, created_at)
    SELECT CAST(:project AS INTEGER), query_id, kind, a, b, c, outcome, position,
        CAST(:choice AS INTEGER), CAST(:source AS VARCHAR), strategy, gold_correct,
        consistent, CAST(:session AS VARCHAR), CAST(:participant AS INTEGER), server_ms,
        CAST(:client_ms AS DOUBLE PRECISION), CAST(:now AS TIMESTAMPTZ)
    FROM answer
    RETURNING id
),
session AS (
    UPDATE sessions SET answered = sessions.answered + 1,
        finished_at = CASE
            WHEN sessions.finished_at IS NULL AND sessions.answered + 1 >= sessions.total
            THEN CAST(:now AS TIMESTAMPTZ) ELSE sessions.finished_at END,
        completion_code_hash = CASE
            WHEN sessions.finished_at IS NULL AND sessions.answered + 1 >= sessions.total
            THEN CAST(:code_hash AS VARCHAR) ELSE sessions.completion_code_hash END
    FROM stored WHERE sessions.id = CAST(:session AS VARCHAR)
    RETURNING sessions.answered, sessions.finished_at, sessions.completion_code_hash
),
counts AS (
    -- quality.count_answer
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
    FROM answer, stored
    WHERE participants.id = CAST(:participant AS INTEGER)
    RETURNING participants.id, participants.flagged, participants.flag_reason,
        participants.flag_manual, participants.n_answers, participants.gold_answers,
        participants.gold_correct, participants.fast_answers, participants.left_answers,
        participants.sided_answers, participants.repeats, participants.consistent_repeats
)
SELECT session.answered AS session_answered, session.finished_at AS session_finished_at,
    session.completion_code_hash AS session_code_hash, counts.*,
    open.id AS q_id, open.project_id AS q_project_id, open.key AS q_key,
    open.kind AS q_kind, open.o1 AS q_o1, open.o2 AS q_o2, open.o3 AS q_o3,
    open.strategy AS q_strategy, open.strategy_position AS q_strategy_position,
    open.strategy_ref AS q_strategy_ref, open.gold_choice AS q_gold_choice,
    open.wanted AS q_wanted, open.live AS q_live, open.answered AS q_answered,
    open.is_open AS q_is_open, open.created_at AS q_created_at
FROM session CROSS JOIN counts
LEFT JOIN LATERAL (
    -- issuance._OPEN_QUESTION: still wanted, and not seen by this participant
    SELECT * FROM questions
    WHERE questions.project_id = CAST(:project AS INTEGER) AND questions.is_open
      AND NOT EXISTS (
        SELECT 1 FROM queries
        WHERE queries.participant_id = CAST(:participant AS INTEGER)
          AND queries.question_id = questions.id)
    ORDER BY questions.id LIMIT 1
) AS open ON true
""")

_ISSUE_QUERY = """
query AS (
    INSERT INTO queries (project_id, question_id, session_id, participant_id, kind, o1, o2,
        o3, status, is_repeat, token, issued_at, expires_at)
    SELECT CAST(:project AS INTEGER), question.id, CAST(:session AS VARCHAR),
        CAST(:participant AS INTEGER), CAST(:kind AS VARCHAR), CAST(:s1 AS INTEGER),
        CAST(:s2 AS INTEGER), CAST(:s3 AS INTEGER), 'issued', false,
        CAST(:token AS VARCHAR), CAST(:now AS TIMESTAMPTZ), CAST(:expires AS TIMESTAMPTZ)
    FROM question
    RETURNING id, question_id
)
SELECT query.id AS query_id, query.question_id, objects.index, objects.name, objects.text,
    objects.image_url
FROM query
LEFT JOIN objects ON objects.project_id = CAST(:project AS INTEGER)
    AND objects.index = ANY(CAST(:shown AS INTEGER[]))
"""

# A new question (issuance._create_question, its first place taken), the plan's progress
# (issuance._SAVE_PLAN_PROGRESS) and its query; no row if the project has the key already.
ISSUE_NEW = text(
    """
WITH question AS (
    INSERT INTO questions (project_id, key, kind, o1, o2, o3, strategy, strategy_position,
        strategy_ref, gold_choice, wanted, live, answered, is_open, created_at)
    VALUES (CAST(:project AS INTEGER), CAST(:key AS VARCHAR), CAST(:kind AS VARCHAR),
        CAST(:o1 AS INTEGER), CAST(:o2 AS INTEGER), CAST(:o3 AS INTEGER),
        CAST(:strategy AS VARCHAR), CAST(:strategy_position AS INTEGER),
        CAST(:strategy_ref AS JSON), CAST(:gold_choice AS INTEGER), CAST(:wanted AS INTEGER),
        1, 0, CAST(:wanted AS INTEGER) > 1, CAST(:now AS TIMESTAMPTZ))
    ON CONFLICT (project_id, key) DO NOTHING
    RETURNING id
),
progress AS (
    UPDATE projects SET plan_state = CAST(:state AS JSON), plan_step = CAST(:step AS INTEGER),
        updated_at = CAST(:now AS TIMESTAMPTZ)
    WHERE id = CAST(:project AS INTEGER)
),
"""
    + _ISSUE_QUERY
)

# An existing question, one more of its places leased (issuance.count_places), and its query.
ISSUE_EXISTING = text(
    """
WITH question AS (
    UPDATE questions SET live = live + 1, is_open = answered + live + 1 < wanted
    WHERE id = CAST(:question AS BIGINT)
    RETURNING id
),
"""
    + _ISSUE_QUERY
)
