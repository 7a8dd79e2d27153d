"""Objects: JSON, CSV and ZIP uploads, stable indices, pagination, and every bad upload."""

from __future__ import annotations

import io
import zipfile

import pytest
from PIL import Image

from tests.factories import make_objects, make_project


def png_bytes(colour: int = 128) -> bytes:
    buffer = io.BytesIO()
    Image.new("L", (4, 4), colour).save(buffer, format="PNG")
    return buffer.getvalue()


def zip_bytes(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@pytest.fixture
def project(client, auth_headers):
    return make_project(client, auth_headers, "objs")


def count(client, headers) -> int:
    return client.get("/api/projects/objs", headers=headers).json()["n_objects"]


def test_json_upload_assigns_indices_in_order_forever(client, auth_headers, project):
    first = make_objects(client, auth_headers, "objs", 3)
    second = make_objects(client, auth_headers, "objs", 2, seed=1)
    assert [o["index"] for o in first + second] == [0, 1, 2, 3, 4]
    one = client.get("/api/projects/objs/objects/3", headers=auth_headers).json()
    assert one["name"] == "object 0"
    assert one["features"] == second[0]["features"]


def test_all_fields_round_trip(client, auth_headers, project):
    sent = {
        "name": "cat",
        "text": "<b>a cat</b>",
        "image_url": "https://example.org/cat.png",
        "features": [0.5, -1.25],
        "label": "animal",
        "target": 3.5,
    }
    client.post("/api/projects/objs/objects", json=[sent], headers=auth_headers)
    got = client.get("/api/projects/objs/objects/0", headers=auth_headers).json()
    assert got == {"index": 0, **sent}


def test_pagination(client, auth_headers, project):
    make_objects(client, auth_headers, "objs", 25)
    page = client.get("/api/projects/objs/objects?offset=10&limit=5", headers=auth_headers).json()
    assert page["count"] == 25
    assert [o["index"] for o in page["data"]] == [10, 11, 12, 13, 14]
    assert client.get("/api/projects/objs/objects?limit=0", headers=auth_headers).status_code == 422


def test_unknown_object_is_404(client, auth_headers, project):
    response = client.get("/api/projects/objs/objects/7", headers=auth_headers)
    assert response.status_code == 404
    assert "no object 7" in response.json()["detail"]


def test_csv_upload(client, auth_headers, project):
    csv_text = "name,text,label,target,f0,f1\nfirst,hello,a,1.5,0.1,0.2\nsecond,,b,,0.3,0.4\n"
    response = client.post(
        "/api/projects/objs/objects",
        files={"file": ("objects.csv", csv_text, "text/csv")},
        headers=auth_headers,
    )
    assert response.status_code == 201, response.text
    data = response.json()["data"]
    assert data[0]["features"] == [0.1, 0.2]
    assert data[0]["target"] == 1.5
    assert data[1]["text"] is None and data[1]["label"] == "b"


def test_zip_of_images(client, auth_headers, project):
    archive = zip_bytes({"img/cat.png": png_bytes(10), "img/dog.png": png_bytes(200), "img/": b""})
    response = client.post(
        "/api/projects/objs/objects",
        files={"file": ("images.zip", archive, "application/zip")},
        headers=auth_headers,
    )
    assert response.status_code == 201, response.text
    data = response.json()["data"]
    assert [o["name"] for o in data] == ["cat", "dog"]
    served = client.get(data[1]["image_url"])
    assert served.status_code == 200
    assert served.content == png_bytes(200)


BAD_JSON_UPLOADS = {
    "nan-feature": ('[{"name": "a", "features": [1.0, NaN]}]', "finite"),
    "inf-feature": ('[{"name": "a", "features": [Infinity, 1.0]}]', "finite"),
    "mixed-lengths": (
        '[{"name": "a", "features": [1]}, {"name": "b", "features": [1, 2]}]',
        "length",
    ),
    "malformed": ('[{"name": "a"', "malformed JSON"),
    "no-name": ('[{"text": "a"}]', "name"),
    "not-a-list": ('{"name": "a"}', "valid array"),
    "empty": ("[]", "no objects"),
    "script-url": ('[{"name": "a", "image_url": "javascript:alert(1)"}]', "image_url"),
}


@pytest.mark.parametrize("body,expected", BAD_JSON_UPLOADS.values(), ids=BAD_JSON_UPLOADS.keys())
def test_bad_json_uploads_are_4xx_and_change_nothing(client, auth_headers, project, body, expected):
    make_objects(client, auth_headers, "objs", 2)
    response = client.post(
        "/api/projects/objs/objects",
        content=body,
        headers={**auth_headers, "content-type": "application/json"},
    )
    assert 400 <= response.status_code < 500
    assert expected in response.json()["detail"]
    assert count(client, auth_headers) == 2


def test_feature_length_must_match_the_project(client, auth_headers, project):
    make_objects(client, auth_headers, "objs", 2, n_features=2)
    response = client.post(
        "/api/projects/objs/objects",
        json=[{"name": "x", "features": [1, 2, 3]}],
        headers=auth_headers,
    )
    assert response.status_code == 422
    assert "length 2" in response.json()["detail"]
    assert count(client, auth_headers) == 2


BAD_FILES = {
    "csv-missing-name": ("o.csv", b"text,label\nhello,a\n", "text/csv", "'name' column"),
    "csv-feature-gap": ("o.csv", b"name,f0,f2\na,1,2\n", "text/csv", "without gaps"),
    "csv-bad-number": ("o.csv", b"name,f0\na,abc\n", "text/csv", "line 2"),
    "csv-nan": ("o.csv", b"name,f0\na,nan\n", "text/csv", "finite"),
    "csv-unknown-column": ("o.csv", b"name,colour\na,red\n", "text/csv", "colour"),
    "zip-not-image": (
        "i.zip",
        zip_bytes({"a.png": b"not an image"}),
        "application/zip",
        "not an image",
    ),
    "zip-escapes": ("i.zip", zip_bytes({"../evil.png": png_bytes()}), "application/zip", "escapes"),
    "zip-absolute": (
        "i.zip",
        zip_bytes({"/etc/evil.png": png_bytes()}),
        "application/zip",
        "escapes",
    ),
    "zip-empty": ("i.zip", zip_bytes({"dir/": b""}), "application/zip", "no images"),
    "zip-corrupt": ("i.zip", b"PK\x03\x04garbage", "application/zip", "not a ZIP"),
    "unknown-type": ("o.txt", b"hello", "text/plain", ".csv or a .zip"),
}


@pytest.mark.parametrize("filename,content,mime,expected", BAD_FILES.values(), ids=BAD_FILES.keys())
def test_bad_files_are_4xx_and_change_nothing(
    client, auth_headers, project, filename, content, mime, expected
):
    make_objects(client, auth_headers, "objs", 1, n_features=1)
    response = client.post(
        "/api/projects/objs/objects",
        files={"file": (filename, content, mime)},
        headers=auth_headers,
    )
    assert 400 <= response.status_code < 500, response.text
    assert expected in response.json()["detail"]
    assert count(client, auth_headers) == 1


def test_zip_with_a_bad_entry_writes_no_file(client, auth_headers, project):
    from app.config import get_settings

    folder = get_settings().data_dir / "media" / "objs"
    before = sorted(folder.iterdir()) if folder.exists() else []
    archive = zip_bytes({"good.png": png_bytes(), "bad.png": b"nope"})
    response = client.post(
        "/api/projects/objs/objects",
        files={"file": ("i.zip", archive, "application/zip")},
        headers=auth_headers,
    )
    assert response.status_code == 422
    after = sorted(folder.iterdir()) if folder.exists() else []
    assert after == before


def test_oversized_upload_is_413(client, auth_headers, project, app):
    limit = int(get_limit_bytes())
    response = client.post(
        "/api/projects/objs/objects",
        files={"file": ("o.csv", b"name\n" + b"x\n" * (limit // 2 + 1), "text/csv")},
        headers=auth_headers,
    )
    assert response.status_code == 413
    assert "MiB" in response.json()["detail"]
    assert count(client, auth_headers) == 0


def get_limit_bytes() -> float:
    from app.config import get_settings

    return get_settings().max_upload_mb * 2**20


def test_streamed_oversized_body_without_length_is_413(client, auth_headers, project):
    def chunks():
        for _ in range(40):
            yield b"x" * 100_000

    response = client.post(
        "/api/projects/objs/objects",
        content=chunks(),
        headers={**auth_headers, "content-type": "application/json"},
    )
    assert response.status_code == 413
    assert count(client, auth_headers) == 0
