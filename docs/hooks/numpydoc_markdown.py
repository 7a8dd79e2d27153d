"""A griffe extension: the library's reStructuredText idioms, read as Markdown.

The docstrings of ``app.learning`` follow numpydoc, as scikit-learn's do: Sphinx roles
(:func:`check_triplets`), simple tables framed by ``====`` lines (the Notes' maps from the
papers' symbols to the code's names), and citations (``.. [1]``, ``[1]_``). mkdocstrings
renders docstrings as Markdown, where a role shows as text, a table as a run of lines and a
row starting with ``#`` as a heading. This extension rewrites each docstring when griffe
loads it (mkdocs.yml: ``extensions`` of the python handler); the source is not changed.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:func|class|mod|meth|data|attr|obj|exc|ref):`(~?)([^`]+)`")
BORDER = re.compile(r"^(\s*)(=+)( +=+)+\s*$")
CITATION = re.compile(r"^(\s*)\.\. \[(\w+)\]", flags=re.M)
CITED = re.compile(r"\[(\w+)\]_")


def _role(match: re.Match[str]) -> str:
    name = match.group(2)
    return f"`{name.rsplit('.', 1)[-1] if match.group(1) else name}`"


def _columns(border: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in re.finditer(r"=+", border)]


def _cells(line: str, columns: list[tuple[int, int]]) -> list[str]:
    cells = []
    for number, (start, _end) in enumerate(columns):
        stop = columns[number + 1][0] if number + 1 < len(columns) else len(line)
        cells.append(line[start:stop].strip())
    return cells


def _table(lines: list[str], columns: list[tuple[int, int]], indent: str) -> list[str]:
    """A simple table's rows (between its borders) as a Markdown table; a row whose first
    cell is empty continues the row above."""
    rows: list[list[str]] = []
    for line in lines:
        if not line.strip() or BORDER.match(line):
            continue
        cells = _cells(line, columns)
        if rows and not cells[0]:
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
        else:
            rows.append(cells)
    if not rows:
        return []
    lines = [f"{indent}| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return [lines[0], f"{indent}|" + "---|" * len(columns), *lines[1:]]


def _tables(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        top = BORDER.match(lines[i])
        if top is None:
            out.append(lines[i])
            i += 1
            continue
        # A simple table: border, header, border, rows, border (the last border closes it).
        borders = [i]
        j = i + 1
        while j < len(lines) and len(borders) < 3:
            if BORDER.match(lines[j]):
                borders.append(j)
            elif not lines[j].strip():
                break
            j += 1
        if len(borders) < 3:
            out.append(lines[i])
            i += 1
            continue
        columns = _columns(lines[i])
        body = lines[borders[0] + 1 : borders[2]]
        out += ["", *_table(body, columns, top.group(1)), ""]
        i = borders[2] + 1
    return "\n".join(out)


def to_markdown(text: str) -> str:
    """numpydoc's reStructuredText idioms in ``text`` as Markdown."""
    text = ROLE.sub(_role, text)
    text = CITATION.sub(lambda m: f"{m.group(1)}[{m.group(2)}]", text)
    text = CITED.sub(lambda m: f"[{m.group(1)}]", text)
    return _tables(text)


class NumpydocMarkdown(griffe.Extension):
    """Rewrite every docstring griffe loads (see the module's docstring)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = to_markdown(obj.docstring.value)
