"""Kind ``kernel``: the triplet kernel k1 or k2 (Kleindessner & von Luxburg), for kernel
PCA, kernel k-means, neighbours and the kernel SVM of its label figure."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

import numpy as np
from pydantic import Field
from sqlalchemy.orm import Session

from app.db.models import Model, Project
from app.errors import InvalidInput, PayloadTooLarge
from app.learning.kernel_methods import kernel_kmeans, kernel_pca, kernel_svm
from app.learning.kernels import TripletKernel, landmark_triplet_mask
from app.training.data import TrainingData
from app.training.kinds._common import (
    MIN_TRIPLETS,
    ModelKindSpec,
    Params,
    Progress,
    Trained,
    check_indices,
    check_k,
    cv_label_accuracy,
    heldout_split,
    need_triplets,
    weights_of,
)

KERNEL_MATRIX_MAX_OBJECTS = 5000


class KernelParams(Params):
    kernel: Literal["k1", "k2"] = "k1"
    landmarks: list[int] | None = Field(
        default=None, description="Landmark indices of a landmark design (kernel paper §2.4)."
    )


def requirements(data: TrainingData, params: KernelParams) -> list[str]:
    missing = need_triplets("kernel", data)
    if params.landmarks is not None:
        landmarks = np.asarray(params.landmarks)
        n_triplets = len(data.triplets)
        if len(landmarks) < 2 or landmarks.min() < 0 or landmarks.max() >= data.n_objects:
            missing.append(f"landmarks must be at least 2 indices in 0..{data.n_objects - 1}")
        elif n_triplets >= MIN_TRIPLETS:
            fitting = int(landmark_triplet_mask(data.triplets, landmarks, params.kernel).sum())
            if fitting < MIN_TRIPLETS:
                missing.append(
                    f"only {fitting} of the {n_triplets} triplets fit the {params.kernel} "
                    f"landmark design on these landmarks; at least {MIN_TRIPLETS} are needed"
                )
    return missing


def _agreement(kernel: TripletKernel, triplets: np.ndarray) -> float:
    """Share of triplets (a, b, c) with k(a, b) > k(a, c); a tie counts one half."""
    phi = kernel.features_
    a, b, c = triplets.T
    near = np.asarray(phi[a].multiply(phi[b]).sum(axis=1)).ravel()
    far = np.asarray(phi[a].multiply(phi[c]).sum(axis=1)).ravel()
    return float(np.mean((near > far) + 0.5 * (near == far)))


def train(data: TrainingData, params: KernelParams, progress: Progress) -> Trained:
    """k1 or k2; with ``landmarks``, on the triplets that fit the landmark design (§2.3):
    a project's other triplets (random ones, say) are left out."""

    def fit(rows: np.ndarray | slice) -> TripletKernel:
        weight = weights_of(data.triplet_weights, rows)
        return TripletKernel(kind=params.kernel, landmarks=params.landmarks).fit(
            data.triplets[rows], data.n_objects, sample_weight=weight
        )

    if params.landmarks is not None:
        fits = landmark_triplet_mask(data.triplets, params.landmarks, params.kernel)
        data = replace(
            data,
            triplets=data.triplets[fits],
            triplet_weights=weights_of(data.triplet_weights, fits),
        )
    train_part, test = heldout_split(len(data.triplets), params.random_state)
    progress(0.1, "held-out fit")
    evaluated = fit(train_part)
    metrics: dict[str, Any] = {
        "n_triplets": len(data.triplets),
        "heldout_triplets": len(test),
        "heldout_triplet_accuracy": _agreement(evaluated, data.triplets[test]),
    }
    progress(0.4, "final fit")
    final = fit(slice(None))
    progress(0.6, "label cross-validation (kernel SVM)")
    accuracy = cv_label_accuracy(
        data.labels,
        params.random_state,
        lambda train, y_train, test: kernel_svm(final, train, y_train, test),
    )
    if accuracy is not None:
        metrics["cv_label_accuracy"] = accuracy
    return Trained({"estimator": final}, metrics)


def embedding(db: Session, model: Model, artifact: dict[str, Any], dims: int) -> np.ndarray:
    """Kernel PCA coordinates of every object (computed once per ``dims`` and kept)."""
    key = f"pca{dims}"
    if key not in artifact:
        estimator = artifact["estimator"]
        if not 1 <= dims <= min(estimator.features_.shape):
            raise InvalidInput(f"dims must be between 1 and {min(estimator.features_.shape)}")
        artifact[key] = kernel_pca(estimator, dims)
    return artifact[key]


def clusters(
    db: Session, model: Model, artifact: dict[str, Any], n_clusters: int, random_state: int
) -> np.ndarray:
    estimator = artifact["estimator"]
    if not 2 <= n_clusters <= estimator.n_objects_:
        raise InvalidInput(f"n_clusters must be between 2 and {estimator.n_objects_}")
    return kernel_kmeans(estimator, n_clusters, random_state=random_state)


def neighbors(
    db: Session, model: Model, artifact: dict[str, Any], index: int, k: int
) -> list[dict]:
    project = db.get(Project, model.project_id)
    assert project is not None  # a foreign key guarantees it
    check_indices([index], project.n_objects)
    check_k(k, project.n_objects)
    indices, similarities = artifact["estimator"].neighbors(index, k)
    return [
        {"index": int(i), "similarity": float(s)}
        for i, s in zip(indices, similarities, strict=True)
    ]


def kernel_matrix(db: Session, model: Model, artifact: dict[str, Any]) -> np.ndarray:
    estimator = artifact["estimator"]
    if estimator.n_objects_ > KERNEL_MATRIX_MAX_OBJECTS:
        raise PayloadTooLarge(
            f"the kernel matrix of {estimator.n_objects_} objects is too large to ship (limit "
            f"{KERNEL_MATRIX_MAX_OBJECTS}); use /embedding, /clusters or /neighbors instead"
        )
    return estimator.kernel_matrix()


KIND = ModelKindSpec(
    name="kernel",
    learns="triplet kernel k1 or k2, for kernel PCA, k-means, neighbours",
    params=KernelParams,
    requirements=requirements,
    train=train,
    routes={
        "embedding": embedding,
        "clusters": clusters,
        "neighbors": neighbors,
        "kernel": kernel_matrix,
    },
)
