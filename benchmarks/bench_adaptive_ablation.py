"""Ablations of the adaptive agent's selector: refit on a training run's teacher-search results
with groups of condition features removed, and compare validation regrets.

Regret is measured on the run's validation conditions (every ``val_every``-th), per sampled
decision: blocking of the rule picked minus the best rule's (each condition's rules simulated on
its training seeds). A group that matters raises the regret when removed.

Usage: python benchmarks/bench_adaptive_ablation.py RUN_DIR [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path

from omegaconf import OmegaConf

from pacml.adaptive_train import AdaptiveTrainConfig, baseline_regrets, fit, load_condition

#: Condition-feature columns of pacml.adaptive.ConditionTracker.features, by group.
GROUPS = {
    "none (the agent)": (),
    "cluster size and shape": (0, 1, 2, 3, 4),
    "load": (5,),
    "targets (beta statistics)": (7, 8, 9, 10, 11),
    "load, burstiness, targets and mix (only the cluster is seen)": tuple(range(5, 16)),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results_adaptive_ablation.json"))
    args = parser.parse_args()
    saved = OmegaConf.load(args.run / "train_config.yaml")
    cfg = AdaptiveTrainConfig(**OmegaConf.to_container(saved.adaptive, resolve=True))
    paths = sorted((args.run / "conditions").glob("*.npz"))
    results = [load_condition(p) for p in paths]
    index = [int(p.stem) for p in paths]
    val = [r for i, r in zip(index, results, strict=True) if i % cfg.val_every == 0]
    train = [r for i, r in zip(index, results, strict=True) if i % cfg.val_every != 0]
    base = baseline_regrets(val)
    best = min(base, key=base.get)
    rows = {}
    for name, cols in GROUPS.items():
        with tempfile.TemporaryDirectory() as scratch:  # fit's metrics.csv is not kept
            _, stats = fit(cfg, train, val, Path(scratch), math.inf, drop=cols)
        rows[name] = round(stats["val_regret"], 4)
        print(f"{name:75s} validation regret {rows[name]:.4f}", flush=True)
    out = {"run": str(args.run), "train_conditions": len(train), "val_conditions": len(val),
           "best_fixed_rule": best, "best_fixed_rule_regret": round(base[best], 4), "without": rows}
    print(f"best fixed rule {best}: {base[best]:.4f}")
    args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
