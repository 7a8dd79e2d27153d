"""The pool's invariants under any sequence of workers' requests (hypothesis, stateful):
participants open sessions, ask for their question, answer it (again, or with another
choice), let leases run out, and the pool is filled, in any order, with the answer's own
statement claiming the next question or not. After every step:

- a participant is never given the same question twice (its one mirrored repeat aside);
- a question's places are never exceeded: its leased and answered counts are what its
  queries say, their sum at most what it wants, and ``is_open`` says whether one is left;
- every acknowledged answer is stored exactly once, with the choice acknowledged;
- a lease that ran out is given back by the next fill, and its question asked again.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import Engine, text, update
from sqlalchemy.orm import Session

from app.config import get_settings
from app.db.models import Query, utcnow
from app.services import pool
from tests.conftest import empty_database
from tests.factories import make_objects, make_project, open_session, set_plan

pytestmark = pytest.mark.slow


def pool_machine(client: TestClient, engine: Engine, headers: dict[str, str]) -> type:
    class PoolMachine(RuleBasedStateMachine):
        sessions = Bundle("sessions")

        def __init__(self) -> None:
            super().__init__()
            self.shown: dict[str, dict] = {}  # session id -> the question it holds
            self.auth: dict[str, dict[str, str]] = {}
            self.acknowledged: dict[str, int] = {}  # token -> choice
            self.expired: set[str] = set()  # tokens whose lease was made to run out

        @initialize()
        def study(self) -> None:
            empty_database(engine)
            with Session(engine) as db:
                from app.services.auth import create_key

                _, secret = create_key(db, "researcher", "machine")
            self.headers = {"Authorization": f"Bearer {secret}"}
            make_project(client, self.headers, "pool")
            make_objects(client, self.headers, "pool", 6)
            strategies = [
                {"kind": "random", "weight": 2, "budget": 12},
                {"kind": "pairs", "weight": 1, "budget": 4},
            ]
            set_plan(client, self.headers, "pool", strategies=strategies, redundancy=2,
                     gold_rate=0.1, repeat_rate=0.3, queries_per_session=8)  # fmt: skip

        @rule(target=sessions, who=st.sampled_from(["p0", "p1", "p2", "p3"]))
        def open(self, who: str) -> str:
            session_id, auth = open_session(client, "pool", participant=who)
            self.auth[session_id] = auth
            return session_id

        @rule(session=sessions)
        def ask(self, session: str) -> None:
            body = client.get(f"/api/w/sessions/{session}/next", headers=self.auth[session])
            assert body.status_code == 200, body.text
            self._hold(session, body.json())

        @rule(session=sessions, choice=st.integers(0, 1), fast=st.booleans())
        def answer(self, session: str, choice: int, fast: bool) -> None:
            query = self.shown.get(session)
            if query is None:
                return
            get_settings().claim_with_answer = fast
            picked = query["objects"][1 + choice]["index"] if query["kind"] == "triplet" else choice
            body = {"token": query["token"], "choice": picked}
            reply = client.post(
                f"/api/w/sessions/{session}/answers", json=body, headers=self.auth[session]
            )
            if query["token"] in self.expired:
                assert reply.status_code in (201, 410), reply.text
            else:
                assert reply.status_code == 201, reply.text
            if reply.status_code == 201:
                self.acknowledged[query["token"]] = picked
                self._hold(session, reply.json()["next"])
            else:
                self.shown.pop(session, None)

        @rule(session=sessions)
        def answer_again_otherwise(self, session: str) -> None:
            answered = [t for t in self.acknowledged if self._session_of(t) == session]
            if not answered:
                return
            token = answered[-1]
            choice = self.acknowledged[token]
            body = {"token": token, "choice": choice}
            path = f"/api/w/sessions/{session}/answers"
            same = client.post(path, json=body, headers=self.auth[session])
            assert same.status_code == 201, same.text

        @rule(session=sessions)
        def lease_runs_out(self, session: str) -> None:
            query = self.shown.pop(session, None)
            if query is None:
                return
            self.expired.add(query["token"])
            with Session(engine) as db:
                past = utcnow() - timedelta(seconds=1)
                db.execute(
                    update(Query).where(Query.token == query["token"]).values(expires_at=past)
                )
                db.commit()

        @rule()
        def fill(self) -> None:
            with Session(engine, expire_on_commit=False) as db:
                project_id = db.execute(text("SELECT id FROM projects")).scalar_one()
                db.rollback()
                pool.fill_alone(db, project_id)
            with engine.connect() as connection:
                unfreed = connection.execute(text(
                    "SELECT count(*) FROM queries WHERE status = 'issued' AND expires_at <= :now"
                ), {"now": utcnow()}).scalar_one()  # fmt: skip
            assert unfreed == 0  # a fill gives back every lease that ran out

        def _hold(self, session: str, body: dict) -> None:
            if body.get("query"):
                self.shown[session] = body["query"]
            else:
                self.shown.pop(session, None)

        def _session_of(self, token: str) -> str | None:
            with engine.connect() as connection:
                found = connection.execute(
                    text("SELECT session_id FROM queries WHERE token = :t"), {"t": token}
                ).first()
            return found[0] if found else None

        @invariant()
        def never_twice_to_a_participant(self) -> None:
            with engine.connect() as connection:
                twice = connection.execute(text(
                    "SELECT participant_id, question_id, is_repeat FROM queries "
                    "GROUP BY participant_id, question_id, is_repeat HAVING count(*) > 1"
                )).all()  # fmt: skip
            assert twice == []

        @invariant()
        def places_are_never_exceeded(self) -> None:
            with engine.connect() as connection:
                rows = connection.execute(text(
                    "SELECT q.id, q.wanted, q.live, q.answered, q.is_open, "
                    "(SELECT count(*) FROM queries WHERE question_id = q.id AND NOT is_repeat "
                    " AND status = 'issued') AS leased, "
                    "(SELECT count(*) FROM queries WHERE question_id = q.id AND NOT is_repeat "
                    " AND status = 'answered') AS done FROM questions q"
                )).all()  # fmt: skip
            for row in rows:
                assert (row.live, row.answered) == (row.leased, row.done), row
                assert row.live + row.answered <= row.wanted, row
                assert bool(row.is_open) == (row.live + row.answered < row.wanted), row

        @invariant()
        def acknowledged_answers_are_stored_once(self) -> None:
            with engine.connect() as connection:
                stored = connection.execute(text(
                    "SELECT queries.token, answers.choice FROM answers "
                    "JOIN queries ON queries.id = answers.query_id"
                )).all()  # fmt: skip
            tokens = [token for token, _ in stored]
            assert len(tokens) == len(set(tokens))
            assert dict(stored) == self.acknowledged

        def teardown(self) -> None:
            get_settings().claim_with_answer = True

    return PoolMachine


def test_pool_invariants(client: TestClient, engine: Engine, auth_headers, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(get_settings(), "fill_ahead", False)  # fills only where the steps say
    machine = pool_machine(client, engine, auth_headers)
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=12,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
