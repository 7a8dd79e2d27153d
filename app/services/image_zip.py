"""A ZIP of images as a project's objects, unpacked as if it were hostile."""

from __future__ import annotations

import io
import shutil
import struct
import tempfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from PIL import Image
from sqlalchemy.orm import Session

from app.config import get_settings
from app.db.models import Project
from app.errors import InvalidInput, PayloadTooLarge
from app.schemas.objects import ObjectCreate
from app.services import imports
from app.services.objects import check_features, import_objects, read_objects_csv

IMAGE_FORMATS = {"PNG": "png", "JPEG": "jpg", "GIF": "gif", "WEBP": "webp", "BMP": "bmp"}
METADATA_FILE = "objects.csv"  # at the top of a ZIP of images: what it says about each image
METADATA_COLUMNS = ("name", "text", "label", "target")
NAME_MAX = 500  # characters of an object's name (ObjectCreate.name)


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
    # The count the archive declares, before zipfile reads an entry; then the entries it
    # really lists (a lying count cannot pass: the body limit bounds that listing).
    _check_entry_count(_declared_entries(file), settings.max_zip_entries)
    try:
        archive = zipfile.ZipFile(file)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as error:
        raise InvalidInput("the upload is not a ZIP archive") from error
    _check_entry_count(len(archive.infolist()), settings.max_zip_entries)
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


_END_RECORD = struct.Struct("<4s4H2LH")  # a ZIP's end of central directory record
_END_SIGNATURE = b"PK\x05\x06"


def _declared_entries(file: BinaryIO) -> int:
    """The entry count in the ZIP's end record (0 when there is none to read: zipfile then
    says what is wrong); the file is left at its start."""
    size = file.seek(0, io.SEEK_END)
    tail_size = min(size, _END_RECORD.size + 65_535)  # the record, then a comment
    file.seek(size - tail_size)
    tail = file.read(tail_size)
    file.seek(0)
    at = tail.rfind(_END_SIGNATURE)
    if at < 0 or len(tail) - at < _END_RECORD.size:
        return 0
    return _END_RECORD.unpack_from(tail, at)[4]  # entries in the whole central directory


def _check_entry_count(count: int, limit: int) -> None:
    if count > limit:
        raise PayloadTooLarge(
            f"the ZIP holds {count:,} entries; the limit is {limit:,} (TRIPLETLAB_MAX_ZIP_ENTRIES)"
        )


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
    check_features(project, rows)
    moved: list[Path] = []

    def place(start: int) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for offset, ((_, extension, staged), row) in enumerate(zip(images, rows, strict=True)):
            filename = f"{start + offset}.{extension}"
            staged.replace(folder / filename)
            moved.append(folder / filename)
            row["image_url"] = f"/media/{project.slug}/{filename}"

    try:
        imports.run(import_objects(db, project, rows, place))
        return rows
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


def _metadata(data: bytes) -> dict[str, ObjectCreate]:
    """``objects.csv`` of a ZIP of images: each row by the name of the image it describes."""
    rows: dict[str, ObjectCreate] = {}
    for line, obj in read_objects_csv(io.BytesIO(data), METADATA_COLUMNS, METADATA_FILE):
        if obj.name in rows:
            raise InvalidInput(f"{METADATA_FILE} line {line}: {obj.name!r} is described twice")
        rows[obj.name] = obj
    return rows
