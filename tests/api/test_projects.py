"""Projects: create, list, read, update, delete, and who may see what."""

from __future__ import annotations

from tests.factories import make_objects, make_project


def test_create_project_returns_201_with_the_project(client, auth_headers):
    response = client.post(
        "/api/projects",
        json={"slug": "faces", "name": "Faces", "instructions": "Look closely."},
        headers=auth_headers,
    )
    assert response.status_code == 201
    body = response.json()
    assert body["slug"] == "faces"
    assert body["instructions"] == "Look closely."
    assert body["question"] == "Which of these two is more similar to the top one?"
    assert body["n_objects"] == 0


def test_taken_slug_is_409(client, auth_headers):
    make_project(client, auth_headers, "faces")
    response = client.post(
        "/api/projects", json={"slug": "faces", "name": "x"}, headers=auth_headers
    )
    assert response.status_code == 409
    assert "taken" in response.json()["detail"]


def test_bad_slug_is_422_naming_the_field(client, auth_headers):
    response = client.post(
        "/api/projects", json={"slug": "Bad Slug!", "name": "x"}, headers=auth_headers
    )
    assert response.status_code == 422
    assert "slug" in response.json()["detail"]


def test_unknown_field_is_refused(client, auth_headers):
    response = client.post(
        "/api/projects", json={"slug": "a", "name": "x", "colour": "red"}, headers=auth_headers
    )
    assert response.status_code == 422
    assert "colour" in response.json()["detail"]


def test_list_read_and_patch(client, auth_headers):
    make_project(client, auth_headers, "one")
    make_project(client, auth_headers, "two")
    listed = client.get("/api/projects", headers=auth_headers).json()
    assert listed["count"] == 2
    assert [p["slug"] for p in listed["data"]] == ["one", "two"]
    response = client.patch(
        "/api/projects/one",
        json={"name": "First", "question": "Which is closer?"},
        headers=auth_headers,
    )
    assert response.status_code == 200
    read = client.get("/api/projects/one", headers=auth_headers).json()
    assert read["name"] == "First"
    assert read["question"] == "Which is closer?"
    assert read["n_answers"] == 0


def test_unknown_project_is_404(client, auth_headers):
    for method, path in [
        ("get", "/api/projects/nope"),
        ("patch", "/api/projects/nope"),
        ("delete", "/api/projects/nope"),
        ("get", "/api/projects/nope/objects"),
        ("get", "/api/projects/nope/answers"),
    ]:
        response = client.request(
            method, path, json={} if method == "patch" else None, headers=auth_headers
        )
        assert response.status_code == 404, (method, path)
        assert response.json() == {"detail": "no project with slug 'nope'"}


def test_researchers_do_not_see_each_others_projects(client, auth_headers, admin_headers, db):
    from app.services.auth import create_key

    make_project(client, auth_headers, "mine")
    _, other = create_key(db, "researcher", "other")
    other_headers = {"Authorization": f"Bearer {other}"}
    assert client.get("/api/projects/mine", headers=other_headers).status_code == 404
    assert client.get("/api/projects", headers=other_headers).json()["count"] == 0
    assert client.delete("/api/projects/mine", headers=other_headers).status_code == 404
    # Admins see every project.
    assert client.get("/api/projects/mine", headers=admin_headers).status_code == 200


def test_delete_refuses_while_answers_exist_unless_forced(client, auth_headers):
    make_project(client, auth_headers, "p")
    make_objects(client, auth_headers, "p", 3)
    client.post("/api/projects/p/answers", json={"triplets": [[0, 1, 2]]}, headers=auth_headers)
    response = client.delete("/api/projects/p", headers=auth_headers)
    assert response.status_code == 409
    assert "1 answers" in response.json()["detail"]
    assert client.get("/api/projects/p", headers=auth_headers).status_code == 200
    assert client.delete("/api/projects/p?force=true", headers=auth_headers).status_code == 204
    assert client.get("/api/projects/p", headers=auth_headers).status_code == 404


def test_delete_without_answers(client, auth_headers):
    make_project(client, auth_headers, "empty")
    assert client.delete("/api/projects/empty", headers=auth_headers).status_code == 204
