"""A project's objects: add them (JSON, CSV or a ZIP of images) and read them back."""

from __future__ import annotations

import io
import math
import re
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from PIL import Image
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import get_settings
from app.db.bulk import execute_insert, prepare_insert
from app.db.models import Object, Project
from app.db.session import begin_write
from app.errors import InvalidInput, NotFound, PayloadTooLarge
from app.schemas.objects import ObjectCreate, ObjectUpdate
from app.services.csv_io import read_csv
from app.services.projects import lock_project

IMAGE_FORMATS = {"PNG": "png", "JPEG": "jpg", "GIF": "gif", "WEBP": "webp", "BMP": "bmp"}
CSV_COLUMNS = ("name", "text", "image_url", "label", "target")
METADATA_FILE = "objects.csv"  # at the top of a ZIP of images: what it says about each image
METADATA_COLUMNS = ("name", "text", "label", "target")
NAME_MAX = 500  # characters of an object's name (ObjectCreate.name)
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
    _check_features(project, rows)
    return _insert(db, project, rows)


def _insert(
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
    feature_dim = _check_features(project, rows)
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


def _check_features(project: Project, rows: Sequence[dict]) -> int | None:
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
    return [obj for _, obj in _csv_objects(file, CSV_COLUMNS)]


def _metadata(data: bytes) -> dict[str, ObjectCreate]:
    """``objects.csv`` of a ZIP of images: each row by the name of the image it describes."""
    rows: dict[str, ObjectCreate] = {}
    for line, obj in _csv_objects(io.BytesIO(data), METADATA_COLUMNS, METADATA_FILE):
        if obj.name in rows:
            raise InvalidInput(f"{METADATA_FILE} line {line}: {obj.name!r} is described twice")
        rows[obj.name] = obj
    return rows


def _csv_objects(
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


def add_image_zip(db: Session, project: Project, file: BinaryIO) -> list[dict]:
    """One object per image of a ZIP, named by its file name, stored under the data directory.

    An ``objects.csv`` at the top of the ZIP may describe the images (columns ``name`` — an
    image's name, with or without its extension — and text, label, target, f0..fk).

    Nothing is trusted: each entry is unpacked in a stream that stops at the per-entry limit
    and at the limit on the whole ZIP (413 naming the entry), its image header is read and
    its pixel count checked before anything is written (422 naming the entry), and the
    images go to a staging folder first, so a refused upload writes no file under ``media/``.
    """
    settings = get_settings()
    entry_cap = int(settings.max_zip_entry_mb * 2**20)
    total_cap = int(settings.max_zip_total_mb * 2**20)
    try:
        archive = zipfile.ZipFile(file)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as error:
        raise InvalidInput("the upload is not a ZIP archive") from error
    images: list[tuple[str, str, Path]] = []  # object name, extension, staged file
    metadata: dict[str, ObjectCreate] = {}
    staging = Path(tempfile.mkdtemp(prefix=".upload-", dir=settings.data_dir))
    try:
        with archive:
            unpacked = 0
            for entry in archive.infolist():
                path = _entry_path(entry)
                if path is None:
                    continue
                data = _read_entry(archive, entry, min(entry_cap, total_cap - unpacked), entry_cap)
                unpacked += len(data)
                if entry.filename == METADATA_FILE:
                    metadata = _metadata(data)
                    continue
                extension = _image_extension(entry.filename, data, settings.max_image_pixels)
                if len(path.stem) > NAME_MAX:
                    raise InvalidInput(
                        f"ZIP entry {_shown(entry.filename)}: its name is longer than "
                        f"{NAME_MAX} characters"
                    )
                staged = staging / f"{len(images)}.{extension}"
                staged.write_bytes(data)
                images.append((path.stem, extension, staged))
        if not images:
            raise InvalidInput("the ZIP holds no images")
        objects = _describe(images, metadata)
        return _store_images(db, project, images, objects)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _entry_path(entry: zipfile.ZipInfo) -> PurePosixPath | None:
    """The entry's path, None for what a ZIP tool adds beside the files (folders, macOS
    resource forks); :class:`InvalidInput` for a path that leaves the archive's folder."""
    path = PurePosixPath(entry.filename.replace("\\", "/"))
    if entry.filename.startswith("/") or ".." in path.parts or ":" in path.parts[0]:
        raise InvalidInput(f"ZIP entry {_shown(entry.filename)} escapes its folder")
    if entry.is_dir() or path.parts[0] == "__MACOSX" or path.name.startswith("._"):
        return None
    return path


def _read_entry(
    archive: zipfile.ZipFile, entry: zipfile.ZipInfo, cap: int, entry_cap: int
) -> bytes:
    """The entry's bytes, unpacked in a stream that stops at ``cap`` bytes."""

    def too_large() -> PayloadTooLarge:
        if cap < entry_cap:
            return PayloadTooLarge(
                f"the ZIP unpacks to more than {get_settings().max_zip_total_mb:g} MiB in all "
                f"(the limit), passed at entry {_shown(entry.filename)}"
            )
        return PayloadTooLarge(
            f"ZIP entry {_shown(entry.filename)} unpacks to more than "
            f"{get_settings().max_zip_entry_mb:g} MiB (the limit for one entry)"
        )

    if entry.file_size > cap:  # what the entry declares; the stream below checks what it holds
        raise too_large()
    if entry.flag_bits & 0x1:
        raise InvalidInput(f"ZIP entry {_shown(entry.filename)} is encrypted")
    try:
        with archive.open(entry) as stream:
            data = stream.read(cap + 1)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError,
            ValueError, OSError) as error:  # fmt: skip
        raise InvalidInput(
            f"ZIP entry {_shown(entry.filename)} cannot be unpacked: {error}"
        ) from error
    if len(data) > cap:
        raise too_large()
    return data


def _describe(
    images: list[tuple[str, str, Path]], metadata: dict[str, ObjectCreate]
) -> list[ObjectCreate]:
    """One object per image, with what ``objects.csv`` says about it."""
    by_name: dict[str, int] = {}
    for position, (name, extension, _) in enumerate(images):
        by_name.setdefault(name, position)
        by_name.setdefault(f"{name}.{extension}", position)
    described: dict[int, ObjectCreate] = {}
    for name, row in metadata.items():
        position = by_name.get(name)
        if position is None:
            position = by_name.get(PurePosixPath(name).stem)
        if position is None:
            raise InvalidInput(f"{METADATA_FILE} describes {name!r}, but the ZIP has no such image")
        if position in described:
            raise InvalidInput(
                f"{METADATA_FILE} describes the image {images[position][0]!r} twice "
                f"(as {described[position].name!r} and {name!r})"
            )
        described[position] = row
    objects = []
    for position, (name, _, _) in enumerate(images):
        row = described.get(position)
        fields = row.model_dump(exclude={"name"}) if row is not None else {}
        objects.append(ObjectCreate(name=name, **fields))
    return objects


def _store_images(
    db: Session, project: Project, images: list[tuple[str, str, Path]], objects: list[ObjectCreate]
) -> list[dict]:
    """Move the staged images to ``media/<slug>/<index>.<ext>`` and insert their objects."""
    folder = get_settings().data_dir / "media" / project.slug
    rows = [o.model_dump() for o in objects]
    _check_features(project, rows)
    moved: list[Path] = []

    def place(start: int) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for offset, ((_, extension, staged), row) in enumerate(zip(images, rows, strict=True)):
            filename = f"{start + offset}.{extension}"
            staged.replace(folder / filename)
            moved.append(folder / filename)
            row["image_url"] = f"/media/{project.slug}/{filename}"

    try:
        return _insert(db, project, rows, place)
    except BaseException:
        db.rollback()
        for path in moved:
            path.unlink(missing_ok=True)
        raise


def _shown(name: str) -> str:
    """An entry's name for a message: quoted, and cut short past 80 characters."""
    return repr(name) if len(name) <= 80 else repr(name[:80]) + f"… ({len(name)} characters)"


def _image_extension(filename: str, data: bytes, max_pixels: int) -> str:
    """The extension for the image in ``data``, after its header and pixel count passed."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            if width * height > max_pixels:
                raise InvalidInput(
                    f"ZIP entry {_shown(filename)} is an image of {width} × {height} pixels; "
                    f"the limit is {max_pixels:,} pixels"
                )
            image.verify()
            image_format = image.format
    except Image.DecompressionBombError as error:
        raise InvalidInput(
            f"ZIP entry {_shown(filename)} has more pixels than the limit of {max_pixels:,}"
        ) from error
    except InvalidInput:
        raise
    except Exception as error:  # any failure of Pillow's many parsers on
        # hostile bytes (UnidentifiedImageError, OSError, struct.error, IndexError, ...)
        # means the entry is not an image we can use.
        raise InvalidInput(f"ZIP entry {_shown(filename)} is not an image") from error
    if image_format not in IMAGE_FORMATS:
        raise InvalidInput(
            f"ZIP entry {_shown(filename)} is a {image_format} image; "
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
