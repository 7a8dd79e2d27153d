"""The command line, run as a user runs it: a separate process on a fresh SQLite file."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.servers import free_port

TRIPLETLAB = str(Path(sys.executable).with_name("tripletlab"))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TRIPLETLAB_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}",
        "TRIPLETLAB_DATA_DIR": str(tmp_path / "data"),
        "TRIPLETLAB_DEMO": "true",
    }


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TRIPLETLAB, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_help_lists_every_command(env):
    result = run(env, "--help")
    assert result.returncode == 0
    for command in ("serve", "db", "keys", "demo"):
        assert command in result.stdout


def test_db_upgrade_then_keys_create_prints_the_key_last(env):
    assert run(env, "db", "upgrade").returncode == 0
    result = run(env, "keys", "create", "--role", "researcher", "--name", "alice")
    assert result.returncode == 0, result.stderr
    key = result.stdout.strip().splitlines()[-1]
    assert key.startswith("tl_") and " " not in key


def test_keys_create_refuses_an_unknown_role(env):
    run(env, "db", "upgrade")
    result = run(env, "keys", "create", "--role", "overlord")
    assert result.returncode == 2
    assert "role must be one of" in result.stderr


def test_demo_creates_the_digits_project_once(env):
    run(env, "db", "upgrade")
    first = run(env, "demo")
    assert first.returncode == 0, first.stderr
    assert "created" in first.stdout
    assert "already exists" in run(env, "demo").stdout


@pytest.fixture(scope="module")
def server(tmp_path_factory):  # type: ignore[no-untyped-def]
    """`tripletlab serve` on a fresh database: its env, base URL and printed admin key."""
    tmp = tmp_path_factory.mktemp("serve")
    env = {
        **os.environ,
        "TRIPLETLAB_DATABASE_URL": f"sqlite:///{tmp / 'serve.db'}",
        "TRIPLETLAB_DATA_DIR": str(tmp / "data"),
        "TRIPLETLAB_DEMO": "true",
        "TRIPLETLAB_RUN_JOBS": "true",
    }
    port = free_port()
    log = tmp / "serve.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [TRIPLETLAB, "serve", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/docs", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.3)
        else:
            pytest.fail(f"server did not start: {log.read_text()}")
        yield env, f"http://127.0.0.1:{port}", log.read_text()
    finally:
        process.terminate()
        process.wait(timeout=20)


def test_serve_migrates_prints_the_admin_key_once_and_serves_the_demo(server):
    _, base, output = server
    keys = [line.strip() for line in output.splitlines() if line.strip().startswith("tl_")]
    assert len(keys) == 1
    projects = httpx.get(
        f"{base}/api/projects", headers={"Authorization": f"Bearer {keys[0]}"}
    ).json()
    assert [p["slug"] for p in projects["data"]] == ["digits-demo"]
    assert projects["data"][0]["n_objects"] > 0
    page = httpx.get(f"{base}/w/digits-demo")
    assert page.status_code == 200


def test_simulate_then_train_from_the_command_line(server):
    env, base, output = server
    key = next(line.strip() for line in output.splitlines() if line.strip().startswith("tl_"))
    simulated = run(
        {**env, "TRIPLETLAB_API_KEY": key},
        "simulate", "digits-demo", "--workers", "4", "--answers", "120", "--noise", "0.1",
        "--url", base,
    )  # fmt: skip
    assert simulated.returncode == 0, simulated.stderr + simulated.stdout
    assert "120 answers" in simulated.stdout
    exported = httpx.get(
        f"{base}/api/projects/digits-demo/answers", headers={"Authorization": f"Bearer {key}"}
    ).json()
    assert len(exported) == 120
    assert {row["source"] for row in exported} == {"simulated"}
    trained = run(env, "train", "digits-demo", "kernel")
    assert trained.returncode == 0, trained.stderr + trained.stdout
    assert "heldout_triplet_accuracy" in trained.stdout
    refused = run(env, "train", "digits-demo", "svmcompare")
    assert refused.returncode == 2
    assert "pair answers" in refused.stderr
    unknown = run(env, "train", "digits-demo", "psychic")
    assert unknown.returncode == 2 and "Traceback" not in unknown.stderr
    expected = "unknown model kind 'psychic'; the kinds are bradley_terry, comprf, embedding"
    assert expected in unknown.stderr


def test_simulate_says_in_one_line_what_stops_it(server):
    env, base, output = server
    key = next(line.strip() for line in output.splitlines() if line.strip().startswith("tl_"))
    headers = {"Authorization": f"Bearer {key}"}
    env = {**env, "TRIPLETLAB_API_KEY": key}
    unknown = run(env, "simulate", "no-such-project", "--answers", "5", "--url", base)
    assert unknown.returncode == 2
    assert "Traceback" not in unknown.stderr
    assert unknown.stderr.strip().startswith("error: cannot read the objects of project")
    assert "no-such-project" in unknown.stderr and "404" in unknown.stderr
    project = {"slug": "plain-objects", "name": "no features"}
    assert httpx.post(f"{base}/api/projects", json=project, headers=headers).status_code == 201
    objects = [{"name": f"o{i}"} for i in range(5)]
    created = httpx.post(
        f"{base}/api/projects/plain-objects/objects", json=objects, headers=headers
    )
    assert created.status_code == 201
    plain = run(env, "simulate", "plain-objects", "--answers", "5", "--url", base)
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert "5 of the 5 objects of 'plain-objects' have none" in plain.stderr
    nobody = run(env, "simulate", "digits-demo", "--url", f"http://127.0.0.1:{free_port()}")
    assert nobody.returncode == 2 and "Traceback" not in nobody.stderr
    assert "cannot reach the server" in nobody.stderr


def test_simulated_pairs_hold_ties_the_way_people_give_them(server):
    """The default tie margin (1 sd) makes about half of random pairs "about the same"."""
    env, base, output = server
    key = next(line.strip() for line in output.splitlines() if line.strip().startswith("tl_"))
    headers = {"Authorization": f"Bearer {key}"}
    project = {"slug": "pairs-study", "name": "pairs"}
    assert httpx.post(f"{base}/api/projects", json=project, headers=headers).status_code == 201
    rng = np.random.default_rng(0)
    objects = [{"name": f"o{i}", "features": rng.normal(size=3).tolist()} for i in range(40)]
    created = httpx.post(f"{base}/api/projects/pairs-study/objects", json=objects, headers=headers)
    assert created.status_code == 201
    plan = {"strategies": [{"kind": "pairs", "weight": 1}], "repeat_rate": 0}
    planned = httpx.put(f"{base}/api/projects/pairs-study/plan", json=plan, headers=headers)
    assert planned.status_code == 200, planned.text
    simulated = run(
        {**env, "TRIPLETLAB_API_KEY": key},
        "simulate", "pairs-study", "--workers", "2", "--answers", "200", "--noise", "0",
        "--url", base,
    )  # fmt: skip
    assert simulated.returncode == 0, simulated.stderr + simulated.stdout
    exported = httpx.get(f"{base}/api/projects/pairs-study/answers", headers=headers).json()
    outcomes = [row["outcome"] for row in exported if row["kind"] == "pair"]
    assert len(outcomes) == 200
    assert 0.3 < outcomes.count(0) / len(outcomes) < 0.7
    assert {-1, 1} <= set(outcomes)


def test_demo_with_simulated_answers_trains_every_kind_it_can(env):
    """`demo --simulate N`: N answers through the worker API, a model of every trainable kind
    at N/4, N/2 and N answers (a learning curve), and why the others were not trained."""
    from sqlalchemy import select

    from app.db.models import Answer, Model
    from app.db.session import make_engine, session_factory

    run(env, "db", "upgrade")
    filled = run(env, "demo", "--simulate", "120")
    assert filled.returncode == 0, filled.stderr + filled.stdout
    assert "Traceback" not in filled.stderr and "Warning" not in filled.stderr
    assert "120 simulated answers" in filled.stdout
    assert "svmcompare not trained: svmcompare needs at least 20 pair answers" in filled.stdout
    engine = make_engine(env["TRIPLETLAB_DATABASE_URL"])
    try:
        with session_factory(engine)() as db:
            sources = set(db.scalars(select(Answer.source)))
            models = db.execute(select(Model.kind, Model.version, Model.n_answers)).all()
    finally:
        engine.dispose()
    assert sources == {"simulated"}
    curves: dict[str, list[int]] = {}
    for kind, _version, n_answers in sorted(models):
        curves.setdefault(kind, []).append(n_answers)
    # The crowd's reliability too: the demo's simulated workers are participants.
    assert set(curves) == {"embedding", "kernel", "metricboost", "reliability", "tripletboost"}
    for kind, seen in curves.items():
        assert len(seen) == 3 and seen[0] < seen[1] < seen[2] <= 120, (kind, seen)


def test_demo_plan_is_runnable(env):
    """The demo's plan mixes random triplets, a k1 landmark design and gold checks."""
    from app.db.models import Project
    from app.db.session import make_engine, session_factory
    from app.services.demo import DEMO_SLUG
    from app.services.pool import planner_for

    run(env, "db", "upgrade")
    run(env, "demo")
    engine = make_engine(env["TRIPLETLAB_DATABASE_URL"])
    with session_factory(engine)() as db:
        project = db.query(Project).filter_by(slug=DEMO_SLUG).one()
        kinds = [s["kind"] for s in project.plan["strategies"]]
        assert kinds == ["random", "landmark_k1"]
        assert project.plan["gold_rate"] > 0
        planner = planner_for(project)
        assert planner.gold_source is not None
    engine.dispose()
