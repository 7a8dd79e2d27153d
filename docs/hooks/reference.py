"""The docs' reference tables, generated from the code when the site is built.

A page that holds a marker gets the reference in its place: ``<!-- generated: settings -->``
the settings of :class:`app.config.Settings` (each field's variable, default and description),
``<!-- generated: cli -->`` the commands of the ``tripletlab`` command line (app/cli.py),
with their arguments and options. Nothing is written by hand, so they cannot drift from the
code (Datasette keeps its references the same way, with cog). mkdocs loads this file as a
hook (``hooks:`` in mkdocs.yml); tests/test_docs.py calls the same functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer.main

from app.cli import app as cli
from app.config import Settings

SETTINGS_MARKER = "<!-- generated: settings -->"
CLI_MARKER = "<!-- generated: cli -->"


def _cell(text: str) -> str:
    """Text for a Markdown table cell: one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _default(value: Any) -> str:
    if value is None:
        return "(unset)"
    if value == "":
        return "(empty)"
    if isinstance(value, Path):
        return f"`{value if value.is_absolute() else './' + value.as_posix()}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def settings_reference() -> str:
    """Every setting as a section: its variable (a heading, so it has an anchor), its
    default, and what it does."""
    prefix = Settings.model_config.get("env_prefix", "")
    parts = []
    for name, field in Settings.model_fields.items():
        description = " ".join((field.description or "").split())
        parts.append(
            f"### `{prefix}{name.upper()}`\n\nDefault: {_default(field.default)}\n\n{description}\n"
        )
    return "\n".join(parts)


# typer builds click commands (its own vendored copy of click in recent versions): read them
# by their attributes, not their classes.


def _commands(group: Any, path: str) -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    for name in sorted(group.commands):
        command = group.commands[name]
        if hasattr(command, "commands"):
            found += _commands(command, f"{path} {name}")
        else:
            found.append((f"{path} {name}", command))
    return found


def _is_option(param: Any) -> bool:
    return param.param_type_name == "option"


def _argument(param: Any) -> str:
    return param.name.upper() if param.required else f"[{param.name.upper()}]"


def _parameter(param: Any) -> tuple[str, str, str]:
    if _is_option(param):
        names = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
        if not param.is_flag:
            names += f" `{param.metavar or param.name.upper()}`"
    else:
        names = f"`{param.name.upper()}`"
    default = param.default
    shown = "(required)" if param.required else _default(default)
    if callable(default) or (_is_option(param) and param.multiple):
        shown = "—" if not param.required else shown
    return names, shown, _cell(getattr(param, "help", None) or "")


def cli_reference() -> str:
    """Every command: its usage, what it does, and a table of its arguments and options."""
    group = typer.main.get_command(cli)
    parts = []
    for path, command in _commands(group, "tripletlab"):
        params = [p for p in command.params if p.name != "help" and not p.hidden]
        usage = " ".join([path, *(_argument(p) for p in params if not _is_option(p))])
        if any(_is_option(p) for p in params):
            usage += " [OPTIONS]"
        help_text = (command.help or "").strip()
        parts.append(f"### `{path}`\n\n```\n{usage}\n```\n\n{help_text}\n")
        if params:
            rows = ["| argument or option | default | meaning |", "|---|---|---|"]
            rows += ["| {} | {} | {} |".format(*_parameter(p)) for p in params]
            parts.append("\n".join(rows) + "\n")
    return "\n".join(parts)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """mkdocs' hook: put the generated tables in place of their markers."""
    if SETTINGS_MARKER in markdown:
        markdown = markdown.replace(SETTINGS_MARKER, settings_reference())
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    return markdown
