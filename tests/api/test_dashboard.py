"""The dashboard's sign-in, CSRF, role rules and pages, through HTTP (browser tests are in
tests/browser/test_dashboard.py)."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import select

from app.db.models import ApiKey, DashboardSession
from app.services.auth import create_key
from tests.factories import make_objects, make_project

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def sign_in(client, secret: str) -> str:
    """Sign in like the browser does; returns the session's CSRF token."""
    client.cookies.clear()
    form = client.get("/dashboard")
    assert form.status_code == 200 and "Sign in" in form.text
    token = CSRF.search(form.text).group(1)
    response = client.post(
        "/dashboard/signin", data={"api_key": secret, "csrf": token}, follow_redirects=False
    )
    assert response.status_code == 303, response.text
    home = client.get("/dashboard")
    assert home.status_code == 200 and "Sign out" in home.text
    return CSRF.search(home.text).group(1)


@pytest.fixture
def researcher(db):
    key, secret = create_key(db, "researcher", "Ada <b>researcher</b>")
    return key, secret


def test_sign_in_sets_a_strict_http_only_expiring_cookie(client, researcher):
    _, secret = researcher
    form = client.get("/dashboard")
    token = CSRF.search(form.text).group(1)
    response = client.post(
        "/dashboard/signin", data={"api_key": secret, "csrf": token}, follow_redirects=False
    )
    cookie = response.headers["set-cookie"]
    assert "tl_dashboard=" in cookie and "HttpOnly" in cookie
    assert "SameSite=strict" in cookie and "Max-Age=43200" in cookie
    assert "Secure" not in cookie  # plain http here; https requests get Secure
    assert "frame-ancestors 'none'" in form.headers["content-security-policy"]


def test_sign_in_refuses_a_wrong_key_and_a_missing_form_token(client, db, researcher):
    form = client.get("/dashboard")
    token = CSRF.search(form.text).group(1)
    wrong = client.post("/dashboard/signin", data={"api_key": "tl_nope", "csrf": token})
    assert wrong.status_code == 401 and "Unknown or revoked API key" in wrong.text
    no_token = client.post("/dashboard/signin", data={"api_key": researcher[1]})
    assert no_token.status_code == 403
    assert db.scalar(select(DashboardSession.id)) is None


def test_researcher_sees_own_projects_only(client, db, researcher, admin_headers):
    _, secret = researcher
    mine = {"Authorization": f"Bearer {secret}"}
    make_project(client, mine, "mine")
    make_project(client, admin_headers, "theirs")
    sign_in(client, secret)
    home = client.get("/dashboard")
    assert "/dashboard/projects/mine" in home.text and "theirs" not in home.text
    assert client.get("/dashboard/projects/mine").status_code == 200
    assert client.get("/dashboard/projects/theirs").status_code == 404
    assert client.get("/dashboard/admin").status_code == 404  # not an admin
    # Names are escaped, never markup.
    assert "Ada &lt;b&gt;researcher&lt;/b&gt;" in home.text


def test_post_without_csrf_is_403_and_changes_nothing(client, db, researcher):
    _, secret = researcher
    headers = {"Authorization": f"Bearer {secret}"}
    make_project(client, headers, "study")
    make_objects(client, headers, "study", 6)
    csrf = sign_in(client, secret)
    plan = '{"strategies": [{"kind": "random"}]}'
    for body in ({"plan": plan}, {"plan": plan, "csrf": "wrong"}):
        response = client.post("/dashboard/projects/study/plan", data=body)
        assert response.status_code == 403
        assert "CSRF" in response.json()["detail"]
    assert client.get("/api/projects/study/plan", headers=headers).status_code == 404
    saved = client.post(
        "/dashboard/projects/study/plan", data={"plan": plan, "csrf": csrf}, follow_redirects=False
    )
    assert saved.status_code == 303
    assert (
        client.get("/api/projects/study/plan", headers=headers).json()["strategies"][0]["kind"]
        == "random"
    )


def test_plan_errors_show_inline(client, db, researcher):
    _, secret = researcher
    headers = {"Authorization": f"Bearer {secret}"}
    make_project(client, headers, "study")
    make_objects(client, headers, "study", 6)
    csrf = sign_in(client, secret)
    for text, message in (
        ("{not json", "not JSON"),
        ('{"strategies": []}', "strategies"),
        ('{"strategies": [{"kind": "nope"}]}', "unknown kind"),
    ):
        response = client.post("/dashboard/projects/study/plan", data={"plan": text, "csrf": csrf})
        assert response.status_code == 422
        assert 'id="plan-error"' in response.text and message in response.text
    assert client.get("/api/projects/study/plan", headers=headers).status_code == 404


def test_flag_from_the_dashboard_shows_in_the_api(client, db, researcher):
    _, secret = researcher
    headers = {"Authorization": f"Bearer {secret}"}
    make_project(client, headers, "study")
    make_objects(client, headers, "study", 6)
    client.put(
        "/api/projects/study/plan",
        json={"strategies": [{"kind": "random"}], "queries_per_session": 5},
        headers=headers,
    ).raise_for_status()
    opened = client.post("/api/w/study/sessions", json={"participant": "p1"}).json()
    csrf = sign_in(client, secret)
    participant = client.get("/api/projects/study/participants", headers=headers).json()["data"][0]
    url = f"/dashboard/projects/study/participants/{participant['id']}/flag"
    response = client.post(url, data={"csrf": csrf}, headers={"Accept": "application/json"})
    assert response.status_code == 200 and response.json()["flagged"] is True
    after = client.get("/api/projects/study/participants", headers=headers).json()["data"][0]
    assert after["flagged"] and after["flag_manual"]
    assert opened["session_id"]


def test_revoking_the_key_ends_the_session_at_once(client, db, researcher, admin_headers):
    key, secret = researcher
    sign_in(client, secret)
    assert "Sign out" in client.get("/dashboard").text
    admin_secret = admin_headers["Authorization"].split()[1]
    # Revoke from the admin page, in another "browser".
    researcher_cookies = dict(client.cookies)
    admin_csrf = sign_in(client, admin_secret)
    revoked = client.post(
        f"/dashboard/admin/keys/{key.id}/revoke",
        data={"csrf": admin_csrf},
        headers={"Accept": "application/json"},
    )
    assert revoked.status_code == 200
    client.cookies.clear()
    client.cookies.update(researcher_cookies)
    assert "Sign in" in client.get("/dashboard").text
    assert client.get("/dashboard/admin", follow_redirects=False).status_code == 303
    assert db.scalar(select(DashboardSession).where(DashboardSession.key_id == key.id)) is None


def test_sign_out_ends_the_session(client, researcher):
    csrf = sign_in(client, researcher[1])
    cookies = dict(client.cookies)
    response = client.post("/dashboard/signout", data={"csrf": csrf}, follow_redirects=False)
    assert response.status_code == 303
    client.cookies.update(cookies)  # a copy of the old cookie no longer works either
    assert "Sign in" in client.get("/dashboard").text


def test_admin_creates_and_lists_keys_with_last_use(client, db, admin_headers):
    csrf = sign_in(client, admin_headers["Authorization"].split()[1])
    created = client.post(
        "/dashboard/admin/keys", data={"name": "Grace", "role": "researcher", "csrf": csrf}
    )
    assert created.status_code == 201
    secret = re.search(r'id="new-secret" readonly value="([^"]+)"', created.text).group(1)
    key = db.scalar(select(ApiKey).where(ApiKey.name == "Grace"))
    assert key.role == "researcher" and key.last_used_at is None
    assert (
        client.get("/api/projects", headers={"Authorization": f"Bearer {secret}"}).status_code
        == 200
    )
    db.rollback()  # a new transaction: what the requests committed since
    assert db.get(ApiKey, key.id).last_used_at is not None
    bad = client.post("/dashboard/admin/keys", data={"name": "x", "role": "root", "csrf": csrf})
    assert bad.status_code == 422
    page = client.get("/dashboard/admin")
    assert "Grace" in page.text and "database size" in page.text


def test_pages_need_a_session(client):
    for path in ("/dashboard/admin", "/dashboard/projects/x"):
        response = client.get(path, follow_redirects=False)
        assert response.status_code == 303 and response.headers["location"] == "/dashboard"
    assert client.post("/dashboard/jobs/1/cancel", data={}).status_code == 403
    assert client.get("/", follow_redirects=False).headers["location"] == "/dashboard"


def test_figures_count_in_sql_on_both_databases(client, db, researcher):
    """Per-minute timeline, response-time histogram, recent minutes and strategy progress."""
    from datetime import timedelta

    from sqlalchemy import update

    from app.db.models import Answer, Project, utcnow
    from app.services import dashboard as figures
    from tests.factories import random_triplets

    _, secret = researcher
    headers = {"Authorization": f"Bearer {secret}"}
    make_project(client, headers, "timed")
    make_objects(client, headers, "timed", 8)
    imported = client.post(
        "/api/projects/timed/answers", json={"triplets": random_triplets(8, 6)}, headers=headers
    )
    assert imported.status_code == 201, imported.text
    project = db.scalar(select(Project).where(Project.slug == "timed"))
    ids = sorted(db.scalars(select(Answer.id).where(Answer.project_id == project.id)))
    now = utcnow().replace(second=30, microsecond=0)
    # Two answers 3 minutes ago (seconds 1 and 59 of the same minute), four in this minute.
    for i, answer_id in enumerate(ids):
        when = now - timedelta(minutes=3) if i < 2 else now
        when = when.replace(second=1 if i == 0 else 59 if i == 1 else 10 + i)
        client_ms = (400, 900, 1200, 1200, 2500, 50_000)[i]
        db.execute(
            update(Answer)
            .where(Answer.id == answer_id)
            .values(created_at=when, client_ms=client_ms)
        )
    db.commit()
    timeline = dict(figures.answers_timeline(db, project))
    assert timeline[now.replace(second=0) - timedelta(minutes=3)] == 2
    assert timeline[now.replace(second=0)] == 4
    assert sum(timeline.values()) == 6
    bins = figures.histogram(db, project, Answer.client_ms, figures.CLIENT_EDGES_MS)
    counts = {b["low"]: b["count"] for b in bins}
    assert counts[0] == 1 and counts[500] == 1 and counts[1000] == 2 and counts[2000] == 1
    assert counts[30000] == 1  # the open-ended last bin
    recent = figures.recent_minutes(db, [project.id], minutes=10)[project.id]
    assert recent[-1] == 4 and recent[-4] == 2 and sum(recent) == 6
    rows = figures.project_rows(db, [project])
    assert rows[0].answers_total == 6


def test_cookie_is_secure_behind_https(app, db, researcher):
    from fastapi.testclient import TestClient

    from app.api.deps import get_db

    app.dependency_overrides[get_db] = lambda: db
    try:
        with TestClient(app, base_url="https://dash.example") as secure:
            form = secure.get("/dashboard")
            assert "Secure" in form.headers["set-cookie"]
            token = CSRF.search(form.text).group(1)
            response = secure.post(
                "/dashboard/signin",
                data={"api_key": researcher[1], "csrf": token},
                follow_redirects=False,
            )
            cookie = response.headers.get_list("set-cookie")[0]
            assert cookie.startswith("tl_dashboard=") and "Secure" in cookie
    finally:
        app.dependency_overrides.clear()


def test_an_expired_session_is_signed_out(client, db, researcher):
    from datetime import timedelta

    from sqlalchemy import update

    from app.db.models import utcnow

    sign_in(client, researcher[1])
    db.execute(update(DashboardSession).values(expires_at=utcnow() - timedelta(seconds=1)))
    db.commit()
    assert "Sign in" in client.get("/dashboard").text


def test_train_cancel_and_export_from_the_project_page(client, db, researcher):
    from tests.factories import random_triplets

    _, secret = researcher
    headers = {"Authorization": f"Bearer {secret}"}
    make_project(client, headers, "study")
    make_objects(client, headers, "study", 8)
    csrf = sign_in(client, secret)
    json_accept = {"Accept": "application/json"}
    early = client.post(
        "/dashboard/projects/study/train",
        data={"kind": "kernel", "csrf": csrf},
        headers=json_accept,
    )
    assert early.status_code == 422 and "triplet answers" in early.json()["detail"]
    client.post(
        "/api/projects/study/answers", json={"triplets": random_triplets(8, 30)}, headers=headers
    ).raise_for_status()
    queued = client.post(
        "/dashboard/projects/study/train",
        data={"kind": "kernel", "csrf": csrf},
        headers=json_accept,
    )
    assert queued.status_code == 200
    job_id = queued.json()["job"]
    page = client.get("/dashboard/projects/study")
    assert f'id="job-{job_id}"' in page.text and f"/dashboard/jobs/{job_id}/cancel" in page.text
    cancelled = client.post(
        f"/dashboard/jobs/{job_id}/cancel", data={"csrf": csrf}, headers=json_accept
    )
    assert cancelled.json()["status"] == "cancelled"
    assert client.get(f"/api/jobs/{job_id}", headers=headers).json()["status"] == "cancelled"
    exported = client.get("/dashboard/projects/study/answers.csv")
    assert exported.status_code == 200 and len(exported.text.strip().splitlines()) == 31
    assert client.get("/dashboard/projects/study/answers.xml").status_code == 404


def test_route_timings_file_requests_under_their_template(client, researcher):
    from app.api import timings

    headers = {"Authorization": f"Bearer {researcher[1]}"}
    make_project(client, headers, "timed-routes")
    for _ in range(3):
        assert client.get("/api/projects/timed-routes", headers=headers).status_code == 200
    client.get("/no/such/route")
    rows = {(r["method"], r["path"]): r for r in timings.summary()}
    row = rows[("GET", "/api/projects/{slug}")]
    assert row["count"] >= 3 and 0 < row["p50"] <= row["p95"] <= row["max"]
    assert not any(path == "/no/such/route" for _, path in rows)


def test_the_project_page_shows_the_budget_adviser(client, db, researcher):
    """Beside each kind's learning curve: the fitted band, the target, the answers still
    needed (or that the target is out of reach), and TripletBoost's n√n reference."""
    import pickle

    import numpy as np

    from app.db.models import Model, Project
    from app.learning.tripletboost import TripletBoost
    from tests.factories import random_triplets

    _, secret = researcher
    headers = {"Authorization": f"Bearer {secret}"}
    make_project(client, headers, "adv")
    make_objects(client, headers, "adv", 16, labels=False)
    project = db.scalar(select(Project).where(Project.slug == "adv"))
    # The page serves the latest TripletBoost model's gallery: give it a real (tiny) one.
    triplets = np.array(random_triplets(16, 400))
    y = np.array(["ab"[i % 2] if i < 10 else None for i in range(16)], dtype=object)
    booster = TripletBoost(n_estimators=20, random_state=0).fit(triplets, y)
    artifact = pickle.dumps({"estimator": booster, "triplets": triplets})
    curves = {
        # 0.95 − 0.5·n^(−1/2) reaches 0.93 at n = 625; 0.8 − 0.4·n^(−0.7) never does.
        "metricboost": ("heldout_triplet_accuracy", lambda n: 0.95 - 0.5 * n**-0.5),
        "tripletboost": ("cv_label_accuracy", lambda n: 0.8 - 0.4 * n**-0.7),
        # A regression forest's figure is an error: the page's accuracy target is not its.
        "comprf": ("loo_rmse", lambda n: 0.1 + 2 * n**-0.5),
    }
    for kind, (metric, f) in curves.items():
        for version, n in enumerate((50, 100, 200, 400), start=1):
            db.add(
                Model(project_id=project.id, kind=kind, version=version, params={},
                      n_answers=n, metrics={metric: f(n)}, training_seconds=0.1,
                      artifact=artifact if kind == "tripletboost" else b"")
            )  # fmt: skip
    db.commit()
    sign_in(client, secret)
    page = client.get("/dashboard/projects/adv?target=0.93")
    assert page.status_code == 200, page.text
    html = page.text
    metricboost = html[html.index('data-kind="metricboost"') :]
    further = int(re.search(r'advice-further" data-value="(\d+)"', metricboost).group(1))
    assert further == pytest.approx(625, rel=0.1)
    tripletboost = html[html.index('data-kind="tripletboost"') :]
    assert 'data-status="not_reachable"' in html and "Not reachable at this rate" in tripletboost
    assert '<strong class="advice-reference">64</strong>' in tripletboost  # 16·√16
    comprf = html[html.index('data-kind="comprf"') :]
    assert "report loo_rmse (an error, lower is better)" in comprf
    assert "advice?kind=comprf&amp;target=" in comprf
    assert html.count('class="band"') == 2 and html.count('class="target"') == 2
    assert 'value="0.93"' in html and 'data-refresh="/dashboard/projects/adv?target=0.93"' in html
    # The default target is 0.9; a bad one is a 422 naming it.
    assert 'value="0.9"' in client.get("/dashboard/projects/adv").text
    bad = client.get("/dashboard/projects/adv?target=2")
    assert bad.status_code == 422 and "target" in bad.text
