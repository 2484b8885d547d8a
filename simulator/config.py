"""Config plumbing shared by every command and builder: the one typed check of a composed config
(:func:`validate_config`), ``instantiate_checked``, and where ``conf/`` lies.

A leaf of ``simulator/`` (it imports only :mod:`simulator.errors` and :mod:`simulator.estimate`).
The rules: docs/configuration.md ("How a config is checked").
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import importlib
import inspect
import logging
import math
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import OmegaConfBaseException

from simulator.errors import ConfigError, raised_site
from simulator.estimate import estimate_run, refusal
from workloads.errors import WorkloadError

log = logging.getLogger(__name__)

#: ``_target_`` paths that moved, old -> new, so that saved configs (the shipped checkpoints'
#: ``train_config.yaml``, old run folders) still build. These aliases go in the next release.
OLD_TARGETS: dict[str, str] = {
    "pacml.policy.PacMLPolicy": "pacml.agent.policy.PacMLBetaPolicy",
    "pacml.rewards.JobAcceptance": "pacml.agent.rewards.JobAcceptance",
    "pacml.rewards.AcceptedDemand": "pacml.agent.rewards.AcceptedDemand",
    "pacml.adaptive.AdaptivePolicy": "pacml.adaptive.policy.PacMLPolicy",
    "pacml.critic.CriticPolicy": "pacml.critic.policy.PacMLCriticPolicy",
}

_CRITIC = ("the adaptive agent's deviation critic did nothing measurable and was never shipped "
           "(docs/journal/conditions-2.md); policy.condition_critics stays")
_IMITATE = ("pacml distill's imitate mode and its settings never beat the agent; distill trains the "
            "deviation critic only (docs/journal/agents.md)")
#: Retired options, key -> why (one line): refused as retired (:func:`retired_error`), not as an
#: unknown key.
RETIRED: dict[str, str] = {
    "policy.selector_memory": "averaging the selector's scores over 64 jobs measured no better on the grid "
                              "(docs/journal/conditions-1.md)",
    "policy.shadow_count_from_warmup": "counting the shadows' evidence from the warm-up's end measured worse "
                                       "(docs/journal/conditions-2.md)",
    "policy.window_margin": "a separate margin for the first whole-window pick measured no better "
                            "(docs/journal/conditions-2.md)",
    "policy.lookup_first_above_servers": "letting the lookup decide from the first job on big clusters measured "
                                         "worse on the grid (docs/journal/conditions-1.md)",
    "policy.shadow_max_servers": "shadows run on every cluster: placing in blocks, they help on 512 servers too "
                                 "(docs/journal/conditions-1.md, conditions-2.md)",
    "policy.critic": _CRITIC,
    "policy.critic_margin": _CRITIC,
    "adaptive.tune_neighbours": "tuning the lookup's distance weights changed almost nothing in simulation "
                                "(docs/journal/conditions-1.md)",
    "adaptive.label_horizon_s": "ranking rules over a longer horizon trained a worse agent "
                                "(docs/journal/conditions-1.md)",
    "adaptive.jobs_per_server": "longer training episodes on big clusters measured worse "
                                "(docs/journal/conditions-1.md)",
    "adaptive.minibatch_rows": "many optimiser steps per fit epoch trained a worse agent on the grid "
                               "(docs/journal/conditions-1.md)",
    "adaptive.size_spread_frac": "resizing the training graphs measured no better on the grid "
                                 "(docs/journal/conditions-2.md)",
    **{f"distill.{key}": _IMITATE for key in ("mode", "epochs", "learning_rate", "batch_size", "change_weight",
                                              "soft_temperature_jobs")},
}
#: Retired values, (key, value) -> why: refused like :data:`RETIRED`.
RETIRED_VALUES: dict[tuple[str, Any], str] = {
    ("net.order", "heft"): "the decoder on HEFT's clock won fewer held-out pairs than the shipped placer "
                           "(docs/journal/placer.md); use rank, full_rank or first",
}


def retired_error(key: str, value: Any = None) -> ConfigError | None:
    """The one-line error for a retired option (``key``, or ``key=value``), or ``None``."""
    if isinstance(value, str) and (key, value) in RETIRED_VALUES:
        return ConfigError(f"{value} was retired: {RETIRED_VALUES[key, value]}", field=key)
    if key in RETIRED:
        return ConfigError(f"was retired: {RETIRED[key]}", field=key)
    return None


#: The shipped config directory (``conf/``).
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"

#: Default cap on the arrivals of one episode (``max_arrivals``): the paper's episode has 1,000.
DEFAULT_MAX_ARRIVALS = 100_000
#: Seeds go to ``numpy.random.SeedSequence`` (non-negative) and are stored as int64.
MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class Rule:
    """The type (a hint :func:`check_type` reads) and range of one config key: numbers within
    ``[low, high]`` (``low`` excluded when ``low_open``); ``non_empty`` lists and strings;
    ``required`` keys present."""

    type: Any
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    non_empty: bool = False
    required: bool = False


def _pos(t: Any = float) -> Rule:
    return Rule(t, low=0.0, low_open=True)


#: Largest ``workload.time_scales`` factor (a graph a million times slower is a typo, not a workload).
MAX_TIME_SCALE = 1e6

#: Keys every simulator-based command has (``conf/sim.yaml``). Group nodes with a ``_target_``
#: are checked against their class instead.
SIM_KEYS: dict[str, Rule] = {
    "seed": Rule(int, low=0, high=MAX_SEED, required=True),
    "mean_interarrival_s": _pos(),
    "horizon_s": _pos(float | None),
    "horizon_accounting": Rule(typing.Literal["drain", "paper"]),
    "scenario_family": Rule(str, non_empty=True),
    "progress": Rule(bool),
    "out_dir": Rule(str | None, non_empty=True),
    "skip_finished": Rule(bool),
    "max_arrivals": Rule(int, low=1),
    "max_estimated_hours": _pos(float | None),
    "max_estimated_memory_gb": _pos(float | None),
    "sim.min_op_time_s": _pos(),
    "sim.edge_sizing": Rule(typing.Literal["paper", "activation"]),
    "sim.placement": Rule(typing.Literal["op_first_fit", "block"]),
    "sim.comm_quirks": Rule(bool),
    "sim.op_placer": Rule(str, non_empty=True),
    "sim.split_ops": Rule(bool),
    "sim.hetero_block_search": Rule(int, low=0),
    "sim.pipeline": Rule(dict | None),  # scenario=pipeline; its keys: OWNED_SECTIONS
    "workload.graphs": Rule(str | list[str], non_empty=True, required=True),
    "workload.profile_time_unit_s": _pos(),
    "workload.num_training_steps": Rule(int, low=1),
    "workload.weights": Rule(list[float] | None, low=0.0, non_empty=True),
    "workload.time_scales": Rule(list[float] | None, low=0.0, low_open=True, high=MAX_TIME_SCALE, non_empty=True),
}

#: Sections whose keys, defaults and checks live in their owner's settings dataclass, section ->
#: the dotted path of a function that checks the section's value (raising ``ConfigError`` naming
#: the key at fault); imported by name, so that this module stays a leaf.
OWNED_SECTIONS: dict[str, str] = {"sim.pipeline": "simulator.allocation.pipeline.pipeline_config"}

#: Sections that are plug-ins (instantiated from ``_target_``), per command.
SIM_PLUGINS = ("cluster", "arrivals", "beta", "policy")

#: Plain keys of ``pacml place`` (``conf/place.yaml``); ``devices`` is checked when the device
#: set is built (``simulator.place.cli``), ``method`` against its class.
PLACE_KEYS: dict[str, Rule] = {
    "seed": Rule(int, low=0, high=MAX_SEED, required=True),
    "graph": Rule(str, non_empty=True, required=True),
    "objective": Rule(typing.Literal["step", "latency", "pipeline"], required=True),
    "input_loading": Rule(typing.Literal["profiled", "prefetched"]),
    "gantt": Rule(bool),
    "out_dir": Rule(str | None, non_empty=True),
    "skip_finished": Rule(bool),
}
PLACE_PLUGINS = ("method",)


def _key_list(keys: Iterable[str]) -> str:
    return ", ".join(sorted(keys))


def suggest(key: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known`` to ``key``, or ``''``."""
    known = [k for k in known if not key.startswith(k + ".")]  # not the section the key is in
    close = difflib.get_close_matches(key, known, n=2, cutoff=0.6)
    if not close:  # a typo of the last component only: compare within the same section
        head, _, tail = key.rpartition(".")
        same = [k for k in known if k.rpartition(".")[0] == head]
        close = [f"{head}.{m}" if head else m
                 for m in difflib.get_close_matches(tail, [k.rpartition(".")[2] for k in same], n=2, cutoff=0.5)]
    if not close:
        head = key.rpartition(".")[0]
        inside = sorted(k.rpartition(".")[2] for k in known if k.rpartition(".")[0] == head) if head else []
        return f" ({head} has: {', '.join(inside)})" if inside else ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"


def flat_keys(node: Any, prefix: str = "") -> list[str]:
    """Every dotted key of a config (sections and leaves), without resolving values."""
    keys: list[str] = []
    if isinstance(node, DictConfig):
        for k in node:
            full = f"{prefix}{k}"
            keys.append(full)
            child = node._get_node(k)  # no resolution: interpolations stay as they are
            if isinstance(child, DictConfig):
                keys += flat_keys(child, full + ".")
    return keys


def _type_name(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if hint is type(None):
        return "null"
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(hint))
    if origin in (list, tuple, Sequence, typing.Sequence):
        args = typing.get_args(hint)
        if args and typing.get_origin(args[0]) is typing.Literal:  # not "a list of one of 'a', 'b's"
            return "a list of values among " + ", ".join(repr(a) for a in typing.get_args(args[0]))
        return f"a list of {_type_name(args[0]).removeprefix('a ').removeprefix('an ')}s" if args else "a list"
    if origin in (dict, Mapping, typing.Mapping):
        return "a mapping"
    names = {int: "an integer", float: "a finite number", bool: "true or false", str: "a string",
             Path: "a path"}
    if hint in names:
        return names[hint]
    return f"a config node with _target_ ({getattr(hint, '__name__', hint)})"


def check_type(value: Any, hint: Any) -> bool:
    """Whether the plain (resolved) ``value`` fits the type hint ``hint`` (numbers finite, a
    ``bool`` no ``int``; a class also accepts a mapping with ``_target_``)."""
    if hint is Any or hint is inspect.Parameter.empty:
        return True
    if hint is type(None) or hint is None:
        return value is None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(check_type(value, a) for a in typing.get_args(hint))
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in typing.get_args(hint))
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if hint is str:
        return isinstance(value, str)
    if hint is Path:
        return isinstance(value, str | Path)
    if origin in (list, tuple, Sequence, typing.Sequence) or hint in (list, tuple):
        if not isinstance(value, list | tuple):
            return False
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return not args or all(check_type(v, args[0]) for v in value)
    if origin in (dict, Mapping, typing.Mapping) or hint is dict:
        if not isinstance(value, dict):
            return False
        args = typing.get_args(hint)
        return len(args) != 2 or all(check_type(k, args[0]) and check_type(v, args[1]) for k, v in value.items())
    if isinstance(hint, type) and isinstance(value, hint):
        return True
    return isinstance(value, dict) and "_target_" in value


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_rule(key: str, value: Any, rule: Rule) -> None:
    """Raise :class:`ConfigError` (field ``key``) unless ``value`` obeys ``rule``."""
    if not check_type(value, rule.type):
        raise ConfigError(f"must be {_type_name(rule.type)}, got {_describe(value)}", field=key)
    items = value if isinstance(value, list | tuple) else [value]
    if rule.non_empty and isinstance(value, list | tuple | str) and len(value) == 0:
        raise ConfigError("must not be empty", field=key)
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int | float):
            continue
        if rule.low is not None and (item < rule.low or (rule.low_open and item == rule.low)):
            raise ConfigError(f"must be {'>' if rule.low_open else '>='} {rule.low:g}, got {_describe(value)}",
                              field=key)
        if rule.high is not None and item > rule.high:
            raise ConfigError(f"must be <= {rule.high:g}, got {_describe(value)}", field=key)


def import_target(path: str, field: str) -> Any:
    """The class or function a ``_target_`` names, or a one-line :class:`ConfigError`."""
    if not isinstance(path, str) or "." not in path:
        raise ConfigError(f"must be a dotted path like 'package.module.Class', got {_describe(path)}", field=field)
    path = OLD_TARGETS.get(path, path)
    module_name, _, attr = path.rpartition(".")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        # A class inside a class (pkg.mod.Outer.Inner) imports pkg.mod and walks the rest.
        parent, _, outer = module_name.rpartition(".")
        try:
            obj = getattr(importlib.import_module(parent), outer) if parent else None
        except (ImportError, AttributeError):
            obj = None
        if obj is None:
            raise ConfigError(f"cannot import {path!r}: {exc} (a module in the working directory is "
                              "found; elsewhere, install it or put its folder on PYTHONPATH)", field=field) from None
    except Exception as exc:  # noqa: BLE001 - the user's module failed while importing
        raise ConfigError(f"importing {module_name!r} failed: {type(exc).__name__}: {exc}", field=field) from None
    try:
        return getattr(obj, attr)
    except AttributeError:
        raise ConfigError(f"{module_name!r} has no {attr!r}", field=field) from None


def _signature(target: Any) -> tuple[dict[str, inspect.Parameter], dict[str, Any], bool]:
    """Parameters, type hints and whether ``target`` takes ``**kwargs``."""
    func = target.__init__ if isinstance(target, type) else target
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return {}, {}, True
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # noqa: BLE001 - unresolvable forward references: check names only
        hints = {}
    params = {n: p for n, p in sig.parameters.items()
              if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values())
    return params, hints, var_kw


def check_plugin(cfg: DictConfig, section: str, given: set[str]) -> None:
    """Check the ``_target_`` node at ``section`` (dotted) against its class's signature.

    Keys the class does not take are dropped from ``cfg`` when ``_target_`` itself was set on the
    command line (``given``) and the key came from the group's file; any other unknown key is an
    error naming the keys the class takes.
    """
    node = OmegaConf.select(cfg, section)
    if not isinstance(node, DictConfig) or "_target_" not in node:
        return
    target_path = _plain(cfg, f"{section}._target_")
    target = import_target(target_path, f"{section}._target_")
    params, hints, var_kw = _signature(target)
    name = getattr(target, "__name__", str(target_path))
    for key in list(node.keys()):
        key = str(key)
        if key.startswith("_") and key.endswith("_"):
            continue
        full = f"{section}.{key}"
        if key not in params and not var_kw:
            if f"{section}._target_" in given and full not in given:
                log.info("%s: dropping %s (from the group's file; %s does not take it)", section, full, name)
                with open_dict(node):
                    del node[key]
                continue
            retired = retired_error(full)
            if retired is not None:
                raise retired
            takes = _key_list(params) or "no arguments"
            raise ConfigError(f"{name} takes no argument {key!r}{suggest(key, params)} (it takes: {takes})",
                              field=full)
        child = node._get_node(key)
        if isinstance(child, DictConfig) and "_target_" in child:
            check_plugin(cfg, full, given)
            continue
        hint = hints.get(key, inspect.Parameter.empty)
        value = _plain(cfg, full)
        if not check_type(value, hint):
            raise ConfigError(f"must be {_type_name(hint)}, got {_describe(value)}", field=full)
    missing = [n for n, p in params.items() if p.default is inspect.Parameter.empty and n not in node]
    if missing:
        raise ConfigError(f"{name} needs {_key_list(missing)}", field=f"{section}.{missing[0]}")


def _plain(cfg: DictConfig, key: str) -> Any:
    """The resolved plain value at ``key`` (interpolation errors name the key)."""
    try:
        value = OmegaConf.select(cfg, key, throw_on_missing=True)
    except OmegaConfBaseException as exc:
        raise ConfigError(str(exc).splitlines()[0], field=key) from None
    if isinstance(value, DictConfig | ListConfig):
        try:
            return OmegaConf.to_container(value, resolve=True)
        except OmegaConfBaseException as exc:
            raise ConfigError(str(exc).splitlines()[0], field=getattr(exc, "full_key", None) or key) from None
    return value


def dataclass_rules(section: str, cls: type, ranges: Mapping[str, Rule] | None = None) -> dict[str, Rule]:
    """Rules for a section that becomes the dataclass ``cls`` (types from its fields)."""
    hints = typing.get_type_hints(cls)
    rules = {f"{section}.{f.name}": Rule(hints[f.name]) for f in dataclasses.fields(cls)}
    for key, rule in (ranges or {}).items():
        rules[f"{section}.{key}"] = rule
    return rules


def estimate_arrivals(cfg: DictConfig) -> float | None:
    """About how many arrivals the episode of ``cfg`` has (``inf``: never ends; ``None``: unknown)."""
    arrivals = cfg.get("arrivals")
    if not isinstance(arrivals, DictConfig):
        return None
    target = str(arrivals.get("_target_", ""))
    horizon = cfg.get("horizon_s")
    if target == "workloads.arrivals.FixedInterval":
        interval = arrivals.get("interval_s")
    elif target == "workloads.arrivals.Poisson":
        rate = arrivals.get("rate_per_s")
        interval = 1.0 / rate if rate else arrivals.get("mean_interval_s")
    elif target == "workloads.arrivals.TraceReplay":
        return math.inf if horizon is None and arrivals.get("repeat") else None
    else:
        return None
    if horizon is None:
        return math.inf
    if not interval or interval <= 0:
        return None
    start = arrivals.get("start_s") or 0.0
    return max(horizon - start, 0.0) / interval + 1.0


def check_episode_size(cfg: DictConfig) -> None:
    """Refuse, before any work, an episode with more than ``max_arrivals`` arrivals, or one whose
    estimated wall time or memory (:mod:`simulator.estimate`) exceeds ``max_estimated_hours`` or
    ``max_estimated_memory_gb``."""
    n = estimate_arrivals(cfg)
    cap = cfg.get("max_arrivals", DEFAULT_MAX_ARRIVALS)
    if n is None or n <= cap:
        _check_estimate(cfg, n)
        return
    if math.isinf(n):
        raise ConfigError("is null, but these arrivals never end: set horizon_s (seconds)", field="horizon_s")
    raise ConfigError(
        f"this episode would have about {n:,.0f} arrivals (horizon_s={cfg.get('horizon_s'):g} s at one "
        f"every {(cfg.get('horizon_s') / max(n - 1, 1)):.3g} s), more than max_arrivals={cap:,}; check "
        "horizon_s and mean_interarrival_s, or raise max_arrivals to run it anyway", field="max_arrivals")


def _check_estimate(cfg: DictConfig, arrivals: float | None) -> None:
    """The wall-time and memory limits (skipped for a config the cost model cannot size)."""
    try:
        plain = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException:
        return  # an unresolvable interpolation is reported where the key is used
    assert isinstance(plain, dict)
    est = estimate_run(plain, arrivals)
    if est is None:
        return
    if est.wall_s is not None:
        log.debug("estimated episode: %.0f arrivals, %.3g s, %.2g GB", est.arrivals, est.wall_s, est.memory_bytes / 1e9)
    found = refusal(est, plain.get("max_estimated_hours", 2.0) if "max_estimated_hours" in plain else None,
                    plain.get("max_estimated_memory_gb"))
    if found is not None:
        key, message = found
        raise ConfigError(message, field=key)


def validate_config(cfg: DictConfig, *, keys: Mapping[str, Rule] = SIM_KEYS,
                    plugins: Sequence[str] = SIM_PLUGINS, given: Iterable[str] = (),
                    free: Sequence[str] = (), optional: Sequence[str] = ()) -> DictConfig:
    """Check every key of a composed config (without its ``hydra`` node); returns ``cfg`` pruned
    of leftover plug-in keys, or raises :class:`ConfigError` naming the first key at fault.

    Args:
        keys: Rules of the plain keys (dotted).
        plugins: Sections instantiated from ``_target_``.
        given: Dotted keys set on the command line.
        free: Sections not checked here (a sub-tree the command reads itself).
        optional: Plug-in sections that may be absent or null.
    """
    given = {g.lstrip("+~") for g in given}
    sections = set(plugins) | {k.split(".")[0] for k in keys if "." in k} | set(free)
    for key in flat_keys(cfg):
        top = key.split(".")[0]
        if (top in ("hydra", *free, *plugins) or key in keys
                or any(key.startswith(f"{section}.") for section in OWNED_SECTIONS)):
            continue
        if key in sections:
            node = cfg._get_node(key)
            if not isinstance(node, DictConfig):
                value = _plain(cfg, key)
                raise ConfigError(f"must be a config section, got {_describe(value)}", field=key)
            continue
        raise retired_error(key) or ConfigError(f"unknown key{suggest(key, list(keys) + list(sections))}",
                                                field=key)
    present = set(flat_keys(cfg))
    for key, rule in keys.items():
        if key in present:
            value = _plain(cfg, key)
            if isinstance(value, str) and (key, value) in RETIRED_VALUES:
                raise ConfigError(f"{value} was retired: {RETIRED_VALUES[key, value]}", field=key)
            check_rule(key, value, rule)
        elif rule.required:
            raise ConfigError("is missing", field=key)
    for section in plugins:
        if section not in cfg:
            if section in optional:
                continue
            raise ConfigError("is missing", field=section)
        node = cfg._get_node(section)
        if section in optional and _plain(cfg, section) is None:
            continue
        if not isinstance(node, DictConfig):
            raise ConfigError(f"must be a config section with _target_, got {_describe(_plain(cfg, section))}",
                              field=section)
        if "_target_" not in node:
            raise ConfigError("has no _target_ (the class to build)", field=section)
        check_plugin(cfg, section, given)
    for section, checker in OWNED_SECTIONS.items():
        if section in keys and section in present and _plain(cfg, section) is not None:
            import_target(checker, section)(_plain(cfg, section))
    check_episode_size(cfg)
    return cfg


def _old_target_nodes(node: Any) -> list[Any]:
    """The mappings in ``node`` (itself included) whose ``_target_`` is a key of :data:`OLD_TARGETS`."""
    found: list[Any] = []
    if isinstance(node, DictConfig):
        if node._is_none() or node._is_missing():
            return found
        target = node._get_node("_target_") if "_target_" in node else None
        if target is not None and target._value() in OLD_TARGETS:
            found.append(node)
        children: list[Any] = [node._get_node(k) for k in node if k != "_target_"]
    elif isinstance(node, ListConfig):
        children = [] if node._is_none() or node._is_missing() else [node._get_node(i) for i in range(len(node))]
    elif isinstance(node, dict):
        if isinstance(node.get("_target_"), str) and node["_target_"] in OLD_TARGETS:
            found.append(node)
        children = [v for k, v in node.items() if k != "_target_"]
    elif isinstance(node, list):
        children = list(node)
    else:
        return found
    for child in children:
        if isinstance(child, DictConfig | ListConfig | dict | list):
            found += _old_target_nodes(child)
    return found


def current_targets(node: Any) -> Any:
    """``node`` with every old ``_target_`` replaced by its :data:`OLD_TARGETS` entry (a copy);
    ``node`` itself when it names none."""
    if not _old_target_nodes(node):
        return node
    node = copy.deepcopy(node)
    for found in _old_target_nodes(node):
        if isinstance(found, DictConfig):
            with read_write(found):
                found["_target_"] = OLD_TARGETS[found._get_node("_target_")._value()]
        else:
            found["_target_"] = OLD_TARGETS[found["_target_"]]
    return node


def instantiate_checked(node: Any, field: str) -> Any:
    """``hydra.utils.instantiate`` that re-raises our own errors unwrapped (old ``_target_`` paths
    are read through :data:`OLD_TARGETS`)."""
    node = current_targets(node)
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
