"""Stored answers read by their shape: the one place that turns an answer row into the
arguments of ``app.learning.shapes`` (its shape, its objects as shown, its choice).

An answer row stores (see ``app.db.models.Answer``): a triplet as ``(a, b, c)``, a pair as
``(a, b, outcome)``, an odd-one-out as ``a``, ``b`` the two kept and ``c`` the odd one with
``objects`` as shown, a ranked grid as ``a`` the anchor and ``b`` the first pick with
``objects`` as shown and ``choices`` the picks in order.
"""

from __future__ import annotations

import json
from typing import Any

from app.learning.shapes import Shape, implied_triplets, shape_of


def listed(value: Any) -> list[int] | None:
    """A JSON list column as a driver may give it (SQLite's raw cursor: text)."""
    return json.loads(value) if isinstance(value, str) else value


def read(
    kind: str, a: int, b: int, c: int | None, objects: Any, choices: Any
) -> tuple[Shape, list[int], int | list[int]]:
    """The shape, the objects (as shown) and the choice of a stored answer (not a pair)."""
    if kind == "triplet":
        return Shape(), [a, b, c], b  # type: ignore[list-item]
    shown = listed(objects) or []
    if kind == "rank":
        picks = listed(choices) or []
        return shape_of(shown, kind, len(picks)), shown, picks
    return shape_of(shown, kind), shown, c  # type: ignore[return-value]


def label(kind: str, objects: Any, choices: Any) -> str:
    """The shape's name in exports: ``triplet``, ``pair``, ``odd_one_out``, ``8-rank-2``."""
    if kind != "rank":
        return kind
    return f"{len(listed(objects) or []) - 1}-rank-{len(listed(choices) or [])}"


def implied(
    kind: str, a: int, b: int, c: int | None, objects: Any, choices: Any
) -> list[tuple[int, int, int]]:
    """The triplets ``(anchor, near, far)`` a stored answer implies
    (``app.learning.shapes.implied_triplets``; none for a pair). A triplet's row is its own."""
    if kind == "pair":
        return []
    if kind == "triplet":
        return [(a, b, c)]  # type: ignore[list-item]
    return implied_triplets(*read(kind, a, b, c, objects, choices))
