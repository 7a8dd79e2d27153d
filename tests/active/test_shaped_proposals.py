"""Strategies ask every triplet-like shape: the questions are of the shape, their objects in
canonical form, and a question's key is the same in any order its objects are shown."""

from __future__ import annotations

import pytest

from app.active.base import Proposal
from app.active.planner import Planner
from app.learning.shapes import Shape

SHAPES = [Shape("odd_one_out"), Shape("rank", 8, 2), Shape("rank", 3, 1)]
KINDS = ["random", "landmark_k1", "landmark_k2", "adaptive", "gold"]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s.type}{s.n}")
@pytest.mark.parametrize("kind", KINDS)
def test_every_strategy_asks_the_shape(kind, shape):
    planner = Planner([{"kind": kind, "weight": 1, "shape": shape.as_json()}], 30, seed=4)
    state = planner.initial_state()
    for step in range(40):
        _, proposal = planner.propose(state, step)
        assert proposal.kind == shape.type
        assert len(proposal.objects) == shape.size
        assert proposal.shape == shape
        if shape.type == "odd_one_out":
            assert list(proposal.objects) == sorted(proposal.objects)
        else:
            assert list(proposal.objects[1:]) == sorted(proposal.objects[1:])
        if kind == "gold":
            assert proposal.gold_choice is not None and proposal.key.startswith("g")
        else:
            assert len(set(proposal.objects)) == shape.size


def test_landmark_grids_draw_their_candidates_among_landmarks():
    landmarks = [1, 4, 6, 9, 11]
    spec = {"kind": "landmark_k1", "weight": 1, "params": {"landmarks": landmarks},
            "shape": {"type": "rank", "n": 4, "k": 2}}  # fmt: skip
    planner = Planner([spec], 20, seed=1)
    for step in range(20):
        _, proposal = planner.propose(planner.initial_state(), step)
        assert set(proposal.objects[1:]) <= set(landmarks)
        assert proposal.objects[0] not in proposal.objects[1:]


def test_keys_ignore_the_order_shown():
    odd = Proposal.shaped(Shape("odd_one_out"), (7, 2, 5), "random")
    assert odd.key == Proposal.shaped(Shape("odd_one_out"), (5, 7, 2), "random").key == "o:2:5:7"
    grid = Proposal.shaped(Shape("rank", 3, 2), (9, 4, 1, 6), "random")
    assert grid.key == "r2:9:1:4:6"
    assert grid.key != Proposal.shaped(Shape("rank", 3, 1), (9, 4, 1, 6), "random").key
    assert grid.key != Proposal.shaped(Shape("rank", 3, 2), (4, 9, 1, 6), "random").key


def test_triplet_plans_draw_as_before():
    """A plan without a shape proposes exactly what it proposed before shapes existed."""
    plain = Planner([{"kind": "random", "weight": 1}], 30, seed=4)
    shaped = Planner([{"kind": "random", "weight": 1, "shape": {"type": "triplet"}}], 30, seed=4)
    for step in range(10):
        assert plain.propose(plain.initial_state(), step) == shaped.propose(
            shaped.initial_state(), step
        )
