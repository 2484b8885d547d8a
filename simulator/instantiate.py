"""``instantiate_checked``: Hydra's ``instantiate`` with our own errors unwrapped.

A leaf of the config plumbing: every builder (``simulator.build``, the op placers of
``simulator.block_placement``, ``pacml-place``) calls it, and it imports none of them.
"""

from __future__ import annotations

from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate

from simulator.errors import ConfigError
from simulator.policy import raised_site
from workloads.errors import WorkloadError


def instantiate_checked(node: Any, field: str) -> Any:
    """``hydra.utils.instantiate`` that re-raises our own errors unwrapped."""
    try:
        return instantiate(node)
    except InstantiationException as exc:
        cause = exc.__cause__
        while cause is not None and not isinstance(cause, WorkloadError | ConfigError | ValueError):
            cause = cause.__cause__
        if isinstance(cause, WorkloadError | ConfigError):
            raise cause from None
        if cause is not None:
            raise ConfigError(str(cause), field=field) from None
        first = exc.__cause__  # e.g. a plug-in's constructor failing: name what it raised and where
        if first is not None:
            text = " ".join(str(first).split())[:200]
            raise ConfigError(f"{str(exc).splitlines()[0]} {type(first).__name__}{': ' + text if text else ''} "
                              f"(at {raised_site(first.__traceback__, None)})", field=field) from None
        raise ConfigError(str(exc).splitlines()[0], field=field) from None
