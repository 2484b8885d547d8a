"""The grid's oracle rule with its rules placed in blocks, and an agent of a grid run against it.

The issue's oracle rule (``bench_conditions.py``) places every rule's degree with the scenario's
placer (op-level first fit in the paper scenario). An agent that places in blocks
(``policy.block_search``) is then compared with weaker rules than it could be: block placement
also helps the rules, and changes which one is best. This benchmark finds the best rule of each
condition *placed as* ``policy.block_search=N`` *places it*, on the grid's evaluation seeds (one
:func:`pacml.adaptive.teacher_search` per condition: every rule from one simulation), and prints
an agent's paired difference against it from a ``bench_conditions.py`` results file.

Usage:
    python benchmarks/bench_block_oracle.py [--conditions a,b] [--workers 2] [--block-search 64]
        [--json OUT] [--results benchmarks/results_conditions.json --agent adaptive]

The 512-server row is left out by default (its ten 4,001-arrival episodes of 26 rules take
about as long as the rest together); name it in ``--conditions`` to include it.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pacml.adaptive import oracle_rule  # noqa: E402
from pacml.conditions import EVAL_SEEDS, GRID, get_condition, paired_difference  # noqa: E402


def _oracle(args: tuple[str, tuple[int, ...], int]) -> tuple[str, dict[str, Any]]:
    name, seeds, block_search = args
    return name, oracle_rule(get_condition(name).overrides, seeds, block_search)


def _fail(message: str) -> NoReturn:
    print(f"bench_block_oracle: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def agent_per_seed(results: dict[str, Any], agent: str) -> dict[str, dict[int, float]]:
    """``{condition: {seed: blocking}}`` of ``agent``'s episodes in a ``bench_conditions.py`` file."""
    out: dict[str, dict[int, float]] = {}
    for record in results.get("episodes", {}).values():
        if isinstance(record, dict) and record.get("policy") == agent and "blocking_rate" in record:
            out.setdefault(record["condition"], {})[int(record["seed"])] = float(record["blocking_rate"])
    return out


def main() -> None:
    """Find the block-placed oracle per condition; compare an agent with it."""
    logging.basicConfig(level=logging.WARNING)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conditions", default=",".join(c.name for c in GRID if not c.name.startswith("ramp512")))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--block-search", type=int, default=64, help="as policy.block_search (0: the issue's oracle)")
    ap.add_argument("--json", type=Path, default=None, help="write the oracle (and the comparison) here")
    ap.add_argument("--results", type=Path, default=None, help="a bench_conditions.py results file")
    ap.add_argument("--agent", default="adaptive", help="the agent of --results to compare")
    a = ap.parse_args()
    names = [n for n in a.conditions.split(",") if n]
    unknown = [n for n in names if n not in {c.name for c in GRID}]
    if unknown:
        _fail(f"--conditions: unknown condition {unknown[0]!r}")
    if a.block_search < 0 or a.workers < 1:
        _fail("--block-search must be >= 0 and --workers >= 1")
    per_seed: dict[str, dict[int, float]] = {}
    if a.results is not None:
        try:
            per_seed = agent_per_seed(json.loads(a.results.read_text()), a.agent)
        except (OSError, ValueError) as exc:
            _fail(f"--results {a.results}: {exc}")
        missing = [n for n in names if set(per_seed.get(n, {})) != set(EVAL_SEEDS)]
        if missing:
            _fail(f"--results {a.results}: agent {a.agent!r} lacks the grid's seeds on {missing[0]}")
    with get_context("spawn").Pool(a.workers) as pool:
        oracle = dict(pool.map(_oracle, [(n, tuple(EVAL_SEEDS), a.block_search) for n in names], chunksize=1))
    out: dict[str, Any] = {"seeds": list(EVAL_SEEDS), "block_search": a.block_search, "oracle": oracle}
    diffs = {}
    for n in names:
        line = f"{n:18s} {oracle[n]['rule']:18s} {np.mean(oracle[n]['per_seed']):.4f}"
        if per_seed:
            diffs[n] = paired_difference([per_seed[n][s] for s in EVAL_SEEDS], oracle[n]["per_seed"])
            line += f" | {a.agent} {diffs[n]['mean']:+.4f} +- {diffs[n]['se']:.4f}"
        print(line)
    if diffs:
        means = [d["mean"] for d in diffs.values()]
        within = sum(m <= 0.005 for m in means)
        print(f"average {a.agent} - block-placed oracle: {np.mean(means):+.4f} over {len(means)} conditions "
              f"({within} within +0.005)")
        out |= {"agent": a.agent, "minus_oracle": diffs, "average": float(np.mean(means))}
    if a.json:
        a.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
