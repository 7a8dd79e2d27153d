"""Parse a large upload in a process of its own, so its CPU never holds up a worker's request.

Parsing and validating 40 MiB of CSV or JSON is seconds of CPU. In a thread of the server it
would hold the interpreter lock that the event loop and every worker request need (a thread
gets it back only every 5 ms, each time it waits), and pydantic's JSON validation holds it
without a break. So an upload larger than ``TRIPLETLAB_UPLOAD_PROCESS_MB`` is parsed in a
process forked for it. A file upload reaches it by its path (the server's open temporary
file, as ``/proc/<pid>/fd/<n>``), not as 40 MiB of pickled bytes; it comes back compact:
answers as two int64 arrays, objects as pickled chunks of ``imports.CHUNK_ROWS`` rows already
rendered as the database and the reply take them (:class:`~app.services.import_chunks.
ObjectChunk`), unpickled a chunk at a time. Smaller uploads are parsed in a worker thread (a
process costs a few tens of milliseconds).

Call these from a worker thread, never on the event loop: they block until parsed.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import pickle
import tempfile
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any, BinaryIO

import numpy as np
from pydantic import TypeAdapter, ValidationError

from app.config import get_settings
from app.errors import InvalidInput
from app.services import imports
from app.services.import_chunks import ObjectChunk
from app.services.objects import ObjectRows


def objects_rows(file: BinaryIO | None, json_body: bytes | None = None) -> list[dict] | ObjectRows:
    """The objects of a CSV upload (``file``) or a JSON body, validated (all but what needs
    the project: :func:`app.services.objects.check_rows`), as insert rows: a list, or for a
    large upload its chunks as the parsing process pickled them."""
    data, size = _content(file, json_body)
    if size <= _threshold():
        return _objects_rows_here(data, json_body is not None)[0]
    # The parsing process writes its chunks into a temporary file of this process (deleted
    # when closed, or when the process ends), read back one chunk at a time: a reply of
    # 80 MiB unpickled at once held the interpreter lock for 0.3 s at load average 17.
    output = tempfile.TemporaryFile()  # noqa: SIM115 (closed with the ObjectRows)
    path = _path(output)
    if path is None:
        output = tempfile.NamedTemporaryFile()  # noqa: SIM115
        path = output.name
    lengths, count, feature_length = _in_process(
        _objects_rows_chunks, data, json_body is not None, path
    )
    return ObjectRows(_FileChunks(output, lengths), count, feature_length)


def answer_arrays(
    file: BinaryIO | None, json_body: bytes | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Triplets and pairs of a CSV upload (``file``) or a JSON body, as int64 arrays (m, 3)."""
    data, size = _content(file, json_body)
    if size <= _threshold():
        return _answer_arrays_here(data, json_body is not None)
    return _in_process(_answer_arrays_in_process, data, json_body is not None)


def _threshold() -> float:
    return get_settings().upload_process_mb * 2**20


def _content(file: BinaryIO | None, json_body: bytes | None) -> tuple[BinaryIO | bytes, int]:
    if json_body is not None:
        return json_body, len(json_body)
    assert file is not None
    size = file.seek(0, io.SEEK_END)
    file.seek(0)
    return file, size


class _FileChunks:
    """The chunks a parsing process wrote one after the other into ``file``, read back one
    at a time (a read waits without the interpreter lock)."""

    def __init__(self, file: BinaryIO, lengths: list[int]) -> None:
        self.file = file
        self.lengths = lengths

    def __iter__(self) -> Iterator[bytes]:
        self.file.seek(0)
        for length in self.lengths:
            yield self.file.read(length)


def _in_process(fn: Any, data: BinaryIO | bytes, is_json: bool, *args: Any) -> Any:
    """``fn(content, is_json, *args)`` in a process of its own, which ends with the call (and gives
    back the memory a large parse took); ``content`` is the file's path when it has one the
    process can open, else its bytes."""
    path = None if isinstance(data, bytes) else _path(data)
    if path is not None:
        try:
            return _run_in_process(fn, path, is_json, *args)
        except OSError:
            pass  # the process may not open another's files here: send the bytes
    return _run_in_process(fn, data if isinstance(data, bytes) else data.read(), is_json, *args)


def _run_in_process(fn: Any, content: str | bytes, is_json: bool, *args: Any) -> Any:
    # A fork server: started once (it imports the parsers, not the server), it forks each
    # parsing process from its own single thread, so a parse starts in milliseconds and
    # inherits no thread state from the server. It ends when this process does.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__, "app.services.objects", "app.services.answers"])
    try:
        with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            return pool.submit(fn, content, is_json, *args).result()
    except BrokenProcessPool as error:
        raise InvalidInput(
            "the upload could not be parsed: its parsing process ended (out of memory?)"
        ) from error


def _path(file: BinaryIO) -> str | None:
    """A path another process of this user can open ``file`` by (Linux), or None."""
    try:
        path = f"/proc/{os.getpid()}/fd/{file.fileno()}"  # a spooled file moves to disk here
    except (AttributeError, OSError, io.UnsupportedOperation):
        return None
    return path if os.path.exists(path) else None


@contextmanager
def _opened(data: str | bytes | BinaryIO) -> Iterator[BinaryIO | bytes]:
    """The content ``data`` names: a file opened by its path (closed after), or as it is."""
    if isinstance(data, str):
        with open(data, "rb") as file:
            yield file
    else:
        yield data


def parse_json(body: bytes, json_type: Any) -> Any:
    """``body`` validated as ``json_type``, or :class:`InvalidInput` naming the first problem."""
    try:
        return TypeAdapter(json_type).validate_json(body)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        if first["type"] == "json_invalid":
            raise InvalidInput(f"malformed JSON: {first['msg']}") from error
        suffix = f" (and {error.error_count() - 1} more errors)" if error.error_count() > 1 else ""
        raise InvalidInput(
            f"invalid body at {where or 'top level'}: {first['msg']}{suffix}"
        ) from error


def _objects_rows_here(data: BinaryIO | bytes, is_json: bool) -> tuple[list[dict], int | None]:
    from app.schemas.objects import ObjectCreate
    from app.services.objects import check_rows, parse_objects_csv

    if is_json:
        assert isinstance(data, bytes)
        objects = parse_json(data, list[ObjectCreate])
    else:
        objects = parse_objects_csv(io.BytesIO(data) if isinstance(data, bytes) else data)
    rows = [o.model_dump() for o in objects]
    return rows, check_rows(rows)  # here too: the checks that need no project


def _objects_rows_chunks(
    data: str | bytes, is_json: bool, output: str
) -> tuple[list[int], int, int | None]:
    """Parse and check the objects, write them as pickled chunks of ``imports.CHUNK_ROWS``
    into the file ``output``; the chunks' lengths, the row count and the feature length."""
    with _opened(data) as content:
        rows, feature_length = _objects_rows_here(content, is_json)
    lengths = []
    with open(output, "wb") as out:
        for start in range(0, len(rows), imports.CHUNK_ROWS):
            chunk = ObjectChunk.of(rows[start : start + imports.CHUNK_ROWS])
            lengths.append(out.write(pickle.dumps(chunk, protocol=pickle.HIGHEST_PROTOCOL)))
    return lengths, len(rows), feature_length


def _answer_arrays_in_process(data: str | bytes, is_json: bool) -> tuple[np.ndarray, np.ndarray]:
    with _opened(data) as content:
        return _answer_arrays_here(content, is_json)


def _answer_arrays_here(data: BinaryIO | bytes, is_json: bool) -> tuple[np.ndarray, np.ndarray]:
    from app.schemas.answers import AnswersImport
    from app.services.answers import parse_answers_csv

    if is_json:
        assert isinstance(data, bytes)
        body = parse_json(data, AnswersImport)
        triplets, pairs = body.triplets, body.pairs
    else:
        triplets, pairs = parse_answers_csv(io.BytesIO(data) if isinstance(data, bytes) else data)
    return (
        np.asarray(triplets, dtype=np.int64).reshape(-1, 3),
        np.asarray(pairs, dtype=np.int64).reshape(-1, 3),
    )
