"""Quality control: figures per participant, automatic and manual flags, marks in exports."""

from __future__ import annotations

import pytest

from tests.factories import answer_all, make_objects, make_project, open_session, set_plan


@pytest.fixture
def project(client, auth_headers):
    make_project(client, auth_headers, "qc")
    make_objects(client, auth_headers, "qc", 12)


def participants(client, headers) -> list[dict]:
    return client.get("/api/projects/qc/participants", headers=headers).json()["data"]


def test_fast_one_sided_workers_are_flagged_automatically(client, auth_headers, project):
    set_plan(
        client, auth_headers, "qc", queries_per_session=12, min_answer_ms=500,
        quality={"min_answers": 10, "max_fast_share": 0.5, "max_position_bias": 0.9},
    )  # fmt: skip
    careful_id, careful = open_session(client, "qc", participant="careful")
    answer_all(client, careful_id, careful, ms=2000)
    hasty_id, hasty = open_session(client, "qc", participant="hasty")
    answer_all(client, hasty_id, hasty, ms=100)
    rows = {r["external_id"]: r for r in participants(client, auth_headers)}
    assert rows["hasty"]["fast_share"] == 1.0
    assert rows["careful"]["fast_share"] == 0.0
    assert rows["hasty"]["flagged"] is True
    assert "too fast" in rows["hasty"]["flag_reason"]
    # Both always chose the left candidate: position bias 1.0 > 0.9 flags the careful one too.
    assert rows["careful"]["flagged"] is True
    assert "position bias" in rows["careful"]["flag_reason"]


def test_manual_flag_and_unflag_and_export_marks(client, auth_headers, project):
    set_plan(client, auth_headers, "qc", queries_per_session=3)
    session_id, headers = open_session(client, "qc", participant="w")
    answer_all(client, session_id, headers)
    row = participants(client, auth_headers)[0]
    assert row["flagged"] is False
    flagged = client.post(
        f"/api/projects/qc/participants/{row['id']}/flag",
        json={"reason": "spam"},
        headers=auth_headers,
    ).json()
    assert flagged["flagged"] is True and flagged["flag_reason"] == "spam"
    exported = client.get("/api/projects/qc/answers", headers=auth_headers).json()
    assert all(r["flagged"] for r in exported) and len(exported) == 3
    unflagged = client.post(
        f"/api/projects/qc/participants/{row['id']}/unflag", headers=auth_headers
    ).json()
    assert unflagged["flagged"] is False and unflagged["flag_manual"] is True
    exported = client.get("/api/projects/qc/answers", headers=auth_headers).json()
    assert not any(r["flagged"] for r in exported)


def test_unknown_participant_is_404(client, auth_headers, project):
    response = client.post("/api/projects/qc/participants/999/flag", headers=auth_headers)
    assert response.status_code == 404
    assert "no participant 999" in response.json()["detail"]


GOLD = [[0, 1, 2], [3, 4, 5], [6, 7, 8]]


def test_gold_accuracy(client, auth_headers, project):
    set_plan(
        client, auth_headers, "qc", queries_per_session=20,
        strategies=[{"kind": "gold", "weight": 1, "params": {"triplets": GOLD}}],
    )  # fmt: skip
    session_id, headers = open_session(client, "qc")
    answered = answer_all(client, session_id, headers)
    assert len(answered) == 3  # three gold questions, each asked once
    right = sum(q["objects"][1]["index"] in (1, 4, 7) for q in answered)
    row = participants(client, auth_headers)[0]
    assert row["gold_answers"] == 3
    assert row["gold_accuracy"] == pytest.approx(right / 3)


def test_counters_on_the_participant_row_match_the_answers(client, auth_headers, project, db):
    """The automatic review reads counters kept as answers arrive; they must say what the
    answers say (the researcher's figures are counted from the answers themselves)."""
    from sqlalchemy import select

    from app.db.models import Participant
    from app.services.quality import quality_of

    set_plan(
        client, auth_headers, "qc", queries_per_session=40, min_answer_ms=500,
        gold_rate=0.2, repeat_rate=0.3,
        quality={"min_answers": 5, "max_fast_share": 0.3, "max_position_bias": 1.0},
    )  # fmt: skip
    for name, ms in (("steady", 2000), ("mixed", 450), ("hasty", 100)):
        session_id, headers = open_session(client, "qc", participant=name)
        answer_all(client, session_id, headers, ms=ms)
    rows = participants(client, auth_headers)
    assert {r["external_id"] for r in rows} == {"steady", "mixed", "hasty"}
    for row in rows:
        stored = db.scalars(select(Participant).where(Participant.id == row["id"])).one()
        counted = quality_of(stored).as_dict()
        for field in ("platform", "external_id"):
            counted[field] = row[field]
        # The bias per shape is counted from the answers only (no counter keeps it).
        assert row.pop("position_bias_by_shape")["triplet"]["answers"] > 0
        counted.pop("position_bias_by_shape")
        assert counted == row
    assert sum(r["repeats"] for r in rows) > 0 and sum(r["gold_answers"] for r in rows) > 0
    reasons = {r["external_id"]: r["flag_reason"] for r in rows}
    assert "too fast" in reasons["hasty"] and "too fast" not in reasons["steady"]
