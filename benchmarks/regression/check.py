"""Regression set: proves a refactor left behaviour unchanged (issue 44, item 6).

``record`` runs a fixed set of commands and writes a fingerprint of everything they produce
(minus wall times) to a JSON file; ``compare`` runs the same commands with the code in the tree
and fails, naming every difference, unless each fingerprint is identical. The set:

* ``make_run``: ``make run``'s 84 runs (``experiment=paper_main``): every ``jobs.csv`` and every
  ``summary.json`` metric, and the report's figure and table CSVs;
* ``conditions``: ``policy=pacml`` on every condition of the condition grid (its first evaluation
  seed): ``jobs.csv`` and the metrics;
* ``place``: ``pacml place`` over every method and device preset on three graphs: each
  placement and its value;
* ``train``: one short, seeded, step-budgeted run of each trainer (per-beta PPO, the learned
  placer, the adaptive agent, the distilled critic): the saved weights and the logged metrics.

Commands are called by their console names, so the set survives module moves; the recorded
command lines are replayed as they were recorded.

Usage::

    python benchmarks/regression/check.py record  --out benchmarks/results/regression/baseline.json
    python benchmarks/regression/check.py compare --baseline benchmarks/results/regression/baseline.json
    python benchmarks/regression/check.py compare --only place,train   # a subset

The baseline in ``benchmarks/results/regression/`` was recorded at commit 967f795, before any
module of issue 44 moved (``git worktree add /tmp/base 967f795`` and ``PYTHONPATH=/tmp/base``).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("regression")

# Keys whose values are wall-clock measurements (or derived from them), or that name code paths
# a refactor may legitimately move (the resolved config's `_target_`s): left out of fingerprints.
VOLATILE_KEYS = {
    "wall_time_s", "events_per_s", "jobs_per_s", "lookahead_wall_s", "method_wall_s", "wall_s",
    "config", "resolved_config", "gantt", "elapsed_s", "time_s", "timestamp", "started", "finished",
    "seconds", "duration_s", "updates_per_s", "steps_per_s", "sps", "method_class", "python",
    "hostname", "host", "machine", "git", "torch", "version", "versions", "command", "argv",
    "run_dir", "path", "paths", "checkpoint_path", "created", "date", "phase_s", "phases_s", "timing",
    "teacher_search_s", "total_s", "update_s", "charts/SPS", "SPS", "refine_s", "coarsen_s", "inner_s", "solver_time_s",
}
# Settings that issue 44 retired (each at its off value in every recorded run), which saved
# configs and checkpoint metadata of the baseline still carry: left out wherever they appear
# (per parent key), so a checkpoint is compared by what it learned and how it was trained.
RETIRED_KEYS = {
    "train_config": {"tune_neighbours", "jobs_per_server", "label_horizon_s", "minibatch_rows", "size_spread_frac"},
    "distill": {"mode", "epochs", "learning_rate", "batch_size", "change_weight", "soft_temperature_jobs"},
}
VOLATILE_COLUMNS = {"wall_s", "wall_time_s", "time_s", "elapsed_s", "sps", "decision_wall_s", "update_s", "charts/SPS",
                    "events_per_s", "jobs_per_s", "lookahead_wall_s"}
# Columns of the report's run table that echo the policy's resolved config (its `_target_` and
# keys, which retired options leave): config, not behaviour; the metrics beside them are compared.
VOLATILE_COLUMN_PREFIXES = ("policy.",)
# Where the runs were written (a temporary folder): replaced by this token before hashing.
WORK_TOKEN = "<work>"
WORK_DIR = ""

PLACE_GRAPHS = ("squeezenet1_0", "gnmt", "alexnet")
PLACE_PRESETS = ("gpu4", "gpu8", "hetero", "cpu_gpu", "ramp_block")
PLACE_METHODS = ("single", "round_robin", "random", "m_topo", "m_etf", "m_sct", "heft", "metis",
                 "pipedream", "local_search", "anneal", "coarse", "learned", "expert")
# (objective, methods, presets) of each sweep: the DP and the MIP model the pipeline objective
# only (pacml place refuses them for step), and the DP needs devices of one kind.
PLACE_SWEEPS = (("step", PLACE_METHODS, PLACE_PRESETS),
                ("pipeline", (*PLACE_METHODS, "mip"), PLACE_PRESETS),
                ("pipeline", ("dp",), ("gpu4", "gpu8", "ramp_block")))

# The entry points as they were at commit 967f795, for recording the baseline from a worktree of it
# (`--entries legacy`): the console scripts installed in the venv may already be the new ones.
LEGACY_ENTRIES = {"sim": "simulator.run:main", "place": "simulator.place.cli:main", "report": "analysis.report:main",
                  "train": "pacml.train:main", "train-placer": "pacml.placer.cli:main",
                  "train-adaptive": "pacml.adaptive_train:main", "distill": "pacml.distill:main"}
ENTRIES = "console"
REUSE = False  # --reuse: fingerprint the runs already in --work, run nothing


def _commands() -> dict[str, list[str]]:
    """Subcommand -> argv prefix: `pacml SUB` (or, before it existed, `pacml-SUB`; or the legacy entries)."""
    if ENTRIES == "legacy":
        code = ("import importlib, sys; m, f = sys.argv.pop(1).split(':'); sys.argv[0] = sys.argv.pop(1); "
                "sys.exit(getattr(importlib.import_module(m), f)())")
        return {s: [sys.executable, "-c", code, entry, f"pacml-{s}"] for s, entry in LEGACY_ENTRIES.items()}
    bin_dir = Path(sys.executable).parent
    if (bin_dir / "pacml").exists():
        return {s: [str(bin_dir / "pacml"), s] for s in LEGACY_ENTRIES}
    return {s: [str(bin_dir / f"pacml-{s}")] for s in LEGACY_ENTRIES}


def _run(cmd: str, args: list[str], cwd: Path, env: dict[str, str], check: bool = True) -> int:
    if REUSE:
        return 0
    argv = _commands()[cmd] + args
    log.info("pacml %s %s", cmd, " ".join(args))
    proc = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if check and proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-5:]
        raise SystemExit(f"regression: {cmd} {' '.join(args)} failed ({proc.returncode}): " + " | ".join(tail))
    return proc.returncode


def _clean(obj: Any, parent: str = "") -> Any:
    """``obj`` without volatile and retired keys, floats as their repr (exact)."""
    if isinstance(obj, dict):
        retired = RETIRED_KEYS.get(parent, set())
        return {k: _clean(v, k) for k, v in sorted(obj.items())
                if k not in VOLATILE_KEYS and not k.endswith("_wall_s") and k not in retired}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    if isinstance(obj, float):
        return repr(obj)
    return obj


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _csv_digest(path: Path) -> str:
    """The CSV's content without volatile columns."""
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return _digest("")
    keep = [i for i, name in enumerate(rows[0]) if name not in VOLATILE_COLUMNS and not name.endswith("_wall_s")
            and not name.startswith(VOLATILE_COLUMN_PREFIXES)]
    out = io.StringIO()
    writer = csv.writer(out)
    for row in rows:
        writer.writerow([row[i] for i in keep if i < len(row)])
    return _digest(_unwork(out.getvalue()))


def _unwork(text: str) -> str:
    """``text`` with the run folder and the checkout (shipped checkpoints' paths) replaced by tokens."""
    text = text.replace(WORK_DIR, WORK_TOKEN) if WORK_DIR else text
    return text.replace(str(Path.cwd()), "<checkout>")


def _json_digest(path: Path) -> str:
    return _digest(_unwork(json.dumps(_clean(json.loads(path.read_text())), sort_keys=True)))


def _tensor_digest(path: Path) -> str:
    """Weights (a torch checkpoint or an npz) as a digest of their arrays."""
    import numpy as np

    h = hashlib.sha256()
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as data:
            for key in sorted(data.files):
                h.update(key.encode())
                value = data[key]
                if key == "meta" and value.dtype == np.uint8:  # JSON metadata: cleaned like any JSON
                    h.update(json.dumps(_clean(json.loads(value.tobytes().decode())), sort_keys=True).encode())
                else:
                    h.update(np.ascontiguousarray(value).tobytes())
        return h.hexdigest()[:20]
    import torch  # lazy: torch

    obj = torch.load(path, map_location="cpu", weights_only=False)

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            h.update(prefix.encode())
            h.update(value.detach().contiguous().numpy().tobytes())
        elif isinstance(value, dict):
            retired = RETIRED_KEYS.get(prefix.rsplit("/", 1)[-1], set())
            for k in sorted(value, key=str):
                if str(k) in VOLATILE_KEYS or str(k) in retired:
                    continue
                walk(f"{prefix}/{k}", value[k])
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                walk(f"{prefix}/{i}", v)
        elif isinstance(value, (int, float, bool, str)) or value is None:
            if isinstance(value, str) and ("/" in value or "\\" in value):
                return  # a path: where the run was written, not what it learned
            h.update(f"{prefix}={value!r}".encode())

    walk("", obj)
    return h.hexdigest()[:20]


def _fingerprint_tree(root: Path) -> dict[str, str]:
    """Every result file under ``root`` (relative path -> digest), logs and figures aside."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if not path.is_file() or "/.hydra/" in f"/{rel}" or rel.endswith((".log", ".png", ".svg", ".pdf", ".html", ".md")):
            continue
        if "/checkpoints/" in f"/{rel}" or path.name.endswith(".tmp"):
            continue
        if path.suffix == ".csv":
            out[rel] = _csv_digest(path)
        elif path.suffix == ".json":
            out[rel] = _json_digest(path)
        elif path.suffix in (".pt", ".npz"):
            out[rel] = _tensor_digest(path)
    return out


# ------------------------------------------------------------------ parts


def part_make_run(work: Path, env: dict[str, str]) -> dict[str, str]:
    sweep = work / "paper_main"
    _run("sim", ["-m", "experiment=paper_main", f"hydra.sweep.dir={sweep}"], work, env)
    _run("report", [str(sweep)], work, env)
    prints = _fingerprint_tree(sweep)
    # The report's run index names run folders by path; its figures' data and tables are what it reports.
    return {k: v for k, v in prints.items() if k.startswith("report/figures/") or k.startswith("report/tables/")
            or k.endswith(("jobs.csv", "summary.json"))}


def _condition_args() -> list[tuple[str, list[str]]]:
    """(name, pacml-sim overrides) of every grid condition with policy=pacml, at its first seed."""
    try:  # recorded once (the baseline at 967f795 had pacml.conditions), replayed after
        from pacml.adaptive.conditions import EVAL_SEEDS, GRID, agent_overrides
    except ModuleNotFoundError:
        from pacml.conditions import EVAL_SEEDS, GRID, agent_overrides

    return [(c.name, [*c.overrides, *agent_overrides(["policy=pacml"], c), f"seed={EVAL_SEEDS[0]}", "progress=false"])
            for c in GRID]


def part_conditions(work: Path, env: dict[str, str], recorded: dict[str, Any] | None) -> tuple[dict[str, str], Any]:
    args = recorded if recorded is not None else _condition_args()
    out: dict[str, str] = {}
    for name, overrides in args:
        run_dir = work / "conditions" / name
        _run("sim", [*overrides, f"hydra.run.dir={run_dir}"], work, env)
        out[f"{name}/jobs.csv"] = _csv_digest(run_dir / "jobs.csv")
        out[f"{name}/summary.json"] = _json_digest(run_dir / "summary.json")
    return out, args


def part_place(work: Path, env: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for objective, methods, presets in PLACE_SWEEPS:
        for graph in PLACE_GRAPHS:
            sweep = work / "place" / objective / graph / methods[-1]
            _run("place", ["-m", f"graph={graph}", f"devices={','.join(presets)}", f"method={','.join(methods)}",
                           f"objective={objective}", "gantt=false", f"hydra.sweep.dir={sweep}"], work, env)
            for rel, digest in _fingerprint_tree(sweep).items():
                if rel.endswith(("placement.json", "summary.json")):
                    out[f"{objective}/{graph}/{rel}"] = digest
    return out


TRAINERS: dict[str, tuple[str, list[str]]] = {
    "train": ("train", ["beta=C", "seed=0", "ppo.total_steps=1024", "ppo.num_envs=2", "ppo.num_steps=128",
                        "ppo.time_budget_s=100000", "ppo.warmstart_episodes=1", "ppo.warmstart_epochs=2",
                        "ppo.checkpoint_every=2", "ppo.eval_every=2", "ppo.eval_seeds=[500000]", "progress=false"]),
    "train_placer": ("train-placer", ["seed=0", "corpus.synthetic=4", "corpus.real=false", "budget.updates=4",
                                      "budget.time_s=100000", "validate_every=2", "validation_tasks=2",
                                      "checkpoint_every=2", "presets=[gpu4]", "progress=false"]),
    "train_adaptive": ("train-adaptive", ["adaptive.num_conditions=6", "adaptive.seeds_per_condition=1",
                                          "adaptive.jobs_per_episode=60", "adaptive.workers=1",
                                          "adaptive.time_budget_s=100000", "adaptive.epochs=20",
                                          "adaptive.val_every=3", "progress=false"]),
    "distill": ("distill", ["beta=D", "distill.episodes=2", "distill.workers=1",
                            "distill.critic_epochs=2", "distill.eval_seeds=[500000]", "distill.time_budget_s=100000",
                            "distill.critic_margins=[0.0,0.25]", "horizon_s=1e5", "progress=false"]),
}


def part_train(work: Path, env: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, (cmd, args) in TRAINERS.items():
        run_dir = work / "train" / name
        _run(cmd, [*args, f"hydra.run.dir={run_dir}"], work, env)
        for rel, digest in _fingerprint_tree(run_dir).items():
            out[f"{name}/{rel}"] = digest
    return out


PARTS = ("make_run", "conditions", "place", "train")


def run_parts(parts: list[str], work: Path, recorded_conditions: Any = None) -> dict[str, Any]:
    env = dict(os.environ, PYTHONHASHSEED="0", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    result: dict[str, Any] = {}
    for part in parts:
        start = time.perf_counter()
        if part == "make_run":
            result[part] = part_make_run(work, env)
        elif part == "conditions":
            result[part], result["condition_args"] = part_conditions(work, env, recorded_conditions)
        elif part == "place":
            result[part] = part_place(work, env)
        elif part == "train":
            result[part] = part_train(work, env)
        log.info("%s: %d fingerprints in %.0f s", part, len(result[part]), time.perf_counter() - start)
    return result


def compare(baseline: dict[str, Any], now: dict[str, Any], parts: list[str]) -> list[str]:
    """Every difference between the two, one line each."""
    diffs: list[str] = []
    for part in parts:
        old, new = baseline.get(part, {}), now.get(part, {})
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                diffs.append(f"{part}: {key}: {old.get(key, 'missing')} -> {new.get(key, 'missing')}")
    return diffs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("record", "compare"))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/regression/baseline.json"))
    parser.add_argument("--baseline", type=Path, default=Path("benchmarks/results/regression/baseline.json"))
    parser.add_argument("--only", default=",".join(PARTS), help=f"comma-separated parts of {PARTS}")
    parser.add_argument("--entries", choices=("console", "legacy"), default="console",
                        help="legacy: call 967f795's entry functions (recording from a worktree of it)")
    parser.add_argument("--reuse", action="store_true",
                        help="run nothing: fingerprint the outputs already in --work (from an earlier record or compare)")
    parser.add_argument("--work", type=Path, default=None, help="where the runs go (default: a temporary folder)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    global ENTRIES, REUSE, WORK_DIR
    ENTRIES, REUSE = args.entries, args.reuse
    if REUSE and args.work is None:
        parser.error("--reuse needs --work")
    parts = [p for p in args.only.split(",") if p]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {unknown}; choose from {PARTS}")
    work = args.work or Path(tempfile.mkdtemp(prefix="pacml_regression_"))
    work = work.resolve()
    # The commands resume: runs already in --work would be skipped and their old outputs
    # fingerprinted as if the code under test had made them.
    if not REUSE and work.exists() and any(work.iterdir()):
        parser.error(f"--work {work} is not empty: its runs would be resumed, not rerun "
                     "(remove it, or pass --reuse to fingerprint them on purpose)")
    work.mkdir(parents=True, exist_ok=True)
    WORK_DIR = str(work)
    if args.mode == "record":
        result = run_parts(parts, work)
        previous = json.loads(args.out.read_text()) if args.out.exists() else {}
        previous.update(result)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(previous, indent=1, sort_keys=True) + "\n")
        tmp.replace(args.out)
        log.info("recorded %s -> %s", parts, args.out)
        return 0
    baseline = json.loads(args.baseline.read_text())
    now = run_parts(parts, work, baseline.get("condition_args"))
    diffs = compare(baseline, now, parts)
    total = sum(len(baseline.get(p, {})) for p in parts)
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    if diffs:
        print(f"{len(diffs)} of {total} fingerprints differ:")
        print("\n".join(diffs))
        return 1
    print(f"identical: {total} fingerprints over {', '.join(parts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
