"""Tune the adaptive agent's inference knobs on validation seeds, never the grid's.

Runs ``pacml.adaptive.AdaptivePolicy`` variants (JSON objects of its keyword arguments) on
conditions of the grid (``pacml/conditions.py``) with validation seeds 500100-500104, and the
oracle rule on the same seeds (every rule's blocking, from one
:func:`pacml.adaptive.teacher_search` per condition). Prints each variant's mean blocking minus
the oracle's per condition, and the average over the conditions.

Usage:
    python benchmarks/bench_adaptive_knobs.py [--conditions a,b] [--workers 2] [--json FILE]
        [--seeds 500100-500104] [--oracle-from EARLIER.json] [--oracle-block-search N] VARIANT_JSON...
    e.g. '{"shadow_rules":0}' '{"shadow_rules":0,"selector_margin":0}' '{}'

A variant starts from the shipped agent's settings (``conf/policy/pacml_adaptive.yaml``), so
``'{}'`` is the agent ``policy=pacml_adaptive`` runs, and ``'{"shadow_rules":0}'`` its selector alone.
``--oracle-block-search 64`` places the oracle's rules in blocks as ``policy.block_search=64``
places them (the issue's oracle, 0, places them with the scenario's placer).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from multiprocessing import get_context
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pacml.adaptive import AdaptivePolicy, oracle_rule  # noqa: E402
from pacml.conditions import GRID, get_condition, validation_seeds  # noqa: E402
from pacml.env import compose_sim_config  # noqa: E402
from simulator.build import build_simulation  # noqa: E402

SEEDS = tuple(range(500100, 500105))
#: The shipped settings' keys (the checkpoint is resolved per condition: its scenario family's agent).
DEFAULTS = {k: v for k, v in OmegaConf.to_container(OmegaConf.load(ROOT / "conf/policy/pacml_adaptive.yaml")).items()
            if k != "_target_"}


def _agent(args: tuple[str, str, int]) -> tuple[str, str, int, float]:
    name, variant, seed = args
    # Composed as pacml-sim composes it, so the checkpoint resolves to the condition's family's agent.
    cfg = compose_sim_config([*get_condition(name).overrides, "policy=pacml_adaptive", "progress=false"])
    # The variant is merged before interpolations resolve, so '{"shadow_z":2}' also moves
    # shadow_familiar_z (${.shadow_z}), as policy.shadow_z=2 does in pacml-sim.
    merged = OmegaConf.merge(cfg.policy, json.loads(variant))
    knobs = {k: v for k, v in OmegaConf.to_container(merged, resolve=True).items() if k != "_target_"}
    policy = AdaptivePolicy(**knobs)
    return name, variant, seed, float(build_simulation(cfg, seed=seed).run(policy).summary["blocking_rate"])


def _oracle(args: tuple[str, tuple[int, ...], int]) -> tuple[str, dict[str, Any]]:
    name, seeds, block_search = args
    return name, oracle_rule(get_condition(name).overrides, seeds, block_search)


def _fail(message: str) -> NoReturn:
    print(f"bench_adaptive_knobs: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main() -> None:
    """Run the variants and print the table."""
    logging.basicConfig(level=logging.WARNING)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="+", help="JSON objects of AdaptivePolicy keyword arguments")
    ap.add_argument("--conditions", default=",".join(c.name for c in GRID))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    ap.add_argument("--seeds", default=f"{SEEDS[0]}-{SEEDS[-1]}", help="validation seeds, FIRST-LAST")
    ap.add_argument("--oracle-from", type=Path, default=None,
                    help="reuse the oracle of an earlier --json run on the same seeds (it is deterministic)")
    ap.add_argument("--oracle-block-search", type=int, default=0,
                    help="place the oracle's rules as policy.block_search=N places them (default 0: first fit)")
    a = ap.parse_args()
    try:
        seeds = validation_seeds(a.seeds)
    except ValueError as exc:
        _fail(f"--seeds: {exc}")
    names = [n for n in a.conditions.split(",") if n]
    for v in a.variants:
        try:
            knobs = json.loads(v)
        except json.JSONDecodeError as exc:
            _fail(f"variant {v!r}: not JSON ({exc})")
        if not isinstance(knobs, dict) or set(knobs) - set(DEFAULTS):
            _fail(f"variant {v!r}: a JSON object with keys among {sorted(DEFAULTS)}")
    if a.oracle_block_search < 0:
        _fail(f"--oracle-block-search: must be >= 0, got {a.oracle_block_search}")
    unknown = [n for n in names if n not in {c.name for c in GRID}]
    if unknown:
        _fail(f"--conditions: unknown condition {unknown[0]!r}")
    oracle: dict[str, dict[str, Any]] = {}
    if a.oracle_from is not None:
        try:
            earlier = json.loads(a.oracle_from.read_text())
            if earlier["seeds"] != list(seeds):
                _fail(f"--oracle-from {a.oracle_from}: seeds {earlier['seeds']}, not {list(seeds)}")
            if earlier.get("oracle_block_search", 0) != a.oracle_block_search:
                _fail(f"--oracle-from {a.oracle_from}: oracle_block_search {earlier.get('oracle_block_search', 0)}, "
                      f"not {a.oracle_block_search}")
            oracle = {n: earlier["oracle"][n] for n in names if n in earlier["oracle"]}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            _fail(f"--oracle-from {a.oracle_from}: not a results file of this benchmark ({exc})")
    tasks = [(n, v, s) for n in names for v in a.variants for s in seeds]
    with get_context("spawn").Pool(a.workers) as pool:
        oracle |= dict(pool.map(_oracle, [(n, seeds, a.oracle_block_search) for n in names if n not in oracle]))
        runs = pool.map(_agent, tasks, chunksize=1)
    got: dict[tuple[str, str], dict[int, float]] = {}
    for n, v, s, b in runs:
        got.setdefault((n, v), {})[s] = b
    table: dict[str, dict[str, float]] = {}
    print(f"{'condition':16s} {'oracle':>20s} " + " ".join(f"{i:>9d}" for i in range(len(a.variants))))
    for n in names:
        o = np.asarray(oracle[n]["per_seed"])
        diffs = {v: float(np.mean([got[(n, v)][s] for s in seeds]) - o.mean()) for v in a.variants}
        table[n] = diffs
        print(f"{n:16s} {oracle[n]['rule']:>14s} {o.mean():.4f} " + " ".join(f"{diffs[v]:+9.4f}" for v in a.variants))
    avg = {v: float(np.mean([table[n][v] for n in names])) for v in a.variants}
    print(f"{'average':16s} {'':>20s} " + " ".join(f"{avg[v]:+9.4f}" for v in a.variants))
    for i, v in enumerate(a.variants):
        print(f"  {i}: {v}")
    if a.json:
        per_seed = {v: {n: [got[(n, v)][s] for s in seeds] for n in names} for v in a.variants}
        a.json.write_text(json.dumps({"seeds": list(seeds), "oracle_block_search": a.oracle_block_search,
                                      "oracle": oracle, "minus_oracle": table, "average": avg,
                                      "per_seed": per_seed}, indent=2) + "\n")


if __name__ == "__main__":
    main()
