"""Simulator scale benchmark: cluster size x policy, and episode length.

Each run is a fresh process (so peak memory is that run's own): a physical-scenario episode of the
paper's five graphs with Poisson arrivals, at a load where blocking is between 0.05 and 0.5, run
exactly as ``pacml-sim`` runs it (results streamed to ``jobs.csv`` in a temporary directory).
Reported per run: wall time, jobs per minute, simulated events per second, peak memory (max RSS),
blocking rate, mean degree, lookaheads simulated.

Usage: python benchmarks/sim/bench_scale.py (the full grid, about an hour; ``--figure-only``
redraws). Writes ``benchmarks/results/sim/results_scale.json`` and ``benchmarks/figures/scale.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from workloads.io import atomic_write_json

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "sim" / "results_scale.json"
FIGURE = ROOT / "benchmarks" / "figures" / "scale.png"

#: Cluster preset of each size, and the mean inter-arrival time (s) of the load used there: the
#: same load per server everywhere (capacity grows with servers), where blocking is between 0.05
#: and 0.5 for para_max and min_feasible at beta B.
CLUSTERS: dict[int, tuple[str, float]] = {
    32: ("ramp32", 1.0),
    512: ("ramp512", 0.0625),
    4096: ("ramp4096", 0.0078125),
    65536: ("ramp65536", 0.00048828125),
}

#: Policy overrides. para_max keeps the paper's cap of 16; para_max_all may use every degree the
#: cluster offers (up to 1,024: its blocking is then mostly jobs missing their targets at huge
#: degrees, but it exercises the step model and placement at those degrees).
POLICIES: dict[str, list[str]] = {
    "para_max": ["policy=para_max"],
    "para_max_all": ["policy=para_max", "policy.max_degree=${cluster.max_degree}"],
    "min_feasible": ["policy=min_feasible"],
    "pacml_beta": ["policy=pacml_beta"],  # the per-beta agent
    "pacml": ["policy=pacml"],  # the adaptive agent (its rule candidates grow with the offered degrees)
}


def overrides(servers: int, policy: str, jobs: int, seed: int = 0) -> list[str]:
    """``pacml-sim`` overrides of one run: ``jobs`` Poisson arrivals on the cluster of ``servers``."""
    preset, gap_s = CLUSTERS[servers]
    return ["scenario=physical", f"cluster={preset}", "arrivals=poisson", "beta=B", *POLICIES[policy],
            f"mean_interarrival_s={gap_s!r}", f"horizon_s={gap_s * jobs!r}", f"seed={seed}",
            "progress=false", f"max_arrivals={2 * jobs + 1000}", "max_estimated_hours=null"]


def run_one(ovr: list[str]) -> dict[str, Any]:
    """Run one episode in this process, as ``pacml-sim`` does; return its costs."""
    from hydra import compose, initialize_config_dir

    from simulator.run import run_config

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose(config_name="sim", overrides=ovr)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        summary = run_config(cfg, out)
        csv_bytes = (Path(out) / "jobs.csv").stat().st_size
    wall = time.perf_counter() - t0
    jobs = summary["num_jobs_arrived"]
    return {"wall_s": wall, "jobs": jobs, "jobs_per_min": 60 * jobs / wall,
            "events": summary["events_simulated"], "events_per_s": summary["events_simulated"] / wall,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "blocking_rate": summary["blocking_rate"], "mean_degree": summary["mean_degree"],
            "lookaheads": summary["lookaheads"], "lookahead_wall_s": summary["lookahead_wall_s"],
            "jobs_csv_mb": csv_bytes / 2**20}


def measure(servers: int, policy: str, jobs: int, timeout_s: float) -> dict[str, Any]:
    """One run in a fresh process (its own peak memory); ``error`` if it failed or timed out."""
    ovr = overrides(servers, policy, jobs)
    row: dict[str, Any] = {"servers": servers, "policy": policy, "target_jobs": jobs, "overrides": " ".join(ovr)}
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    try:
        proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(ovr)], capture_output=True,
                              text=True, timeout=timeout_s, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        row["error"] = f"timed out after {timeout_s:.0f} s"
        return row
    if proc.returncode != 0:
        row["error"] = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return row
    row.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    return row


def plot(results: dict[str, Any], path: Path) -> None:
    """Two panels: cost against cluster size, and against episode length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.2))
    grid = [r for r in results.get("grid", []) if "error" not in r]
    for policy in dict.fromkeys(r["policy"] for r in grid):
        rows = sorted((r for r in grid if r["policy"] == policy), key=lambda r: r["servers"])
        ax1.plot([r["servers"] for r in rows], [r["jobs_per_min"] for r in rows], "o-", label=policy)
        ax2.plot([r["servers"] for r in rows], [r["peak_rss_mb"] for r in rows], "o-", label=policy)
    for ax, label in ((ax1, "simulated jobs per minute"), (ax2, "peak memory (MB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("servers")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    ax1.axhline(1e4, color="grey", ls=":", lw=1)
    ax1.axhline(1e5, color="grey", ls=":", lw=1)
    ax1.set_title("throughput vs cluster size")
    ax2.set_title("memory vs cluster size")
    lengths = sorted((r for r in results.get("lengths", []) if "error" not in r), key=lambda r: r["jobs"])
    if lengths:
        ax3.plot([r["jobs"] for r in lengths], [r["peak_rss_mb"] for r in lengths], "o-", label="peak memory (MB)")
        ax3b = ax3.twinx()
        ax3b.plot([r["jobs"] for r in lengths], [r["wall_s"] for r in lengths], "s--", color="C1", label="wall (s)")
        ax3b.set_ylabel("wall (s)")
        ax3b.set_yscale("log")
        ax3.set_xscale("log")
        ax3.set_ylim(0, max(r["peak_rss_mb"] for r in lengths) * 1.3)
        ax3.set_xlabel("jobs in the episode")
        ax3.set_ylabel("peak memory (MB)")
        ax3.set_title(f"episode length, {lengths[0]['servers']} servers, {lengths[0]['policy']}")
        ax3.grid(True, alpha=0.3)
        h1, l1 = ax3.get_legend_handles_labels()
        h2, l2 = ax3b.get_legend_handles_labels()
        ax3.legend(h1 + h2, l1 + l2, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def _machine() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": len(os.sched_getaffinity(0)), "python": platform.python_version()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default="32,512,4096,65536",
                        help=f"cluster sizes (servers), among {', '.join(map(str, CLUSTERS))}")
    parser.add_argument("--policies", default="para_max,para_max_all,min_feasible,pacml_beta")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per grid run")
    parser.add_argument("--target-jobs", type=int, default=100_000,
                        help="jobs of the target runs (65,536 and 4,096 servers, para_max and min_feasible)")
    parser.add_argument("--lengths", default="10000,100000,1000000",
                        help="episode lengths on 512 servers with para_max ('' to skip)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument("--figure", type=Path, default=FIGURE)
    parser.add_argument("--figure-only", action="store_true")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_one(json.loads(args.child))))
        return
    if args.figure_only:
        plot(json.loads(args.json.read_text()), args.figure)
        return
    results: dict[str, Any] = {"machine": _machine(), "command": " ".join(sys.argv), "grid": [], "targets": [],
                               "lengths": []}
    sizes = [int(s) for s in args.sizes.split(",") if s]
    policies = [p for p in args.policies.split(",") if p]
    for name, given, known in (("--sizes", sizes, CLUSTERS), ("--policies", policies, POLICIES)):
        unknown = [x for x in given if x not in known]
        if unknown:
            parser.error(f"{name}: unknown {unknown} (known: {', '.join(map(str, known))})")
    for servers in sizes:
        for policy in policies:
            row = measure(servers, policy, args.jobs, args.timeout)
            print(json.dumps(row), flush=True)
            results["grid"].append(row)
            atomic_write_json(args.json, results)
    for servers in (s for s in (4096, 65536) if s in sizes and args.target_jobs):
        for policy in (p for p in ("para_max", "min_feasible") if p in policies):
            row = measure(servers, policy, args.target_jobs, args.timeout)
            print(json.dumps(row), flush=True)
            results["targets"].append(row)
            atomic_write_json(args.json, results)
    for jobs in (int(n) for n in args.lengths.split(",") if n):
        row = measure(512, "para_max", jobs, args.timeout)
        print(json.dumps(row), flush=True)
        results["lengths"].append(row)
        atomic_write_json(args.json, results)
    plot(results, args.figure)


if __name__ == "__main__":
    main()
