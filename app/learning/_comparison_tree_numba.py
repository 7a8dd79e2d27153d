"""Compiled inner loops of :class:`app.learning.comparison_tree.ComparisonTreeBuilder`.

With the oracle compiled, profiling CompRF at 50,000 objects put splitting
nodes and choosing their pivots first (about half of a tree's fit): each was
some ten numpy passes (cumulative sums, gathers, scatters) over all slots of a
tree level. A node's objects are one contiguous slice of ``order``, so each is
one loop over the slices here. Each kernel is the algorithm line it cites.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def split_slices(
    order, labels, position_of, node_of, asked, p1, fixed, starts, ends, left, first_child
):  # pragma: no cover (compiled)
    """Alg. 1, lines 4-7: stable partition of each node's slice, left-going objects first.

    Node i holds ``order[starts[i]:ends[i]]``; ``left`` lists, slice after slice,
    whether each slot goes left. Moves the objects (and their labels; ``labels``
    and ``position_of`` may be empty when unused), clears the slots' votes and
    pivot marks, points each slot at its child (``first_child + 2 i`` left,
    ``+ 1`` right) and returns the number of objects going left per node.
    """
    n_left = np.zeros(starts.shape[0], dtype=np.int64)
    widest = np.max(ends - starts) if starts.shape[0] else 0
    moved = np.empty(widest, dtype=order.dtype)  # one slice at a time
    moved_labels = np.empty(widest if labels.shape[0] else 0, dtype=labels.dtype)
    t = 0
    for i in range(starts.shape[0]):
        s, e = starts[i], ends[i]
        for q in range(e - s):
            n_left[i] += left[t + q]
            moved[q] = order[s + q]
            if labels.shape[0]:
                moved_labels[q] = labels[s + q]
        to_left, to_right = s, s + n_left[i]
        for q in range(e - s):
            if left[t + q]:
                p = to_left
                to_left += 1
            else:
                p = to_right
                to_right += 1
            order[p] = moved[q]
            if labels.shape[0]:
                labels[p] = moved_labels[q]
            if position_of.shape[0]:
                position_of[moved[q]] = p
            node_of[p] = first_child + 2 * i + (p >= s + n_left[i])
            asked[p] = 0
            p1[p] = 0
            fixed[p] = 0
        t += e - s
    return n_left


@njit(cache=True, nogil=True)
def other_label_pivots(labels, starts, ends, first, u2):  # pragma: no cover (compiled)
    """Alg. 1, line 3: the second pivot among the objects labelled unlike the first.

    For node i (slice ``starts[i]:ends[i]``, first pivot at slot ``first[i]``)
    returns the number of its objects with another label and the slot of the
    k-th of them in slice order, ``k = floor(u2[i] * n_diff)`` (-1 when none).
    """
    n = starts.shape[0]
    n_diff = np.zeros(n, dtype=np.int64)
    chosen = np.full(n, -1, dtype=np.int64)
    for i in range(n):
        if ends[i] <= starts[i]:
            continue
        ref = labels[first[i]]
        for p in range(starts[i], ends[i]):
            n_diff[i] += labels[p] != ref
        if n_diff[i] == 0:
            continue
        k = min(np.int64(u2[i] * n_diff[i]), n_diff[i] - 1)
        for p in range(starts[i], ends[i]):
            if labels[p] != ref:
                if k == 0:
                    chosen[i] = p
                    break
                k -= 1
    return n_diff, chosen
