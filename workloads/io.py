"""File helpers: atomic writes (a reader never sees a half-written result, checkpoint or log) and
reading text input so that undecodable bytes and control characters become one-line errors."""

from __future__ import annotations

import glob
import json
import logging
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from workloads.errors import WorkloadError

log = logging.getLogger(__name__)


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], None]) -> Path:
    """Write a file through ``write(fh)`` into a temp file, fsync it, then rename over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; keep the usual permissions
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def clear_stale_temporaries(directory: str | Path, names: Iterable[str]) -> list[Path]:
    """Remove the temporary files :func:`atomic_write` left in ``directory`` for the files ``names``
    when its process was killed (SIGKILL skips its cleanup); returns what was removed. Only for a
    directory that one writer owns (a run's folder), where no other write can be in progress."""
    directory = Path(directory)
    removed = [p for name in names for p in directory.glob(f".{glob.escape(name)}.*.tmp") if p.is_file()]
    for path in removed:
        path.unlink(missing_ok=True)
    if removed:
        log.info("%s: removed %d temporary file(s) a killed run left", directory, len(removed))
    return removed


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Atomically write ``text`` (UTF-8) to ``path``."""
    return atomic_write(path, lambda fh: fh.write(text.encode()))


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    """Atomically write ``obj`` as indented JSON to ``path``."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")

# C0 controls other than tab/newline/carriage return, DEL and C1 controls: never in a text profile.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def line_of_offset(text: str, offset: int) -> int:
    """1-based line number of character ``offset`` in ``text``."""
    return text.count("\n", 0, offset) + 1


def read_text(path: Path, *, allow_controls: bool = False) -> str:
    """The UTF-8 text of ``path``.

    Raises:
        WorkloadError: If the file cannot be read, is not UTF-8 (naming the line of the first
            bad byte) or holds a control character (unless ``allow_controls``).
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise WorkloadError(f"cannot read graph file: {exc.strerror or exc}", path=path) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise WorkloadError(f"not a UTF-8 text file (byte 0x{data[exc.start]:02x} at offset {exc.start})",
                            path=path, line=line) from None
    if not allow_controls:
        m = _CONTROL.search(text)
        if m:
            raise WorkloadError(f"control character U+{ord(m.group()):04X} in a text file",
                                path=path, line=line_of_offset(text, m.start()))
    return text


def show(value: object, limit: int = 40) -> str:
    """A short ``repr`` of ``value`` for an error message (long values are cut)."""
    try:
        text = repr(value)
    except RecursionError:
        text = f"<deeply nested {type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
