"""Command plumbing shared by the console commands: argv and override parsing, the Hydra preflight,
and bad input as one line on stderr with exit status 2.

Imported only by the entry points (``tests/test_layering.py`` checks); the config checks live in
the leaf :mod:`simulator.config`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from hydra._internal.hydra import Hydra
from hydra._internal.utils import create_automatic_config_search_path, get_args_parser
from hydra.core.config_search_path import SearchPathQuery
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from simulator.config import (
    SIM_KEYS,
    SIM_PLUGINS,
    Rule,
    flat_keys,
    retired_error,
    suggest,
    validate_config,
)
from simulator.errors import ConfigError, InvalidDecision, one_line
from workloads.errors import WorkloadError

USER_ERRORS = (WorkloadError, ConfigError, InvalidDecision)


def path_safe(name: str) -> str:
    """``name`` as one directory name (``/`` becomes ``%2F``): a sweep run named by an override
    holding a path stays one directory deep."""
    return name.replace("/", "%2F")


# Registered on import: every console command imports this module before Hydra composes, and
# sweep workers (joblib, submitit) import it when they unpickle the command's task function.
OmegaConf.register_new_resolver("pacml_path_safe", path_safe, replace=True)


def policy_name(choice: object, overrides: Sequence[object] = ()) -> str:
    """The policy's name in the log, the run folder and ``summary.json``: its config name, or the
    class name when the command line gives ``policy._target_=module.Class``."""
    for item in overrides or ():
        key, sep, value = str(item).partition("=")
        if sep and key.lstrip("+~") == "policy._target_" and value.strip():
            return value.strip().strip("'\"").rsplit(".", 1)[-1]
    return str(choice) if choice is not None else "none"


# conf/sim.yaml names a single run's folder with it (hydra.run.dir).
OmegaConf.register_new_resolver("pacml_policy_name", policy_name, replace=True)


def fail(prog: str, message: str) -> NoReturn:
    """Print ``prog: error: message`` on stderr and exit with status 2."""
    sys.stderr.write(f"{prog}: error: {message}\n")
    sys.stderr.flush()
    raise SystemExit(2)


def cwd_on_path() -> None:
    """Make modules in the working directory importable, as ``python -m`` would (appended, so a
    stray file cannot shadow an installed package)."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


@dataclass(frozen=True)
class HydraCommand:
    """A Hydra console command (``prog``, its primary config in ``conf/``) and what its config holds
    (the arguments of :func:`simulator.config.validate_config`), for :func:`preflight`."""

    prog: str
    config_name: str
    keys: Mapping[str, Rule] = field(default_factory=lambda: dict(SIM_KEYS))
    plugins: Sequence[str] = SIM_PLUGINS
    optional: Sequence[str] = ()

    def validate(self, cfg: DictConfig, overrides: Sequence[str]) -> DictConfig:
        """Check a composed config (raises :class:`ConfigError`); returns it pruned."""
        from simulator.build import check_buildable  # lazy: numba

        cfg = validate_config(cfg, keys=self.keys, plugins=self.plugins, optional=self.optional,
                              given=override_keys(overrides))
        check_buildable(cfg)
        return cfg


def override_keys(overrides: Sequence[str]) -> set[str]:
    """The config keys a command line's overrides set or delete (``+a.b=1`` and ``~a.b``: ``a.b``)."""
    return {o.split("=", 1)[0].lstrip("+~").split("@")[0] for o in overrides if "=" in o or o.startswith("~")}


def hydra_args(cmd: HydraCommand, argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed as Hydra parses it; a bad flag ends ``cmd`` with one line and status 2."""
    parser = get_args_parser()
    parser.prog = cmd.prog
    parser.error = lambda message: fail(cmd.prog, f"{one_line(message)} (see {cmd.prog} --help)")  # type: ignore[method-assign]
    return parser.parse_args(list(argv))


class Composer:
    """Composes the command's config as Hydra will (same search path, ``--config-dir``)."""

    def __init__(self, cmd: HydraCommand, args: argparse.Namespace) -> None:
        self.cmd = cmd
        self.config_name = args.config_name or cmd.config_name
        self.search_path = create_automatic_config_search_path(None, None, args.config_path or "pkg://conf")
        if args.config_dir is not None:
            conf_dir = os.path.abspath(args.config_dir)
            if not os.path.isdir(conf_dir):
                fail(cmd.prog, f"--config-dir: {conf_dir}: no such directory")
            self.search_path.prepend(provider="command-line", path=f"file://{conf_dir}",
                                     anchor=SearchPathQuery(provider="schema"))

    def compose(self, overrides: list[str]) -> DictConfig:
        """The composed config (with its ``hydra`` node) or a Hydra/OmegaConf exception."""
        GlobalHydra.instance().clear()
        try:
            hydra_app = Hydra.create_main_hydra2(task_name=self.cmd.prog, config_search_path=self.search_path)
            cfg = hydra_app.compose_config(self.config_name, overrides, run_mode=RunMode.RUN, from_shell=True,
                                           with_log_configuration=False)
        finally:
            GlobalHydra.instance().clear()
        assert isinstance(cfg, DictConfig)
        return cfg

    def culprit(self, overrides: list[str]) -> str | None:
        """The override at fault (Hydra's message may not name it): the one without which the others
        compose, else the first that fails to compose on its own."""
        if 1 < len(overrides) <= 16:
            for i, override in enumerate(overrides):
                try:
                    self.compose(overrides[:i] + overrides[i + 1:])
                except Exception:  # noqa: BLE001, S112 - the others fail too: not this one alone
                    continue
                return override
        for override in overrides:
            try:
                self.compose([override])
            except Exception:  # noqa: BLE001 - any failure points at this override
                return override
        return None

    def known_keys(self, overrides: list[str]) -> list[str]:
        """Dotted keys of the config composed without the failing override (for suggestions)."""
        for attempt in (overrides, []):
            try:
                cfg = self.compose(attempt)
            except Exception:  # noqa: BLE001, S112 - fall back to the plain config
                continue
            return [k for k in flat_keys(cfg) if not k.startswith("hydra")]
        return []


def _composition_error(composer: Composer, exc: Exception, overrides: list[str]) -> str:
    """One line for an exception raised while composing (Hydra's own are several lines)."""
    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file:
        group, _, choice = str(exc.missing_cfg_file).rpartition("/")
        if group:
            options = sorted(exc.options or [])
            return f"unknown {group} {choice!r}{suggest(choice, options)} (available: {', '.join(options)})"
        return one_line(str(exc).split("Config search path")[0])
    text = str(exc)
    cause = exc.__cause__
    match = re.match(r"Could not override '([^']+)'", text)
    if match is not None:
        key = match.group(1)
        retired = retired_error(key)
        if retired is not None:
            return str(retired)
        others = [o for o in overrides if o.split("=", 1)[0].lstrip("+") != key]
        known = composer.known_keys(others)
        section = key.rpartition(".")[0]
        hint = (f"; to pass a new argument to the policy class use +{key}=..."
                if section in known and section.split(".")[0] == "policy" else "")
        return f"unknown config key '{key}'{suggest(key, known)}{hint}"
    line = one_line(text.split("\n")[0])
    if cause is not None and not isinstance(cause, MissingConfigException):
        line += f": {one_line(str(cause)).split(' full_key:')[0]}"
    culprit = composer.culprit(overrides)
    return f"override {culprit!r}: {line}" if culprit and culprit not in line else line


def preflight(cmd: HydraCommand, argv: Sequence[str]) -> DictConfig | None:
    """Check a Hydra command line before Hydra runs it; any problem ends in one line, exit 2.

    Parses the flags and overrides, composes the config as Hydra will and validates it; in
    multirun mode each swept value is checked with the first value of the others. Returns the
    checked config (first values of any sweep), or ``None`` when Hydra will only print help.
    """
    cwd_on_path()
    args = hydra_args(cmd, argv)
    if args.help or args.hydra_help or args.info or args.shell_completion or args.experimental_rerun:
        return None
    overrides = list(args.overrides)
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except (OverrideParseException, HydraException) as exc:
        bad = next((o for o in overrides if _unparsable(o)), None)
        fail(cmd.prog, f"cannot parse override {bad!r}: {one_line(str(exc).split('See https')[0])}"
             if bad else f"cannot parse the overrides: {one_line(str(exc).split('See https')[0])}")
    base: list[str] = []
    sweeps: list[tuple[int, list[str]]] = []
    for override, text in zip(parsed, overrides, strict=True):
        if not override.is_sweep_override():
            base.append(text)
            continue
        if not args.multirun:
            fail(cmd.prog, f"{text!r} sweeps over several values: add -m to run each, or write "
                           f"{override.get_key_element()}=[...] for one list value")
        try:
            values = list(override.sweep_string_iterator())
        except Exception:  # noqa: BLE001 - interval sweeps etc.: each job checks its own value
            continue
        prefix = text.split("=", 1)[0]
        sweeps.append((len(base), [f"{prefix}={v}" for v in values] or [text]))
        base.append(sweeps[-1][1][0])
    _check_target_with_policy_sweep(cmd.prog, parsed, overrides)
    variants = [base, *([*base[:pos], value, *base[pos + 1:]]
                        for pos, values in sweeps for value in values[1:])]
    composer = Composer(cmd, args)
    checked = [check_overrides(cmd, composer, variant) for variant in variants[:64]]
    return checked[0]


def _check_target_with_policy_sweep(prog: str, parsed: Sequence[Any], overrides: Sequence[str]) -> None:
    """``policy._target_`` replaces the class of every swept ``policy=`` config, so a sweep over
    several policies would run the same class under each name: refused (one line, exit 2)."""
    target = next((text for o, text in zip(parsed, overrides, strict=True)
                   if o.key_or_group == "policy._target_"), None)
    swept = next((text for o, text in zip(parsed, overrides, strict=True)
                  if o.key_or_group == "policy" and o.is_sweep_override()), None)
    if target is not None and swept is not None:
        fail(prog, f"{target} with more than one policy= value ({swept}) would run the same class "
                   f"under each policy name: give one policy= value or drop policy._target_")


def _unparsable(override: str) -> bool:
    try:
        OverridesParser.create().parse_override(override)
    except HydraException:
        return True
    return False


def check_overrides(cmd: HydraCommand, composer: Composer, overrides: list[str]) -> DictConfig:
    """Compose and validate one command line (no sweeps); one line and exit 2 on any problem."""
    try:
        cfg = composer.compose(overrides)
    except (HydraException, OmegaConfBaseException, ValueError, OSError) as exc:
        fail(cmd.prog, _composition_error(composer, exc, overrides))
    HydraConfig.instance().set_config(cfg)  # so that ${hydra:...} interpolations resolve
    with open_dict(cfg):
        del cfg["hydra"]
    try:
        return cmd.validate(cfg, overrides)
    except USER_ERRORS as exc:
        fail(cmd.prog, one_line(str(exc)))


def report_user_errors(prog: str, body: Callable[[], None]) -> None:
    """Run ``body``; turn our input errors into one line on stderr and exit status 2."""
    try:
        body()
    except USER_ERRORS as exc:
        fail(prog, one_line(str(exc)))


def finished_run(out: Path, resolved_config: object) -> bool:
    """A previous run wrote ``summary.json`` in ``out`` for this same ``resolved_config``."""
    summary = out / "summary.json"
    try:
        return summary.is_file() and json.loads(summary.read_text()).get("resolved_config") == resolved_config
    except (ValueError, OSError):
        return False
