"""A cheap, many-seed yardstick for the adaptive agent's rule selector (validation seeds, never the grid's).

Five validation seeds cannot rank selectors whose grid averages differ by 0.005, and held-out regret
on training conditions (short, random) does not predict the grid (BENCHMARKS §10). This runs one
:func:`pacml.adaptive.teacher_search` per grid condition (except the 512-server one) and validation
seed: every rule's blocking over the whole episode, and the condition features at every arrival.
The features depend only on arrivals, so any selector's pick at every arrival is known without
simulating it, and its *proxy regret* on a seed is the mean, over arrivals, of the blocking of the
rule it picks there minus the blocking of the condition's oracle rule (the best by mean over the
seeds). The proxy ignores that switching rules within an episode changes the state the rules meet
(blocking is path dependent): a selector whose pick flips between near-tied rules can look good
here and block far more in simulation (BENCHMARKS §10, the nearest-neighbour selector), so it
also reports how often the pick changes. It screens selectors; the grid measures them.

The teacher searches are cached in ``--data`` (one file per condition and seed, written atomically;
a re-run computes only missing ones): 40 seeds x 18 conditions took 35 min on one core.

Usage:
    python benchmarks/bench_selector_proxy.py [--seeds 500100-500139] [--data DIR] [--workers 1]
        [--json FILE] [--stride 4] LABEL=CHECKPOINT...
    e.g. shipped=paper_adaptive knn=outputs/train_adaptive/<run>
    (--stride 1, the default, scores every arrival: 1-2 min per selector for 720 episodes)
"""

from __future__ import annotations

import argparse
import io
import logging
import sys
from multiprocessing import get_context
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pacml.adaptive import load_adaptive, teacher_search  # noqa: E402
from pacml.conditions import GRID, get_condition, validation_seeds  # noqa: E402
from simulator.errors import ConfigError  # noqa: E402
from workloads.io import atomic_write, atomic_write_json  # noqa: E402

#: The 512-server condition is left out: its 4,000-arrival episodes cost minutes each.
CONDITIONS = tuple(c.name for c in GRID if c.name != "ramp512_C_62.5")


def _fail(message: str) -> NoReturn:
    print(f"bench_selector_proxy: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _search(args: tuple[str, int, str]) -> tuple[str, int]:
    name, seed, data = args
    path = Path(data) / f"{name}__{seed}.npz"
    if not path.is_file():
        res = teacher_search(get_condition(name).overrides, [seed], samples_per_episode=10**9)  # every arrival
        buf = io.BytesIO()
        np.savez(buf, blocking=res["blocking"][:, 0], conditions=res["conditions"],
                 rule_features=res["rule_features"], rules=np.array(res["rules"]))
        atomic_write(path, lambda fh: fh.write(buf.getvalue()))
    return name, seed


def load_episodes(data: Path, names: list[str], seeds: list[int]) -> dict[str, list[dict[str, Any]]]:
    """The cached teacher searches, per condition, in seed order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        for seed in seeds:
            with np.load(data / f"{name}__{seed}.npz") as d:
                out.setdefault(name, []).append({k: d[k] for k in ("blocking", "conditions", "rule_features")})
    return out


def proxy_regret(weights: Any, episodes: dict[str, list[dict[str, Any]]], stride: int) -> dict[str, dict[str, float]]:
    """Per condition: mean and standard error over seeds of the picked rules' blocking minus the
    oracle rule's, and how often the pick changes (per 1,000 scored arrivals)."""
    table = {}
    for name, eps in episodes.items():
        blocking = np.stack([e["blocking"] for e in eps])
        oracle = int(blocking.mean(axis=0).argmin())
        per_seed, switches = [], []
        for e, b in zip(eps, blocking, strict=True):
            picks = np.array([int(np.argmax(weights.scores(c, e["rule_features"])))
                              for c in e["conditions"][::stride]])
            per_seed.append(float(b[picks].mean() - b[oracle]))
            switches.append(1000.0 * float((picks[1:] != picks[:-1]).sum()) / len(picks))
        table[name] = {"mean": float(np.mean(per_seed)), "se": float(np.std(per_seed, ddof=1) / np.sqrt(len(per_seed)))
                       if len(per_seed) > 1 else float("nan"), "switches_per_1000": float(np.mean(switches))}
    return table


def main() -> None:
    """Fill the cache, then print and write each selector's proxy regret per condition."""
    logging.basicConfig(level=logging.WARNING)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("selectors", nargs="*", help="LABEL=CHECKPOINT (file, run directory or shipped name)")
    ap.add_argument("--seeds", default="500100-500139", help="validation seeds, FIRST-LAST")
    ap.add_argument("--conditions", default=",".join(CONDITIONS))
    ap.add_argument("--data", type=Path, default=ROOT / "outputs" / "selector_proxy")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--stride", type=int, default=1, help="score every Nth arrival")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    try:
        seeds = list(validation_seeds(a.seeds))
    except ValueError as exc:
        _fail(f"--seeds: {exc}")
    names = [n for n in a.conditions.split(",") if n]
    if unknown := [n for n in names if n not in CONDITIONS]:
        _fail(f"--conditions: unknown condition {unknown[0]!r} (choose among {', '.join(CONDITIONS)})")
    if a.stride < 1 or a.workers < 1:
        _fail("--stride and --workers: at least 1")
    selectors = {}
    for item in a.selectors:
        label, sep, ckpt = item.partition("=")
        if not sep or not label:
            _fail(f"selector {item!r}: LABEL=CHECKPOINT")
        from pacml.policy import _resolve

        try:
            selectors[label] = load_adaptive(_resolve(ckpt, "adaptive.npz", "adaptive", "selector"))[0]
        except ConfigError as exc:
            _fail(f"selector {label}: {exc}")
    a.data.mkdir(parents=True, exist_ok=True)
    tasks = [(n, s, str(a.data)) for s in seeds for n in names if not (a.data / f"{n}__{s}.npz").is_file()]
    if tasks:
        print(f"teacher searches to run: {len(tasks)} (cached: {len(names) * len(seeds) - len(tasks)})", flush=True)
        with get_context("spawn").Pool(a.workers) as pool:
            for i, _ in enumerate(pool.imap_unordered(_search, tasks), 1):
                if i % 50 == 0 or i == len(tasks):
                    print(f"  {i}/{len(tasks)}", flush=True)
    episodes = load_episodes(a.data, names, seeds)
    tables = {label: proxy_regret(w, episodes, a.stride) for label, w in selectors.items()}
    print(f"proxy regret (picked rules' blocking minus the oracle rule's), seeds {seeds[0]}-{seeds[-1]}")
    print("(in brackets: changes of the pick per 1,000 arrivals)")
    print(f"{'condition':16s} " + " ".join(f"{label:>28s}" for label in tables))
    for n in names:
        print(f"{n:16s} " + " ".join(f"{t[n]['mean']:+.4f} ± {t[n]['se']:.4f} ({t[n]['switches_per_1000']:5.1f})"
                                     for t in tables.values()))
    avg = {label: float(np.mean([t[n]["mean"] for n in names])) for label, t in tables.items()}
    flips = {label: float(np.mean([t[n]["switches_per_1000"] for n in names])) for label, t in tables.items()}
    print(f"{'average':16s} " + " ".join(f"{avg[label]:+17.4f} ({flips[label]:5.1f})" for label in tables))
    if a.json:
        atomic_write_json(a.json, {"seeds": seeds, "stride": a.stride,
                                   "selectors": dict(s.split("=", 1) for s in a.selectors),
                                   "proxy_regret": tables, "average": avg, "switches_per_1000": flips})


if __name__ == "__main__":
    main()
