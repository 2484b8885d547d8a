"""Shared helpers for the console commands: one-line errors for bad input.

A bad group choice (``policy=nope``), a malformed graph, an impossible cluster or a negative rate
ends the command with one clear line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from omegaconf import OmegaConf

from simulator.errors import ConfigError, InvalidDecision
from workloads.errors import WorkloadError

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
USER_ERRORS = (WorkloadError, ConfigError, InvalidDecision)


def path_safe(name: str) -> str:
    """``name`` as one directory name: ``/`` becomes ``%2F``.

    Sweep runs are named by their overrides (``conf/sim.yaml``: ``hydra.sweep.subdir``); an override
    holding a path (``policy.checkpoint=outputs/train/run/policy.pt``) would otherwise nest the
    run several directories deep.
    """
    return name.replace("/", "%2F")


# Registered on import: every console command imports this module before Hydra composes, and
# sweep workers (joblib, submitit) import it when they unpickle the command's task function.
OmegaConf.register_new_resolver("pacml_path_safe", path_safe, replace=True)


def fail(prog: str, message: str) -> NoReturn:
    """Print ``prog: error: message`` on stderr and exit with status 2."""
    sys.stderr.write(f"{prog}: error: {message}\n")
    sys.stderr.flush()
    raise SystemExit(2)


def check_group_choices(prog: str, argv: Sequence[str], groups: Sequence[str]) -> None:
    """Fail early, in one line, if a command-line group choice names no config file.

    Handles ``group=a``, ``group=a,b`` (sweeps) and ``+group=a``; leaves anything fancier
    (sweep functions, globs) to Hydra.
    """
    for arg in argv:
        if "=" not in arg or arg.startswith("-"):
            continue
        key, value = arg.split("=", 1)
        key = key.lstrip("+~")
        if key not in groups or any(ch in value for ch in "()[]{}*$"):
            continue
        available = sorted(p.stem for p in (CONF_DIR / key).glob("*.yaml"))
        for choice in value.split(","):
            if choice and choice not in ("null",) and choice not in available:
                fail(prog, f"unknown {key} {choice!r} (available: {', '.join(available)})")


def report_user_errors(prog: str, body: Callable[[], None]) -> None:
    """Run ``body``; turn our input errors into one line on stderr and exit status 2."""
    try:
        body()
    except USER_ERRORS as exc:
        fail(prog, str(exc))
