"""The rules of handing out questions, as pure functions: no database, no web.

Every decision a worker's round trip makes that is not a lookup lives here, once: what
the session is asked next (a repeat or a question of the pool, drawn by a replayable
counter-based generator), the order its objects are shown, the question token and what it
carries, when a lease ends, when the participant's quality is reviewed. The SQL of the
round trip (``app.services.round_trip_sql``) receives these decisions as parameters; its
own rules (a participant never sees a question twice, places left, expired leases) are
fragments written once there.
"""

from __future__ import annotations

import hashlib
import secrets
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

MIN_ANSWERS_BEFORE_REPEAT = 3  # a session is never asked a repeat before this many answers
REVIEW_EVERY = 5  # the participant's quality is reviewed after every 5th answer of a session
REPEAT_WINDOW = 256  # a repeat is one of the session's last 256 answered questions
DRAW_RANGE = 2**31  # a repeat's pick: 0 <= draw < DRAW_RANGE, the same arithmetic in SQL
MOST_SHOWN = 10  # objects a question shows at most (a ranked grid: the anchor and 9)
_DIGITS = "0123456789"  # MOST_SHOWN of them: a shown order's keys, one character each
SHAPED = ("odd_one_out", "rank")  # the kinds whose objects are listed and shown shuffled


class Draws:
    """The draws for a session's question after ``answered`` answers, in this order: whether
    it is a repeat, which one (if so), the order shown.

    A counter-based generator: the words of a hash of (the plan's seed, the session,
    ``answered``), so a replay draws the same, whichever server process serves the session.
    numpy's ``default_rng`` gave the same guarantee but took 14 us to seed (44-66 us in the
    server under load); this takes under 1 us. A question takes at most three draws, and a
    shaped question's order (:meth:`order`) the fourth word.
    """

    __slots__ = ("_words",)

    def __init__(self, seed: int, session_id: str, answered: int) -> None:
        session_number = int(session_id.replace("-", "")[:8], 16)
        key = struct.pack("<3q", seed, session_number, answered)
        digest = hashlib.blake2b(key, digest_size=32, person=b"tripletlab-draw").digest()
        self._words = list(struct.unpack("<4Q", digest))

    def random(self) -> float:
        """Uniform in [0, 1): the word's top 53 bits."""
        return (self._words.pop() >> 11) * 2.0**-53

    def integers(self, high: int) -> int:
        """Uniform in [0, high), by multiply and shift (bias under high / 2**64)."""
        return (self._words.pop() * high) >> 64

    def order(self) -> str:
        """The order a shaped question's objects are shown in: a permutation of
        ``range(MOST_SHOWN)`` as digits, the sort key of position ``i`` the ``i``-th (see
        :func:`shown_order`). Drawn from the first word, which the draws above never reach
        (they take three at most), by Fisher–Yates with the word as a mixed-radix number
        (10! < 2**22 of its 64 bits)."""
        keys = list(_DIGITS)
        word = self._words[0]
        for i in range(MOST_SHOWN - 1, 0, -1):
            word, j = divmod(word, i + 1)
            keys[i], keys[j] = keys[j], keys[i]
        return "".join(keys)


@dataclass(frozen=True, slots=True)
class NextQuestion:
    """What a session is asked after ``answered`` answers: nothing (``done``: its quota is
    reached), a repeat picked by ``repeat_draw``, or a question of the pool; ``swap`` and,
    for a shaped question, ``order``: the order shown (see :func:`shown_order`)."""

    done: bool
    repeat_draw: int | None
    swap: bool
    order: str = _DIGITS

    @property
    def from_pool(self) -> bool:
        """Whether the question comes from the pool: then the answer's own statement claims
        it (the round trip's fast path); a repeat or the end need a step of their own."""
        return not self.done and self.repeat_draw is None


def next_question(
    seed: int, repeat_rate: float, session_id: str, answered: int, total: int, shaped: bool = False
) -> NextQuestion:
    """The decision for the session's question after ``answered`` of its ``total`` answers,
    under a plan of ``seed`` and ``repeat_rate``; the order a shaped question is shown in is
    drawn when the plan asks ``shaped`` questions (otherwise the objects' own order: the
    draw costs a few microseconds a triplet never needs)."""
    if answered >= total:
        return NextQuestion(done=True, repeat_draw=None, swap=False)
    rng = Draws(seed, session_id, answered)
    order = rng.order() if shaped else _DIGITS
    repeat_draw = None
    if repeat_rate > 0 and answered >= MIN_ANSWERS_BEFORE_REPEAT and rng.random() < repeat_rate:
        repeat_draw = rng.integers(DRAW_RANGE)
    return NextQuestion(done=False, repeat_draw=repeat_draw, swap=rng.random() < 0.5, order=order)


def shown_order(
    kind: str,
    o1: int,
    o2: int,
    o3: int | None,
    swap: bool,
    objects: Sequence[int] | None = None,
    keys: Sequence[int] | str = _DIGITS,
) -> tuple[int, ...]:
    """The objects in the order shown: a triplet's anchor first and its candidates swapped
    or not; a pair swapped or not; an odd-one-out's three (``objects``) sorted by their
    ``keys`` (``NextQuestion.order``: object ``i`` by key ``i``), a ranked grid's anchor
    first and its candidates so sorted."""
    if kind in SHAPED:
        assert objects is not None
        fixed = 1 if kind == "rank" else 0
        rest = sorted(range(fixed, len(objects)), key=lambda i: keys[i])
        return (*objects[:fixed], *(objects[i] for i in rest))
    if kind == "triplet":
        return (o1, o3, o2) if swap else (o1, o2, o3)  # type: ignore[return-value]
    return (o2, o1) if swap else (o1, o2)


def repeat_order(
    kind: str,
    o1: int,
    o2: int,
    shown_o2: int,
    shown_o3: int | None,
    swap: bool,
    shown: Sequence[int] | None = None,
) -> tuple[int, ...]:
    """The objects of a repeat in the order shown: a triplet mirrored (its candidates in the
    other order than first shown), a pair in the order ``swap`` draws; an odd-one-out's or
    a ranked grid's objects as first ``shown``, the anchor kept first and the rest reversed
    (always another order)."""
    if kind in SHAPED:
        assert shown is not None
        fixed = 1 if kind == "rank" else 0
        return (*shown[:fixed], *reversed(shown[fixed:]))
    if kind == "triplet":
        return (o1, shown_o3, shown_o2)  # type: ignore[return-value]
    return (o2, o1) if swap else (o1, o2)


def query_token(project_id: int, answered: int) -> str:
    """A new query's token: its project, the session's count of answers when it is issued,
    then 24 random bytes (the secret part). A session holds one query at a time, so the
    count is the session's when the query is answered: the round trip's statement checks
    it, and draws the next question from it, without reading the session first."""
    return f"{project_id}.{answered}.{secrets.token_urlsafe(24)}"


@dataclass(frozen=True, slots=True)
class TokenFacts:
    project_id: int
    answered: int


def token_facts(token: str) -> TokenFacts | None:
    """What a token of :func:`query_token` carries; None for any other token."""
    parts = token.split(".", 2)
    if len(parts) != 3 or not all(p.isdigit() and len(p) <= 9 for p in parts[:2]):
        return None
    return TokenFacts(int(parts[0]), int(parts[1]))


def lease_end(issued_at: datetime, lease_seconds: float) -> datetime:
    """When the lease of a query issued at ``issued_at`` ends: someone else may then be
    given its place."""
    return issued_at + timedelta(seconds=lease_seconds)


def review_due(answered: int, finished: bool) -> bool:
    """Whether the participant's quality is reviewed after the session's answer number
    ``answered``: every :data:`REVIEW_EVERY` th, and the session's last."""
    return finished or answered % REVIEW_EVERY == 0
