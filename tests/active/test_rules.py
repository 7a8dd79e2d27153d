"""The rules of handing out questions (app.active.rules), without a database: one test per
rule."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from app.active import rules

SESSION = "0f8e2c1a-1111-4222-8333-444455556666"


def test_the_same_key_draws_the_same_and_another_key_draws_otherwise() -> None:
    first, again = rules.Draws(0, SESSION, 40), rules.Draws(0, SESSION, 40)
    drawn = [first.random(), first.integers(7), first.random()]
    assert drawn == [again.random(), again.integers(7), again.random()]
    others = [(0, SESSION, 41), (0, "0f8e2c1b-" + SESSION[9:], 40), (1, SESSION, 40)]
    assert all(rules.Draws(*key).random() != drawn[0] for key in others)


def test_draws_are_uniform() -> None:
    values = [rules.Draws(0, SESSION, n).random() for n in range(20_000)]
    assert all(0 <= v < 1 for v in values)
    deciles = Counter(int(v * 10) for v in values)
    assert all(1_800 < deciles[d] < 2_200 for d in range(10)), deciles
    picks = Counter(rules.Draws(3, SESSION, n).integers(5) for n in range(10_000))
    assert set(picks) == set(range(5)) and all(1_800 < c < 2_200 for c in picks.values())


def test_the_next_question_ends_the_session_at_its_quota() -> None:
    decision = rules.next_question(0, 0.5, SESSION, answered=10, total=10)
    assert decision.done and not decision.from_pool and decision.repeat_draw is None


def test_no_repeat_before_three_answers_nor_without_a_rate() -> None:
    early = [rules.next_question(0, 0.5, SESSION, n, 100) for n in range(3)]
    assert all(d.repeat_draw is None and d.from_pool for d in early)
    never = [rules.next_question(0, 0.0, SESSION, n, 100) for n in range(3, 300)]
    assert all(d.repeat_draw is None for d in never)


def test_repeats_come_at_the_plan_rate_and_replay_alike() -> None:
    decisions = [rules.next_question(7, 0.2, SESSION, n, 10_000) for n in range(3, 5_003)]
    repeats = [d for d in decisions if d.repeat_draw is not None]
    assert 900 < len(repeats) < 1_100  # 20 % of 5,000
    assert all(0 <= d.repeat_draw < rules.DRAW_RANGE and not d.from_pool for d in repeats)
    assert decisions == [rules.next_question(7, 0.2, SESSION, n, 10_000) for n in range(3, 5_003)]
    sides = Counter(d.swap for d in decisions)
    assert 2_300 < sides[True] < 2_700


@pytest.mark.parametrize(
    "kind,o3,swap,shown",
    [
        ("triplet", 3, False, (1, 2, 3)),
        ("triplet", 3, True, (1, 3, 2)),
        ("pair", None, False, (1, 2)),
        ("pair", None, True, (2, 1)),
    ],
)
def test_the_order_shown(kind: str, o3: int | None, swap: bool, shown: tuple) -> None:
    assert rules.shown_order(kind, 1, 2, o3, swap) == shown


def test_a_repeated_triplet_is_mirrored_and_a_pair_drawn() -> None:
    # First shown (anchor 1; candidates 3 left, 2 right): the repeat shows 2 left, 3 right.
    assert rules.repeat_order("triplet", 1, 2, 3, 2, swap=True) == (1, 2, 3)
    assert rules.repeat_order("triplet", 1, 2, 3, 2, swap=False) == (1, 2, 3)
    assert rules.repeat_order("pair", 1, 2, 2, None, swap=True) == (2, 1)


def test_a_token_carries_its_project_and_count_and_a_secret() -> None:
    token = rules.query_token(12, 40)
    facts = rules.token_facts(token)
    assert facts == rules.TokenFacts(12, 40)
    assert len(token) <= 64 and len(token.split(".")[2]) == 32
    assert rules.query_token(12, 40) != token  # the secret part is new each time
    for other in ("", "12.40", "x.40.abc", "12.y.abc", "1234567890.1.abc", "40.abc"):
        assert rules.token_facts(other) is None, other


def test_a_lease_ends_its_seconds_after_issue() -> None:
    issued = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
    assert rules.lease_end(issued, 300) == issued + timedelta(seconds=300)


def test_the_quality_review_comes_every_fifth_answer_and_at_the_end() -> None:
    due = [n for n in range(1, 23) if rules.review_due(n, finished=False)]
    assert due == [5, 10, 15, 20]
    assert rules.review_due(7, finished=True)


def test_a_shaped_question_is_shown_in_a_drawn_order_a_replay_draws_again() -> None:
    decisions = [rules.next_question(3, 0.0, SESSION, n, 1000, shaped=True) for n in range(300)]
    assert decisions == [rules.next_question(3, 0.0, SESSION, n, 1000, True) for n in range(300)]
    orders = [d.order for d in decisions]
    assert all(sorted(order) == list("0123456789") for order in orders)
    assert len(set(orders)) > 250  # 10! orders: nearly every one new
    # The same draws for everything else: a triplet plan's questions are as before.
    plain = [rules.next_question(3, 0.0, SESSION, n, 1000) for n in range(300)]
    assert [(d.repeat_draw, d.swap) for d in plain] == [(d.repeat_draw, d.swap) for d in decisions]
    assert {d.order for d in plain} == {"0123456789"}


def test_shaped_orders_keep_a_grids_anchor_first_and_repeats_show_another_order() -> None:
    grid = [7, 1, 2, 3, 4]
    shown = rules.shown_order("rank", 7, 1, 2, False, grid, "9876543210")
    assert shown == (7, 4, 3, 2, 1)
    assert rules.repeat_order("rank", 7, 1, 4, 3, False, shown) == (7, 1, 2, 3, 4)
    odd = rules.shown_order("odd_one_out", 1, 5, 9, True, [1, 5, 9], "2019999999")
    assert odd == (5, 9, 1)
    assert rules.repeat_order("odd_one_out", 1, 5, 9, 1, True, odd) == (1, 9, 5)
