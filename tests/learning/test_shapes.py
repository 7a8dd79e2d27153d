"""Question shapes: their checks and the triplets their answers imply."""

from __future__ import annotations

import numpy as np
import pytest

from app.learning.shapes import Shape, check_choice, implied_triplets, implied_triplets_many


def test_an_odd_one_out_implies_the_other_two_are_closer() -> None:
    assert implied_triplets(Shape("odd_one_out"), (4, 7, 9), 9) == [(4, 7, 9), (7, 4, 9)]
    assert implied_triplets(Shape("odd_one_out"), (4, 7, 9), 4) == [(7, 9, 4), (9, 7, 4)]


def test_an_8_rank_2_answer_implies_13_triplets() -> None:
    shape = Shape("rank", n=8, k=2)
    objects = (0, *range(1, 9))
    triplets = implied_triplets(shape, objects, [5, 2])
    assert len(triplets) == 13 == shape.triplets_per_answer
    assert all(anchor == 0 for anchor, _, _ in triplets)
    assert (0, 5, 2) in triplets and (0, 2, 5) not in triplets
    assert sorted(far for _, near, far in triplets if near == 2) == [1, 3, 4, 6, 7, 8]


def test_a_triplet_and_a_pair() -> None:
    assert implied_triplets(Shape(), (1, 2, 3), 3) == [(1, 3, 2)]
    assert implied_triplets(Shape("pair"), (1, 2), 0) == []
    many = implied_triplets_many([(Shape(), (1, 2, 3), 2), (Shape("odd_one_out"), (1, 2, 3), 1)])
    np.testing.assert_array_equal(many, [[1, 2, 3], [2, 3, 1], [3, 2, 1]])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"type": "grid"}, "shape type"),
        ({"type": "rank", "n": 10, "k": 2}, "n must be 3"),
        ({"type": "rank", "n": 4, "k": 4}, "k must be 1"),
        ({"type": "triplet", "n": 5}, "only a rank shape"),
    ],
)
def test_bad_shapes_are_named(value: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Shape.of(value)


@pytest.mark.parametrize(
    ("shape", "objects", "choice", "ok"),
    [
        (Shape(), (1, 2, 3), 2, True),
        (Shape(), (1, 2, 3), 1, False),  # the anchor is not a candidate
        (Shape(), (1, 2, 3), True, False),
        (Shape("odd_one_out"), (1, 2, 3), 1, True),
        (Shape("odd_one_out"), (1, 2, 3), 4, False),
        (Shape("pair"), (1, 2), 0, True),
        (Shape("pair"), (1, 2), 2, False),
        (Shape("rank", n=4, k=2), (0, 1, 2, 3, 4), [3, 1], True),
        (Shape("rank", n=4, k=2), (0, 1, 2, 3, 4), [3, 3], False),
        (Shape("rank", n=4, k=2), (0, 1, 2, 3, 4), [0, 1], False),
        (Shape("rank", n=4, k=2), (0, 1, 2, 3, 4), [1], False),
        (Shape("rank", n=4, k=2), (0, 1, 2, 3, 4), 1, False),
    ],
)
def test_choices_are_checked(shape: Shape, objects: tuple, choice: object, ok: bool) -> None:
    if ok:
        check_choice(shape, objects, choice)
    else:
        with pytest.raises(ValueError, match="choice"):
            check_choice(shape, objects, choice)
