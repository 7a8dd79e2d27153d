"""The learning-curve fit behind the budget adviser."""

from __future__ import annotations

import numpy as np
import pytest

from app.learning.learning_curve import answers_to_reach, fit_learning_curve


def test_recovers_a_noisy_power_law_and_covers_the_truth():
    rng = np.random.default_rng(0)
    n = np.array([100, 200, 400, 800, 1600, 3200])
    y = 0.9 - 0.8 * n**-0.4 + rng.normal(scale=0.005, size=n.size)
    fit = fit_learning_curve(n, y, n_boot=300)
    assert fit.a == pytest.approx(0.9, abs=0.03)
    truth = answers_to_reach(0.85, 0.9, 0.8, 0.4)  # ≈ 1,024
    estimate, low, high = fit.answers_needed(0.85)
    assert low <= truth <= high
    assert estimate == pytest.approx(truth, rel=0.5)
    lows, highs = fit.band([500, 5000])
    assert np.all(lows <= fit.predict([500, 5000]) + 1e-9)
    assert np.all(fit.predict([500, 5000]) <= highs + 1e-9)


def test_a_target_above_the_plateau_is_never_reached():
    n = np.array([100, 200, 400, 800])
    fit = fit_learning_curve(n, 0.7 - 0.5 * n**-0.5)
    assert fit.answers_needed(0.9)[0] == np.inf


def test_needs_three_answer_counts():
    with pytest.raises(ValueError, match="3 or more different answer counts"):
        fit_learning_curve([100, 100, 200], [0.5, 0.6, 0.7])
