"""The policy plug-in interface: one decision per arriving job.

A policy is any object with ``reset(seed)`` and ``decide(job, state) -> Decision`` (built from
``conf/policy/<name>.yaml``); it never mutates simulator state. Optional hook: ``bind(workload)``,
called before each episode (a policy that wraps another should forward it).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from simulator.cluster import ClusterState
from simulator.errors import short_path
from workloads.jobs import JobSpec


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with an arriving job.

    Attributes:
        degree: Partition degree; 0 rejects the job (it is blocked).
        placement: A free block of servers for the job (a block or its server tuple); ``None``
            lets the configured placer choose.
    """

    degree: int
    placement: tuple[int, ...] | None = None


@runtime_checkable
class Policy(Protocol):
    """Decides how many devices each arriving job is partitioned over (and optionally where)."""

    def reset(self, seed: int | None = None) -> None:
        """Start a new episode; ``seed`` seeds any randomness the policy uses."""
        ...

    def decide(self, job: JobSpec, state: ClusterState) -> Decision:
        """Return the decision for ``job`` given the cluster ``state``."""
        ...


#: The protocol in one line, for messages about a policy that breaks it.
PROTOCOL = "a policy needs reset(seed=None) and decide(job, state) returning a Decision (simulator/policy.py)"
#: Packages of this project: an exception inside one of their policies is our bug and keeps its traceback.
_PROJECT_PACKAGES = frozenset({"simulator", "pacml", "workloads", "analysis"})


def source_site(obj: Any) -> str:
    """``file:line`` where a class or function is defined (its qualified name if the source is unknown)."""
    func = getattr(obj, "__func__", obj)
    code = getattr(inspect.unwrap(func) if callable(func) else func, "__code__", None)
    if code is not None:
        return f"{short_path(code.co_filename)}:{code.co_firstlineno}"
    try:
        return f"{short_path(inspect.getsourcefile(obj) or '?')}:{inspect.getsourcelines(obj)[1]}"
    except (OSError, TypeError):
        return getattr(obj, "__qualname__", repr(obj))


def class_path(cls: type) -> str:
    """``module.Class`` of a class (a policy's, in messages about it)."""
    return f"{cls.__module__}.{cls.__qualname__}"


def is_project_policy(policy: Any) -> bool:
    """Whether the policy's class belongs to this project (not a user's plug-in)."""
    return type(policy).__module__.split(".", 1)[0] in _PROJECT_PACKAGES


def interface_problem(cls: type) -> str | None:
    """What a policy class lacks of the protocol (one line naming its file and line), or ``None``."""
    missing = [f"{name}()" for name in ("reset", "decide") if not callable(getattr(cls, name, None))]
    if not missing:
        return None
    return (f"{source_site(cls)}: policy {class_path(cls)} has no {' or '.join(missing)} "
            f"method: {PROTOCOL}")
