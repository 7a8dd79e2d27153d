"""Crowd workers in threads against real servers, keeping what each answer was acknowledged
with, and the checks that every acknowledged answer is stored exactly once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from app.db.models import Answer, Project, Query, Question, WorkSession


@dataclass
class Worker:
    """One participant: asks, answers, and resends whatever got no response (the server was
    killed or restarting) until it gets one. ``bases()`` says which servers it may use."""

    name: str
    slug: str
    bases: list[str]
    acknowledged: dict[str, int] = field(default_factory=dict)  # token -> choice
    statuses: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    session_id: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    done: bool = False
    turn: int = 0

    def _base(self) -> str:
        self.turn += 1
        return self.bases[self.turn % len(self.bases)]

    def _send(self, method: str, path: str, stop_by: float, **kwargs) -> httpx.Response:  # type: ignore[no-untyped-def]
        """The request, sent again (to the next server) until a response comes back."""
        while True:
            try:
                response = httpx.request(method, self._base() + path, timeout=10, **kwargs)
            except httpx.TransportError:
                self.statuses["no response"] += 1
                if time.monotonic() > stop_by:
                    raise
                time.sleep(0.1)
                continue
            self.statuses[f"{method} {response.status_code}"] += 1
            if response.status_code >= 500:
                self.errors.append(f"{method} {path}: {response.status_code} {response.text}")
            return response

    def run(self, stop: threading.Event, stop_by: float) -> None:
        try:
            self._run(stop, stop_by)
        except Exception as error:  # the test reads it
            self.errors.append(f"{type(error).__name__}: {error}")

    def _run(self, stop: threading.Event, stop_by: float) -> None:
        opened = self._send(
            "POST", f"/api/w/{self.slug}/sessions", stop_by, json={"participant": self.name}
        )
        assert opened.status_code == 201, opened.text
        self.session_id = opened.json()["session_id"]
        self.headers = {"Authorization": f"Bearer {opened.json()['session_token']}"}
        while not stop.is_set():
            got = self._send(
                "GET", f"/api/w/sessions/{self.session_id}/next", stop_by, headers=self.headers
            )
            if got.status_code != 200:
                self.errors.append(f"next: {got.status_code} {got.text}")
                return
            query = got.json().get("query")
            if query is None:
                self.done = True
                return
            choice = query["objects"][1]["index"] if query["kind"] == "triplet" else 0
            sent = self._send(
                "POST",
                f"/api/w/sessions/{self.session_id}/answers",
                stop_by,
                json={"token": query["token"], "choice": choice, "client_ms": 100},
                headers=self.headers,
            )
            if sent.status_code in (200, 201):
                self.acknowledged[query["token"]] = choice
            else:
                self.errors.append(f"answer: {sent.status_code} {sent.text}")
                return


def run_crowd(workers: list[Worker], stop_by: float) -> tuple[threading.Event, list]:
    stop = threading.Event()
    threads = [threading.Thread(target=w.run, args=(stop, stop_by), daemon=True) for w in workers]
    for thread in threads:
        thread.start()
    return stop, threads


def acknowledged(workers: list[Worker]) -> int:
    return sum(len(w.acknowledged) for w in workers)


def check_exactly_once(engine: Engine, slug: str, workers: list[Worker]) -> int:
    """Stored answers are the acknowledged ones, each once; no question over-issued; every
    session's count matches. Returns the number of answers."""
    with Session(engine) as db:
        project_id = db.scalar(select(Project.id).where(Project.slug == slug))
        stored = db.execute(
            select(Query.token, Answer.choice, Query.session_id)
            .join(Answer, Answer.query_id == Query.id)
            .where(Answer.project_id == project_id)
        ).all()
        expected = {t: c for w in workers for t, c in w.acknowledged.items()}
        assert {t: c for t, c, _ in stored} == expected
        assert len(stored) == len(expected)  # no query answered twice
        # No question was given to more participants than it wants, nor answered beyond it.
        over = db.execute(
            select(Question.id, Question.wanted, Question.live, Question.answered)
            .where(Question.project_id == project_id)
            .where(Question.live + Question.answered > Question.wanted)
        ).all()
        assert over == []
        answered = db.execute(
            select(Query.question_id, func.count())
            .join(Answer, Answer.query_id == Query.id)
            .where(Query.project_id == project_id, Query.is_repeat.is_(False))
            .group_by(Query.question_id)
        ).all()
        wanted = dict(
            db.execute(
                select(Question.id, Question.wanted).where(Question.project_id == project_id)
            ).all()
        )
        assert all(n <= wanted[question] for question, n in answered)
        # No participant saw one question twice.
        twice = db.execute(
            select(Query.participant_id, Query.question_id)
            .where(Query.project_id == project_id, Query.is_repeat.is_(False))
            .group_by(Query.participant_id, Query.question_id)
            .having(func.count() > 1)
        ).all()
        assert twice == []
        for worker in workers:  # the session resumed with its token and counted every answer
            work = db.get(WorkSession, worker.session_id)
            assert work.answered == len(worker.acknowledged), worker.name
    return len(stored)
