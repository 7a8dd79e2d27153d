"""What a worker's round trip stores, checked row by row against the rules, on both
databases: the answer and the next question are written by SQL that computes what the rules
say (app/services/round_trip_sql.py), each step in one statement on PostgreSQL and in one
per table on SQLite."""

from __future__ import annotations

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import Answer, Participant, Project, Query, Question, WorkSession
from app.services import pool
from app.services.sessions import completion_code, completion_code_hash
from tests.factories import make_objects, make_project, next_query, open_session, set_plan


def _answer_everything(client, slug: str, names: tuple[str, ...], seed: int) -> int:  # type: ignore[no-untyped-def]
    """Each participant answers until done, with random (valid) choices and response times,
    some not sent; returns the number of answers."""
    rng = np.random.default_rng(seed)
    n = 0
    for name in names:
        session_id, headers = open_session(client, slug, participant=name)
        body = next_query(client, session_id, headers)
        while not body.get("done"):
            query = body["query"]
            if query["kind"] == "triplet":
                choice = query["objects"][int(rng.integers(1, 3))]["index"]
            else:
                choice = int(rng.integers(-1, 2))
            ms = [None, 120.0, 900.0][int(rng.integers(3))]
            response = client.post(
                f"/api/w/sessions/{session_id}/answers",
                json={"token": query["token"], "choice": choice, "client_ms": ms},
                headers=headers,
            )
            assert response.status_code == 201, response.text
            body = response.json()["next"]
            n += 1
    return n


def test_round_trip_rows_follow_the_rules(client, auth_headers, db: Session) -> None:
    check_round_trip_rows(client, auth_headers, db, "rows")


def check_round_trip_rows(
    client, headers: dict[str, str], db: Session, slug: str, answering=None
) -> None:  # type: ignore[no-untyped-def]
    """Three participants answer a project ``slug`` (made here) to the end; every row their
    round trips wrote is checked against the rules. ``answering``: how they answer
    (``_answer_everything``'s arguments and result), one after another by default."""
    make_project(client, headers, slug)
    make_objects(client, headers, slug, 10)
    set_plan(
        client, headers, slug,
        strategies=[{"kind": "random", "weight": 1}, {"kind": "pairs", "weight": 1}],
        queries_per_session=30, redundancy=2, gold_rate=0.2, repeat_rate=0.4, min_answer_ms=500,
    )  # fmt: skip
    n = (answering or _answer_everything)(client, slug, ("ann", "bob", "cy"), seed=3)

    rows = db.execute(
        select(Answer, Query, Question)
        .join(Query, Query.id == Answer.query_id)
        .join(Question, Question.id == Query.question_id)
        .join(Project, Project.id == Answer.project_id)
        .where(Project.slug == slug)
        .order_by(Answer.id)
    ).all()
    assert len(rows) == n
    first = {}  # (session, question) -> the answer to its first (not repeated) asking
    for stored, query, question in rows:
        if not query.is_repeat:
            first[(query.session_id, question.id)] = stored
    seen = {"pair": 0, "triplet": 0, "gold": 0, "consistent": 0, "inconsistent": 0}
    for stored, query, question in rows:
        choice = stored.choice
        if query.kind == "triplet":
            assert choice in (query.o2, query.o3)
            other = query.o3 if choice == query.o2 else query.o2
            expected = (query.o1, choice, other, None, -1 if choice == query.o2 else 1)
        else:
            expected = (query.o1, query.o2, None, choice, choice)
        assert (stored.a, stored.b, stored.c, stored.outcome, stored.position) == expected
        assert stored.kind == query.kind == question.kind
        assert stored.strategy == question.strategy
        assert stored.session_id == query.session_id
        assert stored.participant_id == query.participant_id
        assert stored.source == "crowd"
        gold = None if question.gold_choice is None else choice == question.gold_choice
        assert stored.gold_correct is gold
        consistent = None
        if query.is_repeat:
            before = first[(query.session_id, question.id)]
            if query.kind == "triplet":
                consistent = before.b == stored.b
            else:
                verdict = before.outcome if before.a == stored.a else -before.outcome
                consistent = verdict == stored.outcome
            seen["consistent" if consistent else "inconsistent"] += 1
        assert stored.consistent is consistent
        waited = (stored.created_at - query.issued_at).total_seconds() * 1000
        assert abs(stored.server_ms - waited) < 1e-3 and stored.server_ms >= 0  # exact to the µs
        assert query.status == "answered" and query.answered_at == stored.created_at
        seen[query.kind] += 1
        seen["gold"] += gold is not None
    # The run went through every case it checks.
    assert all(seen.values()), seen

    # Questions: each answered place counted, no lease left, open while places are wanted.
    for question in {r.Question.id: r.Question for r in rows}.values():
        db.refresh(question)
        firsts = [r for r in rows if r.Question.id == question.id and not r.Query.is_repeat]
        assert (question.answered, question.live) == (len(firsts), 0)
        assert question.is_open is (question.answered < question.wanted)
        assert len({r.Query.participant_id for r in firsts}) == len(firsts)  # distinct people

    # Sessions: counted and finished with their completion code; participants' counters.
    for session_id in {r.Query.session_id for r in rows}:
        work = db.get(WorkSession, session_id)
        assert work is not None
        db.refresh(work)
        mine = [r.Answer for r in rows if r.Query.session_id == session_id]
        assert work.answered == len(mine) == work.total
        assert work.finished_at is not None
        assert work.completion_code_hash == completion_code_hash(completion_code(work.id))
        participant = db.get(Participant, work.participant_id)
        assert participant is not None
        db.refresh(participant)
        elapsed = [a.client_ms if a.client_ms is not None else a.server_ms for a in mine]
        assert participant.n_answers == len(mine)
        assert participant.gold_answers == sum(a.gold_correct is not None for a in mine)
        assert participant.gold_correct == sum(a.gold_correct is True for a in mine)
        assert participant.fast_answers == sum(e < 500 for e in elapsed)
        assert participant.left_answers == sum(a.position == -1 for a in mine)
        assert participant.sided_answers == sum(a.position in (-1, 1) for a in mine)
        assert participant.repeats == sum(a.consistent is not None for a in mine)
        assert participant.consistent_repeats == sum(a.consistent is True for a in mine)


def test_a_fill_creates_its_batch_in_order_and_passes_over_known_keys(db: Session) -> None:
    """pool.new_questions: one statement for the batch, its rows in the batch's
    order, open with no place taken; a key the project has, or that the batch named
    before, is not created again."""
    project = Project(slug="batch", name="batch", n_objects=10)
    db.add(project)
    db.commit()

    def row(key: str, o1: int, gold: int | None = None, wanted: int = 2) -> dict:
        return {
            "key": key, "kind": "triplet", "o1": o1, "o2": o1 + 1, "o3": o1 + 2,
            "strategy": "random", "strategy_position": 0, "strategy_ref": "null",
            "gold_choice": gold, "wanted": wanted,
        }  # fmt: skip

    assert pool.new_questions(db, project.id, [row("a", 0)]) == {"a"}
    batch = [row("c", 3), row("a", 5), row("b", 1, gold=2), row("c", 7), row("d", 4, wanted=0)]
    assert pool.new_questions(db, project.id, batch) == {"b", "c", "d"}
    stored = db.scalars(
        select(Question).where(Question.project_id == project.id).order_by(Question.id)
    ).all()
    assert [(q.key, q.o1) for q in stored] == [("a", 0), ("c", 3), ("b", 1), ("d", 4)]
    assert [q.gold_choice for q in stored] == [None, None, 2, None]
    assert [(q.live, q.answered, q.wanted, q.is_open) for q in stored] == [
        (0, 0, 2, True), (0, 0, 2, True), (0, 0, 2, True), (0, 0, 0, False),
    ]  # fmt: skip
    assert all(q.strategy_ref is None and q.kind == "triplet" for q in stored)
    assert len({q.created_at for q in stored[1:]}) == 1  # one statement, one time
