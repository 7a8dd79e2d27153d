"""The draws that decide a session's next question (repeat or not, which, the order shown):
the same for the same session and answer count, so a replay issues the same questions, and
uniform, so a plan's repeat rate and the sides shown come out as asked."""

from __future__ import annotations

from collections import Counter

from app.services.issuance import Draws


def test_the_same_key_draws_the_same_and_another_key_draws_otherwise() -> None:
    first, again = Draws(0, 12345, 40), Draws(0, 12345, 40)
    assert [first.random(), first.integers(7), first.random()] == [
        again.random(),
        again.integers(7),
        again.random(),
    ]
    keys = [(0, 12345, 41), (0, 12346, 40), (1, 12345, 40)]
    assert all(Draws(*key).random() != Draws(0, 12345, 40).random() for key in keys)


def test_draws_are_uniform() -> None:
    n = 20_000
    uniforms = [
        Draws(3, session, answered).random()
        for session in range(200)
        for answered in range(n // 200)
    ]
    assert all(0.0 <= u < 1.0 for u in uniforms)
    assert abs(sum(uniforms) / n - 0.5) < 0.01  # sd of the mean: 0.002
    assert abs(sum(u < 0.05 for u in uniforms) / n - 0.05) < 0.006  # a 5 % repeat rate
    picks = Counter(Draws(3, session, 7).integers(3) for session in range(n))
    assert set(picks) == {0, 1, 2}
    assert all(abs(count / n - 1 / 3) < 0.015 for count in picks.values())  # sd 0.0033
