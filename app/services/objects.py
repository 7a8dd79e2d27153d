"""A project's objects: add them (JSON or CSV; a ZIP of images in :mod:`image_zip`), edit and
read them."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import BinaryIO

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.bulk import execute_insert, prepare_insert
from app.db.models import Object, Project
from app.db.session import begin_write
from app.errors import InvalidInput, NotFound
from app.schemas.objects import ObjectCreate, ObjectUpdate
from app.services.csv_io import read_csv
from app.services.projects import lock_project

CSV_COLUMNS = ("name", "text", "image_url", "label", "target")
_FEATURE_COLUMN = re.compile(r"^f(\d+)$")
_ROW_COLUMNS = ("name", "text", "image_url", "features", "label", "target")


def add_objects(db: Session, project: Project, objects: Sequence[ObjectCreate]) -> list[dict]:
    """Append ``objects`` to ``project``; their indices continue from the last one, forever."""
    return add_object_rows(db, project, [o.model_dump() for o in objects])


def add_object_rows(db: Session, project: Project, rows: list[dict]) -> list[dict]:
    """:func:`add_objects` for objects already validated and dumped (``ObjectCreate`` fields);
    returns them with their ``index``."""
    if not rows:
        raise InvalidInput("no objects given")
    _check_image_urls(rows)
    check_features(project, rows)
    return insert_objects(db, project, rows)


def insert_objects(
    db: Session,
    project: Project,
    rows: list[dict],
    place: Callable[[int], None] | None = None,
) -> list[dict]:
    """Insert ``rows`` after the project's last object, under the project's lock (which on
    SQLite every worker's answer waits for: the rows are encoded before it is taken, unless
    ``place(start)`` must first set them, e.g. their image URLs, once the first index is
    known). Returns the rows with their ``index`` (no reading back: 40 MiB is 250,000 rows)."""
    columns = ("project_id", "index", *_ROW_COLUMNS)

    def encoded() -> tuple[str, list[tuple]]:
        return prepare_insert(
            db, Object.__table__, columns, [(0, 0, *(r[k] for k in _ROW_COLUMNS)) for r in rows]
        )

    statement, prepared = encoded() if place is None else ("", [])
    lock_project(db, project)
    feature_dim = check_features(project, rows)
    start = project.n_objects
    if place is not None:
        place(start)
        statement, prepared = encoded()
    execute_insert(
        db, statement, [(project.id, start + i, *row[2:]) for i, row in enumerate(prepared)]
    )
    for i, row in enumerate(rows):
        row["index"] = start + i
    project.n_objects = start + len(rows)
    if feature_dim is not None:
        project.feature_dim = feature_dim
    db.commit()
    return rows


def check_features(project: Project, rows: Sequence[dict]) -> int | None:
    lengths = {len(r["features"]) for r in rows if r.get("features") is not None}
    if not lengths:
        return None
    if len(lengths) > 1:
        raise InvalidInput(
            f"all feature vectors of a project have one length; this upload mixes lengths "
            f"{sorted(lengths)}"
        )
    (length,) = lengths
    if project.feature_dim is not None and length != project.feature_dim:
        raise InvalidInput(
            f"feature vectors of project {project.slug!r} have length {project.feature_dim}, "
            f"got length {length}"
        )
    for position, row in enumerate(rows):
        features = row.get("features")
        if features is not None and not all(math.isfinite(v) for v in features):
            raise InvalidInput(f"object {position} ({row['name']!r}) has a NaN or infinite feature")
    return length


def _check_image_urls(rows: Sequence[dict]) -> None:
    for position, row in enumerate(rows):
        url = row.get("image_url")
        if url is not None and not (
            url.startswith(("https://", "http://", "/media/"))
            and not any(c in url for c in "\"'<> ")
        ):
            raise InvalidInput(
                f"object {position} ({row['name']!r}): image_url must be an http(s) URL or a "
                "/media/ path without quotes, spaces or angle brackets"
            )


def parse_objects_csv(file: BinaryIO) -> list[ObjectCreate]:
    """Objects from a CSV with a ``name`` column and optional text, image_url, label, target,
    and feature columns f0, f1, ..., fk; read from ``file`` as it goes."""
    return [obj for _, obj in read_objects_csv(file, CSV_COLUMNS)]


def read_objects_csv(
    file: BinaryIO, columns: Sequence[str], where: str = "CSV"
) -> list[tuple[int, ObjectCreate]]:
    """Each row of the CSV as an object, with its line."""
    header, records = read_csv(file)
    if "name" not in header:
        raise InvalidInput(f"the {where} needs a 'name' column; its columns are {header}")
    feature_numbers = sorted(int(m.group(1)) for h in header if (m := _FEATURE_COLUMN.match(h)))
    if feature_numbers != list(range(len(feature_numbers))):
        raise InvalidInput(
            f"feature columns of the {where} must be f0..f{len(feature_numbers) - 1} without gaps"
        )
    unknown = [h for h in header if h not in columns and not _FEATURE_COLUMN.match(h)]
    if unknown:
        raise InvalidInput(
            f"unknown columns {unknown} in the {where}; allowed: {list(columns)}, f0..fk"
        )
    if len(set(header)) != len(header):
        raise InvalidInput(f"the {where} repeats a column: {header}")
    position = {h: i for i, h in enumerate(header)}
    objects: list[tuple[int, ObjectCreate]] = []
    for line, row in records:
        values: dict = {k: (row[position[k]] or None) for k in columns if k in position}
        try:
            if values.get("target") is not None:
                values["target"] = _number(values["target"], "target")
            if feature_numbers:
                values["features"] = [
                    _number(row[position[f"f{i}"]], f"f{i}") for i in feature_numbers
                ]
            obj = ObjectCreate.model_validate(values)
        except (ValueError, ValidationError) as error:
            raise InvalidInput(f"{where} line {line}: {_first_error(error)}") from error
        objects.append((line, obj))
    if not objects:
        raise InvalidInput(f"the {where} holds no rows")
    return objects


def _number(text: str, column: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"column {column}: {text[:40]!r} is not a number") from None


def _first_error(error: ValueError) -> str:
    if isinstance(error, ValidationError):
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"{where}: {first['msg']}" if where else first["msg"]
    return str(error)


def list_objects(db: Session, project: Project, offset: int, limit: int) -> list[Object]:
    return list(
        db.scalars(
            select(Object)
            .where(Object.project_id == project.id)
            .order_by(Object.index)
            .offset(offset)
            .limit(limit)
        )
    )


def get_object(db: Session, project: Project, index: int) -> Object:
    obj = db.scalar(select(Object).where(Object.project_id == project.id, Object.index == index))
    if obj is None:
        raise NotFound(f"project {project.slug!r} has no object {index}")
    return obj


def update_object(db: Session, project: Project, index: int, data: ObjectUpdate) -> Object:
    """Set the label, target and/or text of object ``index`` (null clears one)."""
    changes = data.model_dump(exclude_unset=True)
    if not changes:
        raise InvalidInput("nothing to change: give 'label', 'target' and/or 'text'")
    begin_write(db)
    obj = db.scalar(
        select(Object)
        .where(Object.project_id == project.id, Object.index == index)
        .with_for_update()
    )
    if obj is None:
        raise NotFound(f"project {project.slug!r} has no object {index}")
    for field, value in changes.items():
        setattr(obj, field, value)
    db.commit()
    return obj
