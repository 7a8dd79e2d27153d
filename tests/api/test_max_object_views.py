"""The plan's ``max_object_views``: an object is shown to one participant at most k times
(in questions of the pool and in repeats alike); null: no cap."""

from __future__ import annotations

from collections import Counter

from tests.factories import answer_all, make_objects, make_project, open_session, set_plan


def shown_per_object(queries: list[dict]) -> Counter[int]:
    return Counter(o["index"] for query in queries for o in query["objects"])


def test_no_object_is_shown_more_than_the_cap(client, auth_headers) -> None:  # type: ignore[no-untyped-def]
    make_project(client, auth_headers, "cap")
    make_objects(client, auth_headers, "cap", 12)
    strategies = [{"kind": "random", "weight": 2}, {"kind": "pairs", "weight": 1}]
    set_plan(client, auth_headers, "cap", strategies=strategies, queries_per_session=40,
             repeat_rate=0.3, max_object_views=3)  # fmt: skip
    for who in ("p1", "p2"):
        session_id, headers = open_session(client, "cap", participant=who)
        asked = answer_all(client, session_id, headers)
        views = shown_per_object(asked)
        assert max(views.values()) <= 3, views
        assert len(asked) >= 8  # 12 objects x 3 views: the cap, not the plan, ended it
        assert sum(views.values()) > 24


def test_the_cap_counts_every_object_of_a_grid(client, auth_headers) -> None:  # type: ignore[no-untyped-def]
    make_project(client, auth_headers, "gridcap")
    make_objects(client, auth_headers, "gridcap", 14)
    strategies = [
        {"kind": "random", "shape": {"type": "rank", "n": 5, "k": 2}},
        {"kind": "random", "shape": {"type": "odd_one_out"}},
    ]
    set_plan(client, auth_headers, "gridcap", strategies=strategies, queries_per_session=40,
             repeat_rate=0.3, max_object_views=3)  # fmt: skip
    session_id, headers = open_session(client, "gridcap", participant="grid")
    asked = answer_all(client, session_id, headers)
    views = shown_per_object(asked)
    assert max(views.values()) <= 3, views
    assert any(len(query["objects"]) == 6 for query in asked)
    assert sum(views.values()) > 14


def test_without_a_cap_objects_come_back(client, auth_headers) -> None:  # type: ignore[no-untyped-def]
    make_project(client, auth_headers, "nocap")
    make_objects(client, auth_headers, "nocap", 12)
    set_plan(client, auth_headers, "nocap", queries_per_session=40)
    session_id, headers = open_session(client, "nocap")
    asked = answer_all(client, session_id, headers)
    assert len(asked) == 40 and max(shown_per_object(asked).values()) > 3


def test_a_bad_cap_is_422_naming_the_field(client, auth_headers) -> None:  # type: ignore[no-untyped-def]
    make_project(client, auth_headers, "badcap")
    make_objects(client, auth_headers, "badcap", 5)
    plan = {"strategies": [{"kind": "random"}], "max_object_views": 0}
    response = client.put("/api/projects/badcap/plan", json=plan, headers=auth_headers)
    assert response.status_code == 422 and "max_object_views" in response.json()["detail"]
