"""TripletBoost: boosting abstaining triplet classifiers (Perrot & von Luxburg, 2019)."""

from __future__ import annotations

from collections.abc import Callable
from numbers import Integral

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from app.learning import _tripletboost_numba as _kernels
from app.learning.triplets import check_sample_weight, check_triplets

__all__ = ["TripletBoost"]

Progress = Callable[[int, int], object]

# Pair keys index a dense array (counts at fit, a lookup table at prediction)
# up to this many possible pairs, i.e. about 4,000 objects; beyond, sorting.
_DENSE_PAIRS = 1 << 24


def _unlabeled_mask(y: np.ndarray) -> np.ndarray:
    """True for unlabeled entries: ``-1`` in numeric ``y``, ``None`` in object ``y``."""
    if y.dtype == object:
        return np.array([value is None for value in y], dtype=bool)
    if y.dtype.kind in "iuf":
        if y.dtype.kind == "f" and np.isnan(y).any():
            raise ValueError("y holds NaN; mark unlabeled objects with -1")
        return y == -1
    if y.dtype.kind in "USb":
        return np.zeros(y.shape, dtype=bool)
    raise ValueError(f"y must hold class labels, got dtype {y.dtype}")


def _pair_keys(lo: np.ndarray, hi: np.ndarray, n_objects: int) -> np.ndarray:
    """One int64 key per unordered reference pair ``lo < hi``."""
    return lo.astype(np.int64) * n_objects + hi


def _index_sparse(
    triplets: np.ndarray, position: np.ndarray, label: np.ndarray, n_objects: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Training triplets indexed by reference pair, CSR-style, by sorting.

    The same result as ``_kernels.index_dense`` (which counts instead of
    sorting and needs an array of n_objects² counts), for many objects.

    Keeps triplets whose three objects are labeled and whose references differ
    in label; merges repeats and contradictions of one (anchor, pair) into
    their majority (a tie drops the entry); sorts by (pair, anchor). Returns
    the anchors' training positions, flags "anchor in the lower reference's
    half", the CSR pointer and the distinct pair keys: the entries of pair
    ``pair_keys[p]`` are ``indptr[p]:indptr[p + 1]``.
    """
    a, near, far = triplets[:, 0], triplets[:, 1], triplets[:, 2]
    use = (position[a] >= 0) & (label[near] >= 0) & (label[far] >= 0)
    use &= label[near] != label[far]
    a, near, far = a[use], near[use], far[use]
    lo, hi = np.minimum(near, far), np.maximum(near, far)
    n_train = max(int(position.max()) + 1, 1)
    anchor = position[a].astype(np.int64)
    upper = (near != lo).astype(np.int64)  # 0: anchor in lo's half, 1: in hi's
    key = _pair_keys(lo, hi, n_objects)
    if float(n_objects) ** 2 * n_train * 2 < 2.0**62:  # one sortable int64 per entry
        code = (key * n_train + anchor) * 2 + upper
        code.sort()  # a plain value sort: much faster than argsort or lexsort
        upper = code & 1
        key, anchor = np.divmod(code >> 1, n_train)
    else:
        order = np.lexsort((upper, anchor, key))
        key, anchor, upper = key[order], anchor[order], upper[order]
    repeated = (key[1:] == key[:-1]) & (anchor[1:] == anchor[:-1])
    if repeated.any():  # merge repeats and contradictions by majority
        starts = np.flatnonzero(np.concatenate(([True], ~repeated)))
        net = np.add.reduceat(1 - 2 * upper, starts)
        keep = net != 0
        key, anchor, near_lo = key[starts][keep], anchor[starts][keep], net[keep] > 0
    else:
        near_lo = upper == 0
    pair_keys, first = np.unique(key, return_index=True)
    indptr = np.append(first, key.size)
    return anchor.astype(np.intp), near_lo, indptr, pair_keys


def weighted_majority(triplets: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """One row per (anchor, unordered pair): the direction of the larger summed weight;
    pairs whose two directions weigh the same (or nothing) are dropped."""
    a, b, c = triplets.T
    n = int(triplets.max()) + 1 if len(triplets) else 0
    lo, hi = np.minimum(b, c), np.maximum(b, c)
    code = (a.astype(np.int64) * n + lo) * n + hi
    unique, inverse = np.unique(code, return_inverse=True)
    net = np.bincount(inverse, np.where(b < c, weight, -weight), len(unique))
    keep = net != 0
    anchor, rest = np.divmod(unique[keep], n * n)
    low, high = np.divmod(rest, n)
    near_low = net[keep] > 0
    return np.column_stack(
        [anchor, np.where(near_low, low, high), np.where(near_low, high, low)]
    ).astype(np.intp)


class TripletBoost(ClassifierMixin, BaseEstimator):
    """Boosting of abstaining triplet classifiers [1]_.

    Implements Algorithm 1 of [1]_: AdaBoost.MO over the triplet classifiers
    h_{j,k} of §2.1, with the label sets of Eq. (2), the weight α_c of Eq. (3)
    smoothed by 1/n, the weight update of Eq. (4) and the vote of Eq. (5).

    Parameters
    ----------
    n_estimators : int, default=10_000
        Boosting rounds C.
    random_state : int, RandomState instance or None, default=None
        Draws the reference pairs of the rounds.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Labels seen on labeled objects, sorted.
    n_objects_ : int
        Length of ``y`` at fit: the objects triplets may refer to.
    references_ : ndarray of shape (n_estimators, 2)
        Reference objects (x_j, x_k), x_j < x_k, chosen at each round.
    outputs_ : ndarray of shape (n_estimators, 2, n_classes), dtype bool
        Label sets (o_j, o_k) of Eq. (2), as indicators over ``classes_``.
    alphas_ : ndarray of shape (n_estimators,)
        Weights α_c of Eq. (3); 0 for a round whose pair has no training
        triplet (the classifier abstains on every example).
    pairs_ : ndarray of shape (n_pairs,), dtype int64
        Sorted keys ``j * n_objects_ + k`` of the distinct pairs with a vote.
    votes_ : ndarray of shape (n_pairs, 2, n_classes)
        Σ α_c o_j and Σ α_c o_k summed over the rounds that chose each pair:
        the whole model used by prediction.
    unlabeled_marker_ : int or None
        What ``predict`` returns for an abstention: ``-1`` for numeric labels,
        ``None`` for string or object labels.

    Notes
    -----
    The rounds run in ``_tripletboost_numba.boost_rounds`` (compiled: a round
    touches only the few anchors of one reference pair, so numpy's per-call
    overhead dominated by far; see bench/tripletboost_speed.py).

    ======================  ==================================================
    paper (§2)              code
    ======================  ==================================================
    S, n                    objects with a label in ``y``; ``n_train``
    T                       ``triplets`` rows (anchor, near, far)
    w_{c,x_i,y}             ``weight[i, y] / total`` (unnormalised; Z_c common)
    W_{c,X}                 ``marginal / total`` (also in a Fenwick ``tree``)
    𝕀_{y=y_i} − 𝕀_{y≠y_i}   ``sign[i, y]``
    o_j, o_k                ``outputs_[c, 0]``, ``outputs_[c, 1]`` (j < k)
    W_{c,+}, W_{c,−}        ``w_plus``, ``w_minus``
    α_c                     ``alphas_[c]``
    ϑ (abstention)          no vote: zero row of ``decision_function``
    ======================  ==================================================

    Training triplets are indexed by reference pair, CSR-style: the entries
    (anchor, half) of pair {j, k} are contiguous, so a round reads only them.

    Choices where the paper is silent, made as its authors would:

    - *Pair sampling* (§2.2 "select two reference points … such that
      y_j ≠ y_k … by randomly sampling from W_{c,X}"): the pair is drawn from
      W_{c,X} ⊗ W_{c,X} conditioned on y_j ≠ y_k, symmetric in j and k.
    - *Repeated and contradicting triplets*: h_{j,k}(x) follows the majority
      of the triplets (x, j, k) and (x, k, j) present; a tie abstains, as the
      count difference of Kleindessner & von Luxburg (2017) §2 does.
    - Triplets whose references share a label are never used: h_{j,k} is only
      built for y_j ≠ y_k. Triplets with an unlabeled object are not used in
      fit; triplets anchored at unlabeled objects serve prediction.
    - *Abstention* of the strong classifier (Eq. (5) with every h_c = ϑ, or
      with zero total vote): ``decision_function`` gives a zero row,
      ``predict_proba`` a row of NaN, and ``predict`` the unlabeled marker of
      ``y`` (``-1`` for numeric labels, ``None`` for others) — never a label.
      Ties between labels with positive votes go to the first of ``classes_``.

    Prediction is one lookup per triplet of its reference pair among the
    model's pairs (last paragraph of §2.2): a dense table (a perfect hash) up
    to about 4,000 objects, binary search in the sorted ``pairs_`` beyond. It
    is O(|T_x|), never a scan of the C classifiers.

    References
    ----------
    .. [1] Perrot & von Luxburg (2019). Boosting for comparison-based learning.
       IJCAI.

    Examples
    --------
    >>> import numpy as np
    >>> from app.learning.triplets import make_random_triplets
    >>> rng = np.random.default_rng(0)
    >>> X = np.r_[rng.normal(0, 0.3, (15, 2)), rng.normal(3, 0.3, (15, 2))]
    >>> y = np.repeat([0, 1], 15)
    >>> y_fit = np.where(np.arange(30) % 5 == 0, -1, y)  # 6 unlabeled objects
    >>> T = make_random_triplets(X, fraction=0.2, random_state=0)
    >>> model = TripletBoost(n_estimators=2000, random_state=0).fit(T, y_fit)
    >>> model.score(T, np.flatnonzero(y_fit == -1), y[y_fit == -1])
    1.0
    """

    _parameter_constraints: dict = {
        "n_estimators": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(self, n_estimators: int = 10_000, random_state: int | None = None) -> None:
        self.n_estimators = n_estimators
        self.random_state = random_state

    # ------------------------------------------------------------------ fit

    def _check_y(self, y: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        y = np.asarray(y)
        if y.ndim != 1 or y.size < 3:
            raise ValueError(f"y must be 1-d with one entry per object, got shape {y.shape}")
        labeled = ~_unlabeled_mask(y)
        train = np.flatnonzero(labeled)
        values = y[train]
        if y.dtype == object and any(isinstance(v, float) and v != v for v in values):
            raise ValueError("y holds NaN; mark unlabeled objects with None")
        classes, codes = np.unique(values, return_inverse=True)
        if classes.size < 2:
            raise ValueError(
                f"y needs labeled objects of at least 2 classes, got {classes.size} "
                f"class(es) among {train.size} labeled objects"
            )
        return y, train, classes, codes.astype(np.intp)

    def fit(
        self,
        triplets: ArrayLike,
        y: ArrayLike,
        *,
        sample_weight: ArrayLike | None = None,
        progress: Progress | None = None,
    ) -> TripletBoost:
        """Run Algorithm 1 of [1]_ for ``n_estimators`` rounds.

        Parameters
        ----------
        triplets : array-like of shape (n_triplets, 3)
            Rows (anchor, near, far) meaning d(anchor, near) < d(anchor, far).
        y : array-like of shape (n_objects,)
            One label per object; unlabeled objects are ``-1`` (numeric
            labels) or ``None`` (object arrays), as in scikit-learn's
            semi-supervised estimators. String labels work.
        sample_weight : array-like of shape (n_triplets,), default=None
            Algorithm 1 takes each (anchor, pair of references) once, its repeats merged by
            majority; with weights the merge is a weighted majority (answers of weight 0 are
            left out). A lone answer counts fully whatever its weight: the weak classifiers
            have no per-triplet weight.
        progress : callable, default=None
            ``progress(rounds_done, n_estimators)``, called about every 1% of
            the rounds and once at the end (e.g. to update a job's progress);
            its return value is ignored.

        Returns
        -------
        self : TripletBoost
        """
        self._validate_params()
        y, train, classes, codes = self._check_y(y)
        n_objects = y.size
        triplets = check_triplets(triplets, n_objects)
        weight = check_sample_weight(sample_weight, len(triplets))
        if weight is not None:
            triplets = weighted_majority(triplets, weight)
        n_classes = classes.size
        # Training objects grouped by class: class a holds positions seg[a]:seg[a + 1].
        by_class = np.argsort(codes, kind="stable")
        train, codes = train[by_class].astype(np.int64), codes[by_class]
        seg = np.searchsorted(codes, np.arange(n_classes + 1)).astype(np.int64)
        n_train = train.size
        position = np.full(n_objects, -1, dtype=np.int64)
        position[train] = np.arange(n_train)
        label = np.full(n_objects, -1, dtype=np.int64)
        label[train] = codes

        if n_objects * n_objects <= _DENSE_PAIRS and triplets.shape[0] < 2**31:  # int32 inside
            anchors, near_lo, indptr, pair_keys = _kernels.index_dense(
                triplets, position, label, n_objects
            )
        else:
            anchors, near_lo, indptr, pair_keys = _index_sparse(
                triplets, position, label, n_objects
            )
        if pair_keys.size == 0:
            raise ValueError(
                "no usable training triplet: TripletBoost needs triplets whose anchor and "
                "two references are labeled, with references of different classes"
            )
        # 𝕀_{y=y_i} − 𝕀_{y≠y_i}, and Alg. 1, line 1: w_{1,x_i,y} = 1 / (n |Y|), kept
        # unnormalised (the 1/Z_c of Eq. (4) is a common factor) with its row sums.
        sign = np.where(codes[:, None] == np.arange(n_classes), 1.0, -1.0)
        weight = np.ones((n_train, n_classes))
        marginal = weight.sum(axis=1)
        tree = np.zeros(n_train + 1)
        _kernels.fenwick_build(tree, marginal)

        C = int(self.n_estimators)
        uniforms = check_random_state(self.random_state).random_sample((C, 3))
        references = np.empty((C, 2), dtype=np.int64)
        outputs = np.zeros((C, 2, n_classes), dtype=bool)
        alphas = np.zeros(C)
        block = max(1, C // 100)
        for first in range(0, C, block):
            last = min(first + block, C)
            _kernels.boost_rounds(
                first, last, uniforms, weight, marginal, tree, sign, seg, train, n_objects,
                pair_keys, indptr, anchors, near_lo, 1.0 / n_train, references, outputs, alphas,
            )  # fmt: skip
            if progress is not None:
                progress(last, C)

        self.classes_ = classes
        self.n_objects_ = n_objects
        self.references_ = references
        self.outputs_ = outputs
        self.alphas_ = alphas
        self.pairs_, self.votes_ = self._aggregate(references, outputs, alphas, n_objects)
        self.unlabeled_marker_ = None if y.dtype == object or y.dtype.kind in "USb" else -1
        return self

    @staticmethod
    def _aggregate(
        references: np.ndarray, outputs: np.ndarray, alphas: np.ndarray, n_objects: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Sum α_c o_j / α_c o_k of the rounds sharing a pair: Eq. (5) by pair."""
        speaks = (alphas != 0) & outputs.any(axis=(1, 2))
        keys = _pair_keys(references[speaks, 0], references[speaks, 1], n_objects)
        pairs, inverse = np.unique(keys, return_inverse=True)
        votes = np.zeros((pairs.size, 2, outputs.shape[2]))
        np.add.at(votes, inverse, alphas[speaks, None, None] * outputs[speaks])
        return pairs, votes

    # ----------------------------------------------------------- prediction

    def _check_objects(self, objects: ArrayLike) -> np.ndarray:
        objects = np.asarray(objects)
        if objects.ndim != 1 or (objects.size and objects.dtype.kind not in "iu"):
            raise ValueError("objects must be a 1-d array of integer object indices")
        if objects.size and (objects.min() < 0 or objects.max() >= self.n_objects_):
            raise ValueError(f"objects hold an index out of range for {self.n_objects_} objects")
        return objects.astype(np.intp)

    def decision_function(self, triplets: ArrayLike, objects: ArrayLike) -> np.ndarray:
        """Weighted votes Σ_c α_c 𝕀[h_c(x) ≠ ϑ ∧ y ∈ h_c(x)] of Eq. (5).

        Parameters
        ----------
        triplets : array-like of shape (n_triplets, 3)
            Triplets anchored at the objects to classify, with references among
            the objects of fit (others are ignored). Each triplet (x, j, k) is
            matched to the classifiers on the pair {j, k} by one sorted lookup.
        objects : array-like of int of shape (n_queries,)
            The objects to score.

        Returns
        -------
        votes : ndarray of shape (n_queries, n_classes)
            A zero row means abstention: no classifier speaks for the object.
        """
        check_is_fitted(self)
        triplets = check_triplets(triplets, self.n_objects_)
        objects = self._check_objects(objects)
        wanted = np.zeros(self.n_objects_, dtype=bool)
        wanted[objects] = True
        n_pairs_possible = self.n_objects_ * self.n_objects_
        if n_pairs_possible <= _DENSE_PAIRS and self.pairs_.size < 2**31:
            # A perfect hash of the pair keys; int32 halves its cache footprint,
            # and the random lookups into it are most of the time (4 MB at 1,000 objects).
            table = np.full(n_pairs_possible, -1, dtype=np.int32)
            table[self.pairs_] = np.arange(self.pairs_.size)
        else:
            table = np.empty(0, dtype=np.int32)
        scores = np.zeros((self.n_objects_, self.classes_.size))
        _kernels.vote(triplets, wanted, self.n_objects_, self.pairs_, table, self.votes_, scores)
        return scores[objects]

    def predict_proba(self, triplets: ArrayLike, objects: ArrayLike) -> np.ndarray:
        """Votes of Eq. (5) normalised to sum to 1; a row of NaN where H abstains."""
        votes = self.decision_function(triplets, objects)
        total = votes.sum(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(total > 0, votes / total, np.nan)

    def predict(self, triplets: ArrayLike, objects: ArrayLike) -> np.ndarray:
        """H(x) = argmax_y of Eq. (5), or the unlabeled marker where H abstains.

        Returns
        -------
        labels : ndarray of shape (n_queries,)
            Labels from ``classes_``; where no classifier speaks for an object
            (zero total vote) the unlabeled marker of ``y`` at fit: ``-1`` for
            numeric labels, ``None`` (in an object array) otherwise.
        """
        votes = self.decision_function(triplets, objects)
        abstain = votes.sum(axis=1) <= 0
        labels = self.classes_[np.argmax(votes, axis=1)]
        if self.unlabeled_marker_ is None:
            labels = labels.astype(object)
        labels[abstain] = self.unlabeled_marker_
        return labels

    def abstains(self, triplets: ArrayLike, objects: ArrayLike) -> np.ndarray:
        """True for the objects on which the strong classifier abstains."""
        return self.decision_function(triplets, objects).sum(axis=1) <= 0

    def score(self, triplets: ArrayLike, objects: ArrayLike, y: ArrayLike) -> float:  # type: ignore[override]
        """Accuracy on ``objects`` against labels ``y``; abstentions count as errors."""
        predicted = self.predict(triplets, objects)
        y = np.asarray(y)
        if y.shape != predicted.shape:
            raise ValueError(f"y must have one label per object, got shape {y.shape}")
        return float(np.mean(predicted == y))
