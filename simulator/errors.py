"""Errors raised by the simulator for bad configuration or invalid policy decisions."""

from __future__ import annotations


def one_line(text: str) -> str:
    """``text`` on one line (Hydra and OmegaConf messages span several)."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


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
    """A policy returned a decision the simulator cannot apply (a policy bug, not a block).

    Degrees outside the action set, or explicit placements that are not a free symmetric block,
    raise this; a valid degree that merely cannot be placed blocks the job instead.
    """
