"""Every code default equals the shipped config's value, so a class's signature (or a settings
dataclass) describes what ships: ``PacMLPolicy`` against ``conf/policy/pacml_adaptive.yaml``
(``policy=pacml``), each trainer's settings dataclass against its ``conf/*.yaml`` section, and ``sim.pipeline``'s
dataclass against ``conf/scenario/pipeline.yaml``, the DP placers against ``conf/method/``."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from pacml.adaptive.policy import PacMLPolicy
from pacml.adaptive.train import AdaptiveTrainConfig
from pacml.agent.ppo_config import PPOConfig
from pacml.critic.distill import DistillConfig
from pacml.placer.settings import NetConfig, PPOSettings
from simulator.allocation.pipeline import PipelineJobSettings
from simulator.place.dp import DPPlacer, MixedDPPlacer

#: Keys whose YAML value is an interpolation on the run's scenario and beta: the checkpoint of the
#: run's family (``${oc.select:scenario_family,paper}_...``), which no code default can follow.
INTERPOLATED = {"checkpoint"}


def _section(config: str, section: str, overrides: tuple[str, ...] = ()) -> dict[str, Any]:
    with initialize_config_module(config_module="conf", version_base=None):
        cfg = compose(config_name=config, overrides=list(overrides))
    data = OmegaConf.to_container(OmegaConf.select(cfg, section), resolve=True)
    assert isinstance(data, dict)
    return {k: v for k, v in data.items() if not k.startswith("_")}


def _defaults(target: Any) -> dict[str, Any]:
    """Keyword defaults of a class's ``__init__`` or a dataclass's fields."""
    if dataclasses.is_dataclass(target):
        out = {}
        for f in dataclasses.fields(target):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
        return out
    return {n: p.default for n, p in inspect.signature(target).parameters.items()
            if p.default is not inspect.Parameter.empty}


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


PAIRS = [
    # (class, config, section, overrides, code parameters that are no config key)
    (PacMLPolicy, "sim", "policy", ("policy=pacml",), {"weights"}),
    (AdaptiveTrainConfig, "train_adaptive", "adaptive", (), set()),
    (DistillConfig, "distill", "distill", (), set()),
    (PPOConfig, "train", "ppo", (), set()),
    (NetConfig, "train_placer", "net", (), set()),
    (PPOSettings, "train_placer", "ppo", (), set()),
    (PipelineJobSettings, "sim", "sim.pipeline", ("scenario=pipeline",), set()),
    (DPPlacer, "place", "method", ("method=dp",), set()),
    (MixedDPPlacer, "place", "method", ("method=dp_mixed",), set()),
]


@pytest.mark.parametrize(("target", "config", "section", "overrides", "not_keys"), PAIRS,
                         ids=[p[0].__name__ for p in PAIRS])
def test_code_defaults_equal_the_shipped_config(target, config: str, section: str, overrides: tuple[str, ...],
                                                not_keys: set[str]) -> None:
    shipped = _section(config, section, overrides)
    defaults = {k: v for k, v in _defaults(target).items() if k not in not_keys}
    assert set(shipped) == set(defaults), "the config's keys and the code's parameters differ"
    differ = {k: (_plain(defaults[k]), shipped[k]) for k in shipped
              if k not in INTERPOLATED and _plain(defaults[k]) != shipped[k]}
    assert not differ, f"code default vs {config}.yaml: {differ}"
