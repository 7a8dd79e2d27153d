"""The worker API: sessions, issuance rules, answers exactly once, completion."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from app.db.models import Answer, Query, utcnow
from tests.factories import (
    answer,
    answer_all,
    first_choice,
    make_objects,
    make_project,
    next_query,
    open_session,
    set_plan,
)


@pytest.fixture
def project(client, auth_headers):
    project = make_project(client, auth_headers, "crowd", instructions="Be quick.")
    make_objects(client, auth_headers, "crowd", 8)
    set_plan(client, auth_headers, "crowd")
    return project


def stored_answers(db) -> int:
    return db.scalar(select(func.count()).select_from(Answer))


def test_public_project_info(client, project):
    body = client.get("/api/w/crowd").json()
    assert body["instructions"] == "Be quick."
    assert body["accepting"] is True
    assert client.get("/api/w/none").status_code == 404


def test_session_gives_the_same_open_query_until_answered(client, project):
    session_id, headers = open_session(client, "crowd")
    first = next_query(client, session_id, headers)["query"]
    again = next_query(client, session_id, headers)["query"]
    assert first == again
    assert first["kind"] == "triplet"
    assert len(first["objects"]) == 3
    assert set(first["objects"][0]) == {"index", "name", "text", "image_url"}
    assert (first["position"], first["total"]) == (1, 5)


def test_a_full_session_ends_with_a_stable_completion_code(client, project, db):
    session_id, headers = open_session(client, "crowd")
    answered = answer_all(client, session_id, headers)
    assert len(answered) == 5
    assert stored_answers(db) == 5
    done = next_query(client, session_id, headers)
    assert done["done"] is True
    code = done["completion_code"]
    assert code and len(code) == 10
    # A reload resumes the session and shows the same code.
    session_again, headers_again = open_session(client, "crowd")
    assert session_again == session_id
    assert next_query(client, session_again, headers_again)["completion_code"] == code
    # Another participant gets another code.
    other_id, other_headers = open_session(client, "crowd", participant="p2")
    answer_all(client, other_id, other_headers)
    assert next_query(client, other_id, other_headers)["completion_code"] != code


def test_completion_code_is_stored_hashed(client, project, db):
    from app.db.models import WorkSession

    session_id, headers = open_session(client, "crowd")
    answer_all(client, session_id, headers)
    code = next_query(client, session_id, headers)["completion_code"]
    stored = db.get(WorkSession, session_id)
    assert stored.completion_code_hash and code not in stored.completion_code_hash


def test_redirect_url_gets_the_code(client, auth_headers, project):
    set_plan(
        client, auth_headers, "crowd",
        completion={"redirect_url": "https://app.prolific.com/submissions/complete?cc={code}"},
    )  # fmt: skip
    session_id, headers = open_session(
        client, "crowd", PROLIFIC_PID="abc", STUDY_ID="s", SESSION_ID="x"
    )
    answer_all(client, session_id, headers)
    done = next_query(client, session_id, headers)
    assert (
        done["redirect_url"]
        == f"https://app.prolific.com/submissions/complete?cc={done['completion_code']}"
    )


def test_same_platform_id_resumes_with_a_new_token(client, project):
    first_id, first_headers = open_session(client, "crowd", PROLIFIC_PID="w1", STUDY_ID="s")
    query = next_query(client, first_id, first_headers)["query"]
    second_id, second_headers = open_session(client, "crowd", PROLIFIC_PID="w1", STUDY_ID="s")
    assert second_id == first_id
    assert next_query(client, second_id, second_headers)["query"] == query
    # The old token no longer works.
    assert client.get(f"/api/w/sessions/{first_id}/next", headers=first_headers).status_code == 401


def test_mturk_preview_issues_nothing(client, project, db):
    response = client.post(
        "/api/w/crowd/sessions",
        json={"workerId": "A1", "assignmentId": "ASSIGNMENT_ID_NOT_AVAILABLE", "hitId": "H"},
    )
    assert response.status_code == 422
    assert "preview" in response.json()["detail"]
    assert db.scalar(select(func.count()).select_from(Query)) == 0


def test_mturk_submit_target_is_checked_and_returned(client, project):
    bad = client.post(
        "/api/w/crowd/sessions",
        json={
            "workerId": "A1",
            "assignmentId": "X",
            "hitId": "H",
            "turkSubmitTo": "https://evil.example",
        },
    )
    assert bad.status_code == 422
    session_id, headers = open_session(
        client, "crowd", workerId="A1", assignmentId="X", hitId="H",
        turkSubmitTo="https://workersandbox.mturk.com",
    )  # fmt: skip
    answer_all(client, session_id, headers)
    done = next_query(client, session_id, headers)
    assert done["mturk_submit"] == {
        "url": "https://workersandbox.mturk.com/mturk/externalSubmit",
        "assignmentId": "X",
    }


def test_resending_the_same_answer_stores_it_once(client, project, db):
    session_id, headers = open_session(client, "crowd")
    query = next_query(client, session_id, headers)["query"]
    choice = first_choice(query)
    first = answer(client, session_id, headers, query["token"], choice)
    second = answer(client, session_id, headers, query["token"], choice)
    assert first.status_code == second.status_code == 201
    assert first.json() == second.json()
    body = first.json()
    assert (body["answered"], body["total"], body["done"]) == (1, 5, False)
    # The reply carries the next question, the one GET …/next now gives, not yet answered.
    assert body["next"]["query"]["token"] != query["token"]
    assert body["next"] == next_query(client, session_id, headers)
    assert body["next"]["query"]["position"] == 2
    assert stored_answers(db) == 1


def test_the_last_answer_carries_the_end_of_the_session(client, project, db):
    session_id, headers = open_session(client, "crowd")
    body = next_query(client, session_id, headers)
    for _ in range(5):
        query = body["query"]
        response = answer(client, session_id, headers, query["token"], first_choice(query))
        assert response.status_code == 201, response.text
        body = response.json()["next"]
    assert response.json()["done"] is True and body["done"] is True
    assert body["completion_code"] == next_query(client, session_id, headers)["completion_code"]
    assert stored_answers(db) == 5


def test_different_choice_for_an_answered_token_is_409(client, project, db):
    session_id, headers = open_session(client, "crowd")
    query = next_query(client, session_id, headers)["query"]
    answer(client, session_id, headers, query["token"], query["objects"][1]["index"])
    response = answer(client, session_id, headers, query["token"], query["objects"][2]["index"])
    assert response.status_code == 409
    assert stored_answers(db) == 1


def test_answer_errors(client, project, db):
    session_id, headers = open_session(client, "crowd")
    other_id, other_headers = open_session(client, "crowd", participant="p2")
    query = next_query(client, session_id, headers)["query"]
    shown = {o["index"] for o in query["objects"][1:]}
    outsider = next(i for i in range(8) if i not in shown and i != query["objects"][0]["index"])

    unknown = answer(client, session_id, headers, "no-such-token", 0)
    assert unknown.status_code == 404 and "unknown" in unknown.json()["detail"]
    for malformed in ("0.\x00x", "0.a b", "0.é"):  # no token has these characters
        refused = answer(client, session_id, headers, malformed, 0)
        assert refused.status_code == 422, refused.text
        assert "token" in refused.json()["detail"]
    foreign = answer(client, other_id, other_headers, query["token"], first_choice(query))
    assert foreign.status_code == 403 and "another session" in foreign.json()["detail"]
    not_shown = answer(client, session_id, headers, query["token"], outsider)
    assert (
        not_shown.status_code == 422 and "not one of the candidates" in not_shown.json()["detail"]
    )
    anchor = answer(client, session_id, headers, query["token"], query["objects"][0]["index"])
    assert anchor.status_code == 422
    wrong_key = client.post(
        f"/api/w/sessions/{session_id}/answers",
        json={"token": query["token"], "choice": first_choice(query)},
        headers=other_headers,
    )
    assert wrong_key.status_code == 401
    bad_ms = answer(client, session_id, headers, query["token"], first_choice(query), ms=-5)
    assert bad_ms.status_code == 422
    no_session = client.get("/api/w/sessions/nope/next", headers=headers)
    assert no_session.status_code == 404
    assert stored_answers(db) == 0


def test_expired_lease_is_refused_and_reissued_to_someone_else(client, auth_headers, db):
    # A budget of 6 questions: the plan runs dry, and the question whose lease ran out is
    # what is left to ask once the pool's others are answered.
    make_project(client, auth_headers, "crowd")
    make_objects(client, auth_headers, "crowd", 8)
    strategies = [{"kind": "random", "weight": 1, "budget": 6}]
    set_plan(client, auth_headers, "crowd", strategies=strategies, queries_per_session=10)
    session_id, headers = open_session(client, "crowd")
    query = next_query(client, session_id, headers)["query"]
    db.execute(update(Query).values(expires_at=utcnow() - timedelta(seconds=1)))
    db.commit()
    late = answer(client, session_id, headers, query["token"], first_choice(query))
    assert late.status_code == 410
    assert "expired" in late.json()["detail"]
    other_id, other_headers = open_session(client, "crowd", participant="p2")
    asked = []
    body = next_query(client, other_id, other_headers)
    while not body.get("done"):
        asked.append(body["query"])
        reply = answer(client, other_id, other_headers, body["query"]["token"],
                       first_choice(body["query"]))  # fmt: skip
        body = reply.json()["next"]
    assert len(asked) == 6  # the budget, the expired question included
    reissued = [q for q in asked if question_key(q) == question_key(query)]
    assert len(reissued) == 1
    assert reissued[0]["objects"][0] == query["objects"][0]
    assert reissued[0]["token"] != query["token"]
    assert stored_answers(db) == 6


def question_key(query: dict) -> tuple:
    indices = [o["index"] for o in query["objects"]]
    if query["kind"] == "triplet":
        return ("t", indices[0], *sorted(indices[1:]))
    return ("p", *sorted(indices))


def test_a_participant_never_gets_the_same_question_twice(client, auth_headers, project):
    # 4 objects have only 12 distinct triplet questions: ask for all of them, twice over.
    make_project(client, auth_headers, "tiny")
    make_objects(client, auth_headers, "tiny", 4)
    set_plan(client, auth_headers, "tiny", queries_per_session=24, redundancy=3)
    session_id, headers = open_session(client, "tiny")
    answered = answer_all(client, session_id, headers)
    keys = [question_key(q) for q in answered]
    assert len(keys) == len(set(keys)) == 12


def test_redundancy_asks_each_question_of_distinct_participants(client, auth_headers, project, db):
    set_plan(client, auth_headers, "crowd", redundancy=3, queries_per_session=4)
    seen = []
    for worker in ("a", "b", "c"):
        session_id, headers = open_session(client, "crowd", participant=worker)
        seen.append([question_key(q) for q in answer_all(client, session_id, headers)])
    # Everyone answered the same four questions (the open ones first), each of them once.
    assert seen[0] == seen[1] == seen[2]
    assert all(len(set(keys)) == 4 for keys in seen)


def test_budgets_stop_a_strategy_and_an_exhausted_plan_ends_politely(client, auth_headers, project):
    set_plan(
        client, auth_headers, "crowd",
        strategies=[{"kind": "random", "weight": 1, "budget": 3}], queries_per_session=10,
    )  # fmt: skip
    session_id, headers = open_session(client, "crowd")
    assert len(answer_all(client, session_id, headers)) == 3
    done = next_query(client, session_id, headers)
    assert done["done"] is True
    assert "collected all the answers" in done["message"]
    assert done["completion_code"]
    late_id, late_headers = open_session(client, "crowd", participant="late")
    late = next_query(client, late_id, late_headers)
    assert late["done"] is True and late["completion_code"] is None


def test_pairs_record_outcomes(client, auth_headers, project):
    set_plan(client, auth_headers, "crowd", strategies=[{"kind": "pairs", "weight": 1}])
    session_id, headers = open_session(client, "crowd")
    query = next_query(client, session_id, headers)["query"]
    assert query["kind"] == "pair" and len(query["objects"]) == 2
    assert answer(client, session_id, headers, query["token"], 2).status_code == 422
    assert answer(client, session_id, headers, query["token"], -1).status_code == 201
    exported = client.get("/api/projects/crowd/answers", headers=auth_headers).json()
    assert exported[0]["kind"] == "pair"
    assert [exported[0]["a"], exported[0]["b"], exported[0]["outcome"]] == [
        query["objects"][0]["index"], query["objects"][1]["index"], -1,
    ]  # fmt: skip
    assert exported[0]["source"] == "crowd"
    assert exported[0]["server_ms"] >= 0 and exported[0]["client_ms"] == 900


def test_triplet_answers_are_stored_normalised(client, auth_headers, project):
    session_id, headers = open_session(client, "crowd")
    query = next_query(client, session_id, headers)["query"]
    anchor, left, right = (o["index"] for o in query["objects"])
    answer(client, session_id, headers, query["token"], right)
    row = client.get("/api/projects/crowd/answers", headers=auth_headers).json()[0]
    assert (row["a"], row["b"], row["c"], row["position"]) == (anchor, right, left, 1)


def test_a_project_without_plan_is_not_accepting(client, auth_headers):
    make_project(client, auth_headers, "idle")
    make_objects(client, auth_headers, "idle", 3)
    assert client.get("/api/w/idle").json()["accepting"] is False
    session_id, headers = open_session(client, "idle")
    body = next_query(client, session_id, headers)
    # Not the end: the study may start collecting; the page asks again later.
    assert body["done"] is False and body["wait"] is True and body["retry_after"] > 0
    assert body["query"] is None and body["completion_code"] is None
