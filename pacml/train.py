"""``pacml-train``: train a PAC-ML agent with PPO (Hydra app, config ``conf/train.yaml``).

Examples::

    pacml-train beta=C                                 # paper scenario, beta C, 1 h budget
    pacml-train beta=D ppo.total_steps=20000 ppo.time_budget_s=300
    pacml-train resume=outputs/train/<run>             # continue exactly where it stopped

The run directory (Hydra's) receives ``checkpoint.pt`` (everything needed to resume),
``policy.pt`` (best by validation blocking rate), ``policy_last.pt``, ``metrics.csv``,
TensorBoard logs in ``tb/``, ``train_summary.json`` and the composed config.
"""

from __future__ import annotations

import logging
import sys
import typing
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from pacml.ppo import CHECKPOINT, PPOConfig, Trainer
from simulator.build import instantiate_checked
from simulator.cli import HydraCommand, preflight, report_user_errors
from simulator.errors import ConfigError
from simulator.schema import SIM_KEYS, SIM_PLUGINS, Rule, dataclass_rules

log = logging.getLogger(__name__)
PROG = "pacml-train"
GROUPS = ("cluster", "workload", "arrivals", "beta", "scenario")

_COUNT, _POSITIVE, _UNIT = Rule(int, low=1), Rule(float, low=0.0, low_open=True), Rule(float, low=0.0, high=1.0)
#: Ranges of the ``ppo`` keys (their types come from :class:`PPOConfig`).
PPO_RANGES = {
    "total_steps": _COUNT, "time_budget_s": Rule(float | None, low=0.0, low_open=True), "num_envs": _COUNT,
    "num_steps": _COUNT, "learning_rate": _POSITIVE, "gamma": _UNIT, "gae_lambda": _UNIT,
    "num_minibatches": _COUNT, "update_epochs": _COUNT, "clip_coef": _POSITIVE, "ent_coef": Rule(float, low=0.0),
    "vf_coef": Rule(float, low=0.0), "max_grad_norm": _POSITIVE,
    "target_kl": Rule(float | None, low=0.0, low_open=True), "hidden_channels": _COUNT, "num_layers": _COUNT,
    "mask": Rule(typing.Literal["feasible", "placeable", "paper"]), "placement_candidates": Rule(int, low=0),
    "warmstart": Rule(typing.Literal["auto"] | None),
    "warmstart_candidates": Rule(list[int], low=1, non_empty=True), "warmstart_episodes": _COUNT,
    "warmstart_epochs": _COUNT, "warmstart_lr": _POSITIVE, "checkpoint_every": _COUNT, "eval_every": _COUNT,
    "eval_seeds": Rule(list[int], low=0, non_empty=True), "seed": Rule(int, low=0), "torch_threads": _COUNT,
}
#: What ``pacml-train``'s config holds, for the one check before any work (simulator/schema.py).
COMMAND = HydraCommand(
    PROG, "train",
    keys={**SIM_KEYS, "resume": Rule(str | None, non_empty=True), **dataclass_rules("ppo", PPOConfig, PPO_RANGES)},
    plugins=(*SIM_PLUGINS, "reward"), optional=("reward",))


def _ppo_config(node: DictConfig) -> PPOConfig:
    data = OmegaConf.to_container(node, resolve=True)
    assert isinstance(data, dict)
    unknown = set(data) - set(PPOConfig.__dataclass_fields__)
    if unknown:
        raise ConfigError(f"unknown keys {sorted(unknown)}", field="ppo")
    return PPOConfig(**data)  # type: ignore[arg-type]


#: Settings a resumed run may change on the command line (everything else comes from the run).
RESUME_OVERRIDABLE = ("ppo.total_steps", "ppo.time_budget_s", "progress")


def train_from_config(cfg: DictConfig, out_dir: Path, overrides: list[str] | None = None) -> dict:
    """Build a trainer from ``cfg`` (or resume one) and train it.

    Args:
        cfg: The composed ``conf/train.yaml``.
        out_dir: Run directory for a new run (a resumed run keeps its own).
        overrides: The command-line overrides; when resuming, those of
            :data:`RESUME_OVERRIDABLE` (e.g. a larger ``ppo.total_steps``) apply to the saved config.
    """
    resume = cfg.get("resume")
    if resume:
        run = Path(resume)
        ckpt = run / CHECKPOINT if run.is_dir() else run
        if not ckpt.is_file():
            raise ConfigError(f"no checkpoint at {ckpt}", field="resume")
        saved = OmegaConf.load(ckpt.parent / "train_config.yaml")
        for item in overrides or []:
            key = item.split("=", 1)[0].lstrip("+")
            if key in RESUME_OVERRIDABLE:
                OmegaConf.update(saved, key, OmegaConf.select(cfg, key), merge=False)
        out_dir = ckpt.parent
        cfg = saved
    sim_cfg = OmegaConf.masked_copy(cfg, [k for k in cfg if k not in ("ppo", "reward", "resume", "hydra")])
    ppo = _ppo_config(cfg.ppo)
    reward = instantiate_checked(cfg.reward, "reward") if cfg.get("reward") else None
    trainer = Trainer(sim_cfg, ppo, out_dir, reward=reward)
    if resume:
        trainer.load_checkpoint(ckpt)
        log.info("resumed %s at update %d (step %d)", ckpt, trainer.update, trainer.global_step)
    else:
        (out_dir / "train_config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    summary = trainer.train(progress=bool(cfg.get("progress", True)))
    log.info("trained %d steps in %.0f s; best validation blocking rate %.4f -> %s",
             summary["global_step"], summary["wall_s"], summary["best_val_blocking_rate"], out_dir / "policy.pt")
    return summary


@hydra.main(version_base=None, config_path="pkg://conf", config_name="train")
def _hydra_main(cfg: DictConfig) -> None:
    hc = HydraConfig.get()
    out = Path(hc.runtime.output_dir)
    overrides = list(hc.overrides.task)
    report_user_errors(PROG, lambda: train_from_config(COMMAND.validate(cfg, overrides), out, overrides))


def main() -> None:
    """Console entry point (``pacml-train``)."""
    preflight(COMMAND, sys.argv[1:])
    _hydra_main()


if __name__ == "__main__":
    main()
