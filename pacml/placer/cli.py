"""``pacml train-placer``: pre-train the learned op placer (Hydra app, ``conf/train_placer.yaml``;
examples in docs/learned-placer.md).

The time budget counts from the process start and covers every phase; a resumed run's budget is
the total over sessions.
"""

from __future__ import annotations

import logging
import sys
import time
import typing
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from pacml.placer.checkpoint import SHIPPED_DIR
from pacml.placer.problem import ORDERS
from pacml.placer.settings import DECODERS, NetConfig, PPOSettings
from pacml.runfiles import (  # also registers the resume resolvers of the config
    CHECKPOINT,
    PREVIOUS_CHECKPOINT,
    apply_resume_overrides,
    load_run_config,
    process_age_s,
)
from simulator.cli import HydraCommand, override_keys, preflight, report_user_errors
from simulator.config import MAX_SEED, Rule, dataclass_rules, validate_config
from simulator.errors import ConfigError
from simulator.place.cli import cluster_block_device_sets
from simulator.place.devices import DeviceSet, device_set_from_config
from workloads.io import atomic_write_text
from workloads.placement_corpus import TRAIN_REAL, corpus

if typing.TYPE_CHECKING:
    from pacml.placer.trainer import PlacerTrainer

log = logging.getLogger(__name__)
PROG = "pacml train-placer"
CONF_DIR = Path(__file__).resolve().parents[2] / "conf"

_COUNT, _POSITIVE = Rule(int, low=1), Rule(float, low=0.0, low_open=True)
KEYS: dict[str, Rule] = {
    "progress": Rule(bool), "resume": Rule(str | None, non_empty=True),
    "seed": Rule(int, low=0, high=MAX_SEED, required=True), "torch_threads": _COUNT,
    "corpus.synthetic": Rule(int, low=0), "corpus.seed": Rule(int, low=0, high=MAX_SEED),
    "corpus.max_nodes": Rule(int | None, low=50), "corpus.real": Rule(bool),
    "presets": Rule(list[str], non_empty=True),
    "objectives": Rule(list[typing.Literal["step", "latency", "pipeline"]], non_empty=True),
    **dataclass_rules("net", NetConfig, {"hidden": _COUNT, "layers": Rule(int, low=0),
                                         "order": Rule(typing.Literal[ORDERS]),
                                         "decoder": Rule(typing.Literal[DECODERS]), "heads": _COUNT,
                                         "max_devices": _COUNT}),
    **dataclass_rules("ppo", PPOSettings, {
        "batch": Rule(int, low=2), "tasks_per_update": _COUNT, "epochs": _COUNT, "clip": _POSITIVE,
        "learning_rate": _POSITIVE, "ent_coef": Rule(float, low=0.0), "max_grad_norm": _POSITIVE,
        "infeasible_reward": Rule(float, high=0.0)}),
    "budget.time_s": Rule(float | None, low=0.0, low_open=True), "budget.updates": Rule(int | None, low=1),
    "validate_every": _COUNT, "validation_tasks": _COUNT, "checkpoint_every": _COUNT,
}


class TrainPlacerCommand(HydraCommand):
    """``pacml train-placer``'s config check: keys and ranges, then the device presets built."""

    def validate(self, cfg: DictConfig, overrides: typing.Any) -> DictConfig:
        """Check a composed config (raises our own errors); returns it."""
        cfg = validate_config(cfg, keys=self.keys, plugins=(), given=override_keys(overrides))
        sets = device_sets(list(cfg.presets))
        if cfg.net.decoder == "oneshot":  # checked now, else the first task on a larger device set stops the run
            if cfg.net.hidden % cfg.net.heads:
                raise ConfigError(f"net.hidden ({cfg.net.hidden}) must be a multiple of net.heads ({cfg.net.heads}) "
                                  "for the oneshot decoder's attention", field="net.heads")
            large = [(name, d.num_devices) for name, d in sets if d is not None and d.num_devices > cfg.net.max_devices]
            if large:
                raise ConfigError(f"the oneshot decoder has {cfg.net.max_devices} device slots; preset {large[0][0]} "
                                  f"has {large[0][1]} devices (raise net.max_devices or drop the preset)",
                                  field="net.max_devices")
        if cfg.get("resume"):  # before Hydra makes a run directory for a bad resume
            resume_checkpoint(str(cfg.resume))
        return cfg


COMMAND = TrainPlacerCommand(PROG, "train_placer", keys=KEYS, plugins=())
#: Settings a resumed run may change (everything else comes from the run's own config).
RESUME_OVERRIDABLE = ("budget.time_s", "budget.updates", "progress", "torch_threads")


def device_sets(names: list[str]) -> list[tuple[str, DeviceSet | None]]:
    """The device presets named (``file``: each dnn-partitioning graph's own set; ``blocks:<cluster>``:
    every device set a job's block of cluster preset ``<cluster>`` can be, one per block size and
    mix of server kinds, see :func:`simulator.place.cli.cluster_block_device_sets`)."""
    out: list[tuple[str, DeviceSet | None]] = []
    for name in names:
        if name == "file":
            out.append(("file", None))
            continue
        if name.startswith("blocks:"):
            out.extend(cluster_block_device_sets(name.removeprefix("blocks:")))
            continue
        path = CONF_DIR / "devices" / f"{name}.yaml"
        if name in ("auto", "ramp_block") or not path.is_file():
            known = sorted(p.stem for p in (CONF_DIR / "devices").glob("*.yaml") if p.stem not in ("auto", "ramp_block", "file"))
            raise ConfigError(f"unknown device preset {name!r} (expected file, blocks:<cluster> or one of "
                              f"{', '.join(known)})",
                              field="presets")
        out.append((name, device_set_from_config(OmegaConf.to_container(OmegaConf.load(path)),
                                                 where=f"devices.{name}")))
    return out


def training_graphs(cfg: DictConfig) -> list:
    """The pre-training graphs of ``cfg.corpus`` (split ``train``: no held-out graph)."""
    graphs = corpus("train", synthetic=int(cfg.corpus.synthetic), seed=int(cfg.corpus.seed),
                    max_nodes=cfg.corpus.max_nodes)
    if not cfg.corpus.real:
        graphs = [(n, g) for n, g in graphs if n not in TRAIN_REAL]
    if not graphs:
        raise ConfigError("no pre-training graph left", field="corpus")
    return graphs


def build_trainer(cfg: DictConfig, out_dir: Path, started_at: float | None = None) -> PlacerTrainer:
    """A trainer for ``cfg`` writing into ``out_dir``."""
    from pacml.placer.trainer import PlacerTrainer  # lazy: torch

    return PlacerTrainer(
        training_graphs(cfg), device_sets(list(cfg.presets)), list(cfg.objectives),
        net=NetConfig(**OmegaConf.to_container(cfg.net)), ppo=PPOSettings(**OmegaConf.to_container(cfg.ppo)),
        out_dir=out_dir, seed=int(cfg.seed), time_budget_s=cfg.budget.time_s, max_updates=cfg.budget.updates,
        validate_every=int(cfg.validate_every), validation_tasks=int(cfg.validation_tasks),
        checkpoint_every=int(cfg.checkpoint_every), started_at=started_at)


def resume_checkpoint(resume: str) -> Path:
    """The ``checkpoint.pt`` a ``resume=`` value names (a run directory or a checkpoint file).

    Raises:
        ConfigError: (field ``resume``) not a checkpoint (e.g. a ``placer.pt``), none there, or a
            shipped placer's directory (resuming writes into it).
    """
    run = Path(resume)
    ckpt = run / CHECKPOINT if run.is_dir() else run
    if run.is_file() and run.name not in (CHECKPOINT, PREVIOUS_CHECKPOINT):
        raise ConfigError(f"{run} is not a training checkpoint (a placer.pt is a trained placer, for "
                          f"method.checkpoint); pass the run directory", field="resume")
    if not ckpt.is_file() and not (ckpt.parent / PREVIOUS_CHECKPOINT).is_file():
        raise ConfigError(f"no checkpoint at {ckpt}", field="resume")
    if SHIPPED_DIR.resolve() in ckpt.resolve().parents:
        raise ConfigError(f"{ckpt.parent} is a shipped placer: resuming writes into the run directory, so "
                          f"copy it out of the package first (cp -r {ckpt.parent} outputs/...)", field="resume")
    return ckpt


def train_from_config(cfg: DictConfig, out_dir: Path, overrides: list[str] | None = None,
                      started_at: float | None = None) -> dict:
    """Train (or resume) from a composed config; returns the run's summary."""
    resume = cfg.get("resume")
    changed = []
    if resume:
        ckpt = resume_checkpoint(resume)
        saved = load_run_config(ckpt.parent, PROG)
        changed = apply_resume_overrides(saved, cfg, overrides, RESUME_OVERRIDABLE)
        out_dir = ckpt.parent
        cfg = saved
    import torch  # lazy: torch

    torch.set_num_threads(int(cfg.torch_threads))
    trainer = build_trainer(cfg, out_dir, started_at)
    if resume:
        used = trainer.resume(ckpt)
        if changed:
            atomic_write_text(out_dir / "train_config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
        done = trainer.remaining_work()
        if done is not None:
            log.info("nothing to do: %s; pass budget.time_s=S or budget.updates=N (totals over sessions) to extend",
                     done)
            return trainer.summary()
        log.info("resuming %s from %s at update %d (%.0f s used)%s", out_dir, used.name, trainer.update,
                 trainer.elapsed_s, f" with {', '.join(changed)}" if changed else "")
    else:
        atomic_write_text(out_dir / "train_config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    log.info("pre-training on %d tasks (%d graphs x presets %s x objectives %s) -> %s", len(trainer.keys),
             len(trainer.graphs), ",".join(cfg.presets), ",".join(cfg.objectives), out_dir)
    summary = trainer.train(progress=bool(cfg.get("progress", True)))
    log.info("trained %d updates (%d evaluations) in %.0f s; best validation ratio %.4f -> %s",
             summary["updates"], summary["evaluations"], summary["wall_s"], summary["best_val_ratio"],
             out_dir / "placer.pt")
    return summary


@hydra.main(version_base=None, config_path="pkg://conf", config_name="train_placer")
def _hydra_main(cfg: DictConfig) -> None:
    hc = HydraConfig.get()
    started_at = time.perf_counter() - process_age_s()
    overrides = list(hc.overrides.task)
    report_user_errors(PROG, lambda: train_from_config(COMMAND.validate(cfg, overrides),
                                                       Path(hc.runtime.output_dir), overrides, started_at))


def main() -> None:
    """Console entry point (``pacml train-placer``)."""
    preflight(COMMAND, sys.argv[1:])
    _hydra_main()


if __name__ == "__main__":
    main()
