"""The README documents every setting and every CLI command."""

from __future__ import annotations

from pathlib import Path

from app.cli import app as cli
from app.config import Settings

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_every_setting_is_documented():
    missing = [
        f"TRIPLETLAB_{name.upper()}"
        for name in Settings.model_fields
        if f"`TRIPLETLAB_{name.upper()}`" not in README
    ]
    assert missing == []


def test_every_setting_has_a_description():
    assert all(field.description for field in Settings.model_fields.values())


def test_every_cli_command_is_documented():
    import typer.main

    group = typer.main.get_group(cli)
    names = []
    for name, command in group.commands.items():
        sub = getattr(command, "commands", None)
        names += [f"tripletlab {name} {s}" for s in sub] if sub else [f"tripletlab {name}"]
    missing = [n for n in names if f"`{n}" not in README]
    assert missing == []


def test_quick_start_is_two_commands():
    quick = README.split("## Quick start", 1)[1].split("##", 1)[0]
    assert "make run" in quick and "make test" in quick
