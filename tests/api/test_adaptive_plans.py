"""Plans with the adaptive strategy: accepted, refused with a 422 naming the field, and
random until a model exists."""

from __future__ import annotations

import pytest

from tests.factories import answer_all, make_objects, make_project, open_session, set_plan


@pytest.fixture
def project(client, auth_headers):
    make_project(client, auth_headers, "adaptive")
    make_objects(client, auth_headers, "adaptive", 12)


@pytest.mark.parametrize(
    "params,field",
    [
        ({"explore": 2}, "explore"),
        ({"pool": 0}, "pool"),
        ({"dims": "two"}, "dims"),
        ({"method": "umap"}, "method"),
        ({"refresh_every": -5}, "refresh_every"),
        ({"kind": "k3"}, "kind"),
        ({"score": "vibes"}, "score"),
        ({"seed": 1.5}, "seed"),
        ({"budget": 3}, "unknown params"),
    ],
)
def test_bad_params_are_422_naming_the_field(client, auth_headers, project, params, field):
    kept = set_plan(client, auth_headers, "adaptive")
    plan = {"strategies": [{"kind": "adaptive", "params": params}]}
    response = client.put("/api/projects/adaptive/plan", json=plan, headers=auth_headers)
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert field in detail and "adaptive" in detail
    assert client.get("/api/projects/adaptive/plan", headers=auth_headers).json() == kept


def test_without_a_model_workers_get_random_questions(client, auth_headers, project):
    params = {"pool": 20, "explore": 0.2, "refresh_every": 10, "dims": 3, "seed": 4}
    set_plan(
        client,
        auth_headers,
        "adaptive",
        strategies=[{"kind": "adaptive", "params": params}],
        queries_per_session=8,
    )
    session_id, headers = open_session(client, "adaptive")
    answered = answer_all(client, session_id, headers)
    assert len(answered) == 8
    assert all(
        q["kind"] == "triplet" and len({o["index"] for o in q["objects"]}) == 3 for q in answered
    )
