"""Collection plans, worker links, and the strategies they mix."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from app.active import rules
from app.db.models import Query
from tests.factories import (
    answer_all,
    make_objects,
    make_project,
    next_query,
    open_session,
    set_plan,
)


@pytest.fixture
def project(client, auth_headers):
    make_project(client, auth_headers, "plans")
    make_objects(client, auth_headers, "plans", 20)


def test_put_and_get_plan(client, auth_headers, project):
    assert client.get("/api/projects/plans/plan", headers=auth_headers).status_code == 404
    sent = set_plan(
        client, auth_headers, "plans",
        strategies=[
            {"kind": "random", "weight": 2},
            {"kind": "landmark_k1", "weight": 1, "params": {"n_landmarks": 5}},
            {"kind": "landmark_k2", "weight": 1, "params": {"landmarks": [0, 1, 2]}, "budget": 10},
            {"kind": "pairs", "weight": 1},
            {"kind": "gold", "weight": 1, "params": {"triplets": [[0, 1, 2]]}},
        ],
        redundancy=2, gold_rate=0.1, min_answer_ms=300,
        completion={"redirect_url": "https://example.org/done?c={code}"},
    )  # fmt: skip
    read = client.get("/api/projects/plans/plan", headers=auth_headers).json()
    assert read == sent
    assert read["strategies"][2]["budget"] == 10
    assert read["quality"]["min_gold_accuracy"] == 0.7


BAD_PLANS = {
    "unknown-kind": ({"strategies": [{"kind": "psychic", "weight": 1}]}, "unknown kind 'psychic'"),
    "no-strategies": ({"strategies": []}, "strategies"),
    "zero-weight": ({"strategies": [{"kind": "random", "weight": 0}]}, "weight"),
    "bad-param": (
        {"strategies": [{"kind": "random", "weight": 1, "params": {"x": 1}}]},
        "unknown params",
    ),
    "landmark-out-of-range": (
        {"strategies": [{"kind": "landmark_k1", "weight": 1, "params": {"landmarks": [0, 99]}}]},
        "outside",
    ),
    "too-many-landmarks": (
        {"strategies": [{"kind": "landmark_k2", "weight": 1, "params": {"n_landmarks": 50}}]},
        "exceeds",
    ),
    "gold-repeats": (
        {"strategies": [{"kind": "gold", "weight": 1, "params": {"triplets": [[0, 0, 1]]}}]},
        "distinct",
    ),
    "redirect-not-http": (
        {"strategies": [{"kind": "random"}], "completion": {"redirect_url": "javascript:alert(1)"}},
        "redirect_url",
    ),
    "gold-rate": ({"strategies": [{"kind": "random"}], "gold_rate": 1.5}, "gold_rate"),
    "unknown-field": ({"strategies": [{"kind": "random"}], "colour": "red"}, "colour"),
}


@pytest.mark.parametrize("plan,expected", BAD_PLANS.values(), ids=BAD_PLANS.keys())
def test_bad_plans_are_422_and_keep_the_old_plan(client, auth_headers, project, plan, expected):
    kept = set_plan(client, auth_headers, "plans")
    response = client.put("/api/projects/plans/plan", json=plan, headers=auth_headers)
    assert response.status_code == 422
    assert expected in response.json()["detail"]
    assert client.get("/api/projects/plans/plan", headers=auth_headers).json() == kept


def test_plan_for_too_few_objects(client, auth_headers):
    make_project(client, auth_headers, "two")
    make_objects(client, auth_headers, "two", 2)
    response = client.put(
        "/api/projects/two/plan", json={"strategies": [{"kind": "random"}]}, headers=auth_headers
    )
    assert response.status_code == 422
    assert "at least 3 objects" in response.json()["detail"]


def test_landmark_designs_ask_what_the_paper_says(client, auth_headers, project):
    landmarks = {0, 1, 2, 3}
    set_plan(
        client, auth_headers, "plans", queries_per_session=15,
        strategies=[{"kind": "landmark_k1", "params": {"landmarks": sorted(landmarks)}}],
    )  # fmt: skip
    session_id, headers = open_session(client, "plans", participant="k1")
    for query in answer_all(client, session_id, headers):
        candidates = {o["index"] for o in query["objects"][1:]}
        assert candidates <= landmarks  # k1: any anchor, two landmarks
    set_plan(
        client, auth_headers, "plans", queries_per_session=15,
        strategies=[{"kind": "landmark_k2", "params": {"landmarks": sorted(landmarks)}}],
    )  # fmt: skip
    session_id, headers = open_session(client, "plans", participant="k2")
    for query in answer_all(client, session_id, headers):
        anchor, first, second = (o["index"] for o in query["objects"])
        assert anchor in landmarks  # k2: a landmark anchor, an object and another landmark
        assert first in landmarks or second in landmarks


def test_gold_rate_mixes_in_identity_checks(client, auth_headers, project, db):
    set_plan(client, auth_headers, "plans", gold_rate=0.5, queries_per_session=30)
    session_id, headers = open_session(client, "plans")
    answered = answer_all(client, session_id, headers)
    identity = [
        q for q in answered if q["objects"][0]["index"] in {o["index"] for o in q["objects"][1:]}
    ]
    assert 5 <= len(identity) <= 25
    rows = client.get("/api/projects/plans/participants", headers=auth_headers).json()["data"]
    assert rows[0]["gold_answers"] == len(identity)


def test_link(client, auth_headers, project):
    links = client.get("/api/projects/plans/link", headers=auth_headers).json()
    assert links["worker_url"].endswith("/w/plans")
    assert links["prolific_url"] == (
        links["worker_url"]
        + "?PROLIFIC_PID={{%PROLIFIC_PID%}}&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}}"
    )
    assert f"<ExternalURL>{links['worker_url']}</ExternalURL>" in links["mturk_external_question"]


def test_mirrored_repeats_measure_self_consistency(client, auth_headers, project):
    set_plan(client, auth_headers, "plans", repeat_rate=0.5, queries_per_session=30)
    session_id, headers = open_session(client, "plans")
    answered = answer_all(client, session_id, headers)
    keys = [
        (q["objects"][0]["index"], *sorted(o["index"] for o in q["objects"][1:])) for q in answered
    ]
    assert len(keys) > len(set(keys))  # some questions came back
    row = client.get("/api/projects/plans/participants", headers=auth_headers).json()["data"][0]
    assert row["repeats"] == len(keys) - len(set(keys))
    # Always choosing the left candidate contradicts oneself on a mirrored repeat.
    assert row["consistency"] == 0.0
    assert row["position_bias"] == 1.0
    assert next_query(client, session_id, headers)["done"] is True


def test_a_long_session_repeats_one_of_its_last_answers(client, auth_headers, project, db):
    """A repeat's candidates are the session's last ``REPEAT_WINDOW`` answered questions, so a
    repeat costs the same however long the session is (it once walked every answer of the
    session, and long sessions slowed the writer down; see round_trip_sql.REPEAT)."""
    window = rules.REPEAT_WINDOW
    set_plan(client, auth_headers, "plans", repeat_rate=0.2, queries_per_session=window + 150)
    session_id, headers = open_session(client, "plans")
    answer_all(client, session_id, headers)
    queries = db.scalars(select(Query).where(Query.session_id == session_id).order_by(Query.id))
    asked = list(queries)
    assert len(asked) == window + 150 and all(q.status == "answered" for q in asked)
    first_asked = {q.question_id: i for i, q in enumerate(asked) if not q.is_repeat}
    repeats = [(i, i - first_asked[q.question_id]) for i, q in enumerate(asked) if q.is_repeat]
    assert sum(i > window for i, _ in repeats) >= 10  # many repeats drawn past the window
    assert max(gap for _, gap in repeats) <= window  # each of the last `window` answered
