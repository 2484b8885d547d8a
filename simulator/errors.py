"""Errors raised by the simulator for bad configuration or invalid policy decisions.

A leaf: it imports nothing from the project, so every module may import it.
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any


def one_line(text: str) -> str:
    """``text`` on one line (Hydra and OmegaConf messages span several)."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def short_path(path: str) -> str:
    """``path`` relative to the working directory when it lies below it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive
        return path
    return path if rel.startswith("..") else rel


def raised_site(tb: TracebackType | None, method: Any) -> str:
    """``file:line`` of the deepest frame of ``tb`` in the file defining ``method`` (the user's own line,
    not a library's below it); the deepest frame if none is."""
    code = getattr(getattr(method, "__func__", method), "__code__", None)
    home = code.co_filename if code is not None else None
    deepest = mine = None
    while tb is not None:
        deepest = tb
        if tb.tb_frame.f_code.co_filename == home:
            mine = tb
        tb = tb.tb_next
    frame = mine or deepest
    return "?" if frame is None else f"{short_path(frame.tb_frame.f_code.co_filename)}:{frame.tb_lineno}"


class ConfigError(ValueError):
    """A configuration value is impossible (e.g. a cluster with zero racks).

    Args:
        message: What is wrong.
        field: The config key at fault (e.g. ``cluster.num_racks_per_group``).
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = field
        super().__init__(f"field '{field}': {message}" if field else message)


class InvalidDecision(ValueError):
    """A policy returned a decision the simulator cannot apply (a degree outside the action set, a
    placement that is not a free symmetric block): a policy bug, not a block."""
