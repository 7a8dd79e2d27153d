"""The planner's choice of strategy, tested directly (not through the API)."""

from __future__ import annotations

from collections import Counter

from app.active.planner import Planner


def test_a_plan_of_one_strategy_proposes_what_the_strategy_proposes():
    planner = Planner([{"kind": "random", "weight": 1}], n_objects=20, seed=5)
    state = planner.initial_state()
    alone = planner.planned[0].strategy
    proposed = [planner.propose(state, step) for step in range(200)]
    assert proposed == [(0, alone.propose({}, step)) for step in range(200)]
    assert len({p.objects for _, p in proposed}) > 150  # the steps do draw anew


def test_two_strategies_share_the_steps_by_weight_the_same_way_every_time():
    strategies = [{"kind": "random", "weight": 3}, {"kind": "pairs", "weight": 1}]
    planner = Planner(strategies, n_objects=20, seed=5)
    state = planner.initial_state()
    first = [planner.propose(state, step) for step in range(400)]
    again = Planner(strategies, n_objects=20, seed=5)
    assert [again.propose(state, step) for step in range(400)] == first
    shares = Counter(position for position, _ in first)
    assert 250 < shares[0] < 350 and shares[0] + shares[1] == 400


def test_a_strategy_at_its_budget_stops_and_then_the_plan_is_exhausted():
    planner = Planner([{"kind": "random", "weight": 1, "budget": 2}], n_objects=20, seed=5)
    state = planner.initial_state()
    assert planner.propose(state, 0) is not None
    state["created"][0] = 2
    assert planner.propose(state, 1) is None
    assert planner.exhausted(state)
