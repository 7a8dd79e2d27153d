"""Shaped answers as arrays: the input format of the shape likelihoods.

A researcher (or the service) hands the embeddings answers of any triplet-like shape
(:mod:`app.learning.shapes`) in one of two documented forms, and :func:`check_answers`,
the one checker of the format, converts both into :class:`AnswerGroup` s, one per shape:

- a sequence of ``(shape, objects, choice)`` answers, as the service stores them
  (``shape`` a :class:`~app.learning.shapes.Shape` or its JSON form, ``objects`` the
  objects shown in the order the shape defines, ``choice`` as
  :func:`~app.learning.shapes.check_choice` accepts it);
- a mapping ``{shape: rows}`` of per-shape integer arrays in the *ordered-row* form
  below (for arrays built by a benchmark or another tool).

The ordered row of one answer puts what was chosen first:

==================  =========================================  ================
shape               ordered row                                 width
==================  =========================================  ================
``triplet``         ``(anchor, chosen, other)``                 3
``odd_one_out``     ``(i, j, odd)``: the odd one last           3
``rank`` n, k       ``(anchor, c_1, …, c_k, rest …)``: the k    n + 1
                    chosen in order, then the unchosen
==================  =========================================  ================

A triplet row is the rank row of a 2-rank-1 grid. Pairs imply no triplets and are
refused here (Bradley–Terry learns them). The implied triplets of the groups come from
:func:`app.learning.shapes.implied_triplets`, the one rule; :func:`answer_triplets`
only reads the ordered rows back as ``(shape, objects, choice)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from app.learning.shapes import Shape, check_choice, implied_triplets

__all__ = ["AnswerGroup", "answer_triplets", "check_answers"]


@dataclass(frozen=True)
class AnswerGroup:
    """The answers of one shape.

    Attributes
    ----------
    shape : Shape
    rows : ndarray of shape (n_answers, shape.size), dtype intp
        Ordered rows (see the module's table).
    positions : ndarray of shape (n_answers,), dtype intp
        Where each answer stood in the input (to align ``sample_weight``).
    """

    shape: Shape
    rows: np.ndarray
    positions: np.ndarray

    @property
    def k(self) -> int:
        """How many successive choices one answer makes (rank k; 1 otherwise)."""
        return self.shape.k if self.shape.type == "rank" else 1


def _ordered_row(shape: Shape, objects: Sequence[int], choice: Any) -> list[int]:
    if isinstance(choice, np.ndarray | np.integer):  # numpy's ints as Python's
        choice = choice.tolist()
    choice = check_choice(shape, list(objects), choice)
    if shape.type == "triplet":
        anchor, first, second = objects
        return [anchor, choice, second if choice == first else first]
    if shape.type == "odd_one_out":
        return [*(o for o in objects if o != choice), choice]
    anchor, *candidates = objects
    return [anchor, *choice, *(c for c in candidates if c not in choice)]


def check_answers(
    answers: Iterable[tuple[Any, Sequence[int], Any]] | Mapping[Any, ArrayLike],
    n_objects: int | None = None,
) -> list[AnswerGroup]:
    """Validate shaped answers and group them by shape as ordered rows.

    Parameters
    ----------
    answers : sequence of (shape, objects, choice), or mapping {shape: rows}
        See the module's docstring. In the mapping form ``positions`` number the rows
        group after group in the mapping's order.
    n_objects : int, default=None
        When given, every index must be below it.

    Returns
    -------
    groups : list of AnswerGroup
        One per shape present, in order of first appearance; never empty.

    Raises
    ------
    ValueError
        For a pair, a row of the wrong width, an index out of range or repeated within
        an answer, a choice :func:`~app.learning.shapes.check_choice` refuses, or no
        answers at all.
    """
    if isinstance(answers, Mapping):
        items = [(Shape.of(key), np.asarray(rows)) for key, rows in answers.items()]
        start = 0
        groups: list[AnswerGroup] = []
        for shape, rows in items:
            if rows.size == 0:
                continue
            if rows.ndim != 2 or rows.shape[1] != shape.size or rows.dtype.kind not in "iu":
                raise ValueError(
                    f"rows of shape {shape.as_json()} must be an integer array of shape "
                    f"(n_answers, {shape.size}), got {rows.dtype} of shape {rows.shape}"
                )
            groups.append(
                AnswerGroup(shape, rows.astype(np.intp), np.arange(start, start + len(rows)))
            )
            start += len(rows)
    else:
        by_shape: dict[Shape, tuple[list[list[int]], list[int]]] = {}
        for position, answer in enumerate(answers):
            try:
                shape_value, objects, choice = answer
            except (TypeError, ValueError) as error:
                raise ValueError(
                    f"answer {position} must be a (shape, objects, choice) triple"
                ) from error
            shape = Shape.of(shape_value)
            objects = [int(o) for o in objects]
            if len(objects) != shape.size:
                raise ValueError(
                    f"answer {position} shows {len(objects)} objects; a {shape.type} shows "
                    f"{shape.size}"
                )
            if shape.type == "pair":
                raise ValueError(
                    f"answer {position} is a pair: pairs imply no triplets "
                    "(learn them with app.learning.bradley_terry)"
                )
            try:
                row = _ordered_row(shape, objects, choice)
            except ValueError as error:
                raise ValueError(f"answer {position}: {error}") from error
            rows, positions = by_shape.setdefault(shape, ([], []))
            rows.append(row)
            positions.append(position)
        groups = [
            AnswerGroup(shape, np.asarray(rows, dtype=np.intp), np.asarray(pos, dtype=np.intp))
            for shape, (rows, pos) in by_shape.items()
        ]
    if not groups:
        raise ValueError("answers is empty: need at least one answer")
    for group in groups:
        if group.shape.type == "pair":
            raise ValueError("pairs imply no triplets (learn them with app.learning.bradley_terry)")
        rows = group.rows
        if rows.min() < 0 or (n_objects is not None and rows.max() >= n_objects):
            bad = int(np.argmax(((rows < 0) | (rows >= (n_objects or np.inf))).any(axis=1)))
            raise ValueError(
                f"answers of shape {group.shape.type} hold an index out of range "
                f"in row {bad}: {rows[bad].tolist()}"
            )
        ordered = np.sort(rows, axis=1)
        repeats = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
        if repeats.any():
            bad = int(np.argmax(repeats))
            raise ValueError(
                f"answers of shape {group.shape.type} repeat an object in row {bad}: "
                f"{rows[bad].tolist()}"
            )
    return groups


def answer_triplets(groups: Sequence[AnswerGroup]) -> tuple[np.ndarray, np.ndarray]:
    """The implied triplets of checked answers, by :func:`app.learning.shapes.implied_triplets`.

    Returns
    -------
    triplets : ndarray of shape (n_triplets, 3), dtype intp
    positions : ndarray of shape (n_triplets,), dtype intp
        The position of the answer each triplet came from.
    """
    triplets: list[tuple[int, int, int]] = []
    owners: list[int] = []
    for group in groups:
        shape, k = group.shape, group.k
        for row, position in zip(group.rows.tolist(), group.positions.tolist(), strict=True):
            choice: Any
            if shape.type == "odd_one_out":
                choice = row[2]
            elif shape.type == "triplet":
                choice = row[1]
            else:
                choice = row[1 : 1 + k]
            implied = implied_triplets(shape, row, choice)
            triplets.extend(implied)
            owners.extend([position] * len(implied))
    return np.asarray(triplets, dtype=np.intp).reshape(-1, 3), np.asarray(owners, dtype=np.intp)
