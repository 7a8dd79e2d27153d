"""The edge of the API: integers out of range, NUL characters, headers, the OpenAPI document."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import select

from app.db.models import Model, Project
from tests.factories import make_objects, make_project, set_plan

HUGE = 10**20  # above 2**63: overflows SQLite and 64-bit integers
BIG = 3_000_000_000  # above 2**31 - 1: overflows PostgreSQL's INTEGER


@pytest.fixture
def project(client, admin_headers):
    make_project(client, admin_headers, "edge")
    make_objects(client, admin_headers, "edge", 5)
    return "edge"


@pytest.fixture
def model(db, project) -> int:
    """A stored model row (its artifact is never loaded: every request here is refused)."""
    project_id = db.scalar(select(Project.id).where(Project.slug == "edge"))
    row = Model(
        project_id=project_id,
        kind="kernel",
        version=1,
        n_answers=0,
        training_seconds=0.0,
        artifact=b"",
    )
    db.add(row)
    db.commit()
    return row.id


@pytest.mark.parametrize("value", [BIG, HUGE, 2**63, -1])
@pytest.mark.parametrize(
    ("method", "path", "field"),
    [
        ("GET", "/api/jobs/{v}", "job_id"),
        ("DELETE", "/api/jobs/{v}", "job_id"),
        ("GET", "/api/projects/edge/objects/{v}", "index"),
        ("POST", "/api/projects/edge/participants/{v}/flag", "participant_id"),
        ("POST", "/api/projects/edge/participants/{v}/unflag", "participant_id"),
        ("GET", "/api/models/{v}/embedding", "model_id"),
        ("GET", "/api/models/1/neighbors/{v}", "index"),
        ("GET", "/api/projects/edge/objects?offset={v}", "offset"),
    ],
)
def test_integers_out_of_range_answer_422_naming_the_field(
    client, admin_headers, model, method, path, field, value
):
    path = path.replace("/models/1/", f"/models/{model}/")
    response = client.request(method, path.format(v=value), headers=admin_headers)
    assert response.status_code == 422, response.text
    assert field in response.json()["detail"]
    # Nothing broke: the next request on the same client is served.
    assert client.get("/api/projects/edge", headers=admin_headers).status_code == 200


def test_an_id_just_inside_the_range_is_a_plain_404(client, admin_headers, project):
    assert client.get(f"/api/jobs/{2**31 - 1}", headers=admin_headers).status_code == 404
    got = client.get(f"/api/projects/edge/objects/{2**31 - 1}", headers=admin_headers)
    assert got.status_code == 404


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/api/projects/edge/answers", {"triplets": [[0, 1, HUGE]]}, "triplets.0.2"),
        ("/api/projects/edge/answers", {"pairs": [[0, 2**63, 1]]}, "pairs.0.1"),
        ("/api/models/1/predict", {"objects": [HUGE]}, "objects.0"),
        ("/api/models/1/clusters", {"n_clusters": 2, "random_state": HUGE}, "random_state"),
        ("/api/models/1/triplets", {"triplets": [[0, 1, BIG]]}, "triplets.0.2"),
    ],
)
def test_body_integers_out_of_range_answer_422_naming_the_field(
    client, admin_headers, model, path, body, field
):
    path = path.replace("/models/1/", f"/models/{model}/")
    response = client.post(path, json=body, headers=admin_headers)
    assert response.status_code == 422, response.text
    assert field in response.json()["detail"]
    assert client.get("/api/projects/edge", headers=admin_headers).json()["n_answers"] == 0


def test_a_csv_triplet_index_of_2_63_is_reported_as_too_large(client, admin_headers, project):
    csv = f"kind,a,b,c,outcome\ntriplet,0,1,{2**63},\n".encode()
    response = client.post(
        "/api/projects/edge/answers",
        files={"file": ("a.csv", csv, "text/csv")},
        headers=admin_headers,
    )
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    # The CSV reader names the value, its place and the range (never "negative index").
    assert str(2**63) in detail and "column c" in detail and "2,147,483,647" in detail
    assert "negative" not in detail


def test_a_huge_worker_choice_is_refused_by_name(client, admin_headers, project):
    set_plan(client, admin_headers, "edge")
    opened = client.post("/api/w/edge/sessions", json={}).json()
    headers = {"Authorization": f"Bearer {opened['session_token']}"}
    query = client.get(f"/api/w/sessions/{opened['session_id']}/next", headers=headers).json()
    response = client.post(
        f"/api/w/sessions/{opened['session_id']}/answers",
        json={"token": query["query"]["token"], "choice": HUGE},
        headers=headers,
    )
    assert response.status_code == 422
    assert "choice" in response.json()["detail"]


@pytest.mark.parametrize(
    ("method", "path", "body", "where"),
    [
        ("POST", "/api/projects", {"slug": "nul", "name": "a\x00b"}, "body.name"),
        ("PATCH", "/api/projects/edge", {"instructions": "x\x00"}, "body.instructions"),
        ("POST", "/api/projects/edge/objects", [{"name": "o"}, {"name": "\x00"}], "body.1.name"),
        ("POST", "/api/projects/edge/objects", [{"name": "o", "label": "\x00"}], "body.0.label"),
        ("POST", "/api/w/edge/sessions", {"participant": "a\x00"}, "body.participant"),
        ("PUT", "/api/projects/edge/plan", {"strategies": [{"kind": "\x00"}]}, "strategies.0"),
        ("GET", "/api/projects/edge%00", None, "path"),
        ("GET", "/api/projects/edge/jobs?status=q%00", None, "query.status"),
    ],
)
def test_nul_characters_are_refused_on_both_databases(
    client, admin_headers, project, method, path, body, where
):
    before = client.get("/api/projects", headers=admin_headers).json()
    response = client.request(method, path, json=body, headers=admin_headers)
    assert response.status_code == 422, response.text
    assert where in response.json()["detail"]
    assert "NUL" in response.json()["detail"]
    assert client.get("/api/projects", headers=admin_headers).json() == before
    objects = client.get("/api/projects/edge/objects", headers=admin_headers).json()
    assert objects["count"] == 5


def test_an_escaped_backslash_u0000_is_ordinary_text(client, admin_headers):
    # The six characters \u0000 typed as text (JSON "\\u0000") are not a NUL.
    response = client.post(
        "/api/projects",
        content=b'{"slug": "text", "name": "a \\\\u0000 b"}',
        headers={**admin_headers, "content-type": "application/json"},
    )
    assert response.status_code == 201, response.text
    assert response.json()["name"] == "a \\u0000 b"


def test_every_response_says_nosniff(client, admin_headers, project):
    responses = [
        client.get("/api/projects", headers=admin_headers),
        client.get("/api/projects/none", headers=admin_headers),
        client.get("/api/w/edge"),
        client.get("/static/worker.js"),
        client.get("/media/none.png"),
        client.get("/w/edge"),
        client.get("/openapi.json"),
        client.post(  # refused by the body size limit, before any route
            "/api/projects", content=b"x" * (3 * 2**20), headers=admin_headers
        ),
    ]
    assert responses[-1].status_code == 413
    for response in responses:
        assert response.headers["x-content-type-options"] == "nosniff", response.url


def test_frame_ancestors_only_mechanical_turk_when_the_plan_says_so(client, admin_headers, project):
    policy = client.get("/w/edge").headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy
    set_plan(client, admin_headers, "edge")
    policy = client.get("/w/edge").headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy
    set_plan(client, admin_headers, "edge", mturk=True)
    policy = client.get("/w/edge").headers["content-security-policy"]
    ancestors = re.search(r"frame-ancestors ([^;]*)", policy).group(1).split()
    assert ancestors and all(re.fullmatch(r"https://[a-z]+\.mturk\.com", a) for a in ancestors)
    assert "https://workersandbox.mturk.com" in ancestors
    assert "*" not in policy.split("frame-ancestors")[1]


def test_openapi_declares_every_path_parameter_and_the_error_bodies(client):
    document = client.get("/openapi.json").json()
    undeclared = []
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "path"}
            if set(re.findall(r"{(\w+)}", path)) - declared:
                undeclared.append(f"{method.upper()} {path}")
            for status in ("401", "403", "404", "409", "413", "422"):
                assert status in operation["responses"], f"{method} {path} lacks {status}"
            body = operation["responses"]["422"]["content"]["application/json"]["schema"]
            assert body == {"$ref": "#/components/schemas/ValidationErrorBody"}
    assert not undeclared
    schemas = document["components"]["schemas"]
    assert set(schemas["ValidationErrorBody"]["properties"]) == {"detail", "errors"}
    worker = document["paths"]["/api/w/sessions/{session_id}/answers"]["post"]["responses"]
    assert {"410", "429"} <= set(worker)


def test_openapi_lists_paths_in_reading_order_though_worker_sessions_match_first(client):
    # app.main matches the worker session routes before every other router; the document
    # still lists the routers in their reading order, and the two hot routes, which read
    # Authorization themselves, document it as a header parameter like the others.
    paths = list(client.get("/openapi.json").json()["paths"])
    assert paths[0] == "/api/projects"
    worker = [p for p in paths if p.startswith("/api/w/")]
    assert worker == [
        "/api/w/{slug}",
        "/api/w/{slug}/sessions",
        "/api/w/sessions/{session_id}/next",
        "/api/w/sessions/{session_id}/answers",
    ]
    assert paths.index(worker[0]) > paths.index("/api/projects/{slug}/participants")
    assert paths.index(worker[-1]) < paths.index("/api/projects/{slug}/models")
    document = client.get("/openapi.json").json()["paths"]
    for path, method in ((worker[2], "get"), (worker[3], "post")):
        parameters = {(p["in"], p["name"]) for p in document[path][method]["parameters"]}
        assert parameters == {("path", "session_id"), ("header", "authorization")}


def test_docs_and_redoc_load_nothing_from_other_hosts(client):
    for page in ("/docs", "/redoc"):
        response = client.get(page)
        assert response.status_code == 200
        urls = re.findall(r"""(?:src|href)=["']([^"']+)""", response.text)
        assert urls, page
        for url in urls:
            assert url.startswith("/vendor/"), (page, url)
            asset = client.get(url)
            assert asset.status_code == 200 and len(asset.content) > 500, url
        assert "https://" not in response.text.split("<body>")[0].replace("https://fastapi", "")


def test_plan_weights_are_bounded_so_their_sum_stays_finite(client, admin_headers, project):
    plan = {"strategies": [{"kind": "random", "weight": 1e308}, {"kind": "pairs", "weight": 1e308}]}
    response = client.put("/api/projects/edge/plan", json=plan, headers=admin_headers)
    assert response.status_code == 422
    assert "strategies.0.weight" in response.json()["detail"]


WORKER_LIMIT = 8 * 2**10  # TRIPLETLAB_MAX_WORKER_BODY_KB's default


@pytest.mark.parametrize(
    "path", ["/api/w/edge/sessions", "/api/w/sessions/no-such-session/answers"]
)
def test_a_worker_body_over_a_few_kib_is_413_before_the_route_reads_it(client, project, path):
    padded = b'{"participant": "' + b"x" * WORKER_LIMIT + b'"}'
    announced = client.post(path, content=padded, headers={"content-type": "application/json"})

    def pieces():  # no Content-Length: sent chunked, counted as it arrives
        yield b'{"participant": "'
        for _ in range(40):
            yield b"x" * 2**10
        yield b'"}'

    streamed = client.post(path, content=pieces(), headers={"content-type": "application/json"})
    for response in (announced, streamed):
        assert response.status_code == 413, response.text
        assert response.json() == {
            "detail": "request body larger than the worker API's limit of 8 KiB"
        }
    # Refused before the route ran: the session it would have opened does not exist.
    opened = client.post("/api/w/edge/sessions", json={"participant": "x" * 100})
    assert opened.status_code == 201, opened.text


def test_researcher_uploads_keep_the_upload_limit(client, admin_headers, project):
    names = "\n".join(f"object {i} " + "y" * 200 for i in range(400))  # ~90 KiB
    response = client.post(
        "/api/projects/edge/objects",
        content=f"name\n{names}\n".encode(),
        headers={**admin_headers, "content-type": "text/csv"},
    )
    assert response.status_code == 201, response.text
    assert response.json()["count"] == 400


def test_the_worker_body_limit_is_a_setting(tmp_path):
    from fastapi.testclient import TestClient

    from app.config import get_settings
    from app.main import create_app

    settings = get_settings().model_copy(update={"max_worker_body_kb": 0.5})
    with TestClient(create_app(settings)) as small:
        response = small.post(
            "/api/w/sessions/none/answers",
            content=b'{"token": "' + b"a" * 600 + b'", "choice": 1}',
            headers={"content-type": "application/json"},
        )
    assert response.status_code == 413
    assert response.json()["detail"].endswith("limit of 0.5 KiB")


def test_hsts_only_on_responses_served_over_https(client, admin_headers, project):
    plain = client.get("/api/projects", headers=admin_headers)
    assert plain.status_code == 200
    assert "strict-transport-security" not in plain.headers
    # A request whose scheme is HTTPS: served with TLS, or from a trusted proxy that
    # said X-Forwarded-Proto: https (uvicorn sets the scheme; tests/lifecycle has both).
    for path in ("/api/projects", "/w/edge", "/static/worker.js", "/api/w/none"):
        secure = client.get(f"https://testserver{path}", headers=admin_headers)
        assert secure.headers["strict-transport-security"] == "max-age=31536000", path
