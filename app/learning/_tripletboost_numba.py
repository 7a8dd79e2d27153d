"""Compiled inner loops of :mod:`app.learning.tripletboost`.

Profiling the vectorised numpy version showed about 125 µs of Python and numpy
call overhead per boosting round against well under 5 µs of arithmetic (a
round touches the few dozen anchors of one reference pair), so the rounds,
the CSR indexing of the triplets and the prediction lookups are compiled with
numba. Each kernel is the loop of the equation it cites, nothing more.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def index_dense(triplets, position, label, n_objects):  # pragma: no cover (compiled)
    """Counting sort of the usable training triplets by reference pair.

    A triplet is usable when its anchor and references are labeled and the
    references' labels differ. Repeats and contradictions of one (anchor,
    pair) are merged into their majority; a tie drops the entry. Returns
    (anchors, near_lo, indptr, pair_keys) with the entries of
    ``pair_keys[p] = lo * n_objects + hi`` at ``indptr[p]:indptr[p + 1]``,
    in the order of ``triplets`` within a pair.

    Needs ``n_objects ** 2 < 2 ** 31`` and fewer than 2 ** 31 triplets: keys,
    counts and entries are int32, which halves the memory traffic of the
    random accesses that dominate (bench/tripletboost_speed.py).
    """
    m = triplets.shape[0]
    n_keys = n_objects * n_objects
    # Pass 1 compacts the usable triplets into (pair key, 2 * anchor + upper),
    # upper = 1 when the anchor is in the higher reference's half. It writes
    # every row and advances only over usable ones: branch-free, since the
    # labels of random references differ about half the time.
    counts = np.zeros(n_keys + 1, dtype=np.int32)  # 4 bytes a key: stays in cache longer
    keys = np.empty(m, dtype=np.int32)
    entry_in = np.empty(m, dtype=np.int32)
    used = 0
    for t in range(m):
        a, b, c = triplets[t, 0], triplets[t, 1], triplets[t, 2]
        at, lb, lc = position[a], label[b], label[c]
        usable = (at >= 0) & (lb >= 0) & (lc >= 0) & (lb != lc)
        key = min(b, c) * n_objects + max(b, c)
        keys[used] = key
        entry_in[used] = 2 * at + (b > c)
        counts[key + 1] += usable
        used += usable
    # counts[key] becomes the start of key's entries, then the scatter below
    # moves it to their end, i.e. the start of key + 1.
    for key in range(n_keys):
        counts[key + 1] += counts[key]
    entry = np.empty(used, dtype=np.int32)
    for t in range(used):
        key = keys[t]
        entry[counts[key]] = entry_in[t]
        counts[key] += 1
    # Merge repeated anchors within each pair (net vote for the lower
    # reference), compacting in place; a zero net vote drops the entry.
    n_train = max(position.max() + 1, 1)
    stamp = np.full(n_train, -1, dtype=np.int32)
    slot = np.zeros(n_train, dtype=np.int32)
    anchor = np.empty(used, dtype=np.int64)
    net = np.empty(used, dtype=np.int32)
    pair_keys = np.empty(n_keys, dtype=np.int64)  # untouched pages cost nothing
    indptr = np.zeros(n_keys + 1, dtype=np.int64)
    write, p, start = 0, 0, 0
    for key in range(n_keys):
        stop = counts[key]
        if start == stop:
            continue
        first = write
        for i in range(start, stop):
            a = entry[i] >> 1
            vote = 1 - 2 * (entry[i] & 1)
            if stamp[a] != key:
                stamp[a] = key
                slot[a] = write
                anchor[write] = a
                net[write] = vote
                write += 1
            else:
                net[slot[a]] += vote
        start = stop
        kept = first
        for i in range(first, write):
            if net[i] != 0:
                anchor[kept] = anchor[i]
                net[kept] = net[i]
                kept += 1
        write = kept
        if kept > first:
            pair_keys[p] = key
            indptr[p + 1] = kept
            p += 1
    return anchor[:write], net[:write] > 0, indptr[: p + 1].copy(), pair_keys[:p].copy()


@njit(cache=True)
def fenwick_build(tree, values):  # pragma: no cover (compiled)
    n = values.size
    tree[:] = 0.0
    for i in range(n):
        tree[i + 1] += values[i]
        parent = i + 1 + ((i + 1) & -(i + 1))
        if parent <= n:
            tree[parent] += tree[i + 1]


@njit(cache=True)
def _fenwick_add(tree, i, delta):  # pragma: no cover (compiled)
    i += 1
    n = tree.size - 1
    while i <= n:
        tree[i] += delta
        i += i & -i


@njit(cache=True)
def _fenwick_prefix(tree, i):  # pragma: no cover (compiled)
    total = 0.0
    while i > 0:
        total += tree[i]
        i -= i & -i
    return total


@njit(cache=True)
def _fenwick_find(tree, target):  # pragma: no cover (compiled)
    """Smallest 0-based i with prefix(i + 1) > target."""
    n = tree.size - 1
    pos = 0
    mask = 1
    while mask * 2 <= n:
        mask *= 2
    while mask > 0:
        nxt = pos + mask
        if nxt <= n and tree[nxt] <= target:
            pos = nxt
            target -= tree[nxt]
        mask //= 2
    return pos


@njit(cache=True)
def boost_rounds(
    first_round,
    last_round,
    uniforms,
    weight,
    marginal,
    tree,
    sign,
    seg,
    train,
    n_objects,
    pair_keys,
    indptr,
    anchors,
    near_lo,
    smoothing,
    references,
    outputs,
    alphas,
):  # pragma: no cover (compiled)
    """Rounds ``first_round:last_round`` of Algorithm 1 of Perrot & von Luxburg (2019).

    ``weight[i, y]`` holds w_{c,x_i,y} up to the common factor Π 1/Z_c;
    ``marginal`` its row sums W_{c,X}, mirrored in the Fenwick ``tree`` for
    O(log n) sampling and updates. Returns the weights' total afterwards.
    """
    n_classes = weight.shape[1]
    n_pairs = pair_keys.size
    sum_lo = np.zeros(n_classes)
    sum_hi = np.zeros(n_classes)
    mass = np.zeros(n_classes)
    total = marginal.sum()
    for c in range(first_round, last_round):
        # Alg. 1, line 3: classes {a, b} with probability ∝ W_a W_b, then
        # x_j ∝ W_X within class a and x_k ∝ W_X within class b.
        for y in range(n_classes):
            mass[y] = _fenwick_prefix(tree, seg[y + 1]) - _fenwick_prefix(tree, seg[y])
        a, b = 0, 1
        if n_classes > 2:
            norm = 0.0
            for p in range(n_classes):
                for q in range(p + 1, n_classes):
                    norm += mass[p] * mass[q]
            target = uniforms[c, 2] * norm
            done = False
            for p in range(n_classes):
                for q in range(p + 1, n_classes):
                    target -= mass[p] * mass[q]
                    a, b = p, q
                    if target < 0.0:
                        done = True
                        break
                if done:
                    break
        base = _fenwick_prefix(tree, seg[a])
        j = _fenwick_find(tree, base + uniforms[c, 0] * mass[a])
        j = min(max(j, seg[a]), seg[a + 1] - 1)
        base = _fenwick_prefix(tree, seg[b])
        k = _fenwick_find(tree, base + uniforms[c, 1] * mass[b])
        k = min(max(k, seg[b]), seg[b + 1] - 1)
        lo, hi = min(train[j], train[k]), max(train[j], train[k])
        references[c, 0], references[c, 1] = lo, hi
        key = lo * n_objects + hi
        at = np.searchsorted(pair_keys, key)
        if at == n_pairs or pair_keys[at] != key:
            continue  # h_c abstains on every example: W± = 0, α_c = 0
        start, stop = indptr[at], indptr[at + 1]
        # Eq. (2): o_j = {y : Σ_{x_i in j's half} (𝕀_{y=y_i} − 𝕀_{y≠y_i}) w_{c,x_i,y} > 0}
        sum_lo[:] = 0.0
        sum_hi[:] = 0.0
        spoken = 0.0
        for e in range(start, stop):
            i = anchors[e]
            spoken += marginal[i]
            if near_lo[e]:
                for y in range(n_classes):
                    sum_lo[y] += sign[i, y] * weight[i, y]
            else:
                for y in range(n_classes):
                    sum_hi[y] += sign[i, y] * weight[i, y]
        # Eq. (3) for these o: W_+ − W_− = Σ_y |sum_lo_y| + |sum_hi_y|,
        # W_+ + W_− = mass of the examples h_c speaks for.
        gap = 0.0
        for y in range(n_classes):
            gap += abs(sum_lo[y]) + abs(sum_hi[y])
            outputs[c, 0, y] = sum_lo[y] > 0.0
            outputs[c, 1, y] = sum_hi[y] > 0.0
        w_plus = (spoken + gap) / (2.0 * total)
        w_minus = (spoken - gap) / (2.0 * total)
        alpha = 0.5 * np.log((w_plus + smoothing) / (w_minus + smoothing))
        alphas[c] = alpha
        # Eq. (4): × exp(−α_c) where h_c is right about (x_i, y), × exp(α_c) where wrong.
        shrink, grow = np.exp(-alpha), np.exp(alpha)
        for e in range(start, stop):
            i = anchors[e]
            half = 0 if near_lo[e] else 1
            row = 0.0
            for y in range(n_classes):
                right = (sign[i, y] > 0.0) == outputs[c, half, y]
                weight[i, y] *= shrink if right else grow
                row += weight[i, y]
            _fenwick_add(tree, i, row - marginal[i])
            total += row - marginal[i]
            marginal[i] = row
    # Drop accumulated rounding; rescale when far from 1 (1/Z_c is common).
    total = marginal.sum()
    if total < 1e-200 or total > 1e200:
        weight /= total
        marginal /= total
        total = 1.0
    fenwick_build(tree, marginal)
    return total


@njit(cache=True)
def vote(triplets, wanted, n_objects, pair_keys, table, votes, scores):  # pragma: no cover
    """Eq. (5) by triplet: one lookup of the triplet's pair, then add its votes.

    ``table`` maps a pair key to its row in ``votes`` (-1: no classifier); an
    empty ``table`` means binary search in the sorted ``pair_keys`` instead.
    """
    n_classes = votes.shape[2]
    dense = table.size > 0
    for t in range(triplets.shape[0]):
        a = triplets[t, 0]
        if not wanted[a]:
            continue
        b, c = triplets[t, 1], triplets[t, 2]
        key = min(b, c) * n_objects + max(b, c)
        if dense:
            at = table[key]
            if at < 0:
                continue
        else:
            at = np.searchsorted(pair_keys, key)
            if at == pair_keys.size or pair_keys[at] != key:
                continue
        half = 0 if b < c else 1
        for y in range(n_classes):
            scores[a, y] += votes[at, half, y]
