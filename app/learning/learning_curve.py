"""Learning curves: fit a figure against the answers it was learned from, extrapolate.

The fitted family is the inverse power law of learning curves, y(n) = a − b·n^(−c)
(Frey & Fisher 1999; Figueroa et al. 2012, "Predicting sample size required for
classification performance", BMC Med. Inform. Decis. Mak. 12:8, who fit it by weighted
non-linear least squares to extrapolate the sample size needed for a target accuracy).
a ≤ ``ceiling`` is the figure the method tends to at this rate, b > 0 and c > 0 set how
fast. Its uncertainty comes from a residual bootstrap: the fit is repeated on the fitted
values plus resampled residuals, giving a band around the curve and an interval for the
answers needed to reach a target.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import OptimizeWarning, curve_fit

__all__ = ["LearningCurveFit", "answers_to_reach", "fit_learning_curve", "power_law"]

MIN_POINTS = 3


def power_law(n: np.ndarray, a: float, b: float, c: float) -> np.ndarray:
    """y(n) = a − b·n^(−c)."""
    return a - b * np.power(n, -c)


def answers_to_reach(target: float, a: float, b: float, c: float) -> float:
    """n with y(n) = target, inf when target ≥ a (not reachable at this rate)."""
    if target >= a:
        return float("inf")
    return float((b / (a - target)) ** (1.0 / c))


@dataclass
class LearningCurveFit:
    """A fitted curve: parameters, bootstrap draws of them, and the residual spread."""

    a: float
    b: float
    c: float
    draws: np.ndarray  # (n_boot, 3): a, b, c of each bootstrap refit
    residual_sd: float

    def predict(self, n: ArrayLike) -> np.ndarray:
        return power_law(np.asarray(n, dtype=float), self.a, self.b, self.c)

    def band(self, n: ArrayLike, level: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
        """Pointwise ``level`` interval of the curve over the bootstrap draws."""
        n = np.asarray(n, dtype=float)
        values = np.array([power_law(n, *draw) for draw in self.draws])
        tail = (1 - level) / 2
        return np.quantile(values, tail, axis=0), np.quantile(values, 1 - tail, axis=0)

    def answers_needed(self, target: float, level: float = 0.9) -> tuple[float, float, float]:
        """(estimate, low, high) of the answers at which the curve reaches ``target``;
        inf where a draw never reaches it."""
        estimate = answers_to_reach(target, self.a, self.b, self.c)
        needed = np.array([answers_to_reach(target, *draw) for draw in self.draws])
        big = np.finfo(float).max  # quantiles of values that include inf, without nan
        needed = np.where(np.isfinite(needed), needed, big)
        tail = (1 - level) / 2
        low, high = (float(np.quantile(needed, q, method="lower")) for q in (tail, 1 - tail))
        return estimate, low if low < big else np.inf, high if high < big else np.inf


def _fit(n: np.ndarray, y: np.ndarray, ceiling: float) -> np.ndarray:
    low = min(float(y.max()), ceiling - 1e-9)
    span = max(float(y.max() - y.min()), 1e-3)
    start = (min(low + span / 2, ceiling), span * float(n.min()) ** 0.5, 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptimizeWarning)
        params, _ = curve_fit(
            power_law,
            n,
            y,
            p0=start,
            bounds=([low, 0.0, 0.05], [ceiling, np.inf, 3.0]),
            maxfev=5000,
        )
    return params


def fit_learning_curve(
    n_answers: ArrayLike,
    values: ArrayLike,
    *,
    ceiling: float = 1.0,
    floor: float = 0.0,
    n_boot: int = 200,
    random_state: int = 0,
) -> LearningCurveFit:
    """Fit y(n) = a − b·n^(−c) to (answers, figure) points; ``ValueError`` when there are
    fewer than 3 distinct answer counts or the fit does not converge.

    The asymptote a is bounded below by the best figure seen and above by ``ceiling``
    (1 for accuracies); bootstrap values are kept within [``floor``, ``ceiling``]. A figure
    where lower is better (an error e ≥ 0) is fitted as y = −e with ``ceiling=0`` and
    ``floor=-inf``: e(n) = −a + b·n^(−c).
    """
    n = np.asarray(n_answers, dtype=float)
    y = np.asarray(values, dtype=float)
    if n.shape != y.shape or n.ndim != 1:
        raise ValueError("n_answers and values must be 1-D arrays of the same length")
    keep = np.isfinite(n) & np.isfinite(y) & (n > 0)
    n, y = n[keep], y[keep]
    if len(np.unique(n)) < MIN_POINTS:
        raise ValueError(
            f"a learning curve needs figures at {MIN_POINTS} or more different answer counts, "
            f"got {len(np.unique(n))}"
        )
    try:
        params = _fit(n, y, ceiling)
    except RuntimeError as error:
        raise ValueError(f"the learning curve fit did not converge: {error}") from error
    fitted = power_law(n, *params)
    residuals = y - fitted
    rng = np.random.default_rng(random_state)
    draws = []
    for _ in range(n_boot):
        resampled = np.clip(fitted + rng.choice(residuals, len(residuals)), floor, ceiling)
        try:
            draws.append(_fit(n, resampled, ceiling))
        except RuntimeError:
            continue
    draws_array = np.array(draws) if draws else params[None, :]
    dof = max(len(n) - 3, 1)
    return LearningCurveFit(
        float(params[0]),
        float(params[1]),
        float(params[2]),
        draws_array,
        float(np.sqrt((residuals**2).sum() / dof)),
    )
