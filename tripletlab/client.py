"""A Python client of Triplet Lab's researcher API, for notebooks and scripts.

One :class:`Client` per server and API key. Tables come back as pandas frames (answers,
objects, participants, models, predictions); the triplets as the int array ``(m, 3)`` of
rows ``(anchor, near, far)`` that :mod:`app.learning` and cblearn take; a refusal raises the
:class:`~tripletlab.errors.TripletLabError` of its status, with the API's ``detail``.

>>> from tripletlab import Client
>>> client = Client("http://127.0.0.1:8000", "tl_...")        # doctest: +SKIP
>>> client.create_project("faces", "Faces")                     # doctest: +SKIP
"""

from __future__ import annotations

import io
import time
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np

from tripletlab.errors import JobFailed, raise_for_status

if TYPE_CHECKING:
    import pandas as pd

# What the server unpacks from a ZIP (app/services/image_zip.py), and its optional table.
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp"})
OBJECTS_CSV = "objects.csv"
# The columns a CSV of objects may have besides the features f0..fk (README: objects route).
OBJECT_COLUMNS = ("name", "text", "image_url", "label", "target")
FINISHED = frozenset({"succeeded", "failed", "cancelled"})
# Integer columns of the answers export, kept integer where a pair leaves ``c`` empty.
_ANSWER_INTEGERS = ("id", "a", "b", "c", "outcome", "participant_id", "position")
_PAGE = 10_000  # the largest page the list routes give


def _pandas():  # type: ignore[no-untyped-def]
    try:
        import pandas
    except ImportError as error:  # pragma: no cover - the dev and client extras install it
        raise ImportError(
            "tables come back as pandas frames: pip install 'tripletlab[client]'"
        ) from error
    return pandas


class Client:
    """Triplet Lab's researcher API at ``base_url``, with the API key ``api_key``.

    Parameters
    ----------
    base_url : str
        Where the server answers, e.g. ``http://127.0.0.1:8000``.
    api_key : str
        A key printed by the first ``tripletlab serve`` or ``tripletlab keys create``.
    timeout : float, default=120
        Seconds to wait for one response (an upload of many images may take a while).
    progress : bool, default=True
        Show a progress bar while :meth:`train` waits for its job.
    transport : httpx.BaseTransport, optional
        Another way to reach the server (tests pass an in-process one).

    Examples
    --------
    >>> with Client("http://127.0.0.1:8000", key) as client:         # doctest: +SKIP
    ...     client.triplets("faces").shape
    (1200, 3)
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 120.0,
        progress: bool = True,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.progress = progress
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=timeout,
            transport=transport,
        )

    def close(self) -> None:
        """Close the connections (a ``with Client(...)`` block does it at its end)."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.base_url!r})"

    # -- requests -------------------------------------------------------------------------

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Send any request of the API (``path`` from ``/api/...``); raise its refusal.

        For the routes this class has no method for, e.g.
        ``client.request("GET", "/api/models/3/ranking").json()``.
        """
        response = self._http.request(method, path, **kwargs)
        raise_for_status(response)
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs).json()

    def _rows(self, path: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Every row of a list route answering ``{"data", "count"}``, a page at a time."""
        rows: list[dict[str, Any]] = []
        while True:
            page = self._json(
                "GET", path, params={**(params or {}), "offset": len(rows), "limit": _PAGE}
            )
            rows += page["data"]
            if not page["data"] or len(rows) >= page["count"]:
                return rows

    # -- projects -------------------------------------------------------------------------

    def create_project(self, slug: str, name: str, **fields: Any) -> dict[str, Any]:
        """Create a project; ``fields`` are the route's others (``instructions``,
        ``consent``, ``question``, ``pair_question``). A taken slug raises ``Conflict``."""
        return self._json("POST", "/api/projects", json={"slug": slug, "name": name, **fields})

    def project(self, slug: str) -> dict[str, Any]:
        """A project with its counts of objects and answers."""
        return self._json("GET", f"/api/projects/{slug}")

    def projects(self) -> list[dict[str, Any]]:
        """The projects this key sees (an admin's: all)."""
        return self._rows("/api/projects")

    def update_project(self, slug: str, **fields: Any) -> dict[str, Any]:
        """Change a project's name, instructions, consent or wording."""
        return self._json("PATCH", f"/api/projects/{slug}", json=fields)

    def delete_project(self, slug: str, *, force: bool = False) -> None:
        """Delete a project; one that holds answers needs ``force=True``."""
        self.request("DELETE", f"/api/projects/{slug}", params={"force": force})

    # -- objects --------------------------------------------------------------------------

    def upload_objects(
        self, slug: str, objects: pd.DataFrame | Iterable[Mapping[str, Any] | str] | str | Path
    ) -> pd.DataFrame:
        """Append objects to a project; the new objects come back with their ``index``.

        ``objects`` is one of:

        - a list of dicts (``name`` and optionally ``text``, ``image_url``, ``features``,
          ``label``, ``target``), or of strings (each a name, shown as text);
        - a pandas frame with those columns (``features`` as a column of lists, or as
          columns ``f0``, ``f1``, …);
        - a folder of images (PNG, JPEG, GIF, WebP, BMP; one object per image, named by its
          file name, in the order of the names), optionally with an ``objects.csv``
          (``name``, ``text``, ``label``, ``target``, ``f0``…); other files are left out;
        - the path of a ``.csv`` or a ``.zip`` of images, sent as it is.
        """
        path = f"/api/projects/{slug}/objects"
        if isinstance(objects, str | Path):
            response = self._upload_path(path, Path(objects))
        elif hasattr(objects, "to_csv") and hasattr(objects, "columns"):
            response = self.request(
                "POST", path, content=_frame_csv(objects), headers={"content-type": "text/csv"}
            )
        else:
            rows = [{"name": o} if isinstance(o, str) else dict(o) for o in objects]
            response = self.request("POST", path, json=rows)
        return _pandas().DataFrame(response.json()["data"])

    def _upload_path(self, route: str, path: Path) -> httpx.Response:
        if path.is_dir():
            archive = _zip_folder(path)
            files = {"file": (f"{path.name or 'images'}.zip", archive, "application/zip")}
            return self.request("POST", route, files=files)
        suffix = path.suffix.lower()
        if suffix == ".zip":
            with path.open("rb") as file:
                return self.request(
                    "POST", route, files={"file": (path.name, file, "application/zip")}
                )
        if suffix == ".csv":
            return self.request(
                "POST", route, content=path.read_bytes(), headers={"content-type": "text/csv"}
            )
        raise ValueError(f"{path}: give a folder of images, a .zip of images or a .csv")

    def objects(self, slug: str) -> pd.DataFrame:
        """Every object of a project, by ``index``."""
        return _pandas().DataFrame(self._rows(f"/api/projects/{slug}/objects"))

    # -- collection -----------------------------------------------------------------------

    def set_plan(self, slug: str, plan: Mapping[str, Any]) -> dict[str, Any]:
        """Set the collection plan (strategies with weights and budgets, redundancy,
        questions per session, gold and repeat rates, completion); returns it as stored."""
        return self._json("PUT", f"/api/projects/{slug}/plan", json=dict(plan))

    def plan(self, slug: str) -> dict[str, Any]:
        """The project's plan."""
        return self._json("GET", f"/api/projects/{slug}/plan")

    def plan_progress(self, slug: str) -> dict[str, Any]:
        """Per strategy the questions asked, the answers received and the budget."""
        return self._json("GET", f"/api/projects/{slug}/plan/progress")

    def link(self, slug: str) -> dict[str, Any]:
        """Where workers go: ``worker_url``, ``prolific_url``, ``mturk_url`` and
        ``mturk_external_question``."""
        return self._json("GET", f"/api/projects/{slug}/link")

    def simulate(
        self,
        slug: str,
        answers: int = 500,
        *,
        workers: int = 4,
        noise: float = 0.1,
        seed: int = 0,
    ) -> int:
        """Let simulated workers answer ``answers`` questions through the worker API, as
        ``tripletlab simulate`` does: a pilot before the crowd, or a tutorial without one.

        They answer triplets from the objects' feature vectors (each answer flipped with
        probability ``noise``), odd-one-outs and ranked grids from the same distances (a
        random answer with probability ``noise``) and pairs by the objects' ``target``;
        their answers are stored with source ``simulated``. Returns the number of answers
        given (fewer when the study has nothing more to ask). Objects without feature
        vectors, or an unknown project, raise ``app.simulate.SimulationError``.
        """
        from app.simulate import simulate

        done = simulate(
            self.base_url,
            slug,
            self._http.headers["Authorization"].removeprefix("Bearer "),
            workers=workers,
            answers=answers,
            noise=noise,
            seed=seed,
        )
        if done.errors and not done.answers:
            raise RuntimeError(f"simulated workers failed: {done.errors[0]}")
        return done.answers

    def participants(self, slug: str) -> pd.DataFrame:
        """Each participant's answers and quality figures (gold accuracy, fast share,
        position bias, consistency) and flag."""
        return _pandas().DataFrame(self._json("GET", f"/api/projects/{slug}/participants")["data"])

    # -- answers --------------------------------------------------------------------------

    def answers(self, slug: str) -> pd.DataFrame:
        """Every answer, one row each: ``kind``, the objects ``a``, ``b``, ``c`` (a triplet
        ``(anchor, chosen, other)``; a pair ``(a, b)`` with ``outcome`` −1 / 0 / 1) and their
        names, ``source``, ``strategy``, participant, session, response times, ``flagged``,
        ``created_at``; ``shape``, ``objects`` as shown and ``choice`` (a ranked grid's picks
        in order) for every shape."""
        pd = _pandas()
        rows = self._json("GET", f"/api/projects/{slug}/answers", params={"format": "json"})
        if not rows:  # the CSV export has its header even without rows: the same columns
            csv = self.request("GET", f"/api/projects/{slug}/answers", params={"format": "csv"})
            return pd.read_csv(io.StringIO(csv.text))
        frame = pd.DataFrame(rows)
        for column in _ANSWER_INTEGERS:
            if column in frame:
                frame[column] = frame[column].astype("Int64")
        if "created_at" in frame:
            frame["created_at"] = pd.to_datetime(frame["created_at"], format="ISO8601")
        return frame

    def triplets(self, slug: str) -> np.ndarray:
        """The triplet answers as an int64 array ``(m, 3)``, rows ``(a, b, c)`` meaning a
                is closer to b than to c: ``triplets.npy``, the format of cblearn and
        :mod:`app.learning`. Gold questions (attention checks) are left out, as training
                leaves them out; :meth:`answers` has them."""
        response = self.request("GET", f"/api/projects/{slug}/answers/triplets.npy")
        return np.load(io.BytesIO(response.content), allow_pickle=False).reshape(-1, 3)

    def shape_answers(self, slug: str, shape: str) -> np.ndarray:
        """One shape's answers as given, an int64 array: ``"odd_one_out"`` rows
        ``(i, j, odd)``; ``"8-rank-2"`` (any ``n-rank-k``) rows of the anchor, the ``k``
        picks in order and the unpicked candidates; gold questions left out
        (``GET …/answers/{shape}.npy``). :meth:`triplets` has the triplets they imply."""
        response = self.request("GET", f"/api/projects/{slug}/answers/{shape}.npy")
        return np.load(io.BytesIO(response.content), allow_pickle=False)

    def import_answers(
        self,
        slug: str,
        triplets: np.ndarray | Iterable[Iterable[int]] | None = None,
        pairs: np.ndarray | Iterable[Iterable[int]] | None = None,
    ) -> dict[str, int]:
        """Import comparisons collected elsewhere (source ``import``), all or nothing:
        ``triplets`` rows ``(a, b, c)``, ``pairs`` rows ``(a, b, outcome)``."""
        body = {
            name: np.asarray(rows, dtype=np.int64).reshape(-1, width).tolist()
            for name, rows, width in (("triplets", triplets, 3), ("pairs", pairs, 3))
            if rows is not None
        }
        return self._json("POST", f"/api/projects/{slug}/answers", json=body)

    # -- training and predictions ---------------------------------------------------------

    def train(
        self,
        slug: str,
        kind: str,
        params: Mapping[str, Any] | None = None,
        wait: bool = True,
        *,
        timeout: float | None = None,
        poll_seconds: float = 0.5,
    ) -> dict[str, Any]:
        """Train a model of ``kind`` (``embedding``, ``tripletboost``, ``kernel``,
        ``metricboost``, ``svmcompare``, ``comprf``) on the answers so far.

        With ``wait`` (the default) it follows the job with a progress bar and returns the
        model: ``id``, ``version``, ``n_answers`` and its honest figures in ``metrics``; a
        job that fails raises :class:`~tripletlab.errors.JobFailed` with the job's error.
        Without, it returns the queued job (``id``, ``status``); :meth:`wait` follows it.
        A request that could not succeed (too few answers, no labels) raises
        ``InvalidInput`` saying what is missing, and queues nothing.
        """
        job = self._json(
            "POST",
            f"/api/projects/{slug}/models",
            json={"kind": kind, "params": dict(params or {})},
        )
        if not wait:
            return job
        return self.wait(job["id"], timeout=timeout, poll_seconds=poll_seconds)

    def job(self, job_id: int) -> dict[str, Any]:
        """A job: ``status``, ``progress`` (0 to 1), ``error``, ``model_id``."""
        return self._json("GET", f"/api/jobs/{job_id}")

    def wait(
        self, job_id: int, *, timeout: float | None = None, poll_seconds: float = 0.5
    ) -> dict[str, Any]:
        """Follow a job until it ends and return its model (see :meth:`train`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        job = self.job(job_id)
        with _ProgressBar(self.progress, f"{job['kind']} on {job['project_slug']}") as bar:
            while job["status"] not in FINISHED:
                bar.update(job["progress"], job["progress_text"])
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"job {job_id} still {job['status']} after {timeout} s")
                time.sleep(poll_seconds)
                job = self.job(job_id)
            bar.update(1.0 if job["status"] == "succeeded" else job["progress"], job["status"])
        if job["status"] != "succeeded":
            raise JobFailed(job)
        models = self._json(
            "GET", f"/api/projects/{job['project_slug']}/models", params={"kind": job["kind"]}
        )["data"]
        return next(model for model in models if model["id"] == job["model_id"])

    def models(self, slug: str, kind: str | None = None) -> pd.DataFrame:
        """Every model of a project (of ``kind``), its figures flattened into columns
        ``metrics.*``: the learning curve."""
        params = {"kind": kind} if kind else {}
        rows = self._json("GET", f"/api/projects/{slug}/models", params=params)["data"]
        return _pandas().json_normalize(rows)

    def advice(
        self, slug: str, kind: str, target: float = 0.9, metric: str | None = None
    ) -> dict[str, Any]:
        """How many more answers a model of ``kind`` needs to reach ``target``, from the
        learning curve of the models trained so far: ``status`` (``reached``,
        ``reachable`` with ``further_answers`` and its interval, ``not_reachable``, or
        ``insufficient_data`` before 3 models at different answer counts), the fitted curve
        and its band."""
        params: dict[str, Any] = {"kind": kind, "target": target}
        if metric is not None:
            params["metric"] = metric
        return self._json("GET", f"/api/projects/{slug}/advice", params=params)

    def predictions(self, model_id: int, k: int = 1) -> pd.DataFrame:
        """A model's predictions for the unlabelled objects, one row each: TripletBoost's
        label (or abstention) and scores, CompRF's label and class shares (or target and
        spread), or the ``k``-NN label in an embedding or MetricBoost's metric."""
        rows = self._json("GET", f"/api/models/{model_id}/predictions", params={"k": k})
        return _pandas().DataFrame(rows["data"])

    def embedding(self, model_id: int, dims: int = 2) -> np.ndarray:
        """The coordinates of every object, ``(n_objects, dims)``: an embedding model's
        points, or a kernel model's kernel PCA."""
        found = self._json("GET", f"/api/models/{model_id}/embedding", params={"dims": dims})
        return np.asarray(found["coordinates"], dtype=float).reshape(-1, found["dims"])

    def neighbors(self, model_id: int, index: int, k: int = 10) -> pd.DataFrame:
        """The ``k`` objects most similar to object ``index``."""
        rows = self._json("GET", f"/api/models/{model_id}/neighbors/{index}", params={"k": k})
        return _pandas().DataFrame(rows["data"])


class _ProgressBar:
    """rich's progress bar for a job (nothing at all when ``show`` is false)."""

    def __init__(self, show: bool, description: str) -> None:
        self._progress = None
        self._description = description
        if show:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.percentage:>3.0f}%"),
                TimeElapsedColumn(),
            )
            self._task = self._progress.add_task(description, total=1.0)

    def __enter__(self) -> _ProgressBar:
        if self._progress is not None:
            self._progress.start()
        return self

    def update(self, fraction: float, text: str) -> None:
        if self._progress is not None:
            label = f"{self._description}: {text}" if text else self._description
            self._progress.update(self._task, completed=fraction, description=label[:70])

    def __exit__(self, *exc_info: object) -> None:
        if self._progress is not None:
            self._progress.stop()


def _frame_csv(frame: pd.DataFrame) -> bytes:
    """A frame of objects as the CSV the objects route reads: a ``features`` column of lists
    becomes ``f0``…``fk``, and labels stay as written (a label column with gaps is a float
    column in pandas: 3.0 is sent as 3)."""
    frame = frame.copy()
    if "features" in frame:
        features = np.asarray(frame.pop("features").tolist(), dtype=float)
        for j in range(features.shape[1]):
            frame[f"f{j}"] = features[:, j]
    unknown = [
        c
        for c in frame.columns
        if c not in OBJECT_COLUMNS and not (str(c)[:1] == "f" and str(c)[1:].isdigit())
    ]
    if unknown:
        raise ValueError(
            f"unknown object columns {unknown}: the columns are {', '.join(OBJECT_COLUMNS)} "
            "and the features (a column 'features' of lists, or f0, f1, ...)"
        )
    if "name" not in frame:
        raise ValueError("objects need a 'name' column")
    if "label" in frame:
        frame["label"] = frame["label"].map(_label_text).astype(object)
    return frame.to_csv(index=False, lineterminator="\n").encode()


def _label_text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    if isinstance(value, float | np.floating) and float(value).is_integer():
        return str(int(value))
    return str(value)


def _zip_folder(folder: Path) -> bytes:
    """The images of ``folder`` (and its ``objects.csv``) as a ZIP, in the order of names."""
    images = sorted(
        p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES
    )
    if not images:
        raise ValueError(
            f"{folder}: no images (PNG, JPEG, GIF, WebP or BMP) in this folder; "
            "give one image per object"
        )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        table = folder / OBJECTS_CSV
        if table.is_file():
            archive.write(table, OBJECTS_CSV, compress_type=zipfile.ZIP_DEFLATED)
        for image in images:  # already compressed: stored as they are
            archive.write(image, image.name)
    return buffer.getvalue()
