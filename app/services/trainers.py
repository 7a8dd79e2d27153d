"""One trainer per model kind: what it needs, how it fits, and how its quality is measured.

Quality is measured honestly: comparisons are split 90/10 with the job's seed, a model
fit on the 90% is scored on the held-out 10% (triplets, or pairs for SVMcompare), and
where objects have labels, label accuracy is cross-validated over the labelled objects.
The served model is then refit on every answer. TripletBoost predicts labels, not
comparisons, so its quality is its cross-validated label accuracy alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from sklearn.model_selection import KFold, StratifiedKFold
from sklearn.neighbors import KNeighborsClassifier

from app.learning.embedding import CKL, GNMDS, SOE, TSTE
from app.learning.kernel_methods import kernel_svm
from app.learning.kernels import TripletKernel, landmark_triplet_mask
from app.learning.metricboost import MetricBoost
from app.learning.svmcompare import SVMCompare
from app.learning.tripletboost import TripletBoost
from app.services.comprf import comprf_requirements, train_comprf
from app.services.training_data import TrainingData

Progress = Callable[[float, str], None]  # (fraction done, text)
MIN_TRIPLETS = 20
MIN_PAIRS = 20
HELDOUT_SHARE = 0.1
EXACT_SVMCOMPARE_MAX_PAIRS = 3000  # the dual's 2m × 2m kernel: ~0.5 GB at 3,000 pairs
EMBEDDINGS = {"soe": SOE, "tste": TSTE, "ckl": CKL, "gnmds": GNMDS}


@dataclass
class Trained:
    artifact: dict[str, Any]
    metrics: dict[str, Any]


def requirements(kind: str, data: TrainingData, params: Any) -> list[str]:
    """What ``data`` lacks for training ``kind`` with ``params``, in words; empty if nothing."""
    missing = []
    n_triplets, n_pairs = len(data.triplets), len(data.pairs)
    if kind in ("tripletboost", "kernel", "embedding", "metricboost") and n_triplets < MIN_TRIPLETS:
        missing.append(
            f"{kind} needs at least {MIN_TRIPLETS} triplet answers, the project has {n_triplets}"
        )
    if kind == "tripletboost":
        classes = {label for label in data.labels if label is not None}
        if len(classes) < 2:
            missing.append(
                f"tripletboost needs labelled objects of at least 2 classes, found {len(classes)}"
            )
    if kind == "comprf":
        missing.extend(comprf_requirements(data))
    if kind in ("metricboost", "svmcompare") and data.features is None:
        missing.append(f"{kind} needs a feature vector on every object")
    if kind == "svmcompare" and n_pairs < MIN_PAIRS:
        missing.append(
            f"svmcompare needs at least {MIN_PAIRS} pair answers, the project has {n_pairs}"
        )
    if kind == "svmcompare" and n_pairs and len(np.unique(data.pairs[:, 2])) < 2:
        missing.append("svmcompare needs pair answers with at least two different outcomes")
    if kind == "kernel" and params.landmarks is not None:
        landmarks = np.asarray(params.landmarks)
        if len(landmarks) < 2 or landmarks.min() < 0 or landmarks.max() >= data.n_objects:
            missing.append(f"landmarks must be at least 2 indices in 0..{data.n_objects - 1}")
        elif n_triplets >= MIN_TRIPLETS:
            fitting = int(landmark_triplet_mask(data.triplets, landmarks, params.kernel).sum())
            if fitting < MIN_TRIPLETS:
                missing.append(
                    f"only {fitting} of the {n_triplets} triplets fit the {params.kernel} landmark "
                    f"design on these landmarks; at least {MIN_TRIPLETS} are needed"
                )
    return missing


def heldout_split(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng([seed, 90]).permutation(n)
    n_test = max(1, round(n * HELDOUT_SHARE))
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def _label_folds(labels: np.ndarray, folds: int, seed: int):  # type: ignore[no-untyped-def]
    """Folds over the labelled objects, stratified when every class has enough members."""
    labelled = np.flatnonzero(np.array([y is not None for y in labels], dtype=bool))
    y = np.array([str(v) for v in labels[labelled]])
    if len(labelled) < 2:
        return labelled, y, []
    counts = np.unique(y, return_counts=True)[1]
    folds = min(folds, len(labelled))
    if len(counts) > 1 and counts.min() >= folds:
        splitter = StratifiedKFold(folds, shuffle=True, random_state=seed)
        return labelled, y, list(splitter.split(labelled, y))
    return labelled, y, list(KFold(folds, shuffle=True, random_state=seed).split(labelled))


def train_tripletboost(data: TrainingData, params: Any, progress: Progress) -> Trained:
    labelled, y, folds = _label_folds(data.labels, params.cv_folds, params.random_state)
    steps = len(folds) + 1
    correct = abstained = 0
    for fold, (_train, test) in enumerate(folds):
        hidden = data.labels.copy()
        hidden[labelled[test]] = None
        model = TripletBoost(n_estimators=params.n_estimators, random_state=params.random_state)
        model.fit(data.triplets, hidden, progress=_sub(progress, fold, steps, "cross-validation"))
        predicted = model.predict(data.triplets, labelled[test])
        abstains = np.array([p is None for p in predicted])
        abstained += int(abstains.sum())
        correct += int(np.sum(np.array([str(p) for p in predicted]) == y[test]))
    final = TripletBoost(n_estimators=params.n_estimators, random_state=params.random_state)
    final.fit(data.triplets, data.labels, progress=_sub(progress, steps - 1, steps, "final fit"))
    metrics: dict[str, Any] = {"n_triplets": len(data.triplets), "n_labelled": len(labelled)}
    if folds:
        metrics["cv_label_accuracy"] = correct / len(labelled)
        metrics["cv_abstention_rate"] = abstained / len(labelled)
        answered = len(labelled) - abstained
        metrics["cv_accuracy_when_answered"] = correct / answered if answered else None
        metrics["cv_folds"] = len(folds)
        metrics["note"] = "abstentions count as errors in cv_label_accuracy"
    return Trained({"estimator": final, "triplets": data.triplets}, metrics)


def _kernel_agreement(kernel: TripletKernel, triplets: np.ndarray) -> float:
    """Share of triplets (a, b, c) with k(a, b) > k(a, c); a tie counts one half."""
    phi = kernel.features_
    a, b, c = triplets.T
    near = np.asarray(phi[a].multiply(phi[b]).sum(axis=1)).ravel()
    far = np.asarray(phi[a].multiply(phi[c]).sum(axis=1)).ravel()
    return float(np.mean((near > far) + 0.5 * (near == far)))


def train_kernel(data: TrainingData, params: Any, progress: Progress) -> Trained:
    """k1 or k2; with ``landmarks``, on the triplets that fit the landmark design (§2.3):
    a project's other triplets (random ones, say) are left out."""

    def fit(triplets: np.ndarray) -> TripletKernel:
        return TripletKernel(kind=params.kernel, landmarks=params.landmarks).fit(
            triplets, data.n_objects
        )

    if params.landmarks is not None:
        fits = landmark_triplet_mask(data.triplets, params.landmarks, params.kernel)
        data = replace(data, triplets=data.triplets[fits])
    train, test = heldout_split(len(data.triplets), params.random_state)
    progress(0.1, "held-out fit")
    evaluated = fit(data.triplets[train])
    metrics: dict[str, Any] = {
        "n_triplets": len(data.triplets),
        "heldout_triplets": len(test),
        "heldout_triplet_accuracy": _kernel_agreement(evaluated, data.triplets[test]),
    }
    progress(0.4, "final fit")
    final = fit(data.triplets)
    progress(0.6, "label cross-validation (kernel SVM)")
    accuracy = _cv_label_accuracy(
        data.labels,
        params.random_state,
        lambda train, y_train, test: kernel_svm(final, train, y_train, test),
    )
    if accuracy is not None:
        metrics["cv_label_accuracy"] = accuracy
    return Trained({"estimator": final}, metrics)


def train_embedding(data: TrainingData, params: Any, progress: Progress) -> Trained:
    def fit(triplets: np.ndarray, start: float, span: float):  # type: ignore[no-untyped-def]
        model = EMBEDDINGS[params.method](
            n_components=params.dims, random_state=params.random_state
        )
        return model.fit(
            triplets, data.n_objects, callback=_fraction(progress, start, span, params.method)
        )

    train, test = heldout_split(len(data.triplets), params.random_state)
    evaluated = fit(data.triplets[train], 0.0, 0.5)
    final = fit(data.triplets, 0.5, 0.45)
    metrics: dict[str, Any] = {
        "n_triplets": len(data.triplets),
        "heldout_triplets": len(test),
        "heldout_triplet_accuracy": float(evaluated.score(data.triplets[test])),
    }
    points = final.embedding_
    accuracy = _cv_label_accuracy(
        data.labels,
        params.random_state,
        lambda train, y_train, test: (
            KNeighborsClassifier(n_neighbors=1).fit(points[train], y_train).predict(points[test])
        ),
    )
    if accuracy is not None:
        metrics["cv_label_accuracy_1nn"] = accuracy
    return Trained({"estimator": final, "embedding": points}, metrics)


def _cv_label_accuracy(
    labels: np.ndarray,
    seed: int,
    predict: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
) -> float | None:
    """Label accuracy cross-validated over the labelled objects, or None with < 2 classes.

    ``predict(train_objects, train_labels, test_objects)`` gives the test objects' labels;
    a fold whose training part holds one class predicts that class.
    """
    labelled, y, folds = _label_folds(labels, 5, seed)
    if not folds or len(np.unique(y)) < 2:
        return None
    correct = 0
    for train, test in folds:
        if len(np.unique(y[train])) < 2:
            predicted = np.full(len(test), y[train][0])
        else:
            predicted = predict(labelled[train], y[train], labelled[test])
        correct += int(np.sum(np.asarray(predicted) == y[test]))
    return correct / len(labelled)


def standardizer(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and scale that z-score the columns of X (a constant column keeps scale 1)."""
    scale = X.std(axis=0)
    return X.mean(axis=0), np.where(scale > 0, scale, 1.0)


def train_metricboost(data: TrainingData, params: Any, progress: Progress) -> Trained:
    assert data.features is not None
    mean, scale = standardizer(data.features) if params.standardize else (0.0, 1.0)
    X = (data.features - mean) / scale

    def fit(triplets: np.ndarray, start: float, span: float) -> MetricBoost:
        model = MetricBoost(
            n_estimators=params.n_estimators,
            weak_learner=params.weak_learner,
            random_state=params.random_state,
        )
        return model.fit(X, triplets, callback=_fraction(progress, start, span, "boosting"))

    train, test = heldout_split(len(data.triplets), params.random_state)
    evaluated = fit(data.triplets[train], 0.0, 0.45)
    final = fit(data.triplets, 0.45, 0.45)
    metrics: dict[str, Any] = {
        "n_triplets": len(data.triplets),
        "heldout_triplets": len(test),
        "heldout_triplet_accuracy": float(evaluated.score(X, data.triplets[test])),
    }
    accuracy = _cv_label_accuracy(
        data.labels,
        params.random_state,
        lambda train, y_train, test: final.predict_knn(X[train], y_train, X[test]),
    )
    if accuracy is not None:
        metrics["cv_label_accuracy_1nn"] = accuracy
    return Trained({"estimator": final, "mean": mean, "scale": scale}, metrics)


def train_svmcompare(data: TrainingData, params: Any, progress: Progress) -> Trained:
    assert data.features is not None
    mean, scale = standardizer(data.features) if params.standardize else (0.0, 1.0)
    X = (data.features - mean) / scale

    solver = params.solver
    if solver == "auto":
        solver = "dual" if len(data.pairs) <= EXACT_SVMCOMPARE_MAX_PAIRS else "primal"

    def fit(pairs: np.ndarray) -> SVMCompare:
        model = SVMCompare(
            C=params.C,
            kernel=params.kernel,
            gamma=params.gamma,
            solver=solver,
            random_state=params.random_state,
        )
        return model.fit(X[pairs[:, 0]], X[pairs[:, 1]], pairs[:, 2])

    train, test = heldout_split(len(data.pairs), params.random_state)
    progress(0.1, "held-out fit")
    evaluated = fit(data.pairs[train])
    held = data.pairs[test]
    progress(0.5, "final fit")
    final = fit(data.pairs)
    metrics = {
        "n_pairs": len(data.pairs),
        "heldout_pairs": len(test),
        "heldout_pair_accuracy": float(evaluated.score(X[held[:, 0]], X[held[:, 1]], held[:, 2])),
        "solver": solver,
    }
    artifact = {"estimator": final, "ranking": final.rank(X), "mean": mean, "scale": scale}
    return Trained(artifact, metrics)


TRAINERS: dict[str, Callable[[TrainingData, Any, Progress], Trained]] = {
    "tripletboost": train_tripletboost,
    "kernel": train_kernel,
    "embedding": train_embedding,
    "metricboost": train_metricboost,
    "svmcompare": train_svmcompare,
    "comprf": train_comprf,
}


def _sub(progress: Progress, step: int, steps: int, text: str) -> Callable[[int, int], None]:
    """A ``(done, total)`` callback reporting within step ``step`` of ``steps``."""

    def report(done: int, total: int) -> None:
        progress((step + done / max(total, 1)) / steps, f"{text}: {done}/{total}")

    return report


def _fraction(
    progress: Progress, start: float, span: float, text: str
) -> Callable[[int, int], None]:
    def report(done: int, total: int, *_: object) -> None:
        progress(start + span * done / max(total, 1), f"{text}: {done}/{total}")

    return report
