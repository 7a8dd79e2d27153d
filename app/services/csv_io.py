"""CSV in and out: read an uploaded CSV row by row with errors that name the line, and write
cells a spreadsheet will not run as formulas."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import Any, BinaryIO

from app.errors import InvalidInput

FIELD_LIMIT = csv.field_size_limit()  # characters in one cell (the csv module's limit)
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def read_csv(file: BinaryIO) -> tuple[list[str], Iterator[tuple[int, list[str]]]]:
    """The header of the UTF-8 CSV in ``file`` and an iterator over its records.

    Records come as ``(line, values)``, ``line`` being the 1-based line the record starts
    on, each with exactly as many values as the header. The file is read as it goes (never
    whole into memory). Every problem is an :class:`InvalidInput` that names its line: a
    value count that differs from the header's, a NUL character, a quote never closed, a
    bare carriage return outside quotes (a line ends with ``\\n`` or ``\\r\\n``), text that
    is not UTF-8, a cell over 131,072 characters.
    """
    # newline="\n": lines end at "\n" only, so a "\r" that ends no line reaches the csv module,
    # which refuses it outside quotes instead of splitting a record silently.
    text = io.TextIOWrapper(file, encoding="utf-8-sig", newline="\n")
    reader = csv.reader(text, strict=True)
    records = _records(reader)
    try:
        first = next(records, None)
    except InvalidInput as error:
        raise InvalidInput(f"{error.detail} (in the header)") from error
    if first is None:
        raise InvalidInput("the CSV is empty: it needs a header line")
    _, header = first
    header = [h.strip() for h in header]

    def body() -> Iterator[tuple[int, list[str]]]:
        for line, values in records:
            if values == []:
                continue  # a blank line
            if len(values) != len(header):
                raise InvalidInput(
                    f"CSV line {line} has {len(values)} values, the header has {len(header)}"
                )
            yield line, values

    return header, body()


def _records(reader: Any) -> Iterator[tuple[int, list[str]]]:
    previous_end = 0
    while True:
        start = previous_end + 1
        try:
            values = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            raise InvalidInput(f"CSV line {start}: {_explain(str(error), start)}") from error
        except UnicodeDecodeError as error:
            raise InvalidInput(f"the CSV is not UTF-8 text (after line {previous_end})") from error
        previous_end = reader.line_num
        for value in values:
            if "\x00" in value:
                raise InvalidInput(f"CSV line {start}: a value holds a NUL character (\\x00)")
        yield start, values


def _explain(message: str, line: int) -> str:
    if "unexpected end of data" in message:
        return f'a quote (") opened on line {line} or after is never closed'
    if "new-line character seen in unquoted field" in message:
        return (
            "a carriage return (\\r) inside an unquoted value; quote the value, "
            "or end lines with \\n or \\r\\n"
        )
    if "field larger than field limit" in message:
        return f"a value longer than {FIELD_LIMIT:,} characters"
    if "expected after" in message:
        return f'a quoted value must end at its closing quote ("): {message}'
    return message


def safe_cell(value: Any) -> Any:
    """``value`` for a CSV meant for spreadsheets: text starting with = + - @, a tab or a
    carriage return gets a leading apostrophe, so a spreadsheet shows it instead of running
    it as a formula (OWASP's "CSV injection"); numbers and other text pass unchanged."""
    if isinstance(value, str) and value.startswith(_FORMULA_STARTS):
        return "'" + value
    return value
