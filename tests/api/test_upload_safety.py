"""Uploads that cannot hurt the service: ZIP bombs, pixel bombs, hostile CSVs, huge integers,
NUL characters, formulas in exports, and parsing kept off the event loop (issue 13)."""

from __future__ import annotations

import asyncio
import csv
import io
import struct
import zipfile
import zlib

import pytest
from PIL import Image

from app.config import get_settings
from tests.factories import make_objects, make_project


def png_bytes(colour: int = 128, size: tuple[int, int] = (4, 4)) -> bytes:
    buffer = io.BytesIO()
    Image.new("L", size, colour).save(buffer, format="PNG")
    return buffer.getvalue()


def png_header(width: int, height: int) -> bytes:
    """A PNG signature and header claiming ``width`` × ``height`` pixels, and no pixels."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return (
        b"\x89PNG\r\n\x1a\n"
        + struct.pack(">I", len(ihdr))
        + chunk
        + struct.pack(">I", zlib.crc32(chunk))
        + struct.pack(">I", 0)
        + b"IEND"
        + struct.pack(">I", zlib.crc32(b"IEND"))
    )


def zip_bytes(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@pytest.fixture
def project(client, auth_headers):
    return make_project(client, auth_headers, "safe")


def n_objects(client, headers) -> int:
    return client.get("/api/projects/safe", headers=headers).json()["n_objects"]


def files_on_disk() -> list[str]:
    """Every file under the data directory but the database and the secret."""
    root = get_settings().data_dir
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def upload(client, headers, filename: str, content: bytes, mime: str = "application/zip"):
    return client.post(
        "/api/projects/safe/objects", files={"file": (filename, content, mime)}, headers=headers
    )


# --- ZIP bombs ---------------------------------------------------------------------------


def test_zip_bomb_entry_is_refused_by_its_unpacked_size_and_writes_nothing(
    client, auth_headers, project
):
    cap = get_settings().max_zip_entry_mb
    bomb = png_bytes() + bytes(int(cap * 2**20) + 2**20)  # a valid PNG, then zeros
    archive = zip_bytes({"ok.png": png_bytes(), "bomb.png": bomb})
    assert len(archive) < len(bomb) / 200  # it is a bomb: tiny packed, huge unpacked
    before = files_on_disk()
    response = upload(client, auth_headers, "b.zip", archive)
    assert response.status_code == 413, response.text
    assert "'bomb.png'" in response.json()["detail"]
    assert f"{cap:g} MiB" in response.json()["detail"]
    assert files_on_disk() == before
    assert n_objects(client, auth_headers) == 0


@pytest.mark.parametrize("lie", [False, True])
def test_zip_with_more_entries_than_the_limit_is_413_and_writes_nothing(
    client, auth_headers, project, monkeypatch, lie
):
    """Refused from the count in the ZIP's end record before any entry is read, and from
    the entries really listed when that count lies."""
    monkeypatch.setattr(get_settings(), "max_zip_entries", 5)
    archive = zip_bytes({f"{i}.png": png_bytes() for i in range(6)})
    if lie:  # the end record claims one entry (its count fields are at offsets 8 and 10)
        end = archive.rindex(b"PK\x05\x06")
        archive = archive[: end + 8] + struct.pack("<2H", 1, 1) + archive[end + 12 :]
    before = files_on_disk()
    response = upload(client, auth_headers, "many.zip", archive)
    assert response.status_code == 413, response.text
    assert response.json()["detail"] == (
        "the ZIP holds 6 entries; the limit is 5 (TRIPLETLAB_MAX_ZIP_ENTRIES)"
    )
    assert files_on_disk() == before
    assert n_objects(client, auth_headers) == 0
    five = zip_bytes({f"{i}.png": png_bytes() for i in range(5)})
    assert upload(client, auth_headers, "five.zip", five).status_code == 201


def test_zip_over_the_total_unpacked_size_names_the_entry_that_passed_it(
    client, auth_headers, project, monkeypatch
):
    monkeypatch.setattr(get_settings(), "max_zip_total_mb", 1.0)
    padded = png_bytes() + bytes(400_000)  # each entry under the per-entry cap
    archive = zip_bytes({f"{i}.png": padded for i in range(4)})
    before = files_on_disk()
    response = upload(client, auth_headers, "b.zip", archive)
    assert response.status_code == 413, response.text
    detail = response.json()["detail"]
    assert "'2.png'" in detail and "1 MiB in all" in detail
    assert files_on_disk() == before
    assert n_objects(client, auth_headers) == 0


def test_zip_entry_lying_about_its_size_is_not_unpacked_past_the_claim(
    client, auth_headers, project
):
    archive = bytearray(zip_bytes({"liar.png": png_bytes() + bytes(5 * 2**20)}))
    central = archive.index(b"PK\x01\x02")
    archive[central + 24 : central + 28] = struct.pack("<I", 200)  # claims 200 bytes unpacked
    before = files_on_disk()
    response = upload(client, auth_headers, "l.zip", bytes(archive))
    assert response.status_code == 422, response.text
    assert "'liar.png'" in response.json()["detail"]
    assert files_on_disk() == before


@pytest.mark.parametrize("width,height", [(100_000, 100_000), (2**31 - 1, 2)])
def test_pixel_bomb_is_refused_from_its_header(client, auth_headers, project, width, height):
    archive = zip_bytes({"ok.png": png_bytes(), "huge.png": png_header(width, height)})
    before = files_on_disk()
    response = upload(client, auth_headers, "p.zip", archive)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert "'huge.png'" in detail and "pixels" in detail
    assert files_on_disk() == before
    assert n_objects(client, auth_headers) == 0


def test_pixel_limit_is_a_setting(client, auth_headers, project, monkeypatch):
    monkeypatch.setattr(get_settings(), "max_image_pixels", 15)
    response = upload(client, auth_headers, "p.zip", zip_bytes({"a.png": png_bytes()}))
    assert response.status_code == 422
    assert "4 × 4 pixels" in response.json()["detail"]
    assert (
        upload(
            client, auth_headers, "p.zip", zip_bytes({"a.png": png_bytes(size=(3, 5))})
        ).status_code
        == 201
    )


def test_long_zip_entry_name_is_422_naming_it_shortly(client, auth_headers, project):
    name = "n" * 600 + ".png"
    response = upload(client, auth_headers, "n.zip", zip_bytes({name: png_bytes()}))
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert "longer than 500 characters" in detail and "604 characters" in detail
    assert len(detail) < 300
    assert n_objects(client, auth_headers) == 0


def test_encrypted_or_unreadable_entries_are_422(client, auth_headers, project):
    archive = bytearray(zip_bytes({"a.png": png_bytes()}))
    local = archive.index(b"PK\x03\x04")
    central = archive.index(b"PK\x01\x02")
    for flags in (local + 6, central + 8):
        archive[flags] |= 0x1  # the "encrypted" bit
    response = upload(client, auth_headers, "e.zip", bytes(archive))
    assert response.status_code == 422
    assert "'a.png' is encrypted" in response.json()["detail"]


# --- objects.csv inside a ZIP (issue 11) -------------------------------------------------


def test_zip_with_objects_csv_describes_its_images(client, auth_headers, project):
    metadata = "name,label,target,text,f0,f1\ncat.png,animal,1.5,a cat,0.1,0.2\ndog,animal,,,1,2\n"
    archive = zip_bytes(
        {
            "cat.png": png_bytes(10),
            "dog.png": png_bytes(20),
            "rock.png": png_bytes(30),
            "objects.csv": metadata.encode(),
        }
    )
    response = upload(client, auth_headers, "o.zip", archive)
    assert response.status_code == 201, response.text
    objects = {o["name"]: o for o in response.json()["data"]}
    assert set(objects) == {"cat", "dog", "rock"}
    assert objects["cat"]["label"] == "animal" and objects["cat"]["target"] == 1.5
    assert objects["cat"]["text"] == "a cat" and objects["cat"]["features"] == [0.1, 0.2]
    assert objects["dog"]["features"] == [1.0, 2.0] and objects["dog"]["target"] is None
    # An image the CSV does not describe gets no label; but a project's feature vectors
    # all have one length, so an undescribed image simply has none.
    assert objects["rock"]["label"] is None and objects["rock"]["features"] is None
    assert all(o["image_url"].startswith("/media/safe/") for o in objects.values())


BAD_METADATA = {
    "unknown-image": ("name,label\nghost,x\n", "no such image"),
    "image-url-column": ("name,image_url\ncat,http://x\n", "image_url"),
    "twice": ("name,label\ncat,a\ncat.png,b\n", "twice"),
    "bad-target": ("name,target\ncat,heavy\n", "objects.csv line 2"),
    "unbalanced-quote": ('name,label\ncat,"animal\n', "never closed"),
}


@pytest.mark.parametrize("metadata,expected", BAD_METADATA.values(), ids=BAD_METADATA.keys())
def test_bad_objects_csv_in_a_zip_is_422_and_writes_nothing(
    client, auth_headers, project, metadata, expected
):
    archive = zip_bytes({"cat.png": png_bytes(), "objects.csv": metadata.encode()})
    before = files_on_disk()
    response = upload(client, auth_headers, "o.zip", archive)
    assert response.status_code == 422, response.text
    assert expected in response.json()["detail"]
    assert files_on_disk() == before
    assert n_objects(client, auth_headers) == 0


# --- hostile CSVs of objects --------------------------------------------------------------

BAD_OBJECT_CSVS = {
    "bare-cr": (b"name,label\nfirst,a\rb\n", "line 2: a carriage return"),
    "unbalanced-quote": (b'name,f0\nfirst,1\n"second,2\nthird,3\n', 'line 3: a quote (")'),
    "too-few-values": (b"name,f0,f1\nfirst,1,2\nsecond,3\n", "line 3 has 2 values"),
    "too-many-values": (b"name,f0\nfirst,1,2\n", "line 2 has 3 values"),
    "nul": (b"name,label\nfi\x00rst,a\n", "line 2: a value holds a NUL"),
    "bad-feature": (b"name,f0\nfirst,abc\n", "line 2: column f0: 'abc' is not a number"),
    "not-utf8": (b"name\n\xff\xfe\n", "not UTF-8"),
    "empty": (b"", "empty"),
    "huge-cell": (b"name\n" + b"x" * 200_000 + b"\n", "longer than 131,072"),
}


@pytest.mark.parametrize("content,expected", BAD_OBJECT_CSVS.values(), ids=BAD_OBJECT_CSVS.keys())
def test_hostile_object_csvs_are_422_and_change_nothing(
    client, auth_headers, project, content, expected
):
    for send in ("multipart", "body"):
        if send == "multipart":
            response = upload(client, auth_headers, "o.csv", content, "text/csv")
        else:
            response = client.post(
                "/api/projects/safe/objects",
                content=content,
                headers={**auth_headers, "content-type": "text/csv"},
            )
        assert response.status_code == 422, response.text
        assert expected in response.json()["detail"]
    assert n_objects(client, auth_headers) == 0


def test_crlf_csv_and_quoted_carriage_returns_are_fine(client, auth_headers, project):
    content = b'name,text\r\nfirst,"two\r\nlines"\r\nsecond,"a\rb"\r\n'
    response = upload(client, auth_headers, "o.csv", content, "text/csv")
    assert response.status_code == 201, response.text
    assert [o["text"] for o in response.json()["data"]] == ["two\r\nlines", "a\rb"]


@pytest.mark.parametrize("field", ["name", "text", "label", "image_url"])
def test_nul_in_json_objects_is_422(client, auth_headers, project, field):
    obj = {"name": "ok", field: "/media/a\x00b" if field == "image_url" else "a\x00b"}
    response = client.post("/api/projects/safe/objects", json=[obj], headers=auth_headers)
    assert response.status_code == 422, response.text
    assert f"0.{field}" in response.json()["detail"] and "NUL" in response.json()["detail"]
    assert n_objects(client, auth_headers) == 0


# --- huge integers and hostile CSVs in an answers import ----------------------------------


@pytest.fixture
def answers_project(client, auth_headers, project):
    make_objects(client, auth_headers, "safe", 5)


def n_answers(client, headers) -> int:
    return len(client.get("/api/projects/safe/answers", headers=headers).json())


@pytest.mark.parametrize("value", [10**20, 2**63, 2**64, -(2**63), 2**31])
@pytest.mark.parametrize("key", ["triplets", "pairs"])
def test_huge_integers_in_a_json_import_are_422_naming_the_field(
    client, auth_headers, answers_project, value, key
):
    body = {key: [[0, 1, 2] if key == "triplets" else [0, 1, 0], [0, 1, value]]}
    response = client.post("/api/projects/safe/answers", json=body, headers=auth_headers)
    assert response.status_code == 422, response.text
    assert f"{key}.1.2" in response.json()["detail"]
    assert n_answers(client, auth_headers) == 0


BAD_ANSWER_CSVS = {
    "index-1e20": ("triplet,0,1,100000000000000000000,", "line 3: column c"),
    "index-2^63": ("pair,9223372036854775808,1,,0", "line 3: column a"),
    "negative": ("triplet,0,-1,2,", "line 3: column b: -1 is not an object index"),
    "outcome-2^63": ("pair,0,1,,9223372036854775808", "line 3: column outcome"),
    "outcome-2": ("pair,0,1,,2", "line 3: column outcome: 2 is not −1"),
    "float": ("triplet,0,1,2.0,", "line 3: column c: '2.0' is not an integer"),
    "empty-index": ("triplet,0,,2,", "line 3: column b is empty"),
    "bare-cr": ("triplet,0,1,2\r,", "line 3: a carriage return"),
    "unbalanced-quote": ('triplet,"0,1,2,', 'line 3: a quote (")'),
    "short-row": ("triplet,0,1", "line 3 has 3 values"),
    "nul": ("trip\x00let,0,1,2,", "NUL"),
}


@pytest.mark.parametrize("row,expected", BAD_ANSWER_CSVS.values(), ids=BAD_ANSWER_CSVS.keys())
def test_hostile_answer_csvs_are_422_naming_line_and_column(
    client, auth_headers, answers_project, row, expected
):
    content = f"kind,a,b,c,outcome\ntriplet,0,1,2,\n{row}\n".encode()
    response = client.post(
        "/api/projects/safe/answers",
        files={"file": ("a.csv", content, "text/csv")},
        headers=auth_headers,
    )
    assert response.status_code == 422, response.text
    assert expected in response.json()["detail"]
    assert n_answers(client, auth_headers) == 0


# --- formulas in CSV exports ---------------------------------------------------------------

FORMULAS = ['=HYPERLINK("http://evil.example","x")', "+1+1", "@SUM(A1)", "-2+3", "\tTAB", "\rCR"]


def test_csv_export_neutralises_formulas_and_json_stays_exact(client, auth_headers, project):
    objects = [{"name": name} for name in FORMULAS]
    assert (
        client.post("/api/projects/safe/objects", json=objects, headers=auth_headers).status_code
        == 201
    )
    body = {"triplets": [[0, 1, 2], [3, 4, 5]], "pairs": [[0, 1, -1]]}
    assert client.post("/api/projects/safe/answers", json=body, headers=auth_headers).is_success

    exported = client.get("/api/projects/safe/answers?format=csv", headers=auth_headers)
    rows = list(csv.DictReader(io.StringIO(exported.text, newline="")))
    names = [row[f"{k}_name"] for row in rows[:2] for k in "abc"]
    assert names == ["'" + name for name in FORMULAS]
    assert rows[2]["outcome"] == "-1"  # a number is not text: it stays a number
    assert all(
        not cell.startswith(("=", "+", "@", "\t", "\r")) for r in rows for cell in r.values()
    )

    records = client.get("/api/projects/safe/answers", headers=auth_headers).json()
    assert [r[f"{k}_name"] for r in records[:2] for k in "abc"] == FORMULAS


# --- editing an object (issue 11) ----------------------------------------------------------


def test_patch_object_edits_label_target_and_text(client, auth_headers, project):
    make_objects(client, auth_headers, "safe", 2)
    url = "/api/projects/safe/objects/1"
    response = client.patch(
        url, json={"label": "cat", "target": 2.5, "text": "a cat"}, headers=auth_headers
    )
    assert response.status_code == 200, response.text
    assert (response.json()["label"], response.json()["target"]) == ("cat", 2.5)
    response = client.patch(url, json={"label": None}, headers=auth_headers)
    got = client.get(url, headers=auth_headers).json()
    assert got["label"] is None and got["target"] == 2.5 and got["text"] == "a cat"
    assert got["name"] == response.json()["name"]


BAD_PATCHES = {
    "empty": ({}, "nothing to change"),
    "name": ({"name": "other"}, "name"),
    "features": ({"features": [1.0]}, "features"),
    "target-text": ({"target": "heavy"}, "target"),
    "long-label": ({"label": "x" * 201}, "label"),
    "nul": ({"text": "a\x00b"}, "NUL"),
}


@pytest.mark.parametrize("body,expected", BAD_PATCHES.values(), ids=BAD_PATCHES.keys())
def test_bad_patches_are_422_and_change_nothing(client, auth_headers, project, body, expected):
    make_objects(client, auth_headers, "safe", 1)
    before = client.get("/api/projects/safe/objects/0", headers=auth_headers).json()
    response = client.patch("/api/projects/safe/objects/0", json=body, headers=auth_headers)
    assert response.status_code == 422, response.text
    assert expected in response.json()["detail"]
    assert client.get("/api/projects/safe/objects/0", headers=auth_headers).json() == before


def test_patch_unknown_object_or_someone_elses_project_is_404(
    client, auth_headers, admin_headers, project
):
    make_objects(client, auth_headers, "safe", 1)
    for index in (1, 2**31 - 1):
        response = client.patch(
            f"/api/projects/safe/objects/{index}", json={"label": "x"}, headers=auth_headers
        )
        assert response.status_code == 404
    assert (
        client.patch(
            "/api/projects/safe/objects/3000000000", json={"label": "x"}, headers=auth_headers
        ).status_code
        == 422
    )
    make_project(client, admin_headers, "theirs")
    make_objects(client, admin_headers, "theirs", 1)
    response = client.patch(
        "/api/projects/theirs/objects/0", json={"label": "x"}, headers=auth_headers
    )
    assert response.status_code == 404
    got = client.get("/api/projects/theirs/objects/0", headers=admin_headers).json()
    assert got["label"] != "x"
    assert client.patch("/api/projects/safe/objects/0", json={"label": "x"}).status_code == 401


# --- parsing stays off the event loop ------------------------------------------------------


def test_uploads_are_parsed_off_the_event_loop(client, auth_headers, project, monkeypatch):
    """Each parser runs in a worker thread: there no event loop runs, so a worker's request
    is not held up while a researcher's upload is parsed (bench/upload_stall.py measures it)."""
    from app.api import objects as objects_api
    from app.services import image_zip, imports, upload_parsing

    threads: dict[str, bool] = {}

    def spy(module, name):  # type: ignore[no-untyped-def]
        original = getattr(module, name)

        def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
            try:
                asyncio.get_running_loop()
                threads[name] = True
            except RuntimeError:
                threads[name] = False
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    for module, name in [
        (upload_parsing, "objects_rows"),
        (upload_parsing, "answer_arrays"),
        (image_zip, "add_image_zip"),
        (imports, "step"),
        (objects_api, "_created_json"),
        (objects_api, "_created"),
    ]:
        spy(module, name)
    assert upload(client, auth_headers, "o.csv", b"name\na\nb\nc\n", "text/csv").is_success
    assert upload(client, auth_headers, "i.zip", zip_bytes({"d.png": png_bytes()})).is_success
    answers_csv = b"kind,a,b,c,outcome\ntriplet,0,1,2,\n"
    assert client.post(
        "/api/projects/safe/answers",
        files={"file": ("a.csv", answers_csv, "text/csv")},
        headers=auth_headers,
    ).is_success
    assert threads == dict.fromkeys(
        ["objects_rows", "answer_arrays", "add_image_zip", "step", "_created_json", "_created"],
        False,
    )


def test_large_uploads_are_parsed_in_a_process_of_their_own(
    client, auth_headers, project, monkeypatch
):
    """Past ``upload_process_mb`` the parse runs in a spawned process; results and refusals
    come back the same as from a thread."""
    from app.services import upload_parsing

    calls: list[str] = []
    original = upload_parsing._in_process

    def counted(fn, data, is_json, *args):  # type: ignore[no-untyped-def]
        calls.append(fn.__name__)
        return original(fn, data, is_json, *args)

    monkeypatch.setattr(upload_parsing, "_in_process", counted)
    monkeypatch.setattr(get_settings(), "upload_process_mb", 0.0)
    csv_text = b"name,label,f0\n" + b"".join(b"o%d,l,%d\n" % (i, i) for i in range(12_000))
    response = upload(client, auth_headers, "o.csv", csv_text, "text/csv")
    assert response.status_code == 201, response.text
    assert response.json()["count"] == 12_000
    assert response.json()["data"][11_999] == {
        "index": 11_999, "name": "o11999", "text": None, "image_url": None,
        "features": [11_999.0], "label": "l", "target": None,
    }  # fmt: skip
    json_objects = [{"name": "j", "features": [0.5]}]
    response = client.post("/api/projects/safe/objects", json=json_objects, headers=auth_headers)
    assert response.json()["data"][0]["index"] == 12_000
    bad = upload(client, auth_headers, "o.csv", b'name,f0\nx,1\ny,"2\n', "text/csv")
    assert bad.status_code == 422 and "never closed" in bad.json()["detail"]
    body = {"triplets": [[0, 1, 2], [3, 4, 5]], "pairs": [[0, 1, -1]]}
    response = client.post("/api/projects/safe/answers", json=body, headers=auth_headers)
    assert response.json() == {"triplets": 2, "pairs": 1}
    answers_csv = b"kind,a,b,c,outcome\ntriplet,0,1,2,\npair,3,4,,0\n"
    response = upload_answers(client, auth_headers, answers_csv)
    assert response.json() == {"triplets": 1, "pairs": 1}
    huge = upload_answers(client, auth_headers, b"kind,a,b,c,outcome\ntriplet,0,1,1e999,\n")
    assert huge.status_code == 422 and "line 2: column c" in huge.json()["detail"]
    assert calls == ["_objects_rows_chunks"] * 3 + ["_answer_arrays_in_process"] * 3
    assert n_answers(client, auth_headers) == 5


def upload_answers(client, headers, content: bytes):  # type: ignore[no-untyped-def]
    return client.post(
        "/api/projects/safe/answers",
        files={"file": ("a.csv", content, "text/csv")},
        headers=headers,
    )
