"""The demo project: scikit-learn's handwritten digits, as images a person can compare."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import get_settings
from app.db.models import Project
from app.schemas.objects import ObjectCreate
from app.schemas.plans import Plan, StrategySpec
from app.schemas.projects import ProjectCreate
from app.services.objects import add_objects
from app.services.projects import create_project

DEMO_SLUG = "digits-demo"
DEMO_OBJECTS = 120
# Random triplets for TripletBoost and the kernels, a k1 landmark design, and gold checks.
DEMO_PLAN = Plan(
    strategies=[
        StrategySpec(kind="random", weight=2),
        StrategySpec(kind="landmark_k1", weight=1, params={"n_landmarks": 10}),
    ],
    queries_per_session=20,
    gold_rate=0.1,
    min_answer_ms=300,
)


def digit_png(pixels: np.ndarray, size: int = 96) -> bytes:
    """An 8×8 digit (values 0–16) as a dark-on-light PNG of ``size`` pixels a side."""
    gray = (255 - pixels.reshape(8, 8) * (255 / 16)).astype(np.uint8)
    image = Image.fromarray(gray, mode="L").resize((size, size), Image.Resampling.NEAREST)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def create_demo(db: Session, n_objects: int = DEMO_OBJECTS, seed: int = 0) -> Project | None:
    """Create the demo project unless it exists; returns it, or None if it existed."""
    if db.scalar(select(Project).where(Project.slug == DEMO_SLUG)) is not None:
        return None
    # Imported here, not with the module: `tripletlab serve` imports this module at every
    # start, before its worker processes start, and scikit-learn took 0.8 s of that.
    from sklearn.datasets import load_digits

    digits = load_digits()
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(len(digits.target), size=n_objects, replace=False))
    project = create_project(
        db,
        ProjectCreate(
            slug=DEMO_SLUG,
            name="Handwritten digits (demo)",
            instructions=(
                "You will see small images of handwritten digits. For each question, pick the "
                "one of the two lower images that looks more like the image on top. There are "
                "no wrong answers: go with your first impression."
            ),
            question="Which of these two looks more like the top one?",
        ),
        owner=None,
    )
    folder = get_settings().data_dir / "media" / DEMO_SLUG
    folder.mkdir(parents=True, exist_ok=True)
    objects = []
    for index, sample in enumerate(chosen):
        (folder / f"{index}.png").write_bytes(digit_png(digits.images[sample]))
        objects.append(
            ObjectCreate(
                name=f"digit {index}",
                image_url=f"/media/{DEMO_SLUG}/{index}.png",
                features=digits.data[sample].tolist(),
                label=str(digits.target[sample]),
            )
        )
    add_objects(db, project, objects)
    project.plan = DEMO_PLAN.model_dump(mode="json")
    db.commit()
    return project
