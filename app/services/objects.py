"""A project's objects: add them (JSON, CSV or a ZIP of images) and read them back."""

from __future__ import annotations

import csv
import io
import math
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from PIL import Image, UnidentifiedImageError
from pydantic import ValidationError
from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from app.config import get_settings
from app.db.models import Object, Project
from app.errors import InvalidInput, NotFound
from app.schemas.objects import ObjectCreate
from app.services.projects import lock_project

IMAGE_FORMATS = {"PNG": "png", "JPEG": "jpg", "GIF": "gif", "WEBP": "webp", "BMP": "bmp"}
CSV_COLUMNS = ("name", "text", "image_url", "label", "target")
_FEATURE_COLUMN = re.compile(r"^f(\d+)$")


def add_objects(db: Session, project: Project, objects: Sequence[ObjectCreate]) -> list[Object]:
    """Append ``objects`` to ``project``; their indices continue from the last one, forever."""
    if not objects:
        raise InvalidInput("no objects given")
    _check_image_urls(objects)
    lock_project(db, project)
    return _insert_locked(db, project, objects)


def _insert_locked(db: Session, project: Project, objects: Sequence[ObjectCreate]) -> list[Object]:
    """Insert ``objects`` after the project's last one; the caller holds the project's lock."""
    feature_dim = _check_features(project, objects)
    start = project.n_objects
    rows = [
        {"project_id": project.id, "index": start + i, **obj.model_dump()}
        for i, obj in enumerate(objects)
    ]
    db.execute(insert(Object), rows)
    project.n_objects = start + len(rows)
    if feature_dim is not None:
        project.feature_dim = feature_dim
    db.commit()
    return list(
        db.scalars(
            select(Object)
            .where(Object.project_id == project.id, Object.index >= start)
            .order_by(Object.index)
        )
    )


def _check_features(project: Project, objects: Sequence[ObjectCreate]) -> int | None:
    lengths = {len(o.features) for o in objects if o.features is not None}
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
    for position, obj in enumerate(objects):
        if obj.features is not None and not all(math.isfinite(v) for v in obj.features):
            raise InvalidInput(f"object {position} ({obj.name!r}) has a NaN or infinite feature")
    return length


def _check_image_urls(objects: Sequence[ObjectCreate]) -> None:
    for position, obj in enumerate(objects):
        url = obj.image_url
        if url is not None and not (
            url.startswith(("https://", "http://", "/media/"))
            and not any(c in url for c in "\"'<> ")
        ):
            raise InvalidInput(
                f"object {position} ({obj.name!r}): image_url must be an http(s) URL or a /media/ "
                "path without quotes, spaces or angle brackets"
            )


def parse_objects_csv(content: bytes) -> list[ObjectCreate]:
    """Objects from a CSV with a ``name`` column and optional text, image_url, label, target,
    and feature columns f0, f1, ..., fk."""
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InvalidInput("the CSV is not UTF-8 text") from error
    reader = csv.DictReader(io.StringIO(text))
    header = reader.fieldnames or []
    if "name" not in header:
        raise InvalidInput(f"the CSV needs a 'name' column; its columns are {header}")
    feature_numbers = sorted(int(m.group(1)) for h in header if (m := _FEATURE_COLUMN.match(h)))
    if feature_numbers != list(range(len(feature_numbers))):
        raise InvalidInput(f"feature columns must be f0..f{len(feature_numbers) - 1} without gaps")
    unknown = [h for h in header if h not in CSV_COLUMNS and not _FEATURE_COLUMN.match(h)]
    if unknown:
        raise InvalidInput(f"unknown CSV columns {unknown}; allowed: {list(CSV_COLUMNS)}, f0..fk")
    objects = []
    for line, row in enumerate(reader, start=2):
        values: dict = {k: (row.get(k) or None) for k in CSV_COLUMNS if k in header}
        try:
            if values.get("target") is not None:
                values["target"] = float(values["target"])
            if feature_numbers:
                values["features"] = [float(row[f"f{i}"]) for i in feature_numbers]
            objects.append(ObjectCreate.model_validate(values))
        except (TypeError, ValueError, ValidationError) as error:
            message = error.errors()[0]["msg"] if isinstance(error, ValidationError) else str(error)
            raise InvalidInput(f"CSV line {line}: {message}") from error
    if not objects:
        raise InvalidInput("the CSV holds no rows")
    return objects


def add_image_zip(db: Session, project: Project, content: bytes) -> list[Object]:
    """One object per image of a ZIP, named by its file name, stored under the data directory."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(content))
    except zipfile.BadZipFile as error:
        raise InvalidInput("the upload is not a ZIP archive") from error
    images: list[tuple[str, bytes, str]] = []
    with archive:
        for entry in archive.infolist():
            path = PurePosixPath(entry.filename.replace("\\", "/"))
            if entry.filename.startswith("/") or ".." in path.parts or ":" in path.parts[0]:
                raise InvalidInput(f"ZIP entry {entry.filename!r} escapes its folder")
            if entry.is_dir() or path.parts[0] == "__MACOSX" or path.name.startswith("._"):
                continue
            data = archive.read(entry)
            images.append((path.stem, data, _image_extension(entry.filename, data)))
    if not images:
        raise InvalidInput("the ZIP holds no images")
    folder = get_settings().data_dir / "media" / project.slug
    folder.mkdir(parents=True, exist_ok=True)
    lock_project(db, project)
    start = project.n_objects
    written: list[Path] = []
    objects = []
    try:
        for offset, (name, data, extension) in enumerate(images):
            filename = f"{start + offset}.{extension}"
            (folder / filename).write_bytes(data)
            written.append(folder / filename)
            objects.append(ObjectCreate(name=name, image_url=f"/media/{project.slug}/{filename}"))
        return _insert_locked(db, project, objects)
    except BaseException:
        db.rollback()
        for path in written:
            path.unlink(missing_ok=True)
        raise


def _image_extension(filename: str, data: bytes) -> str:
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.verify()
            image_format = image.format
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as error:
        raise InvalidInput(f"ZIP entry {filename!r} is not an image") from error
    if image_format not in IMAGE_FORMATS:
        raise InvalidInput(
            f"ZIP entry {filename!r} is a {image_format} image; "
            f"accepted: {', '.join(IMAGE_FORMATS)}"
        )
    return IMAGE_FORMATS[image_format]


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
