"""An import's chunks as JSON text, each written by one set-based ``INSERT``.

Writing 2,000 rows with ``executemany`` makes 2,000 tuples in the server and binds their values
one at a time, holding the interpreter lock; those tuples, and the dicts and lists of an
objects upload, also wake the garbage collector, whose full passes over the server's heap held
the lock — and with it every worker's request — for 0.1-0.6 s at a time during a 40 MiB import
(profiled with a stack sampler in the server while ``bench/upload_stall.py`` ran). Here a chunk
travels as one JSON text parameter that the database unpacks (SQLite's ``json_each``,
PostgreSQL's ``json_array_elements``), so the server makes a handful of Python objects per
chunk; the text of an objects upload is even made where it was parsed, in a process of its
own (:mod:`app.services.upload_parsing`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import TypeAdapter
from sqlalchemy.orm import Session

from app.schemas.objects import ObjectPublic

OBJECT_COLUMNS = ("name", "text", "image_url", "features", "label", "target")
_PUBLIC = TypeAdapter(ObjectPublic)
_INDEX_PREFIX = b'{"index":0,'  # how ObjectPublic's JSON starts (index is its first field)


@dataclass
class ObjectChunk:
    """A chunk of an objects upload as the database and the reply take it.

    ``rows_json``: a JSON list of the rows (``OBJECT_COLUMNS``, null ones left out), the
    ``INSERT``'s one parameter; ``public``: each row's ``ObjectPublic`` JSON without its
    leading ``{"index":N,`` (the indices are known only when the chunk is written), or None
    when nobody asked for the reply.
    """

    rows_json: str
    n_rows: int
    public: list[bytes] | None = None

    @classmethod
    def of(cls, rows: Sequence[dict], public: bool = True) -> ObjectChunk:
        """The chunk of ``rows`` (``ObjectCreate`` dumps)."""
        listed = [{k: r[k] for k in OBJECT_COLUMNS if r.get(k) is not None} for r in rows]
        # allow_nan=False: a NaN was refused before (check_rows); never write one as text.
        text = json.dumps(listed, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        fragments = None
        if public:
            cut = len(_INDEX_PREFIX)
            fragments = [
                _PUBLIC.dump_json(ObjectPublic.model_validate({**r, "index": 0}))[cut:]
                for r in rows
            ]
        return cls(text, len(rows), fragments)

    def public_json(self, first_index: int) -> bytes:
        """The rows as the items of a JSON list of ``ObjectPublic`` (without its brackets),
        numbered from ``first_index``."""
        assert self.public is not None
        return b",".join(
            [b'{"index":%d,%s' % (first_index + i, part) for i, part in enumerate(self.public)]
        )


def answers_json(rows: np.ndarray) -> str:
    """Integer rows (m, 3) as a JSON list of lists, made in C from one flat tuple (not a
    list and a tuple per row)."""
    if not len(rows):
        return "[]"
    flat = tuple(np.ascontiguousarray(rows, dtype=np.int64).ravel().tolist())
    return "[" + ("[%d,%d,%d]," * len(rows) % flat)[:-1] + "]"


def insert_objects(db: Session, project_id: int, first_index: int, chunk: ObjectChunk) -> None:
    """Insert the chunk's rows as the project's objects ``first_index``, ``first_index + 1``, …
    in the current transaction."""
    if _dialect(db) == "sqlite":
        fields = ", ".join(f"json_extract(value, '$.{k}')" for k in OBJECT_COLUMNS)
        statement = (
            'INSERT INTO objects (project_id, "index", name, text, image_url, features, label, '
            f"target) SELECT ?, ? + key, {fields} FROM json_each(?)"
        )
    else:
        statement = (
            'INSERT INTO objects (project_id, "index", name, text, image_url, features, label, '
            "target) SELECT %s, %s + t.n - 1, t.r->>'name', t.r->>'text', t.r->>'image_url', "
            "t.r->'features', t.r->>'label', (t.r->>'target')::double precision "
            "FROM json_array_elements(%s::json) WITH ORDINALITY AS t(r, n)"
        )
    db.connection().exec_driver_sql(statement, (project_id, first_index, chunk.rows_json))


def insert_answers(
    db: Session, project_id: int, kind: str, rows_json: str, created_at: Any, import_id: int
) -> None:
    """Insert imported answers of ``kind`` ("triplet": rows [a, b, c]; "pair": rows
    [a, b, outcome]) in the current transaction; ``created_at`` as the driver takes it."""
    if _dialect(db) == "sqlite":
        a, b, third = (f"json_extract(value, '$[{i}]')" for i in range(3))
        source = "json_each(?)"
    else:
        a, b = "(t.r->>0)::integer", "(t.r->>1)::integer"
        third = "(t.r->>2)::integer" if kind == "triplet" else "(t.r->>2)::smallint"
        source = "json_array_elements(%s::json) AS t(r)"
    c, outcome = (third, "NULL") if kind == "triplet" else ("NULL", third)
    mark = "?" if _dialect(db) == "sqlite" else "%s"
    statement = (
        "INSERT INTO answers (project_id, source, kind, a, b, c, outcome, created_at, import_id) "
        f"SELECT {mark}, 'import', {mark}, {a}, {b}, {c}, {outcome}, {mark}, {mark} FROM {source}"
    )
    db.connection().exec_driver_sql(statement, (project_id, kind, created_at, import_id, rows_json))


def _dialect(db: Session) -> str:
    return db.get_bind().dialect.name
