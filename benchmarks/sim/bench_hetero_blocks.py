"""Degree rules on a cluster of two GPU generations: blocking of every rule on ``ramp32_hetero``.

The condition: ``cluster=ramp32_hetero scenario=model_parallel beta=fixed
beta.value=1.0`` (every job fits one fast server and must run as fast as it would alone on the
profiled GPU, so a slow server never meets the target). Each rule runs on the given seeds; the
block-aware reference rule (``tests/block_reference.py``: the smallest degree with any free block
that meets the target, placed there) is the yardstick.

The reference rule is loaded from this checkout's ``tests/`` by path, and everything else from
wherever ``simulator`` is imported, so the same script measures an older checkout:
``PYTHONPATH=/path/to/old/checkout python benchmarks/sim/bench_hetero_blocks.py --json before.json``.

Usage: python benchmarks/sim/bench_hetero_blocks.py --seeds 0,1,2 --json benchmarks/results/sim/results_hetero_blocks.json
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

import simulator
from pacml.agent.env import compose_sim_config
from simulator.build import (
    build_feasibility,
    build_policy,
    build_simulation,
    build_topology,
    build_workload,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import ROOT, parser, save  # noqa: E402

CONDITION = ["cluster=ramp32_hetero", "scenario=model_parallel", "beta=fixed", "beta.value=1.0"]
#: name -> policy overrides (``reference``: the block-aware rule of tests/block_reference.py).
#: pacml_beta names its checkpoint: beta=fixed has no per-beta agent, and paper_betaA is the one
#: policy=pacml_beta's default resolves to there.
RULES = {
    "para_max": ["policy=para_max"],
    "min_feasible": ["policy=min_feasible"],
    "min_feasible_4": ["policy=min_feasible_4"],
    "min_feasible block_search=64": ["policy=min_feasible", "policy.block_search=64"],
    "pacml": ["policy=pacml"],
    "pacml_beta": ["policy=pacml_beta", "policy.checkpoint=paper_betaA"],
    "reference": None,
    "para_min": ["policy=para_min"],
    "fixed(4)": ["policy=fixed", "policy.degree=4"],
    "lookahead": ["policy=lookahead"],  # not in the default list: ~0.1 s a decision (--rules lookahead)
}
DEFAULT_RULES = ("para_max", "min_feasible", "min_feasible_4", "min_feasible block_search=64", "pacml",
                 "pacml_beta", "reference", "para_min", "fixed(4)")


def reference_policy():
    """The block-aware reference rule, from this checkout's tests/ (by path)."""
    spec = importlib.util.spec_from_file_location("block_reference", ROOT / "tests" / "block_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.BlockAwareMinFeasible()


def main() -> None:
    p = parser(__doc__, seeds="0,1,2")
    p.add_argument("--rules", default=",".join(DEFAULT_RULES), help="comma-separated names of RULES")
    p.add_argument("--overrides", default="", help="extra Hydra overrides, space-separated")
    args = p.parse_args()
    seeds = args.seeds
    base = [*CONDITION, "progress=false", *args.overrides.split()]
    cfg = compose_sim_config(base)
    out: dict = {"code": str(Path(simulator.__file__).resolve().parents[1]), "condition": base, "seeds": seeds,
                 "rules": {}}
    for name in args.rules.split(","):
        row: dict = {"blocking_rate": [], "server_utilisation": [], "wall_s": []}
        for seed in seeds:
            # A fresh feasibility engine per run: no cache carries over between rules.
            feas = build_feasibility(build_topology(cfg), cfg.sim)
            policy = reference_policy() if RULES[name] is None else build_policy(compose_sim_config([*base, *RULES[name]]))
            t0 = time.perf_counter()
            summary = build_simulation(cfg, seed=seed, feasibility=feas, workload=build_workload(cfg)).run(policy).summary
            row["wall_s"].append(time.perf_counter() - t0)
            row["blocking_rate"].append(summary["blocking_rate"])
            row["server_utilisation"].append(summary["mean_server_utilisation"])
        rates = np.array(row["blocking_rate"])
        row["mean_blocking_rate"] = float(rates.mean())
        row["sem_blocking_rate"] = float(rates.std(ddof=1) / np.sqrt(len(rates))) if len(rates) > 1 else None
        out["rules"][name] = row
        print(f"{name:30s} blocking {rates.mean():.4f} {[round(float(r), 4) for r in rates]} util "
              f"{np.mean(row['server_utilisation']):.3f} wall {np.mean(row['wall_s']):.1f} s/run", flush=True)
        save(args.json, out)


if __name__ == "__main__":
    main()
