"""Simulated crowd workers: play a study against a running server through the worker API.

Each simulated worker answers from the objects' feature vectors with the oracle of
:mod:`app.learning.triplets` (Euclidean distance, each answer flipped with probability
``noise``); an odd-one-out and a ranked grid with the same oracle and noise model
(``TripletOracle.answer``: the object outside the closest pair; the ``k`` candidates nearest
the anchor, in order; with probability ``noise`` one of the other answers); a pair is
judged by the objects' ``target`` when they have one, else by the sum of their features,
"about the same" within ``tie_margin`` standard deviations of that quality. The default
margin, one standard
deviation, makes about half of random pairs ties, as in the SVMcompare paper's simulations
(ρ = 1/2; its sushi ratings give 71%); people asked "or are they about the same?" give many
ties, and SVMcompare needs them: with the former margin of 0.1 (6–9% ties) it found no
comparison function on digits or diabetes. Simulated workers report human-like response
times (log-normal, median 1.5 s) as their ``client_ms`` without waiting them, so the
project's quality checks judge them as they would a careful person; their answers are
recorded with source ``simulated``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import numpy as np

from app.learning.shapes import shape_of
from app.learning.triplets import make_oracle

WAIT_S = 0.2  # pause before asking again when the study waits for other workers' answers
MAX_WAITS = 50  # consecutive waits before a simulated worker gives up

DEFAULT_TIE_MARGIN = 1.0


class SimulationError(Exception):
    """The simulation cannot start: unknown project, objects without features, no server."""


@dataclass
class SimulationResult:
    answers: int = 0
    sessions: int = 0
    errors: list[str] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)


class PatientTransport(httpx.HTTPTransport):
    """Waits out the worker API's rate limits: a 429 is retried after its Retry-After."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        for _ in range(20):
            response = super().handle_request(request)
            if response.status_code != 429:
                return response
            response.close()
            time.sleep(min(float(response.headers.get("retry-after", "1")), 30.0))
        return response


def fetch_objects(client: httpx.Client, slug: str, api_key: str) -> tuple[np.ndarray, np.ndarray]:
    headers = {"Authorization": f"Bearer {api_key}"}
    rows: list[dict] = []
    while True:
        try:
            response = client.get(
                f"/api/projects/{slug}/objects",
                params={"offset": len(rows), "limit": 10_000},
                headers=headers,
            )
        except httpx.TransportError as error:
            raise SimulationError(
                f"cannot reach the server at {client.base_url}: {error}"
            ) from error
        if response.status_code != 200:
            detail = response.text
            with contextlib.suppress(ValueError, KeyError, TypeError):
                detail = response.json()["detail"]
            raise SimulationError(
                f"cannot read the objects of project {slug!r}: {response.status_code} {detail}"
            )
        page = response.json()
        rows += page["data"]
        if len(rows) >= page["count"] or not page["data"]:
            break
    if not rows:
        raise SimulationError(f"project {slug!r} has no objects to compare")
    lacking = [r["index"] for r in rows if r["features"] is None]
    if lacking:
        raise SimulationError(
            f"simulation answers from feature vectors, and {len(lacking)} of the {len(rows)} "
            f"objects of {slug!r} have none (first: index {lacking[0]})"
        )
    X = np.array([r["features"] for r in rows], dtype=float)
    targets = np.array([np.nan if r["target"] is None else r["target"] for r in rows])
    return X, targets


def simulate(
    base_url: str,
    slug: str,
    api_key: str,
    *,
    workers: int = 20,
    answers: int = 2000,
    noise: float = 0.1,
    tie_margin: float = DEFAULT_TIE_MARGIN,
    seed: int = 0,
    think_ms: float = 0.0,
    on_answer: Callable[[int], None] | None = None,
    objects: tuple[np.ndarray, np.ndarray] | None = None,
    client_factory: Callable[[], httpx.Client] | None = None,
) -> SimulationResult:
    """Answer ``answers`` questions with ``workers`` concurrent simulated workers.

    ``objects`` (features, targets) spares reading them over the API; ``client_factory``
    makes each worker's HTTP client (default: one to ``base_url``; the demo passes clients
    of the app in this process).
    """

    def connect() -> httpx.Client:
        if client_factory is not None:
            return client_factory()
        return httpx.Client(base_url=base_url, timeout=30, transport=PatientTransport())

    if objects is None:
        with connect() as client:
            X, targets = fetch_objects(client, slug, api_key)
    else:
        X, targets = objects
    oracle = make_oracle(X, noise=noise, random_state=seed)
    quality = targets if not np.isnan(targets).any() else X.sum(axis=1)
    margin = tie_margin * float(np.std(quality) or 1.0)
    result = SimulationResult()
    lock = threading.Lock()
    rng = np.random.default_rng(seed)
    pair_noise = rng.random  # shared generator guarded by the lock

    def take_one() -> bool:
        with lock:
            if result.answers >= answers:
                return False
            result.answers += 1
            return True

    def give_back() -> None:
        with lock:
            result.answers -= 1

    def work(number: int) -> None:
        with connect() as client:
            generation = 0
            waits = 0
            while True:
                participant = f"sim-{seed}-{number}-{generation}"
                opened = client.post(
                    f"/api/w/{slug}/sessions", json={"participant": participant, "simulated": True}
                )
                if opened.status_code != 201:
                    result.errors.append(opened.text)
                    return
                body = opened.json()
                session, headers = (
                    body["session_id"],
                    {"Authorization": f"Bearer {body['session_token']}"},
                )
                with lock:
                    result.sessions += 1
                nxt = None  # each answer's reply carries the next question
                while True:
                    if not take_one():
                        return
                    started = time.perf_counter()
                    if nxt is None:
                        fetched = client.get(f"/api/w/sessions/{session}/next", headers=headers)
                        if fetched.status_code != 200:
                            give_back()
                            result.errors.append(fetched.text)
                            return
                        nxt = fetched.json()
                    if nxt.get("wait"):
                        give_back()
                        if waits >= MAX_WAITS:
                            return
                        waits += 1  # the next questions wait for answers given now
                        time.sleep(min(WAIT_S, nxt.get("retry_after") or WAIT_S))
                        nxt = None  # ask again
                        continue
                    if nxt.get("done"):
                        give_back()
                        if nxt.get("completion_code") is None:
                            return  # the study has nothing more to ask
                        break
                    waits = 0
                    query = nxt["query"]
                    choice = answer_for(query)
                    if think_ms:
                        time.sleep(think_ms / 1000)
                    with lock:
                        reported_ms = think_ms + float(rng.lognormal(np.log(1500.0), 0.4))
                    posted = client.post(
                        f"/api/w/sessions/{session}/answers",
                        json={"token": query["token"], "choice": choice, "client_ms": reported_ms},
                        headers=headers,
                    )
                    elapsed = (time.perf_counter() - started) * 1000
                    if posted.status_code != 201:
                        give_back()
                        result.errors.append(posted.text)
                        nxt = None
                        continue
                    nxt = posted.json().get("next")
                    with lock:
                        result.latencies_ms.append(elapsed)
                        done = result.answers
                    if on_answer is not None:
                        on_answer(done)
                generation += 1

    def answer_for(query: dict) -> int | list[int]:
        indices = [o["index"] for o in query["objects"]]
        if query["kind"] in ("odd_one_out", "rank"):
            shape = shape_of(indices, query["kind"], query.get("k"))
            with lock:  # the oracle's generator is shared by the workers' threads
                chosen = oracle.answer(shape, [indices])[0]
            return [int(c) for c in chosen] if shape.type == "rank" else int(chosen)
        if query["kind"] == "triplet":
            anchor, left, right = indices
            closer_left = bool(oracle(np.array([anchor]), np.array([left]), np.array([right]))[0])
            return left if closer_left else right
        left, right = indices
        difference = quality[right] - quality[left]
        with lock:
            flip = pair_noise() < noise
        verdict = 0 if abs(difference) < margin else int(np.sign(difference))
        if flip:
            verdict = int(rng.choice([v for v in (-1, 0, 1) if v != verdict]))
        return verdict

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return result


def simulate_in_process(
    slug: str,
    objects: tuple[np.ndarray, np.ndarray],
    *,
    answers: int,
    workers: int = 4,
    noise: float = 0.1,
    seed: int = 0,
    on_answer: Callable[[int], None] | None = None,
) -> SimulationResult:
    """:func:`simulate` against the app in this process (no server needed): the same worker
    API, plan, quality checks and recording, through Starlette's in-process client."""
    import warnings

    with warnings.catch_warnings():  # Starlette's notice about httpx, not ours to act on
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    from app.config import get_settings
    from app.main import create_app

    settings = get_settings()
    # One local "client" plays every worker: per-address and per-session rate limits of the
    # worker API (where the settings have them) are for the crowd, not for this.
    unlimited = {
        name: 0.0
        for name in ("worker_rate_session", "worker_rate_address")
        if name in type(settings).model_fields
    }
    app = create_app(settings.model_copy(update={"run_jobs": False, **unlimited}))
    return simulate(
        "http://in-process",
        slug,
        "",
        workers=workers,
        answers=answers,
        noise=noise,
        seed=seed,
        on_answer=on_answer,
        objects=objects,
        client_factory=lambda: TestClient(app, base_url="http://in-process"),
    )
