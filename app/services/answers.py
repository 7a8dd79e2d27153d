"""The answer log: import comparisons, and export every answer (JSON, CSV, NumPy)."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from typing import BinaryIO

import numpy as np
from numpy.typing import ArrayLike
from sqlalchemy import select
from sqlalchemy.orm import Session, aliased

from app.db.bulk import bind_value
from app.db.models import Answer, Object, Participant, Project, utcnow
from app.db.session import begin_write
from app.db.statistics import analyze_after_bulk
from app.errors import InvalidInput
from app.learning.shapes import Shape
from app.learning.triplets import check_triplets
from app.services import imports, shaped
from app.services.csv_io import read_csv, safe_cell
from app.services.import_chunks import answers_json, insert_answers
from app.services.projects import lock_project

EXPORT_COLUMNS = (
    "id", "kind", "a", "b", "c", "outcome", "a_name", "b_name", "c_name", "source", "strategy",
    "participant_id", "participant", "flagged", "reliability", "session_id", "server_ms",
    "client_ms", "position", "created_at", "shape", "objects", "choice",
)  # fmt: skip
# The columns read from the database; shape, objects and choice are made from them.
_READ_COLUMNS = (*EXPORT_COLUMNS[:-3], "objects", "choice", "choices")
MAX_INDEX = 2**31 - 1  # the largest object index a CSV may name


def check_pairs(pairs: np.ndarray, n_objects: int) -> np.ndarray:
    """Validate rows (a, b, outcome) with outcome in {−1, 0, 1}."""
    try:
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 3)
    except OverflowError as error:
        raise InvalidInput(
            f"pairs hold a value too large: object indices are below {n_objects}, "
            "outcomes are -1, 0 or 1"
        ) from error
    if not len(pairs):
        return pairs
    objects = pairs[:, :2]
    bad = (objects < 0) | (objects >= n_objects)
    if bad.any():
        row = int(np.argmax(bad.any(axis=1)))
        raise InvalidInput(
            f"pairs row {row} {pairs[row].tolist()}: object index out of range for "
            f"{n_objects} objects"
        )
    same = pairs[:, 0] == pairs[:, 1]
    if same.any():
        row = int(np.argmax(same))
        raise InvalidInput(f"pairs row {row} {pairs[row].tolist()} compares an object with itself")
    bad_outcome = ~np.isin(pairs[:, 2], (-1, 0, 1))
    if bad_outcome.any():
        row = int(np.argmax(bad_outcome))
        raise InvalidInput(
            f"pairs row {row} {pairs[row].tolist()}: outcome must be −1 (a better), "
            "0 (about the same) or 1 (b better)"
        )
    return pairs


def import_answers(
    db: Session, project: Project, triplets: ArrayLike, pairs: ArrayLike
) -> imports.Steps[tuple[int, int]]:
    """The steps (see :mod:`app.services.imports`) that store comparisons collected
    elsewhere (source ``import``), all or nothing: validated first, then written a chunk per
    transaction, hidden until the last. Result: how many triplets and pairs."""
    triplets = np.asarray(triplets, dtype=np.int64).reshape(-1, 3)
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 3)
    if not len(triplets) and not len(pairs):
        raise InvalidInput("nothing to import: give 'triplets' and/or 'pairs'")
    # A project's objects are never removed, so indices valid now stay valid.
    db.refresh(project)
    try:
        triplet_array = check_triplets(triplets, project.n_objects)
    except ValueError as error:
        raise InvalidInput(str(error)) from error
    pair_array = check_pairs(pairs, project.n_objects)
    yield True
    begin_write(db)
    import_id = imports.begin(db, project, "answers", len(triplet_array) + len(pair_array), None)
    db.commit()
    try:
        # Encoded once: the driver takes every row's values as they are.
        now = bind_value(db, Answer.__table__, "created_at", utcnow())
        for kind, array in (("triplet", triplet_array), ("pair", pair_array)):
            for first in range(0, len(array), imports.CHUNK_ROWS):
                yield False
                rows_json = answers_json(array[first : first + imports.CHUNK_ROWS])
                yield True
                begin_write(db)
                imports.touch(db, import_id)
                insert_answers(db, project.id, kind, rows_json, now, import_id)
                db.commit()
        yield True
        lock_project(db, project, durable=True)
        imports.end(db, import_id)
        first_id = imports.first_answer_id(db, import_id)
        if first_id is not None:
            imports.lower_watermarks(db, project, first_id)
        db.commit()  # durable: it also makes every chunk's commit before it reach the disk
    except BaseException:
        imports.discard(db, import_id)
        raise
    yield False  # the planner's statistics of the grown table, so the next export is quick
    analyze_after_bulk(db, {"answers": len(triplet_array) + len(pair_array)}, share=0.0)
    return len(triplet_array), len(pair_array)


def parse_answers_csv(file: BinaryIO) -> tuple[list[list[int]], list[list[int]]]:
    """Triplets and pairs from a CSV with columns kind, a, b, c, outcome (an export's layout):
    a triplet row leaves outcome empty, a pair row leaves c empty. Read from ``file`` as it
    goes; a problem is reported with its line and column."""
    header, records = read_csv(file)
    missing = [c for c in ("kind", "a", "b", "c", "outcome") if c not in header]
    if missing:
        raise InvalidInput(f"the CSV lacks the columns {missing}; it needs kind, a, b, c, outcome")
    kind, a, b, c, outcome = (header.index(k) for k in ("kind", "a", "b", "c", "outcome"))
    triplets: list[list[int]] = []
    pairs: list[list[int]] = []
    for line, row in records:
        try:
            if row[kind] == "triplet":
                triplets.append([_index(row, a, "a"), _index(row, b, "b"), _index(row, c, "c")])
            elif row[kind] == "pair":
                value = _integer(row[outcome], "outcome")
                if value not in (-1, 0, 1):
                    raise ValueError(
                        f"column outcome: {value} is not −1 (a better), 0 (about the same) "
                        "or 1 (b better)"
                    )
                pairs.append([_index(row, a, "a"), _index(row, b, "b"), value])
            elif row[kind] in ("odd_one_out", "rank"):
                raise ValueError(
                    f"{row[kind]} answers cannot be imported (triplets and pairs can: the "
                    "triplets a shaped study implies are GET …/answers/triplets.npy)"
                )
            else:
                raise ValueError(f"kind must be 'triplet' or 'pair', got {row[kind][:40]!r}")
        except ValueError as error:
            raise InvalidInput(f"CSV line {line}: {error}") from error
    return triplets, pairs


def _integer(text: str, column: str) -> int:
    text = text.strip()
    if not text:
        raise ValueError(f"column {column} is empty")
    if len(text) > 20 or not text.lstrip("+-").isdigit():
        raise ValueError(f"column {column}: {text[:40]!r} is not an integer")
    return int(text)


def _index(row: list[str], position: int, column: str) -> int:
    value = _integer(row[position], column)
    if not 0 <= value <= MAX_INDEX:
        raise ValueError(f"column {column}: {value} is not an object index (0 to {MAX_INDEX:,})")
    return value


def _export_statement(project: Project):  # type: ignore[no-untyped-def]
    names = [aliased(Object) for _ in range(3)]
    statement = select(
        Answer.id, Answer.kind, Answer.a, Answer.b, Answer.c, Answer.outcome,
        names[0].name, names[1].name, names[2].name, Answer.source, Answer.strategy,
        Answer.participant_id, Participant.external_id, Participant.flagged,
        Participant.reliability, Answer.session_id,
        Answer.server_ms, Answer.client_ms, Answer.position, Answer.created_at,
        Answer.objects, Answer.choice, Answer.choices,
    ).where(Answer.project_id == project.id, imports.visible_answers())  # fmt: skip
    for alias, column in zip(names, (Answer.a, Answer.b, Answer.c), strict=True):
        statement = statement.outerjoin(
            alias, (alias.project_id == Answer.project_id) & (alias.index == column)
        )
    statement = statement.outerjoin(Participant, Participant.id == Answer.participant_id)
    return statement.order_by(Answer.id).execution_options(stream_results=True, yield_per=5000)


def iter_answer_rows(db: Session, project: Project) -> Iterator[dict]:
    """Every answer as a row of :data:`EXPORT_COLUMNS`: ``shape`` names it (``triplet``,
    ``pair``, ``odd_one_out``, ``8-rank-2``), ``objects`` lists its objects as shown (the
    anchor first; a triplet's ``[a, b, c]``, a pair's ``[a, b]``) and ``choice`` is the
    chosen object (triplet, odd-one-out's odd one), the outcome (pair) or the picks in
    order (rank)."""
    for row in db.execute(_export_statement(project)):
        record = dict(zip(_READ_COLUMNS, row, strict=True))
        record["created_at"] = record["created_at"].isoformat()
        record["flagged"] = bool(record["flagged"]) if record["participant_id"] else False
        kind, objects, choices = record["kind"], record.pop("objects"), record.pop("choices")
        stored_choice = record.pop("choice")
        record["shape"] = shaped.label(kind, objects, choices)
        if kind == "triplet":
            record["objects"] = [record["a"], record["b"], record["c"]]
            record["choice"] = record["b"]
        elif kind == "pair":
            record["objects"], record["choice"] = [record["a"], record["b"]], record["outcome"]
        else:
            record["objects"] = shaped.listed(objects)
            record["choice"] = shaped.listed(choices) if kind == "rank" else stored_choice
        yield record


def stream_json(db: Session, project: Project) -> Iterator[bytes]:
    """A JSON array of every answer, produced a chunk at a time."""
    yield b"["
    buffer: list[str] = []
    first = True
    for record in iter_answer_rows(db, project):
        buffer.append(("" if first else ",") + json.dumps(record))
        first = False
        if len(buffer) >= 1000:
            yield "".join(buffer).encode()
            buffer.clear()
    yield ("".join(buffer) + "]").encode()


def stream_csv(db: Session, project: Project) -> Iterator[bytes]:
    """A CSV of every answer (header first), produced a chunk at a time.

    Text cells a spreadsheet would run as a formula (starting with = + - @, a tab or a
    carriage return: an object named ``=HYPERLINK(...)``) get a leading apostrophe; the JSON
    export keeps every value exact."""
    out = io.StringIO()
    # RFC 4180 line ends: with "\n" alone the csv module would not quote a "\r" inside a value.
    writer = csv.DictWriter(out, fieldnames=EXPORT_COLUMNS, lineterminator="\r\n")
    writer.writeheader()
    for count, record in enumerate(iter_answer_rows(db, project), start=1):
        writer.writerow(
            {k: json.dumps(v) if isinstance(v, list) else safe_cell(v) for k, v in record.items()}
        )
        if count % 2000 == 0:
            yield out.getvalue().encode()
            out.seek(0)
            out.truncate()
    yield out.getvalue().encode()


def triplets_array(db: Session, project: Project) -> np.ndarray:
    """The triplets of every answer as an int array (m, 3) of rows (a, b, c), in answer
    order: a triplet answer's own, and those an odd-one-out or a ranked grid implies
    (``app.learning.shapes.implied_triplets``, the rule training reads them by).

    Gold questions are left out, as training leaves them out (app/training/data.py): they
    are attention checks, not data, and an identity check's row (a, a, c) is no triplet in
    the format of app.learning and cblearn, whose checkers refuse it. The JSON and CSV
    exports keep them, marked with their strategy."""
    rows = db.execute(
        select(Answer.kind, Answer.a, Answer.b, Answer.c, Answer.objects, Answer.choices)
        .where(Answer.project_id == project.id, Answer.kind != "pair")
        .where((Answer.strategy.is_(None)) | (Answer.strategy != "gold"))
        .where(imports.visible_answers())
        .order_by(Answer.id)
    ).all()
    triplets = [triplet for row in rows for triplet in shaped.implied(*row)]
    return np.asarray(triplets, dtype=np.int64).reshape(-1, 3)


def shape_array(db: Session, project: Project, name: str) -> np.ndarray:
    """The answers of one shape as they were given, for tools that model the shape itself,
    as an int array in answer order (gold questions left out, as for triplets):

    ``odd_one_out``: rows (i, j, odd), the two kept as shown, the odd one last (SPoSE's
    order); ``{n}-rank-{k}`` (e.g. ``8-rank-2``): rows of n + 1, the anchor, the k picks in
    order, then the unpicked candidates as shown (psiz's order of a rank trial's stimulus
    set); ``triplet``: rows (anchor, chosen, other)."""
    if name == "odd_one_out" or name == "triplet":
        kind = name
    elif (match := _RANK_NAME.fullmatch(name)) is not None:
        kind = "rank"
        n, k = int(match[1]), int(match[2])
        try:
            Shape("rank", n, k)
        except ValueError as error:
            raise InvalidInput(str(error)) from error
    else:
        raise InvalidInput(
            f"unknown shape {name!r}: triplet, odd_one_out or n-rank-k (such as 8-rank-2)"
        )
    rows = db.execute(
        select(Answer.a, Answer.b, Answer.c, Answer.objects, Answer.choices)
        .where(Answer.project_id == project.id, Answer.kind == kind)
        .where((Answer.strategy.is_(None)) | (Answer.strategy != "gold"))
        .where(imports.visible_answers())
        .order_by(Answer.id)
    ).all()
    if kind != "rank":
        return np.asarray([row[:3] for row in rows], dtype=np.int64).reshape(-1, 3)
    trials = []
    for *_, objects, choices in rows:
        shown, picks = shaped.listed(objects) or [], shaped.listed(choices) or []
        if len(shown) == n + 1 and len(picks) == k:
            rest = [o for o in shown[1:] if o not in picks]
            trials.append([shown[0], *picks, *rest])
    return np.asarray(trials, dtype=np.int64).reshape(-1, n + 1)


_RANK_NAME = re.compile(r"([0-9])-rank-([0-9])")


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()
