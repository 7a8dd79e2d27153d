"""A project's objects: add them (JSON or CSV; a ZIP of images in :mod:`image_zip`), edit and
read them."""

from __future__ import annotations

import math
import pickle
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import Object, Project
from app.db.session import begin_write
from app.db.statistics import analyze_after_bulk
from app.errors import Conflict, InvalidInput, NotFound
from app.schemas.objects import ObjectCreate, ObjectUpdate
from app.services import imports
from app.services.csv_io import read_csv
from app.services.import_chunks import ObjectChunk, insert_objects
from app.services.projects import lock_project

CSV_COLUMNS = ("name", "text", "image_url", "label", "target")
_FEATURE_COLUMN = re.compile(r"^f(\d+)$")


@dataclass
class ObjectRows:
    """An upload's objects as the process that parsed and checked them (:func:`check_rows`)
    sends them: an :class:`~app.services.import_chunks.ObjectChunk` of ``imports.CHUNK_ROWS``
    rows each, pickled, unpickled one at a time while they are stored, so that the server
    never holds 250,000 rows as Python objects (the garbage collector's full passes over them
    held the interpreter lock, and every request, for seconds)."""

    chunks: Iterable[bytes]
    count: int
    feature_length: int | None

    def __len__(self) -> int:
        return self.count

    def parts(self) -> Iterator[ObjectChunk]:
        for chunk in self.chunks:
            yield pickle.loads(chunk)


def add_objects(db: Session, project: Project, objects: Sequence[ObjectCreate]) -> list[dict]:
    """Append ``objects`` to ``project``; their indices continue from the last one, forever."""
    rows = [o.model_dump() for o in objects]
    imports.run(import_objects(db, project, rows))
    return rows


def import_objects(
    db: Session,
    project: Project,
    rows: list[dict] | ObjectRows,
    place: Callable[[int], None] | None = None,
    stored: Callable[[int, ObjectChunk], None] | None = None,
) -> imports.Steps[int]:
    """The steps (see :mod:`app.services.imports`) that append ``rows`` (validated
    ``ObjectCreate`` dumps) after the project's last object, all or nothing, a chunk per
    transaction, hidden until the last; the result is how many. Each row (of a list) gets its
    ``index`` as it is written. ``place(start)`` may set the rows (e.g. their image URLs)
    once their first index is known. ``stored(first, chunk)`` (if given) sees each chunk
    written, ``first`` its first index (``chunk.public_json(first)`` is the chunk as replied).

    Everything is checked before the first row is written (an :class:`ObjectRows` was checked
    where it was parsed); a second upload of objects into the project while one runs is
    refused (409): the indices from ``n_objects`` on are the running one's.
    """
    if not len(rows):
        raise InvalidInput("no objects given")
    length = rows.feature_length if isinstance(rows, ObjectRows) else check_rows(rows)
    check_feature_length(project, length)
    imports.sweep(db, project.id)
    yield True
    lock_project(db, project)
    running = imports.pending_objects_import(db, project)
    if running is not None:
        raise Conflict(
            f"objects are being uploaded into project {project.slug!r} (since "
            f"{running.started_at:%Y-%m-%d %H:%M:%S} UTC); send these when that upload ends"
        )
    check_feature_length(project, length)
    start = project.n_objects
    import_id = imports.begin(db, project, "objects", len(rows), start)
    db.commit()
    try:
        yield False  # placing and rendering the first chunk need no turn
        if place is not None:
            place(start)
        index = start
        for chunk in _chunks(rows, start, public=stored is not None):
            yield True
            begin_write(db)
            imports.touch(db, import_id)
            insert_objects(db, project.id, index, chunk)
            db.commit()
            yield False  # not in the writing step's turn:
            if stored is not None:
                stored(index, chunk)
            index += chunk.n_rows
        yield True
        lock_project(db, project)
        imports.end(db, import_id)
        project.n_objects = start + len(rows)
        if length is not None:
            project.feature_dim = length
        db.commit()
    except BaseException:
        imports.discard(db, import_id)
        raise
    yield False  # the planner's statistics of the grown table (app.db.statistics)
    analyze_after_bulk(db, {"objects": len(rows)}, share=0.0)
    return len(rows)


def _chunks(rows: list[dict] | ObjectRows, start: int, public: bool) -> Iterator[ObjectChunk]:
    """The rows ``imports.CHUNK_ROWS`` at a time, the first of them to be object ``start``;
    a list's rows get their ``index``."""
    if isinstance(rows, ObjectRows):
        yield from rows.parts()
        return
    for first in range(0, len(rows), imports.CHUNK_ROWS):
        chunk = rows[first : first + imports.CHUNK_ROWS]
        for offset, row in enumerate(chunk):
            row["index"] = start + first + offset
        yield ObjectChunk.of(chunk, public)


def check_rows(rows: Sequence[dict]) -> int | None:
    """The checks of an upload's objects that need no project (image URLs, feature vectors
    of one length and finite values; seconds for 250,000 rows: run where parsing runs); the
    feature length (None without features)."""
    _check_image_urls(rows)
    lengths = {len(r["features"]) for r in rows if r.get("features") is not None}
    if len(lengths) > 1:
        raise InvalidInput(
            f"all feature vectors of a project have one length; this upload mixes lengths "
            f"{sorted(lengths)}"
        )
    _check_finite(rows)
    return lengths.pop() if lengths else None


def check_feature_length(project: Project, length: int | None) -> None:
    if length is not None and project.feature_dim is not None and length != project.feature_dim:
        raise InvalidInput(
            f"feature vectors of project {project.slug!r} have length {project.feature_dim}, "
            f"got length {length}"
        )


def check_features(project: Project, rows: Sequence[dict]) -> int | None:
    """:func:`check_rows` and :func:`check_feature_length`: the feature length of ``rows``."""
    length = check_rows(rows)
    check_feature_length(project, length)
    return length


def _check_finite(rows: Sequence[dict]) -> None:
    for position, row in enumerate(rows):
        features = row.get("features")
        if features is not None and not all(math.isfinite(v) for v in features):
            raise InvalidInput(f"object {position} ({row['name']!r}) has a NaN or infinite feature")


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
            .where(Object.project_id == project.id, imports.visible_objects(project.id))
            .order_by(Object.index)
            .offset(offset)
            .limit(limit)
        )
    )


def get_object(db: Session, project: Project, index: int) -> Object:
    obj = db.scalar(
        select(Object).where(
            Object.project_id == project.id,
            Object.index == index,
            imports.visible_objects(project.id),
        )
    )
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
        .where(
            Object.project_id == project.id,
            Object.index == index,
            imports.visible_objects(project.id),
        )
        .with_for_update()
    )
    if obj is None:
        raise NotFound(f"project {project.slug!r} has no object {index}")
    for field, value in changes.items():
        setattr(obj, field, value)
    db.commit()
    return obj
