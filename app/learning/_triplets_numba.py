"""Compiled pass of :func:`app.learning.triplets.check_triplets`.

The numpy version of the checks read the triplets about ten times (minimum,
maximum, three column comparisons, two ``|``, ``any``), and a validated array
of 15 million triplets took longer to check than TripletBoost's 20,000 rounds
(bench/tripletboost_speed.py). One compiled pass reads each row once.
"""

from __future__ import annotations

from numba import njit


@njit(cache=True)
def scan_triplets(triplets):  # pragma: no cover (compiled)
    """Smallest and largest index, and the first row repeating an object.

    ``triplets`` is a C-contiguous ``intp`` array of shape (n_triplets, 3).
    Returns ``(smallest, largest, first_repeat)``; ``first_repeat`` is -1 when
    every row holds three distinct objects, and the extremes are 0 for no row.
    """
    m = triplets.shape[0]
    if m == 0:
        return 0, 0, -1
    smallest = largest = triplets[0, 0]
    first_repeat = -1
    for t in range(m):
        a, b, c = triplets[t, 0], triplets[t, 1], triplets[t, 2]
        smallest = min(smallest, min(a, min(b, c)))
        largest = max(largest, max(a, max(b, c)))
        if ((a == b) | (a == c) | (b == c)) and first_repeat < 0:
            first_repeat = t
    return smallest, largest, first_repeat
