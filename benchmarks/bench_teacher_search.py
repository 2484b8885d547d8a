"""Speed of the adaptive agent's teacher search, and its agreement with one simulation per rule.

    python benchmarks/bench_teacher_search.py --conditions 30 --seed 7 [--full]

Draws ``--conditions`` training conditions as ``pacml-train-adaptive`` does (``core_frac=0.5``,
500 jobs, 2 seeds each), runs :func:`pacml.adaptive.teacher_search` on each in one process and
logs its time. With ``--full`` it also runs :func:`pacml.adaptive.teacher_search_full` (one
simulation per rule) and reports the largest blocking-rate difference (0 when exact).
"""

from __future__ import annotations

import argparse
import logging
import time

import numpy as np

from pacml.adaptive import sample_condition, teacher_search, teacher_search_full

log = logging.getLogger("bench_teacher_search")


def main() -> None:
    """Run the benchmark (see module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conditions", type=int, default=30)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--full", action="store_true", help="also time one simulation per rule, and compare")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    rng = np.random.default_rng(args.seed)
    fast_s = full_s = diff = 0.0
    for k in range(args.conditions):
        over = sample_condition(rng, 500, 0.5, "paper")
        seeds = [1000001 + k, 1000101 + k]
        t0 = time.perf_counter()
        res = teacher_search(over, seeds)
        took = time.perf_counter() - t0
        fast_s += took
        line = f"condition {k}: {took:.1f} s"
        if args.full:
            t0 = time.perf_counter()
            ref = teacher_search_full(over, seeds)
            full_s += time.perf_counter() - t0
            diff = max(diff, float(np.abs(ref["blocking"] - res["blocking"]).max()))
            line += f", one simulation per rule {time.perf_counter() - t0:.1f} s"
        log.info("%s (%s)", line, " ".join(over[2:6]))
    log.info("teacher_search: %.1f s for %d conditions", fast_s, args.conditions)
    if args.full:
        log.info("teacher_search_full: %.1f s; largest blocking difference %.3g", full_s, diff)


if __name__ == "__main__":
    main()
