"""``pacml train``: train a PAC-ML agent with PPO (Hydra app, config ``conf/train.yaml``; examples
in docs/policies.md).

The run directory (Hydra's) receives ``checkpoint.pt`` (everything needed to resume; the one
before is kept as ``checkpoint.prev.pt``), ``policy.pt`` (best by validation blocking rate),
``policy_last.pt``, ``metrics.csv``, TensorBoard logs in ``tb/``, ``train_summary.json`` and the
composed config. A resumed session writes into the run's own directory (its Hydra record goes to
``.hydra/resume-<time>/``), so resuming creates no new output folder.
"""

from __future__ import annotations

import logging
import math
import sys
import time
import typing
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from pacml.agent.ppo_config import PPOConfig
from pacml.runfiles import CHECKPOINT, PREVIOUS_CHECKPOINT, load_run_config, process_age_s
from simulator.cli import HydraCommand, fail, preflight, report_user_errors
from simulator.config import SIM_KEYS, SIM_PLUGINS, Rule, dataclass_rules, instantiate_checked
from simulator.errors import ConfigError
from workloads.io import atomic_write_text

log = logging.getLogger(__name__)
PROG = "pacml train"

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
    "condition_jobs": _COUNT, "val_conditions": _COUNT,
}
#: What ``pacml train``'s config holds, for the one check before any work (simulator/config.py).
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


def _plain(cfg: DictConfig, key: str) -> object:
    """The resolved value at dotted ``key`` (containers as plain data; ``None`` where absent)."""
    node = OmegaConf.select(cfg, key, default=None, throw_on_missing=False)
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


#: Settings a resumed run may change on the command line (everything else comes from the run).
RESUME_OVERRIDABLE = ("ppo.total_steps", "ppo.time_budget_s", "progress")


def train_from_config(cfg: DictConfig, out_dir: Path, overrides: list[str] | None = None,
                      started_at: float | None = None) -> dict:
    """Build a trainer from the composed ``conf/train.yaml`` (or resume one) and train it.

    ``out_dir`` is a new run's directory (a resumed run keeps its own); when resuming, the
    ``overrides`` of :data:`RESUME_OVERRIDABLE` apply to the saved config. ``started_at``: the
    ``perf_counter()`` value the session's budget counts from.
    """
    from pacml.agent.ppo import Trainer  # lazy: torch

    resume = cfg.get("resume")
    changed: list[str] = []
    if resume:
        run = Path(resume)
        ckpt = run / CHECKPOINT if run.is_dir() else run
        if not ckpt.is_file() and not (ckpt.parent / PREVIOUS_CHECKPOINT).is_file():
            raise ConfigError(f"no checkpoint at {ckpt}", field="resume")
        saved = load_run_config(ckpt.parent, PROG)
        fixed = []
        for item in overrides or []:
            key = item.split("=", 1)[0].lstrip("+~")
            if key in RESUME_OVERRIDABLE and OmegaConf.select(saved, key) != OmegaConf.select(cfg, key):
                OmegaConf.update(saved, key, OmegaConf.select(cfg, key), merge=False)
                changed.append(f"{key}={OmegaConf.select(cfg, key)}")
            elif key not in RESUME_OVERRIDABLE and key != "resume" and not key.startswith("hydra") \
                    and _plain(saved, key) != _plain(cfg, key):
                fixed.append(key)
        fixed = list(dict.fromkeys(fixed))
        if fixed:  # the run continues with its own settings: a different value would be silently ignored
            raise ConfigError(f"{', '.join(fixed)} {'differs' if len(fixed) == 1 else 'differ'} from the resumed run's {ckpt.parent / 'train_config.yaml'}; "
                              f"a resumed run keeps its settings except {', '.join(RESUME_OVERRIDABLE)} "
                              "(start a new run to change them)", field=fixed[0])
        out_dir = ckpt.parent
        cfg = saved
    sim_cfg = OmegaConf.masked_copy(cfg, [k for k in cfg if k not in ("ppo", "reward", "resume", "hydra")])
    ppo = _ppo_config(cfg.ppo)
    reward = instantiate_checked(cfg.reward, "reward") if cfg.get("reward") else None
    trainer = Trainer(sim_cfg, ppo, out_dir, reward=reward, started_at=started_at)
    if resume:
        used = trainer.resume(ckpt)
        done = trainer.remaining_work()
        if done is not None:
            log.info("nothing to do: %s; pass ppo.total_steps=N or ppo.time_budget_s=S (the total over "
                     "sessions) to extend", done)
            return {"updates": trainer.update, "global_step": trainer.global_step, "wall_s": trainer.elapsed_s,
                    "best_val_blocking_rate": trainer.best_val}
        if changed:  # the run remembers what it is now training for (a later plain resume keeps it)
            atomic_write_text(out_dir / "train_config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
        budget = "no time limit" if ppo.time_budget_s is None else (
            f"{trainer.elapsed_s:.0f} s of time_budget_s={ppo.time_budget_s:g} used")
        log.info("resuming %s from %s at update %d, step %d (%s)%s: training until step %d or the budget ends",
                 out_dir, used.name, trainer.update, trainer.global_step, budget,
                 f" with {', '.join(changed)}" if changed else "", ppo.total_steps)
    else:
        atomic_write_text(out_dir / "train_config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    summary = trainer.train(progress=bool(cfg.get("progress", True)))
    best = summary["best_val_blocking_rate"]
    log.info("trained %d steps in %.0f s; best validation blocking rate %s -> %s", summary["global_step"],
             summary["wall_s"], f"{best:.4f}" if math.isfinite(best) else "none (no validation ran)",
             out_dir / "policy.pt")
    return summary


@hydra.main(version_base=None, config_path="pkg://conf", config_name="train")
def _hydra_main(cfg: DictConfig) -> None:
    hc = HydraConfig.get()
    out = Path(hc.runtime.output_dir)
    started_at = time.perf_counter() - process_age_s()
    overrides = list(hc.overrides.task)
    report_user_errors(PROG, lambda: train_from_config(COMMAND.validate(cfg, overrides), out, overrides,
                                                       started_at))


#: Keys of ``conf/sim.yaml`` that ``pacml train`` composes but never reads: set on its command line, they
#: would be silently ignored, so they are refused (key -> what to do instead).
SIM_ONLY_KEYS = {
    "policy": "it trains its own agent, set in the ppo section",
    "experiment": "experiments preset pacml sim sweeps",
    "out_dir": "it writes into hydra.run.dir=DIR",
    "skip_finished": "resume a run with resume=RUN",
}


def refuse_sim_only_keys(argv: list[str]) -> None:
    """One line and exit 2 for an override of a :data:`SIM_ONLY_KEYS` key (which training ignores)."""
    for arg in argv:
        if arg.startswith("-") or ("=" not in arg and not arg.startswith("~")):
            continue
        key = arg.split("=", 1)[0].lstrip("+~")
        top = key.split(".", 1)[0].split("@", 1)[0]
        if top in SIM_ONLY_KEYS:
            fail(PROG, f"{arg!r}: pacml train would ignore {top}, a pacml sim setting ({SIM_ONLY_KEYS[top]})")


def main() -> None:
    """Console entry point (``pacml train``)."""
    refuse_sim_only_keys(sys.argv[1:])
    preflight(COMMAND, sys.argv[1:])
    _hydra_main()


if __name__ == "__main__":
    main()
