"""The docs are complete and build: every setting and every CLI command is in the generated
references, the site builds with ``mkdocs build --strict``, and the README stays a door."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from app.cli import app as cli
from app.config import Settings

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
DOCS = REPO / "docs"


def _reference():  # type: ignore[no-untyped-def]
    """docs/hooks/reference.py, the mkdocs hook that generates the tables (not a package)."""
    spec = importlib.util.spec_from_file_location("docs_reference", DOCS / "hooks/reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _command_names() -> list[str]:
    group = typer.main.get_command(cli)
    names = []
    for name, command in group.commands.items():
        sub = getattr(command, "commands", None)
        names += [f"tripletlab {name} {s}" for s in sub] if sub else [f"tripletlab {name}"]
    return names


def test_every_setting_is_in_the_generated_reference():
    reference = _reference()
    text = reference.settings_reference()
    missing = [
        f"TRIPLETLAB_{name.upper()}"
        for name in Settings.model_fields
        if f"### `TRIPLETLAB_{name.upper()}`\n\nDefault: " not in text
    ]
    assert missing == []
    assert reference.SETTINGS_MARKER in (DOCS / "admin/settings.md").read_text()


def test_every_setting_has_a_description():
    assert all(field.description for field in Settings.model_fields.values())


def test_every_cli_command_is_in_the_generated_reference():
    reference = _reference()
    text = reference.cli_reference()
    missing = [name for name in _command_names() if f"### `{name}`" not in text]
    assert missing == []
    assert "`--workers` `WORKERS`" in text  # options too, with their help
    assert reference.CLI_MARKER in (DOCS / "admin/cli.md").read_text()


def test_quick_start_is_two_commands():
    quick = README.split("## Quick start", 1)[1].split("##", 1)[0]
    assert "make run" in quick and "make test" in quick


def test_the_readme_is_a_door():
    """What it is, the two commands, a first study, links: not the manual."""
    assert len(README.splitlines()) <= 200
    pages = set(re.findall(r"\]\((docs/[^)#]+)", README))
    assert len(pages) >= 10 and all((REPO / page).exists() for page in pages)


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path):
    """Broken links, anchors, a docstring the reference cannot render: each fails the build."""
    mkdocs = Path(sys.executable).with_name("mkdocs")
    result = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-5000:]
    settings = (tmp_path / "site/admin/settings/index.html").read_text()
    assert "TRIPLETLAB_DATABASE_URL" in settings and "generated: settings" not in settings
    commands = (tmp_path / "site/admin/cli/index.html").read_text()
    assert "tripletlab serve" in commands and "generated: cli" not in commands
    reference = (tmp_path / "site/learning/reference/index.html").read_text()
    assert "TripletBoost" in reference and "n_estimators" in reference
