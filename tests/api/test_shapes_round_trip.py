"""Questions of every shape through the worker API, end to end on both databases: shown with
their kind, objects and (rank) k, answered with a choice of their shape, stored as the
shape's row; any other choice is 422 naming ``choice`` and changes nothing."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from app.db.models import Answer, Query, Question
from app.learning.shapes import Shape, implied_triplets, shape_of
from tests.factories import (
    answer,
    first_choice,
    make_objects,
    make_project,
    next_query,
    open_session,
    set_plan,
)

SHAPES = {
    "odd_one_out": {"type": "odd_one_out"},
    "4-rank-2": {"type": "rank", "n": 4, "k": 2},
    "8-rank-2": {"type": "rank", "n": 8, "k": 2},
}


def listed(value):  # type: ignore[no-untyped-def]
    return json.loads(value) if isinstance(value, str) else value


# Questions per session: the repeats and gold questions are drawn per session (its id is
# random), so enough that a session without either is rarer than one in a thousand.
N = 24


@pytest.fixture
def study(client, auth_headers):
    make_project(client, auth_headers, "shaped")
    make_objects(client, auth_headers, "shaped", 14)


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_a_shaped_study_end_to_end(client, auth_headers, study, db, shape):
    set_plan(
        client, auth_headers, "shaped", strategies=[{"kind": "random", "shape": shape}],
        queries_per_session=N, repeat_rate=0.5, gold_rate=0.4, seed=3,
    )  # fmt: skip
    expected = Shape.of(shape)
    session_id, headers = open_session(client, "shaped", participant="grid")
    answered = []
    body = next_query(client, session_id, headers)
    while not body.get("done"):
        query = body["query"]
        assert query["kind"] == expected.type
        assert len(query["objects"]) == expected.size
        assert query["k"] == (expected.k if expected.type == "rank" else None)
        choice = first_choice(query)
        reply = answer(client, session_id, headers, query["token"], choice)
        assert reply.status_code == 201, reply.text
        answered.append((query, choice))
        reply_body = reply.json()
        body = reply_body["next"]
        if reply_body["done"]:
            break
    assert len(answered) == N
    rows = db.scalars(select(Answer).order_by(Answer.id)).all()
    assert [row.kind for row in rows] == [expected.type] * N
    for row, (query, choice) in zip(rows, answered, strict=True):
        shown = [o["index"] for o in query["objects"]]
        assert listed(row.objects) == shown
        if expected.type == "rank":
            assert (row.a, row.b, row.c) == (shown[0], choice[0], None)
            assert listed(row.choices) == choice and row.choice == choice[0]
            assert row.position is None
        else:
            kept = [o for o in shown if o != choice] if shown.count(choice) == 1 else None
            if kept is not None:
                assert [row.a, row.b] == kept
            assert row.c == choice == row.choice
            assert row.position == shown.index(choice) - 1
        if row.strategy == "gold":  # an identity check: attention, not data
            continue
        triplets = implied_triplets(
            shape_of(shown, row.kind, expected.k), shown, row.choices or row.choice
        )
        assert len(triplets) == expected.triplets_per_answer
    gold = [row for row in rows if row.strategy == "gold"]
    repeats = db.scalars(select(Query).where(Query.is_repeat)).all()
    assert gold, "some questions were gold identity checks"
    assert all(row.gold_correct is not None for row in gold)
    assert repeats, "some questions were asked again"
    for repeat in repeats:
        first = db.scalars(
            select(Query).where(
                Query.question_id == repeat.question_id, ~Query.is_repeat,
                Query.participant_id == repeat.participant_id,
            )
        ).one()  # fmt: skip
        first_shown, again = listed(first.objects), listed(repeat.objects)
        assert sorted(first_shown) == sorted(again) and first_shown != again
        if expected.type == "rank":
            assert again[0] == first_shown[0]
    assert all(row.consistent is not None for row in rows if row.query_id in
               {r.id for r in repeats})  # fmt: skip
    listing = client.get("/api/projects/shaped/participants", headers=auth_headers).json()
    by_shape = listing["data"][0]["position_bias_by_shape"]
    label = f"{expected.n}-rank-{expected.k}" if expected.type == "rank" else expected.type
    assert by_shape[label]["answers"] == N
    assert 0 <= by_shape[label]["position_bias"] <= 1
    if expected.type == "rank":  # the first pick is always the first candidate shown
        assert by_shape[label]["position_bias"] == 1
    questions = db.scalars(select(Question)).all()
    for question in questions:
        objects = listed(question.objects)
        assert question.kind == expected.type and len(objects) == expected.size
        fixed = 1 if expected.type == "rank" else 0
        assert objects[fixed:] == sorted(objects[fixed:])


BAD_CHOICES = {
    "odd_one_out": [99, [0], -1, True, "x"],
    "rank": [5, [], "one", ["a"], [[1]], "anchor", "repeat", "outside", "too-many"],
}


@pytest.mark.parametrize("kind", ["odd_one_out", "rank"])
def test_other_choices_are_422_naming_choice(client, auth_headers, study, db, kind):
    shape = SHAPES["odd_one_out"] if kind == "odd_one_out" else SHAPES["4-rank-2"]
    set_plan(client, auth_headers, "shaped", strategies=[{"kind": "random", "shape": shape}])
    session_id, headers = open_session(client, "shaped", participant="bad")
    query = next_query(client, session_id, headers)["query"]
    shown = [o["index"] for o in query["objects"]]
    outside = next(i for i in range(14) if i not in shown)
    named = {
        "anchor": [shown[0], shown[1]],
        "repeat": [shown[1], shown[1]],
        "outside": [shown[1], outside],
        "too-many": shown[1:4],
    }
    for bad in BAD_CHOICES[kind]:
        choice = named.get(bad, bad) if isinstance(bad, str) else bad
        reply = client.post(
            f"/api/w/sessions/{session_id}/answers",
            json={"token": query["token"], "choice": choice}, headers=headers,
        )  # fmt: skip
        assert reply.status_code == 422, (bad, reply.text)
        assert "choice" in json.dumps(reply.json()), reply.text
    assert db.scalars(select(Answer)).all() == []
    db.rollback()
    good = client.post(
        f"/api/w/sessions/{session_id}/answers",
        json={"token": query["token"], "choice": first_choice(query)}, headers=headers,
    )  # fmt: skip
    assert good.status_code == 201, good.text
    again = client.post(
        f"/api/w/sessions/{session_id}/answers",
        json={"token": query["token"], "choice": first_choice(query)}, headers=headers,
    )  # fmt: skip
    assert again.status_code == 201, again.text  # the same answer sent again: harmless
    if kind == "rank":
        other = [shown[2], shown[1]]
        reply = client.post(
            f"/api/w/sessions/{session_id}/answers",
            json={"token": query["token"], "choice": other}, headers=headers,
        )  # fmt: skip
        assert reply.status_code == 409, reply.text
    assert len(db.scalars(select(Answer)).all()) == 1
