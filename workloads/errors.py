"""Errors raised for bad workload input.

Every error names the file, and where it can, the line (or op) and the field, so that a user
sees one actionable line instead of a traceback from deep inside a parser.
"""

from __future__ import annotations

from pathlib import Path


class WorkloadError(ValueError):
    """Bad workload input (graph file, trace, distribution parameters).

    Args:
        message: What is wrong, in words a user can act on.
        path: The offending file, if any.
        line: 1-based line number in ``path``, if known.
        field: The field (or op id) at fault, if known.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.path = None if path is None else str(path)
        self.line = line
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path
            if self.line is not None:
                where += f":{self.line}"
            where += ": "
        what = f"field '{self.field}': " if self.field else ""
        # One line whatever the input held: a newline from a file name or value would split it.
        return f"{where}{what}{self.message}".replace("\r", "\\r").replace("\n", "\\n")
