"""Train the paper family's `policy=pacml` from scratch, as shipped, and time it on 2 cores.

    python scripts/train_pacml.py --out outputs/train_pacml

The agent is two trained parts (conf/policy/pacml_adaptive.yaml):
- the selector ``paper_adaptive_knn``: ``pacml train-adaptive adaptive.neighbours=100``, whose
  teacher search covered conditions 0-1255 (``adaptive.num_conditions=1256``);
- the condition critic ``paper_betaD_critic``: ``pacml distill beta=D``, distilled around the
  per-beta D agent ``paper_betaD`` (``pacml train beta=D``), whose encoder it reads. Its best
  policy is its warm start, so one PPO update (``ppo.total_steps=2048``) saves the same
  ``policy.pt`` as the shipped 2-million-step run (compared byte for byte).

The selector runs alongside the PPO and then the distillation; time budgets are raised so that
each phase ends when its work is done. Writes ``training_time.json`` into ``--out`` (each command,
its run directory and wall time, and the total); ``--compare`` compares the runs with the shipped
checkpoints.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
log = logging.getLogger("train_pacml")


def _run(name: str, argv: list[str], run_dir: Path, times: dict[str, dict]) -> None:
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    log.info("%s: %s", name, " ".join(argv))
    with (run_dir.parent / f"{name}.log").open("w") as fh:
        code = subprocess.call([str(BIN / argv[0]), *argv[1:], f"hydra.run.dir={run_dir}"], stdout=fh,
                               stderr=subprocess.STDOUT, cwd=ROOT)
    took = time.monotonic() - start
    times[name] = {"command": " ".join(argv), "run_dir": str(run_dir), "wall_s": round(took, 1), "exit": code}
    log.info("%s: exit %d after %.0f s", name, code, took)
    if code:
        raise SystemExit(f"{name} failed (exit {code}); see {run_dir.parent / (name + '.log')}")


def train(out: Path) -> dict:
    """Run the three trainings (see module docstring); returns the timing record."""
    times: dict[str, dict] = {}
    start = time.monotonic()
    selector = ["pacml", "train-adaptive", "adaptive.neighbours=100", "adaptive.num_conditions=1256",
                "adaptive.time_budget_s=7200", "progress=false"]
    agent = ["pacml", "train", "beta=D", "ppo.total_steps=2048", "ppo.time_budget_s=7200", "progress=false"]
    critic = ["pacml", "distill", "beta=D", f"distill.checkpoint={out / 'paper_betaD'}", "distill.time_budget_s=null",
              "progress=false"]

    def critic_chain() -> None:
        _run("paper_betaD", agent, out / "paper_betaD", times)
        _run("paper_betaD_critic", critic, out / "paper_betaD_critic", times)

    errors: list[BaseException] = []

    def guarded(fn) -> None:  # noqa: ANN001
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - reported after both threads end
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(lambda: _run("paper_adaptive_knn", selector,
                                                                   out / "paper_adaptive_knn", times),)),
               threading.Thread(target=guarded, args=(critic_chain,))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    record = {"phases": times, "total_wall_s": round(time.monotonic() - start, 1)}
    (out / "training_time.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def _arrays(path: Path) -> dict[str, np.ndarray]:
    if path.suffix == ".npz":
        with np.load(path) as data:
            return {k: data[k] for k in data.files if k != "meta"}
    import torch

    state = torch.load(path, map_location="cpu", weights_only=False)
    flat: dict[str, np.ndarray] = {}

    def walk(prefix: str, obj: object) -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(f"{prefix}/{k}", v)
        elif hasattr(obj, "detach"):
            flat[prefix] = obj.detach().numpy()
    walk("", state)
    return flat


def compare(out: Path) -> dict[str, bool]:
    """Whether each trained file equals the shipped one (every array; metadata aside)."""
    pairs = {"paper_adaptive_knn": "adaptive.npz", "paper_betaD": "policy.pt", "paper_betaD_critic": "critic.pt"}
    result = {}
    for name, file in pairs.items():
        a, b = _arrays(out / name / file), _arrays(ROOT / "pacml" / "checkpoints" / name / file)
        same = a.keys() == b.keys() and all(np.array_equal(a[k], b[k], equal_nan=a[k].dtype.kind == "f") for k in a)
        result[name] = same
        log.info("%s: %s the shipped %s (%d arrays)", name, "equals" if same else "differs from", file, len(a))
    return result


def main() -> None:
    """Command line (see module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("outputs/train_pacml"))
    ap.add_argument("--compare", action="store_true", help="only compare a finished --out with the shipped files")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    out = args.out.resolve()
    if not args.compare:
        record = train(out)
        log.info("total %.1f min", record["total_wall_s"] / 60)
    compare(out)


if __name__ == "__main__":
    main()
