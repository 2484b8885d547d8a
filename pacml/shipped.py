"""Shipped checkpoints: where they live and how a checkpoint name, run folder or file resolves to a file.

Shared by every agent that loads a checkpoint (the per-beta agent, the adaptive agent, the critics).
A leaf: it imports only pacml.runfiles and the simulator's errors (torch only when a file is read).
The data folder itself is ``pacml/checkpoints/``.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from pacml.runfiles import load_torch_file
from simulator.errors import ConfigError

log = logging.getLogger(__name__)

#: Where shipped checkpoints live (``pacml/checkpoints/<name>/policy.pt``).
SHIPPED_DIR = Path(__file__).resolve().parent / "checkpoints"
#: Former names of shipped checkpoints. The learned *job placement* agents (which block a job
#: gets) were called ``paper_beta*_placement`` before op placement (which device runs each op,
#: ``pacml place``) existed; the old names still load, with a warning.
RENAMED_CHECKPOINTS = {f"paper_beta{b}_placement": f"paper_beta{b}_block" for b in "ABCD"}
#: The degree agents' checkpoint files: kind (for messages) and the policy config that runs them.
#: ``policy=pacml`` is the adaptive agent; the per-beta agents (``pacml train``) are ``policy=pacml_beta``.
DEGREE_AGENT_FILES = {"policy.pt": ("a per-beta policy", "pacml_beta"),
                      "adaptive.npz": ("an adaptive", "pacml")}
#: The name the per-condition configs (conf/policy/pacml_beta.yaml, pacml_critic.yaml, ...) give a run
#: whose beta has no ``name`` (uniform, fixed): ``{family}_beta{UNNAMED_BETA}``, which never exists.
UNNAMED_BETA = "unnamed"
#: Per file kind: the shipped-name pattern of the configs' default for the run's condition
#: (``{scenario_family}_beta{beta.name}``), and the command that trains one for another condition.
_PER_CONDITION_NAME = {"policy.pt": (r"([a-z]+)_beta(\w+?)", "pacml train"),
                       "critic.pt": (r"([a-z]+)_beta(\w+?)_critic", "pacml distill")}


def _find(path: str | Path, filename: str, named: bool = False) -> Path | None:
    """``path`` as given, or relative to the shipped checkpoints; a directory means its ``filename``.
    ``named``: only a file called ``filename`` (a checkpoint file may have any name)."""
    for cand in (Path(path), SHIPPED_DIR / str(path)):
        if cand.is_dir():
            cand = cand / filename
        if cand.is_file() and (not named or cand.name == filename):
            return cand
    return None


def resolve_checkpoint(path: str | Path, filename: str, kind: str, field: str) -> Path:
    """The checkpoint file ``path`` names (see :func:`_find`); a ConfigError on ``field`` if there is
    none, naming the policy config that runs it when ``path`` is the other degree agent's checkpoint."""
    if str(path) in RENAMED_CHECKPOINTS and not Path(path).exists():
        log.warning("checkpoint %r is now called %r (job placement: which block a job gets)",
                    str(path), RENAMED_CHECKPOINTS[str(path)])
        path = RENAMED_CHECKPOINTS[str(path)]
    found = _find(path, filename)
    if found is not None and found.name == filename:
        return found
    wanted = DEGREE_AGENT_FILES.get(filename, (f"a {kind}", ""))[0]
    for other, (other_kind, policy) in DEGREE_AGENT_FILES.items():
        if other != filename and _find(path, other, named=True) is not None:
            raise ConfigError(f"{str(path)!r} is {other_kind} checkpoint, not {wanted} one: run it with "
                              f"policy={policy} policy.checkpoint={path}", field=field)
    if found is not None:  # a checkpoint file saved under a name of its own
        return found
    shipped = ", ".join(sorted(p.parent.name for p in SHIPPED_DIR.glob(f"*/{filename}"))) or "none"
    condition = _PER_CONDITION_NAME.get(filename)
    match = condition and re.fullmatch(condition[0], str(path))
    families = {p.name.split("_beta")[0] for p in SHIPPED_DIR.glob("*_beta*")}
    if match and match.group(1) in families:  # a config's default for its condition, not a typo
        family, beta = match.group(1), match.group(2)
        what = f"beta {beta!r}" if beta != UNNAMED_BETA else "a beta with no name (beta=uniform or beta=fixed)"
        raise ConfigError(
            f"no {kind} checkpoint for {what} in the {family} scenario family; shipped: {shipped}; "
            f"pick one with {field}=NAME or a run of {condition[1]} ({field}=outputs/<run>); "
            "policy=pacml is one agent for every beta"
            # The name itself only when a person may have typed it (the unnamed one is internal).
            + (f" (looked for {str(path)!r})" if beta != UNNAMED_BETA else ""), field=field)
    raise ConfigError(f"no {kind} checkpoint at {path!r} (shipped: {shipped})", field=field)


def load_payload(path: str | Path, filename: str, fmt: str, kind: str, field: str) -> dict[str, Any]:
    """Resolve and read a pacml checkpoint file of format ``fmt``; bad input is a ConfigError on ``field``."""
    file = resolve_checkpoint(path, filename, kind, field)
    try:  # imports torch only now: a missing file must not wait for the import
        payload = load_torch_file(file, f"{kind} checkpoint")
    except ValueError as exc:
        raise ConfigError(str(exc), field=field) from None
    if not isinstance(payload, dict) or payload.get("format") != fmt:
        raise ConfigError(f"{file} is not a pacml {kind} checkpoint", field=field)
    return payload
