"""The ``pacml`` command: one entry point whose subcommands are the project's programs.

``pacml SUB ARGS...`` runs the same main as before (a Hydra app or an argparse program) on
ARGS, so every override, ``-m`` sweep, ``--help``, ``--cfg job`` and ``hydra.run.dir=`` works as
it did. A subcommand's module is imported only when it is chosen: ``pacml --help`` and
``pacml sim`` load no torch. The old commands (``pacml-sim``, ...) stay one release as aliases
that say where they moved, then run unchanged.

Leaf module: it imports nothing from the project at module level (targets by name, lazily).
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

#: subcommand -> (module, function, one line of help). The function reads ``sys.argv``.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "sim": ("simulator.run", "main", "simulate one episode of job arrivals under a policy (or a sweep: -m)"),
    "place": ("simulator.place.cli", "main", "place one graph's ops on devices by a method and price it"),
    "report": ("analysis.report", "main", "tables, figures and a report of a sweep or run folder"),
    "graph": ("workloads.graph_cli", "main", "validate, convert or describe computation graph files"),
    "train": ("pacml.agent.train", "main", "train a per-beta PAC-ML agent with PPO"),
    "train-placer": ("pacml.placer.cli", "main", "pre-train the learned op placer"),
    "train-adaptive": ("pacml.adaptive.train", "main", "train the adaptive agent (teacher search, selector fit)"),
    "distill": ("pacml.critic.distill", "main", "distil the rollout planner into a deviation critic for a per-beta agent"),
}


def usage() -> str:
    """``pacml --help``: the subcommands, one line each."""
    width = max(map(len, COMMANDS))
    lines = ["usage: pacml COMMAND [ARGS...]    (pacml COMMAND --help: that command's options)", "",
             "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, (_, _, text) in COMMANDS.items()]
    return "\n".join(lines) + "\n"


def _run(name: str, args: Sequence[str]) -> None:
    """Run subcommand ``name`` on ``args`` as its own program: ``sys.argv`` is what the old
    console script saw, but named ``pacml NAME`` (Hydra names the command by it in
    ``--hydra-help``; job names and run folders come from the config, not from it)."""
    module, function, _ = COMMANDS[name]
    sys.argv = [f"{sys.argv[0] if sys.argv else 'pacml'} {name}", *args]
    getattr(importlib.import_module(module), function)()


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point (``pacml``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(usage())
        return
    name = args[0]
    if name not in COMMANDS:
        _unknown(name)
    _run(name, args[1:])


def _unknown(name: str) -> NoReturn:
    sys.stderr.write(f"pacml: error: unknown command {name!r} (choose from {', '.join(COMMANDS)})\n")
    sys.exit(2)


def _alias(name: str) -> None:
    """An old ``pacml-NAME`` command: one line on stderr, then the same program, unchanged."""
    sys.stderr.write(f"pacml-{name} is now `pacml {name}` (this alias goes in the next release)\n")
    module, function, _ = COMMANDS[name]
    getattr(importlib.import_module(module), function)()


# The old console scripts (pyproject.toml [project.scripts]), one release.
sim_alias = functools.partial(_alias, "sim")
place_alias = functools.partial(_alias, "place")
report_alias = functools.partial(_alias, "report")
graph_alias = functools.partial(_alias, "graph")
train_alias = functools.partial(_alias, "train")
train_placer_alias = functools.partial(_alias, "train-placer")
train_adaptive_alias = functools.partial(_alias, "train-adaptive")
distill_alias = functools.partial(_alias, "distill")


if __name__ == "__main__":
    main()
