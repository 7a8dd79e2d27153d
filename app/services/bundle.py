"""The study bundle: one ZIP with what a study collected and what it takes to reproduce it.

Laid out as a Psych-DS dataset (https://psych-ds.github.io/): ``dataset_description.json``
at the top (schema.org ``Dataset`` JSON-LD: ``name``, ``description``, ``variableMeasured``
naming every column of the data file, keywords, citations), the answers as the one data
file ``data/study-<slug>_data.csv`` (Psych-DS's keyword file name), the objects and their
images under ``materials/``, and beside them the plan, the seeds, the software's version,
the exclusions with their reasons and the models' figures. A researcher's previews are not
in it (``imports.visible_answers``); participants appear by their number in this project,
never by their platform id.
"""

from __future__ import annotations

import csv
import io
import json
import platform
import re
import subprocess
import zipfile
from collections.abc import Iterator
from datetime import datetime
from functools import lru_cache
from importlib import metadata
from pathlib import Path, PurePosixPath
from tempfile import SpooledTemporaryFile
from typing import IO, Any

from sqlalchemy import select
from sqlalchemy.orm import Session, aliased

from app.active.planner import stream_seed
from app.config import get_settings
from app.db.models import Answer, Model, Object, Participant, Project, utcnow
from app.services import study_state
from app.services.csv_io import safe_cell
from app.services.imports import visible_answers, visible_objects
from app.services.projects import count_answers

PSYCH_DS_VERSION = "Psych-DS 1.0.0"
SPOOL_BYTES = 8 * 2**20  # a bundle past 8 MiB is built on disk
CHUNK_BYTES = 2**16
REPO = Path(__file__).resolve().parents[2]

# The data file's columns, described once: the CSV's header and ``variableMeasured``.
COLUMNS = (
    ("answer_id", "The answer's number in this study (its order of arrival)."),
    (
        "kind",
        "triplet (which of b and c is closer to a), pair (is a or b better), "
        "odd_one_out (which of three does not belong) or rank (the k of n candidates most "
        "similar to a, in order).",
    ),
    ("a", "Triplet: the anchor's object index. Pair: the left object's index."),
    ("b", "Triplet: the candidate chosen as closer to a. Pair: the right object's index."),
    ("c", "Triplet: the candidate not chosen. Pair: empty."),
    ("outcome", "Pair: -1 a better, 0 about the same, 1 b better. Triplet: empty."),
    ("a_name", "The name of object a (materials/objects.csv)."),
    ("b_name", "The name of object b."),
    ("c_name", "The name of object c."),
    ("position", "Where the chosen answer was shown: -1 left, 0 'about the same', 1 right."),
    ("source", "crowd (a worker), simulated (a simulated worker) or import (from elsewhere)."),
    ("strategy", "The plan's strategy that asked the question (plan.json)."),
    ("gold_correct", "An attention check with a known answer: whether it was answered right."),
    ("consistent", "A repeated question: whether the answer agreed with the first one."),
    ("participant", "The participant's number in this study (not their platform id)."),
    ("session", "The session the answer was given in."),
    ("client_ms", "Milliseconds from showing the question to the answer (the browser's)."),
    ("server_ms", "Milliseconds the server took to store the answer."),
    ("created_at", "When the answer was stored (UTC, ISO 8601)."),
    (
        "objects",
        "Odd-one-out and rank: every object shown, in the order shown (JSON; a "
        "rank's anchor first). Odd-one-out: a and b are the two kept, c the odd one.",
    ),
    ("choices", "Rank: the candidates picked, in order (JSON); b is the first."),
    ("excluded", "Whether the answer is left out of the models (see exclusion_reason)."),
    ("exclusion_reason", "Why: an attention check, and/or its participant flagged (and why)."),
)
KEYWORDS = (
    "triplet comparisons", "pairwise comparisons", "similarity judgements", "crowdsourcing",
    "active learning",
)  # fmt: skip
CITATIONS = (
    "Perrot, M., & von Luxburg, U. (2019). Boosting for comparison-based learning. IJCAI.",
    "Haghiri, S., Garreau, D., & von Luxburg, U. (2018). Comparison-based random forests. ICML.",
    "Kleindessner, M., & von Luxburg, U. (2017). Kernel functions based on triplet "
    "comparisons. NeurIPS.",
)


def data_file_name(slug: str) -> str:
    """Psych-DS's name for the data file: keyword ``study`` with the slug's letters and
    digits (a keyword's value may hold no dash), suffix ``_data``."""
    return f"data/study-{re.sub(r'[^A-Za-z0-9]', '', slug) or 'study'}_data.csv"


def build(db: Session, project: Project) -> IO[bytes]:
    """The bundle of ``project`` as a ZIP file, at its start (on disk past 8 MiB)."""
    out: IO[bytes] = SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 - returned
    root = PurePosixPath(project.slug)
    exported = utcnow()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:

        def put(name: str, text: str) -> None:
            archive.writestr(str(root / name), text)

        n_rows = _write_data(archive, str(root / data_file_name(project.slug)), db, project)
        objects = _objects(db, project)
        images = _write_objects(archive, root, project, objects)
        put("dataset_description.json", _json(_description(project, exported, n_rows)))
        put("study.json", _json(_study(db, project, exported, n_rows, len(objects))))
        put("plan.json", _json(project.plan))
        put("seeds.json", _json(_seeds(project)))
        put("software.json", _json(software()))
        put("exclusions.csv", _exclusions_csv(db, project))
        put("models.json", _json(_models(db, project)))
        put("README.md", _readme(project, n_rows, len(objects), images))
    out.seek(0)
    return out


def chunks(file: IO[bytes]) -> Iterator[bytes]:
    """``file``'s bytes a piece at a time, closing it at the end."""
    with file:
        while piece := file.read(CHUNK_BYTES):
            yield piece


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n"


def _answer_rows(db: Session, project: Project) -> Iterator[dict[str, Any]]:
    names = [aliased(Object) for _ in range(3)]
    statement = select(
        Answer.id, Answer.kind, Answer.a, Answer.b, Answer.c, Answer.outcome,
        names[0].name, names[1].name, names[2].name, Answer.position, Answer.source,
        Answer.strategy, Answer.gold_correct, Answer.consistent, Answer.participant_id,
        Answer.session_id, Answer.client_ms, Answer.server_ms, Answer.created_at,
        Answer.objects, Answer.choices, Participant.flagged, Participant.flag_reason,
    ).where(Answer.project_id == project.id, visible_answers())  # fmt: skip
    for alias, column in zip(names, (Answer.a, Answer.b, Answer.c), strict=True):
        statement = statement.outerjoin(
            alias, (alias.project_id == Answer.project_id) & (alias.index == column)
        )
    statement = statement.outerjoin(Participant, Participant.id == Answer.participant_id)
    statement = statement.order_by(Answer.id).execution_options(yield_per=5000)
    for row in db.execute(statement):
        *values, flagged, flag_reason = row
        record = dict(zip((name for name, _ in COLUMNS[:-2]), values, strict=True))
        reasons = []
        if record["strategy"] == "gold":
            reasons.append("attention check (gold question), not data")
        if flagged:
            reasons.append(f"participant flagged: {flag_reason or 'by the researcher'}")
        record["created_at"] = record["created_at"].isoformat()
        for name in ("objects", "choices"):
            value = record[name]
            record[name] = json.dumps(value) if isinstance(value, list) else value
        record["excluded"] = bool(reasons)
        record["exclusion_reason"] = "; ".join(reasons)
        yield record


def _write_data(archive: zipfile.ZipFile, name: str, db: Session, project: Project) -> int:
    count = 0
    with archive.open(name, "w") as raw, io.TextIOWrapper(raw, "utf-8", newline="") as text:
        writer = csv.DictWriter(text, [name for name, _ in COLUMNS], lineterminator="\r\n")
        writer.writeheader()
        for record in _answer_rows(db, project):
            writer.writerow({k: safe_cell(v) for k, v in record.items()})
            count += 1
    return count


def _objects(db: Session, project: Project) -> list[Object]:
    return list(
        db.scalars(
            select(Object)
            .where(Object.project_id == project.id, visible_objects(project.id))
            .order_by(Object.index)
        )
    )


def _write_objects(
    archive: zipfile.ZipFile, root: PurePosixPath, project: Project, objects: list[Object]
) -> int:
    """``materials/objects.csv``, and the images stored by this server under
    ``materials/images/``; how many images."""
    media = get_settings().data_dir / "media" / project.slug
    prefix = f"/media/{project.slug}/"
    width = max((len(o.features or ()) for o in objects), default=0)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    header = ["index", "name", "text", "image_url", "image_file", "label", "target"]
    writer.writerow(header + [f"f{i}" for i in range(width)])
    n_images = 0
    for o in objects:
        image_file = ""
        if o.image_url and o.image_url.startswith(prefix):
            path = media / o.image_url[len(prefix) :]
            if path.is_file() and path.parent == media:
                image_file = f"materials/images/{path.name}"
                archive.write(path, str(root / image_file))
                n_images += 1
        features = list(o.features or ())
        row = [o.index, o.name, o.text, o.image_url, image_file, o.label, o.target]
        writer.writerow([safe_cell(v) for v in row + features + [""] * (width - len(features))])
    archive.writestr(str(root / "materials" / "objects.csv"), out.getvalue())
    return n_images


def _description(project: Project, exported: datetime, n_rows: int) -> dict[str, Any]:
    """``dataset_description.json``: schema.org's Dataset, as Psych-DS asks."""
    text = (
        f"Comparisons collected with Triplet Lab for the study “{project.name}”: "
        f"{n_rows:,} answers to triplet questions (“{project.question}”) and pair questions "
        f"(“{project.pair_question}”) over {project.n_objects:,} objects. The data file "
        f"{data_file_name(project.slug)} holds one row per answer; materials/objects.csv the "
        "objects; plan.json, seeds.json and software.json what it takes to run the study "
        "again; exclusions.csv and models.json the participants left out and the models' "
        "figures."
    )
    return {
        "@context": "https://schema.org/",
        "@type": "Dataset",
        "name": project.name,
        "description": text,
        "schemaVersion": PSYCH_DS_VERSION,
        "variableMeasured": [
            {"@type": "PropertyValue", "name": name, "description": about}
            for name, about in COLUMNS
        ],
        "keywords": list(KEYWORDS),
        "measurementTechnique": "Relative comparisons: which of two objects is more similar to "
        "a third (triplet), and which of two is better, or are they about the same (pair), "
        "asked through a web page; questions chosen by the study's plan (plan.json).",
        "citation": list(CITATIONS),
        "dateCreated": project.created_at.isoformat(),
        "dateModified": exported.isoformat(),
        "version": software()["tripletlab"],
    }


def _study(
    db: Session, project: Project, exported: datetime, n_rows: int, n_objects: int
) -> dict[str, Any]:
    counts = count_answers(db, project)
    return {
        "slug": project.slug,
        "name": project.name,
        "instructions": project.instructions,
        "consent": project.consent,
        "question": project.question,
        "pair_question": project.pair_question,
        "status": study_state.status(project),
        "created_at": project.created_at.isoformat(),
        "exported_at": exported.isoformat(),
        "answers": n_rows,
        "triplets": counts["triplet"],
        "pairs": counts["pair"],
        "odd_one_out": counts["odd_one_out"],
        "rank": counts["rank"],
        "objects": n_objects,
    }


def _seeds(project: Project) -> dict[str, Any]:
    """Every seed the study's draws come from: the plan's, each strategy's stream (as the
    planner derives it), and how a session's own draws follow from them."""
    plan = project.plan or {}
    seed = int(plan.get("seed", 0))
    return {
        "plan_seed": seed,
        "strategies": [
            {"position": i, "kind": spec.get("kind"), "stream_seed": stream_seed(seed, i)}
            for i, spec in enumerate(plan.get("strategies") or [])
        ],
        "sessions": "a session's draws (repeats, the order shown) come from blake2b of the "
        "plan seed, the session and its count of answers (app/services/issuance.py, Draws)",
    }


@lru_cache(maxsize=1)
def software() -> dict[str, str | None]:
    """The versions of what ran the study: Triplet Lab (and its commit, when run from a
    checkout), Python and the numerical libraries."""
    versions: dict[str, str | None] = {"tripletlab": _version("tripletlab")}
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=5
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    versions["git_commit"] = commit or None
    versions["python"] = platform.python_version()
    for package in ("numpy", "scipy", "scikit-learn", "sqlalchemy", "fastapi"):
        versions[package] = _version(package)
    return versions


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _exclusions_csv(db: Session, project: Project) -> str:
    """The participants left out of the models, with why and by whom."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(["participant", "platform", "answers", "flagged_by", "reason"])
    rows = db.execute(
        select(Participant.id, Participant.platform, Participant.n_answers,
               Participant.flag_manual, Participant.flag_reason)
        .where(Participant.project_id == project.id, Participant.flagged)
        .order_by(Participant.id)
    )  # fmt: skip
    for participant, platform_name, n_answers, manual, reason in rows:
        by = "researcher" if manual else "automatic quality check"
        writer.writerow([participant, platform_name, n_answers, by, safe_cell(reason)])
    return out.getvalue()


def _models(db: Session, project: Project) -> list[dict[str, Any]]:
    rows = db.execute(
        select(Model.kind, Model.version, Model.n_answers, Model.params, Model.metrics,
               Model.first_answer_id, Model.last_answer_id, Model.training_seconds,
               Model.created_at)
        .where(Model.project_id == project.id)
        .order_by(Model.kind, Model.version)
    )  # fmt: skip
    return [{**row._asdict(), "created_at": row.created_at.isoformat()} for row in rows]


def _readme(project: Project, n_rows: int, n_objects: int, n_images: int) -> str:
    return f"""# {project.name}

A study bundle from Triplet Lab, laid out as a Psych-DS dataset.

| file | what it holds |
|---|---|
| `dataset_description.json` | the dataset's description (schema.org JSON-LD), every column |
| `{data_file_name(project.slug)}` | the {n_rows:,} answers, one per row |
| `materials/objects.csv` | the {n_objects:,} objects: name, text, image, label, target, features |
| `materials/images/` | the {n_images:,} images this server stored |
| `study.json` | the study's texts: instructions, consent, question wording; its status |
| `plan.json` | the collection plan: strategies, budgets, redundancy, rates, stop rule |
| `seeds.json` | the seeds every draw came from |
| `software.json` | the versions of Triplet Lab and its libraries that ran it |
| `exclusions.csv` | the participants left out of the models, and why |
| `models.json` | every model trained: its settings and figures, and the answers it saw |

Answers of the researcher's previews are not included. Participants are numbered within
this study; their platform ids (Prolific, MTurk) are not included. Add the authors and a
license to `dataset_description.json` before publishing.
"""
