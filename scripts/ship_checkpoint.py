"""Copy a finished `pacml train` run into pacml/checkpoints/<name>/ with its training curve.

Copies ``policy.pt`` (best by validation), ``train_config.yaml``, ``metrics.csv`` and
``train_summary.json``, and renders ``training_curve.png`` (blocking rate vs training time).
A ``pacml distill`` run (it holds ``critic.pt``) is shipped with
``critic.pt``, ``distill_config.yaml``, ``critic_metrics.csv``, ``distill_summary.json`` and
``demos.jsonl`` instead.

Usage: python scripts/ship_checkpoint.py outputs/train/paper_betaC paper_betaC
       python scripts/ship_checkpoint.py outputs/distill/paper_betaD_critic paper_betaD_critic
       python scripts/ship_checkpoint.py RUN/paper_betaD_critic paper_betaD_critic --agent paper_betaD

``--agent NAME`` (critics): the critic was distilled around a run directory that is shipped as
``NAME``; the critic then names ``NAME`` (in ``critic.pt`` and ``distill_config.yaml``) instead of
that directory. Refused unless the shipped ``NAME/policy.pt`` is byte-identical to the run's.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
from pathlib import Path

import matplotlib
import yaml

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DEST = Path(__file__).resolve().parents[1] / "pacml" / "checkpoints"


def _float(row: dict[str, str], key: str) -> float:
    try:
        return float(row.get(key, "") or "nan")
    except ValueError:
        return float("nan")


def plot_curve(metrics: Path, out: Path, title: str, validation: str = "2 fixed seeds") -> None:
    rows = list(csv.DictReader(metrics.open()))
    minutes = [_float(r, "wall_s") / 60 for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    train = [(m, _float(r, "charts/blocking_rate")) for m, r in zip(minutes, rows, strict=True)]
    train = [(m, v) for m, v in train if v == v]
    val = [(m, _float(r, "eval/blocking_rate")) for m, r in zip(minutes, rows, strict=True)]
    val = [(m, v) for m, v in val if v == v]
    if train:
        ax.plot(*zip(*train, strict=True), color="0.6", lw=1, label="training episodes (sampled actions)")
    if val:
        ax.plot(*zip(*val, strict=True), "o-", color="C0", ms=3, label=f"validation (greedy, {validation})")
    teacher = _float(rows[0], "warmstart/teacher_val_blocking_rate") if rows else float("nan")
    if teacher == teacher:
        k = int(_float(rows[0], "warmstart/teacher_min_degree"))
        ax.axhline(teacher, color="C3", ls="--", lw=1, label=f"warm-start teacher (min_feasible, k={k})")
    ax.set_xlabel("wall time (min, 2-core CPU)")
    ax.set_ylabel("blocking rate")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def name_agent(dest: Path, agent: str) -> None:
    """Make the critic in ``dest`` name its agent by the shipped ``agent`` (see module docstring)."""
    import filecmp

    import torch
    from omegaconf import OmegaConf

    payload = torch.load(dest / "critic.pt", map_location="cpu", weights_only=False)
    trained = Path(payload["meta"]["agent_checkpoint"])
    trained = trained / "policy.pt" if trained.is_dir() else trained
    shipped = DEST / agent / "policy.pt"
    if not (trained.is_file() and shipped.is_file() and filecmp.cmp(trained, shipped, shallow=False)):
        raise SystemExit(f"--agent {agent}: {shipped} is not the agent the critic was distilled around ({trained})")
    payload["meta"]["agent_checkpoint"] = agent
    payload["meta"]["distill"]["checkpoint"] = agent
    torch.save(payload, dest / "critic.pt")
    config = OmegaConf.load(dest / "distill_config.yaml")
    config.distill.checkpoint = agent
    (dest / "distill_config.yaml").write_text(OmegaConf.to_yaml(config))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("name")
    parser.add_argument("--agent", help="critics: the shipped name of the agent it was distilled around")
    args = parser.parse_args()
    dest = DEST / args.name
    dest.mkdir(parents=True, exist_ok=True)
    if (args.run_dir / "critic.pt").is_file():
        for name in ("critic.pt", "distill_config.yaml", "critic_metrics.csv", "distill_summary.json", "demos.jsonl"):
            shutil.copy2(args.run_dir / name, dest / name)
        if args.agent:
            name_agent(dest, args.agent)
        print(f"shipped {args.run_dir} -> {dest}")
        return
    for name in ("policy.pt", "train_config.yaml", "metrics.csv", "train_summary.json"):
        shutil.copy2(args.run_dir / name, dest / name)
    summary = json.loads((args.run_dir / "train_summary.json").read_text())
    ppo = (yaml.safe_load((args.run_dir / "train_config.yaml").read_text()) or {}).get("ppo", {})
    seeds = len(ppo.get("eval_seeds", [0, 0]))
    validation = (f"{ppo.get('val_conditions')} random conditions x {seeds} seeds" if ppo.get("random_conditions")
                  else f"{seeds} fixed seeds")
    plot_curve(dest / "metrics.csv", dest / "training_curve.png",
               f"PAC-ML training, {args.name} ({summary['global_step']:,} decisions, "
               f"{summary['wall_s'] / 60:.0f} min)", validation)
    print(f"shipped {args.run_dir} -> {dest}")


if __name__ == "__main__":
    main()
