"""Worker sessions cannot be taken over by name, and the worker API is rate-limited."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.api.deps import get_db
from app.api.ratelimit import TokenBuckets
from app.config import get_settings
from app.main import create_app
from tests.factories import (
    answer_all,
    first_choice,
    make_objects,
    make_project,
    next_query,
    set_plan,
)


@pytest.fixture
def project(client, admin_headers):
    make_project(client, admin_headers, "crowd")
    make_objects(client, admin_headers, "crowd", 8)
    set_plan(client, admin_headers, "crowd", queries_per_session=6)
    return "crowd"


def opened(client, **params) -> tuple[str, dict[str, str]]:
    response = client.post("/api/w/crowd/sessions", json=params)
    assert response.status_code == 201, response.text
    body = response.json()
    return body["session_id"], {"Authorization": f"Bearer {body['session_token']}"}


def works(client, session_id, headers) -> bool:
    response = client.get(f"/api/w/sessions/{session_id}/next", headers=headers)
    assert response.status_code in (200, 401), response.text
    return response.status_code == 200


SECRET_A = "a" * 32
SECRET_B = "b" * 32


def test_a_participant_id_alone_does_not_take_over_a_session(client, project):
    alice, alice_headers = opened(client, participant="alice", resume_secret=SECRET_A)
    question = next_query(client, alice, alice_headers)["query"]
    stranger, stranger_headers = opened(client, participant="alice")
    other, other_headers = opened(client, participant="alice", resume_secret=SECRET_B)
    assert len({alice, stranger, other}) == 3
    # Alice's tab goes on with her question; the others have sessions of their own.
    assert works(client, alice, alice_headers)
    assert next_query(client, alice, alice_headers)["query"] == question
    assert works(client, stranger, stranger_headers) and works(client, other, other_headers)
    # Her own browser (the same secret) resumes her session, with a new token.
    again, again_headers = opened(client, participant="alice", resume_secret=SECRET_A)
    assert again == alice
    assert next_query(client, again, again_headers)["query"] == question
    assert not works(client, alice, alice_headers)


def test_mturk_resumes_by_assignment_from_any_browser_but_not_by_worker_id(client, project):
    submit = "https://workersandbox.mturk.com"
    first, _ = opened(client, workerId="W1", assignmentId="A1", hitId="H", turkSubmitTo=submit)
    elsewhere, _ = opened(
        client, workerId="W1", assignmentId="A1", hitId="H", resume_secret=SECRET_B
    )
    assert elsewhere == first
    forged, forged_headers = opened(
        client, workerId="W1", assignmentId="FORGED", hitId="H", turkSubmitTo=submit
    )
    assert forged != first
    assert works(client, forged, forged_headers)


def test_each_mturk_assignment_submits_its_own_assignment_id(client, project):
    submit = "https://workersandbox.mturk.com"
    mturk = {"workerId": "W2", "hitId": "H", "turkSubmitTo": submit}
    first, first_headers = opened(client, **mturk, assignmentId="A1")
    answer_all(client, first, first_headers)
    second, second_headers = opened(client, **mturk, assignmentId="A2")
    assert second != first
    answer_all(client, second, second_headers)
    forged, _ = opened(client, **mturk, assignmentId="FORGED", resume_secret=SECRET_B)
    assert forged not in (first, second)
    again, again_headers = opened(client, **mturk, assignmentId="A1")
    assert again == first
    done_first = next_query(client, again, again_headers)["mturk_submit"]
    done_second = next_query(client, second, second_headers)["mturk_submit"]
    assert done_first["assignmentId"] == "A1" and done_second["assignmentId"] == "A2"


def test_prolific_resumes_by_session_id_or_the_browser_secret(client, project):
    first, _ = opened(client, PROLIFIC_PID="P1", STUDY_ID="S", SESSION_ID="X1")
    assert opened(client, PROLIFIC_PID="P1", STUDY_ID="S", SESSION_ID="X1")[0] == first
    assert opened(client, PROLIFIC_PID="P1", STUDY_ID="S", SESSION_ID="X2")[0] != first
    without, _ = opened(client, PROLIFIC_PID="P2", STUDY_ID="S", resume_secret=SECRET_A)
    assert opened(client, PROLIFIC_PID="P2", STUDY_ID="S", resume_secret=SECRET_A)[0] == without
    assert opened(client, PROLIFIC_PID="P2", STUDY_ID="S")[0] != without


def test_an_anonymous_browser_resumes_by_its_own_random_id(client, project):
    first, _ = opened(client, anonymous_id="f" * 32)
    assert opened(client, anonymous_id="f" * 32)[0] == first
    assert opened(client, anonymous_id="e" * 32)[0] != first


def test_a_short_resume_secret_is_refused(client, project):
    response = client.post("/api/w/crowd/sessions", json={"participant": "x", "resume_secret": "1"})
    assert response.status_code == 422
    assert "resume_secret" in response.json()["detail"]


def test_token_buckets_refill_at_the_rate_and_forget_the_oldest_keys():
    now = [0.0]
    buckets = TokenBuckets(rate=2.0, burst=3, max_keys=100, clock=lambda: now[0])
    assert [buckets.take("s") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("s") == pytest.approx(0.5)  # one token back in 1/2 s
    now[0] += 0.5
    assert buckets.take("s") == 0.0
    assert buckets.take("other") == 0.0  # keys are independent
    for key in range(1000):
        buckets.take(str(key))
    assert len(buckets) == 100  # bounded memory


@pytest.fixture
def limited(db):
    settings = get_settings().model_copy(
        update={
            "worker_rate_session": 0.01,  # a token back every 100 s: none during the test
            "worker_burst_session": 4,
            "worker_rate_address": 0.01,
            "worker_burst_address": 12,
        }
    )
    app = create_app(settings)
    app.dependency_overrides[get_db] = lambda: db
    with TestClient(app) as test_client:
        yield test_client


def test_a_flooding_session_gets_429_with_retry_after(client, project, limited, db):
    session_id, headers = opened(limited, participant="flood", resume_secret=SECRET_A)
    statuses = [
        limited.get(f"/api/w/sessions/{session_id}/next", headers=headers).status_code
        for _ in range(6)
    ]
    assert statuses == [200, 200, 200, 200, 429, 429]  # a burst of 4
    refused = limited.get(f"/api/w/sessions/{session_id}/next", headers=headers)
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) >= 1
    assert "session" in refused.json()["detail"]
    # Another session from the same address is not held back by this one's limit ...
    other, other_headers = opened(limited, participant="calm", resume_secret=SECRET_B)
    assert limited.get(f"/api/w/sessions/{other}/next", headers=other_headers).status_code == 200
    # ... until the address as a whole is over its own limit.
    codes = [limited.post("/api/w/crowd/sessions", json={}).status_code for _ in range(6)]
    assert 429 in codes
    last = limited.post("/api/w/crowd/sessions", json={})
    assert last.status_code == 429 and "address" in last.json()["detail"]
    # Answers count against the same limits as GET …/next (checked by the route itself).
    query = next_query(client, session_id, headers)["query"]
    answer = {"token": query["token"], "choice": first_choice(query)}
    refused = limited.post(f"/api/w/sessions/{session_id}/answers", json=answer, headers=headers)
    assert refused.status_code == 429 and "retry-after" in refused.headers
    # Researcher routes are not limited.
    assert client.get("/api/w/crowd").status_code == 200
