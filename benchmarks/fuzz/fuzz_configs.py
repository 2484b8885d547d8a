"""Fuzz the console commands with generated command lines (good and bad overrides).

A seeded grammar builds each line from *atoms*, one or a few overrides labelled good or bad (a
bad atom names the keys an error about it must mention; atoms touching the same keys are never
combined). Each line runs in-process through the command's entry checks (``pacml-train`` and
``pacml-place`` run whole, briefly); a sample also runs through the installed console scripts.
Rules checked on every line: no traceback; bad lines exit 2 and good ones 0; a rejection is one
stderr line ``prog: error: ...`` naming a key of a bad atom; an accepted train or place run claims
nothing it has not shown (:func:`misleading_train_claims`, :func:`misleading_place_claims`).

Usage: python benchmarks/fuzz/fuzz_configs.py [--per-command 300] [--console-sample 12] [--seed 0]
Exit status 0 when every rule holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import random
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SHIPPED_GRAPH = ROOT / "workloads" / "data" / "pipedream" / "resnet18" / "graph.txt"


@dataclass(frozen=True)
class Atom:
    """A piece of a command line.

    Attributes:
        args: Overrides or arguments, in order.
        bad: Whether the piece is clearly invalid.
        names: Words a rejection must mention (a key, option or file); any one suffices.
        touches: Config keys (or argument slots) the piece sets; pieces sharing one are not combined.
    """

    args: tuple[str, ...]
    bad: bool
    names: tuple[str, ...] = ()
    touches: frozenset[str] = field(default_factory=frozenset)


def good(*args: str, touches: str | tuple[str, ...] = ()) -> Atom:
    """A valid piece (touching the keys of its overrides unless ``touches`` says more)."""
    keys = {a.split("=", 1)[0].lstrip("+~").split(".")[0] for a in args}
    extra = (touches,) if isinstance(touches, str) else touches
    return Atom(tuple(args), False, (), frozenset(keys | set(extra)))


def bad(*args: str, names: str | tuple[str, ...] = (), touches: str | tuple[str, ...] = ()) -> Atom:
    """A clearly invalid piece; a rejection must name one of ``names`` (default: its keys)."""
    keys = [a.split("=", 1)[0].lstrip("+~") for a in args if "=" in a]
    named = (names,) if isinstance(names, str) else names
    extra = (touches,) if isinstance(touches, str) else touches
    return Atom(tuple(args), True, tuple(named or keys), frozenset({k.split(".")[0] for k in keys} | set(extra)))


def bad_values(rng: random.Random, rows: Iterable[tuple[str, str | list[str]]]) -> list[Atom]:
    """One bad piece per ``("[ARGS ...] KEY", values)`` row: the args, then ``KEY=`` one of ``values``
    (a str: that value); a rejection must name ``KEY``."""
    atoms = []
    for spec, values in rows:
        *before, key = spec.split()
        atoms.append(bad(*before, f"{key}={values if isinstance(values, str) else rng.choice(values)}", names=key))
    return atoms


# ------------------------------------------------------------------------------- grammar
def _typo(rng: random.Random, word: str, known: set[str]) -> str | None:
    """A one-edit misspelling of ``word`` that is not itself a known key."""
    for _ in range(10):
        i = rng.randrange(len(word))
        kind = rng.randrange(3)
        if kind == 0 and len(word) > 2:
            cand = word[:i] + word[i + 1:]
        elif kind == 1:
            cand = word[:i] + word[i] + word[i:]
        else:
            cand = word[:i] + rng.choice("aeiorstx") + word[i + 1:]
        if cand != word and cand not in known and "." not in cand[-1:] and cand.strip(".") == cand:
            return cand
    return None


INT_KEYS = ["seed", "workload.num_training_steps"]
FLOAT_KEYS = ["mean_interarrival_s", "sim.min_op_time_s", "workload.profile_time_unit_s"]
BOOL_KEYS = ["sim.comm_quirks", "progress"]
WRONG_INT = ["abc", "1.5", "[0]", "null", "true", "{a: 1}", "''", "1e3"]
WRONG_FLOAT = ["abc", "[1]", "null", "true", "nan", "inf", "-inf", "1e400", "{a: 1}"]
WRONG_BOOL = ["maybe", "1", "0", "yes", "null", "[true]", "'true'"]


def typo_atoms(rng: random.Random, known: Iterable[str], count: int) -> list[Atom]:
    """Bad pieces ``key=1`` where ``key`` is ``count`` known keys each with its last part misspelt
    (:func:`_typo`; a key with no such misspelling gives none)."""
    known = set(known)
    atoms = []
    for key in rng.sample(sorted(k for k in known if not k.startswith("_") and "._" not in k), count):
        typo = _typo(rng, key.rpartition(".")[2], {k.rpartition(".")[2] for k in known})
        if typo:
            full = f"{key.rpartition('.')[0]}.{typo}" if "." in key else typo
            atoms.append(bad(f"{full}=1", names=(full,)))
    return atoms


def hydra_atoms(rng: random.Random, command: str, known: set[str]) -> tuple[list[Atom], list[Atom]]:
    """Good and bad pieces of a ``pacml-sim`` / ``-train`` / ``-distill`` command line."""
    g: list[Atom] = [
        good(f"seed={rng.randrange(2**31)}"),
        good(f"horizon_s={rng.choice(['1e4', '5e4', '1e5', '1e6', '20000.0'])}"),
        good(f"mean_interarrival_s={rng.choice(['100', '500', '1000.0', '2000'])}"),
        good(f"beta={rng.choice(['A', 'B', 'C', 'D', 'uniform', 'pmf', 'fixed'])}"),
        good("beta=fixed", f"beta.value={rng.choice(['0.3', '1', '0.05'])}"),
        good("beta=uniform", "beta.low=0.2", "beta.high=0.9"),
        good(f"cluster={rng.choice(['ramp32', 'ramp64'])}"),
        good(f"sim.comm_quirks={rng.choice(['true', 'false'])}"),
        good(f"sim.placement={rng.choice(['block', 'op_first_fit'])}"),
        good(f"sim.edge_sizing={rng.choice(['paper', 'activation'])}"),
        good("sim.min_op_time_s=0.001"),
        good(f"horizon_accounting={rng.choice(['drain', 'paper'])}"),
        good("arrivals=poisson"),
        good(f"workload.num_training_steps={rng.choice([1, 10, 100])}"),
        good(f"workload.graphs={rng.choice(['resnet18', '[resnet18,vgg16]', 'paper', 'all'])}"),
        good("scenario=physical", touches=("horizon_s", "mean_interarrival_s", "sim", "workload")),
        good("max_arrivals=2000000"),
        good("progress=false"),
    ]
    b = bad_values(rng, [*((key, WRONG_INT) for key in INT_KEYS), *((key, WRONG_FLOAT) for key in FLOAT_KEYS),
                         *((key, WRONG_BOOL) for key in BOOL_KEYS), ("seed", ["-1", str(2**64), "-100"])])
    b += [
        bad(f"horizon_s={rng.choice(['-1', '0', 'abc', '[1e5]', 'null'])}", touches="arrivals"),
        *bad_values(rng, [
            ("mean_interarrival_s", ["0", "-5"]), ("horizon_accounting", ["bogus", "Drain", "1"]),
            ("sim.placement", ["first_fit", "null", "3"]), ("sim.edge_sizing", ["x", "PAPER"]),
            ("workload.num_training_steps", "0"), ("workload.weights", "[1,-1,1,1,1]"),
            ("beta=fixed beta.value", ["1.5", "0", "-0.2", "abc", "null"]),
            ("beta=uniform beta.high", ["2", "1.01", "abc"])]),
        bad("beta=uniform", "beta.low=0.9", "beta.high=0.1", names=("beta.low", "beta.high")),
        bad("beta=pmf", "beta.values=[0.5,2,1]", names="beta"),
        *bad_values(rng, [("cluster.num_racks_per_group", ["0", "-1", "1.5", "abc"]),
                          ("cluster.max_degree", ["0", "x", "null"]),
                          ("cluster.memory_capacity_bytes", ["-1", "0", "abc"])]),
        bad(f"{rng.choice(['sim', 'workload', 'cluster', 'arrivals', 'beta'])}=null",
            touches=("sim", "workload", "cluster", "arrivals", "beta")),
        bad("workload.graphs=null"),
        bad("workload.graphs=[]"),
        bad(f"{rng.choice(['seed', 'horizon_s', 'sim', 'workload.num_training_steps'])}=[1]"),
        bad(f"{rng.choice(['foo', 'horizon', 'seeds', 'beta_name'])}=1"),
        bad(f"{rng.choice(['cluster', 'sim', 'workload', 'arrivals'])}.foo=1"),
        bad(f"+{rng.choice(['foo', 'sim.foo', 'workload.bar'])}=1"),
        bad(f"{rng.choice(['policy', 'beta', 'cluster', 'scenario', 'arrivals', 'workload'])}="
            f"{rng.choice(['nope', 'para_mx', 'E', 'ramp33', 'papr', 'poison', 'al'])}"),
        bad("mean_interarrival_s=1e-3", names=("max_arrivals", "mean_interarrival_s"),
            touches=("horizon_s", "max_arrivals")),
        bad("horizon_s=1e12", names=("max_arrivals", "horizon_s"), touches=("mean_interarrival_s", "max_arrivals")),
        bad("arrivals=poisson", "arrivals.mean_interval_s=1e-6", names=("max_arrivals", "arrivals"),
            touches=("max_arrivals", "horizon_s")),
        bad(rng.choice(["seed=[", "seed='abc", "=1", "seed=${", "horizon_s=)", "seed=1=2="]), names=("seed", "horizon_s",
                                                                                              "=1")),
        bad("seed=0,1", names="seed"),
        bad(rng.choice(["--foo", "--multirun-now", "-z"]), names=("--foo", "--multirun-now", "-z"), touches="flags"),
        bad("--config-dir=/nonexistent/conf", names="config-dir", touches="flags"),
        bad("seed=${nope}", names="seed"),
        bad("~seed", names="seed"),
        bad("max_arrivals=0"),
    ]
    b += typo_atoms(rng, known, 3)
    if command == "pacml-sim":
        g += [
            good(f"policy={rng.choice(['para_max', 'para_min', 'random', 'min_feasible', 'sequential', 'fixed'])}"),
            good("policy=fixed", f"policy.degree={rng.choice([1, 2, 4, 8, 16])}"),
            good("policy=random", "policy.seed=3"),
            good("policy._target_=simulator.policies.heuristics.ParaMin"),
            good("skip_finished=false"),
            good(f"out_dir={tempfile.gettempdir()}/pacml-fuzz-out"),
        ]
        b += [
            *bad_values(rng, [("policy=fixed policy.degree", ["3", "-1", "1.5", "abc", "[4]"]),
                              ("policy._target_", ["nope.Missing", "simulator.policies.heuristics.Nope", "123"])]),
            bad(f"policy.max_degree={rng.choice(['abc', 'null', '1.5'])}", touches="policy"),
            bad("policy.mask=bogus", touches="policy"),
            bad("policy=null", names="policy"),
            bad("skip_finished=maybe"),
            bad("out_dir=''"),
        ]
    elif command == "pacml-train":
        g += train_atoms_good(rng)
        b += train_atoms_bad(rng)
    else:
        g += [
            good("distill.episodes=4"), good("distill.margin_jobs=0.5"),
            good("distill.critic_margins=[0.0,0.2]"), good("distill.time_budget_s=60"),
        ]
        b += bad_values(rng, [("distill.episodes", ["0", "-1", "abc"]), ("distill.critic_margins", "[-1]"),
                              ("distill.eval_seeds", "[]"), ("distill.episods", "3"), ("distill", "null"),
                              ("distill.workers", "0")])
    return g, b


#: Settings every ``pacml-train`` line gets unless one of its pieces sets the key (or a key above or
#: below it): two short updates on 31-arrival episodes, a two-candidate warm start, one validation,
#: so a line that passes the checks trains, validates and saves in a few seconds.
TRAIN_BASE = {"ppo.total_steps": "64", "ppo.num_envs": "2", "ppo.num_steps": "16", "ppo.num_minibatches": "2",
              "ppo.update_epochs": "1", "ppo.hidden_channels": "16", "ppo.num_layers": "2", "ppo.eval_every": "2",
              "ppo.checkpoint_every": "1", "ppo.eval_seeds": "[7]", "ppo.warmstart_candidates": "[1,16]",
              "ppo.warmstart_episodes": "1", "ppo.warmstart_epochs": "2", "ppo.time_budget_s": "12",
              "ppo.condition_jobs": "40", "ppo.val_conditions": "1", "horizon_s": "3e4", "progress": "false"}
#: A physical-scenario line's episode length instead (its arrivals come every second).
TRAIN_PHYSICAL_HORIZON_S = "40"
#: Run directory of the ``pacml-train`` run that resume pieces continue (written by :func:`main`).
TRAIN_RUN = "train_run"
#: What a resume piece shares with every other piece that would change the run's settings (a resumed
#: run keeps them; changing one is a rejection, covered by the bad resume pieces).
RESUME_TOUCHES = ("seed", "horizon_s", "mean_interarrival_s", "beta", "cluster", "sim", "horizon_accounting",
                  "arrivals", "workload", "scenario", "max_arrivals", "progress", "ppo", "reward", "policy",
                  "out_dir", "skip_finished", "resume", "flags")


def train_atoms_good(rng: random.Random) -> list[Atom]:
    """Valid pieces of a ``pacml-train`` command line (besides the simulator's)."""
    return [
        good(f"ppo.total_steps={rng.choice([32, 96])}"), good(f"ppo.gamma={rng.choice(['0.99', '0.9', '1.0'])}"),
        good("ppo.warmstart=null"), good(f"ppo.mask={rng.choice(['paper', 'feasible', 'placeable'])}"),
        good("ppo.eval_seeds=[1,2]"), good("reward.success=2.0"), good("reward.failure=-0.5"),
        good("ppo.time_budget_s=null"), good(f"ppo.time_budget_s={rng.choice(['3', '6'])}"),
        good(f"ppo.learning_rate={rng.choice(['1e-4', '3e-3'])}"), good("ppo.anneal_lr=false"),
        good(f"ppo.gae_lambda={rng.choice(['0.9', '1.0'])}"), good(f"ppo.clip_coef={rng.choice(['0.1', '0.3'])}"),
        good("ppo.clip_vloss=false"), good(f"ppo.ent_coef={rng.choice(['0', '0.01'])}"),
        good(f"ppo.target_kl={rng.choice(['null', '0.02'])}"), good(f"ppo.placement_candidates={rng.choice([0, 2])}"),
        good(f"ppo.warmstart_budget_frac={rng.choice(['0.2', '1'])}"), good(f"ppo.eval_every={rng.choice([1, 3])}"),
        good(f"ppo.seed={rng.choice([0, 5])}"), good("ppo.random_conditions=true", "cluster=ramp32"),
        good(f"resume={{tmp}}/{TRAIN_RUN}", "ppo.total_steps=96", touches=RESUME_TOUCHES),
        good("progress=true"),
    ]


def train_atoms_bad(rng: random.Random) -> list[Atom]:
    """Clearly invalid pieces of a ``pacml-train`` command line (besides the simulator's)."""
    return [
        *bad_values(rng, [
            ("ppo.gamma", ["2", "-0.1", "abc"]), ("ppo.num_envs", ["0", "1.5", "x"]),
            ("ppo.learning_rate", ["-1", "0", "fast"]), ("ppo.warmstart", ["maybe", "1", "true"]),
            ("ppo.foo", "1"), ("ppo", "null"), ("reward.success", "abc"), ("reward._target_", "nope.X"),
            ("resume", "''"), ("ppo.eval_seeds", "[]"), ("ppo.mask", ["all", "null"]), ("ppo.time_budget_s", "-5"),
            ("ppo.anneal_lr", "sometimes"), ("ppo.warmstart_budget_frac", ["0", "1.5", "-1", "half"]),
            ("ppo.warmstart_candidates", ["[]", "[0]", "[-2]", "abc"]), ("ppo.num_minibatches", ["0", "-1"]),
            ("ppo.total_steps", ["0", "-64", "1.5"]), ("ppo.placement_candidates", ["-1", "x"]),
            ("ppo.torch_threads", ["0", "x"]), ("ppo.val_conditions", ["0", "-1"]), ("ppo.target_kl", ["0", "-0.1"]),
            ("ppo.random_conditions=true cluster", "ramp32_hetero"), ("policy", ["pacml", "para_max"])]),
        bad(f"policy.block_search={rng.choice(['-1', '8'])}", names="policy"),
        *bad_values(rng, [("out_dir", "/tmp/x"), ("skip_finished", "false"), ("resume", "/nonexistent/run")]),
        bad(f"resume={{tmp}}/{TRAIN_RUN}", f"{rng.choice(['ppo.gamma=0.5', 'beta=D', 'ppo.hidden_channels=32'])}",
            names=("ppo.gamma", "beta", "ppo.hidden_channels"), touches=RESUME_TOUCHES),
    ]


def with_train_base(args: list[str], tmp: Path) -> list[str]:
    """``args`` plus the :data:`TRAIN_BASE` settings none of its keys is, lies under or above."""
    args = [a.replace("{tmp}", str(tmp)) for a in args]
    keys = [a.split("=", 1)[0].lstrip("+~") for a in args if "=" in a or a.startswith("~")]

    def free(key: str) -> bool:
        return not any(k == key or key.startswith(k + ".") or k.startswith(key + ".") for k in keys)

    base = dict(TRAIN_BASE)
    if "scenario=physical" in args:
        base["horizon_s"] = TRAIN_PHYSICAL_HORIZON_S
    flags = [a for a in args if a.startswith("-")]
    return flags + [a for a in args if not a.startswith("-")] + [f"{k}={v}" for k, v in base.items() if free(k)]


def short_run(command: Any, train_from_config: Callable[..., Any], base: dict[str, str], run: Path) -> None:
    """A short run of a trainer with the ``base`` settings, for the resume pieces to continue."""
    from simulator.cli import preflight

    cfg = preflight(command, [f"{k}={v}" for k, v in base.items()])
    assert cfg is not None
    train_from_config(cfg, run)


def misleading_train_claims(run: Path, stderr: str) -> list[str]:
    """What a finished ``pacml-train`` run claims that it has not shown: a summary whose comparison
    with the warm start does not follow from its numbers (or a worse run that does not say so), an
    unvalidated policy with a validation figure, or a progress bar with ``val=inf`` or a total the
    run never reached when the time budget stopped it."""
    path = run / "train_summary.json"
    if not path.is_file():
        return [f"no train_summary.json in {run}"]
    s = json.loads(path.read_text())
    out = []
    best, rule = s.get("best_val_blocking_rate"), s.get("teacher_val_blocking_rate")
    if best is not None and not 0 <= best <= 1:
        out.append(f"best_val_blocking_rate {best}")
    expected = None if best is None or rule is None else best > rule
    if s.get("worse_than_teacher") is not expected:
        out.append(f"worse_than_teacher {s.get('worse_than_teacher')} with validation {best} and rule {rule}")
    if "val=inf" in stderr:
        out.append("progress bar shows val=inf")
    bars = [ln for ln in stderr.replace("\r", "\n").splitlines() if ln.startswith("pacml-train:") and "step" in ln]
    if bars and s.get("stopped_by") == "time_budget" and f"{s['global_step']}/{s['global_step']} " not in bars[-1]:
        out.append(f"progress bar ends at {bars[-1].strip()[:80]!r}, the run at step {s['global_step']}")
    return out


def train_entry() -> Callable[[list[str]], None]:
    """``pacml-train`` in process: its own checks, preflight, then the short run itself
    (:data:`TRAIN_BASE`) into a scratch directory, removed afterwards."""
    import itertools
    import shutil

    from pacml.agent.train import COMMAND, PROG, refuse_sim_only_keys, train_from_config
    from simulator.cli import preflight, report_user_errors

    root = Path(tempfile.gettempdir()) / "pacml-fuzz-train-out"
    count = itertools.count()

    def body(argv: list[str]) -> None:
        refuse_sim_only_keys(argv)
        cfg = preflight(COMMAND, argv)
        if cfg is None:
            return
        out = root / str(next(count))
        resumed = next((a.split("=", 1)[1] for a in argv if a.startswith("resume=")), None)
        run = Path(resumed) if resumed else out
        if resumed and run.is_dir():  # a copy: every resume line continues the same short run
            run = out / "resumed"
            shutil.copytree(resumed, run)
            argv = [f"resume={run}" if a.startswith("resume=") else a for a in argv]
            cfg.resume = str(run)
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                report_user_errors(PROG, lambda: train_from_config(COMMAND.validate(cfg, argv), out, argv))
        except SystemExit:
            sys.stderr.write(err.getvalue())
            raise
        finally:
            claims = misleading_train_claims(run, err.getvalue()) if run.exists() else [f"no run at {run}"]
            shutil.rmtree(out, ignore_errors=True)
        for claim in claims:
            print(f"{MISLEADING} {claim}", file=sys.stderr)

    return body


def graph_atoms(rng: random.Random, tmp: Path, n: int) -> tuple[list[Atom], list[Atom]]:
    """Good and bad ``pacml-graph`` command lines (each atom is a whole command line)."""
    notgraph = tmp / "notes.txt"
    g = [
        good("validate", str(SHIPPED_GRAPH), touches="cmd"),
        good("info", rng.choice(["resnet18", "paper", "vgg16"]), touches="cmd"),
        good("info", "resnet18", "squeezenet1_0", touches="cmd"),
        good("convert", "resnet18", str(tmp / f"out_{n}.json"), touches="cmd"),
        good("--time-unit-s", rng.choice(["1e-3", "1", "0.5"]), "info", "resnet18", touches="cmd"),
        good("validate", str(SHIPPED_GRAPH.parent), touches="cmd"),
    ]
    b = [
        bad("--time-unit-s", rng.choice(["abc", "nan", "inf", "-1", "0", "1e400", ""]), "info", "resnet18",
            names="--time-unit-s", touches="cmd"),
        bad("validate", names="paths", touches="cmd"),
        bad("info", rng.choice(["nope", "resnet19", "pap"]), names=("nope", "resnet19", "pap"), touches="cmd"),
        bad("validate", "/nonexistent/graph.json", names="/nonexistent/graph.json", touches="cmd"),
        bad("convert", "resnet18", names="dst", touches="cmd"),
        bad("convert", "nope", str(tmp / "x.json"), names="nope", touches="cmd"),
        bad("convert", "resnet18", str(notgraph / "x.json"), names=str(notgraph / "x.json"), touches="cmd"),
        bad(rng.choice(["frob", "valdate", "inf"]), names=("frob", "valdate", "inf"), touches="cmd"),
        bad(rng.choice(["--foo", "-x"]), "info", "resnet18", names=("--foo", "-x"), touches="cmd"),
        bad(names="command", touches="cmd"),
        bad("validate", str(notgraph), names=str(notgraph), touches="cmd"),
        bad("info", "resnet18", "--time-unit-s", names="--time-unit-s", touches="cmd"),
    ]
    return g, b


def report_atoms(rng: random.Random, tmp: Path, sweep: Path, n: int) -> tuple[list[Atom], list[Atom]]:
    """Good and bad ``pacml-report`` command lines."""
    afile = tmp / "afile.txt"
    empty = tmp / "empty"
    g = [good(str(sweep), "--out", str(tmp / f"report_{n % 3}"), touches="cmd")]
    b = [
        bad("/nonexistent/sweep", names="/nonexistent/sweep", touches="cmd"),
        bad(str(afile), names=str(afile), touches="cmd"),
        bad(str(empty), names=str(empty), touches="cmd"),
        bad(names="sweep_dir", touches="cmd"),
        bad(str(sweep), "--out", str(afile), names=("--out", str(afile)), touches="cmd"),
        bad(str(sweep), rng.choice(["--foo", "--out", "-x"]), names=("--foo", "--out", "-x"), touches="cmd"),
        bad(str(sweep), str(sweep), names=("unrecognized",), touches="cmd"),
        bad("--out", names=("--out",), touches="cmd"),
    ]
    return g, b


PLACE_GRAPHS = ["resnet18", "resnet50", "vgg16", "alexnet", "squeezenet1_0", "gnmt", "bert24_training",
                "bert24_inference", "bert_l-3_inference", "inceptionv3_inference"]
DNN_GRAPHS = ["bert24_training", "bert24_inference", "bert_l-3_inference", "inceptionv3_inference"]


def place_files(tmp: Path) -> dict[str, Path]:
    """Placement files for ``method=file``: one sound for resnet18 on gpu4, and broken ones."""
    from workloads.loaders import load_compute_graph

    graph = load_compute_graph("resnet18")
    good_map = {name: f"gpu{graph.group[i] % 4}" for i, name in enumerate(graph.node_names)}
    split = dict(good_map)
    mirror = graph.node_names[graph.group_members[0][-1]]
    split[mirror] = "gpu1" if good_map[mirror] != "gpu1" else "gpu2"
    docs: dict[str, Any] = {
        "placement_ok.json": {"placement": good_map},
        "placement_missing_op.json": {**good_map, "no_such_op": "gpu0"},
        "placement_missing_device.json": {**good_map, graph.node_names[0]: "tpu9"},
        "placement_incomplete.json": dict(list(good_map.items())[1:]),
        "placement_split.json": split,
        "placement_list.json": [1, 2, 3],
    }
    out = {}
    for name, doc in docs.items():
        out[name] = tmp / name
        out[name].write_text(json.dumps(doc, indent=1) + "\n")
    out["placement_garbled.json"] = tmp / "placement_garbled.json"
    out["placement_garbled.json"].write_text('{"node1": "gpu0",\n')
    # Graph folders, as pacml-sim's workload.graphs reads them: one PipeDream model, two, none.
    for folder, models in (("graph_dir_one", ["resnet18"]), ("graph_dir_two", ["resnet18", "alexnet"]),
                           ("graph_dir_empty", [])):
        (tmp / folder).mkdir(exist_ok=True)
        for model in models:
            (tmp / folder / model).mkdir(exist_ok=True)
            (tmp / folder / model / "graph.txt").write_text(SHIPPED_GRAPH.parent.with_name(model).joinpath(
                "graph.txt").read_text())
    return out


def place_atoms(rng: random.Random, tmp: Path, known: frozenset[str]) -> tuple[list[Atom], list[Atom]]:
    """Good and bad pieces of a ``pacml-place`` command line."""
    files = {p.name: p for p in tmp.glob("placement_*.json")}
    ok = files["placement_ok.json"]
    g = [
        good(f"seed={rng.randrange(2**31)}"),
        good(f"graph={rng.choice(PLACE_GRAPHS)}"),
        good(f"devices={rng.choice(['gpu4', 'gpu8', 'hetero', 'cpu_gpu', 'auto', 'ramp_block'])}"),
        good("devices=ramp_block", f"devices.servers={rng.choice([1, 2, 4, 8, 16])}"),
        good("devices=ramp_block", f"devices.cluster={rng.choice(['ramp32', 'ramp64'])}", "devices.servers=2"),
        good(f"graph={rng.choice(DNN_GRAPHS)}", "devices=file"),
        good(f"objective={rng.choice(['step', 'latency', 'pipeline'])}"),
        good(f"method={rng.choice(['single', 'round_robin', 'random'])}"),
        good("graph=resnet18", "devices=gpu4", "method=file", f"method.path={ok}"),
        good(f"gantt={rng.choice(['true', 'false'])}"),
        good("devices=gpu4", "devices.links.bandwidth_Bps=1e9"),
        good("devices=hetero", "devices.groups.0.memory_bytes=1e6"),  # infeasible for one device: a result
        good(f"graph={tmp / 'graph_dir_one'}"),
        good(f"graph={tmp / 'graph_dir_one' / 'resnet18'}"),
        good(f"graph={SHIPPED_GRAPH.parent}"),
        good(f"method={rng.choice(['heft', 'm_etf', 'm_sct', 'm_topo', 'pipedream', 'metis', 'expert'])}"),
        good("method=heft", "method.insertion=false"),
        good("method=metis", f"method.balance={rng.choice(['speed', 'equal'])}", "method.parts=null"),
        good("method=local_search", f"method.max_evaluations={rng.choice([50, 300])}",
             f"method.restarts={rng.choice([1, 3])}", f"method.move_rule={rng.choice(['best', 'first'])}",
             f"method.respect_memory={rng.choice(['true', 'false'])}"),
        good("method=anneal", f"method.max_evaluations={rng.choice([50, 300])}",
             f"method.swap_probability={rng.choice(['0', '0.5', '1'])}"),
        good(f"graph={rng.choice(['bert24_inference', 'bert24_training', 'bert_l-3_inference'])}", "devices=auto",
             "objective=pipeline", "method=dp"),
        good("graph=bert24_inference", "devices=auto", "objective=pipeline", "method=mip", "method.time_limit_s=2",
             f"method.warm_start={rng.choice(['null', 'single', 'local_search'])}"),
        good(f"graph={rng.choice(['resnet50', 'bert24_training'])}", "method=coarse",
             f"method.inner={rng.choice(['heft', 'm_etf', 'round_robin'])}", f"method.max_groups={rng.choice([8, 32])}"),
        good("graph=bert24_training", "devices=auto", "objective=pipeline", "method=coarse", "method.inner=dp",
             "method.max_groups=16"),
        good("method=expert", "method.shipped=false"),
        good("method=learned", f"method.mode={rng.choice(['greedy', 'sample'])}", "method.samples=4"),
    ]
    b = [
        *bad_values(rng, [("seed", WRONG_INT + ["-1", str(2**64)])]),
        bad(f"graph={rng.choice(['nope', 'resnet19', '/nonexistent/g.json', '[resnet18]', 'null', '1'])}",
            names=("graph", "nope", "resnet19", "/nonexistent/g.json")),
        *(bad(f"graph={path}", names=(str(path),)) for path in
          (tmp / "notes.txt", files["placement_garbled.json"], files["placement_ok.json"])),
        *bad_values(rng, [
            ("graph", "''"), ("devices", ["nope", "gpu5", "heter", "file_", "ramp"]),
            ("method", ["nope", "singel", "dp_", "rand"]), ("objective", ["nope", "null", "Step", "throughput", "1"])]),
        bad(f"graph={rng.choice(['resnet18', 'vgg16'])}", "devices=file", names="devices"),
        *bad_values(rng, [
            ("devices=ramp_block devices.servers", ["5", "0", "abc", "1000", "null"]),
            ("devices=ramp_block devices.cluster", ["nope", "null", "ramp"]),
            ("devices=gpu4 devices.groups", ["[]", "[{kind: gpu, count: 0}]", "null"]),
            ("devices=gpu4 devices.links.bandwidth_Bps", ["-1", "0", "abc"])]),
        bad("devices=gpu4", "devices.groups.0.speed=0", names="devices.groups[0].speed"),
        bad("method=file", names="method.path"),
        bad("method=file", "method.path=/nonexistent/p.json", names="method.path"),
        bad("graph=resnet18", "devices=gpu4", "method=file",
            f"method.path={files[rng.choice(sorted(set(files) - {'placement_ok.json'}))]}",
            names=tuple(str(p) for p in files.values())),
        bad("graph=resnet18", "devices=gpu4", "devices.groups=[{kind: gpu, count: 4, memory_bytes: 1e6}]",
            "method=file", f"method.path={ok}", names=(str(ok),)),
        bad(f"method.time_limit_s={rng.choice(['0', '-1'])}", names="method.time_limit_s", touches="method"),
        *bad_values(rng, [("method._target_", ["nope.Missing", "simulator.place.placer.Nope", "123"]),
                          ("method", "null"), ("gantt", WRONG_BOOL), ("skip_finished", WRONG_BOOL)]),
        bad(f"{rng.choice(['foo', 'graphs', 'objectives', 'seeds'])}=1"),
        bad(f"+{rng.choice(['foo', 'devices.foo', 'method.bar'])}=1",
            names=("foo", "devices.foo", "method.bar", "method")),
        bad(rng.choice(["seed=[", "graph='abc", "=1", "seed=${", "graph=)"]), names=("seed", "graph", "=1")),
        bad("seed=0,1", names="seed"),
        bad("~seed", names="seed"),
        bad("~graph", names="graph"),
        bad(rng.choice(["--foo", "-z"]), names=("--foo", "-z"), touches="flags"),
        bad("--config-dir=/nonexistent/conf", names="config-dir", touches="flags"),
        # Exact methods refuse objectives they do not optimise (no "optimal" for an unproven claim).
        bad(f"objective={rng.choice(['step', 'latency'])}", rng.choice(["method=dp", "method=mip"]),
            names="objective"),
        bad(f"objective={rng.choice(['step', 'latency'])}", "method=coarse", "method.inner=dp", names="objective"),
        bad(f"graph={tmp / 'graph_dir_two'}", names="graph"),
        bad(f"graph={tmp / 'graph_dir_empty'}", names=(str(tmp / "graph_dir_empty"),)),
        *bad_values(rng, [
            ("method=local_search method.restarts", ["0", "-1", "abc", "1.5", "null"]),
            ("method=local_search method.max_evaluations", ["0", "-3", "abc"]),
            ("method=local_search method.move_rule", ["worst", "null", "1"]),
            ("method=local_search method.respect_memory", ["yes", "1", "null"]),
            ("method=anneal method.max_evaluations", ["0", "-1", "abc"]),
            ("method=anneal method.initial_temperature", ["0", "-1", "inf", "abc"]),
            ("method=anneal method.final_temperature", "1.0"),
            ("method=anneal method.swap_probability", ["1.5", "-0.1", "nan"]),
            ("objective=pipeline method=dp method.max_states", ["0", "-1", "abc", "1.5"]),
            ("objective=pipeline method=dp method.fallback", ["nope", "3", "singel"]),
            ("objective=pipeline method=dp devices", "hetero"),
            ("objective=pipeline method=mip method.mip_gap", ["2", "-0.1", "abc"]),
            ("objective=pipeline method=mip method.warm_start", ["nope", "heft", "1.5"]),
            ("objective=pipeline method=mip method.threads", ["0", "abc"]),
            ("method=coarse method.inner", ["nope", "coarse_", "null"]),
            ("method=coarse method.max_groups", ["0", "-1", "abc"]),
            ("method=coarse method.method", ["x", "null"])]),
        bad("method=coarse", "+method.inner_args.insertion=maybe", names=("method.inner_args.insertion",)),
        *bad_values(rng, [("method=heft method.insertion", ["maybe", "1", "null"])]),
        bad(rng.choice(["method=m_etf", "method=m_sct", "method=m_topo", "method=pipedream"]),
            f"method.use_cpu={rng.choice(['maybe', '2'])}", names="method.use_cpu"),
        *bad_values(rng, [("method=metis method.parts", ["0", "-2", "abc"]),
                          ("method=metis method.balance", ["x", "null"]),
                          ("method=metis method.edge_weight", ["x", "bytes"])]),
        bad("method=expert", "method.path=/nonexistent/split.json", names=("method.path", "/nonexistent/split.json")),
        *bad_values(rng, [("method=expert method.shipped", ["maybe", "0"]),
                          ("method=learned method.mode", ["x", "Greedy", "null"])]),
        bad("method=learned", "method.checkpoint=/nonexistent/placer.pt",
            names=("method.checkpoint", "/nonexistent/placer.pt")),
        *bad_values(rng, [("method=learned method.samples", ["0", "-1", "abc"]),
                          ("method=learned method.temperature", ["0", "-1", "abc"])]),
    ]
    b += typo_atoms(rng, known, 2)
    return g, b


#: Settings every ``pacml-train-placer`` line gets unless one of its pieces sets the key: one short
#: update on small graphs, so a line that passes the checks trains, validates and saves once.
PLACER_BASE = {"budget.updates": "1", "budget.time_s": "300", "validation_tasks": "1", "validate_every": "1",
               "checkpoint_every": "1", "corpus.synthetic": "2", "corpus.max_nodes": "300", "progress": "false"}
#: Keys a resumed run may not change (pacml/placer/cli.py's RESUME_OVERRIDABLE are the others).
PLACER_FIXED_ON_RESUME = ("seed", "corpus", "presets", "objectives", "net", "ppo", "validate_every",
                          "validation_tasks", "checkpoint_every")


def train_placer_atoms(rng: random.Random, tmp: Path, known: frozenset[str]) -> tuple[list[Atom], list[Atom]]:
    """Good and bad pieces of a ``pacml-train-placer`` command line."""
    from pacml.placer.checkpoint import SHIPPED_DIR

    run = tmp / "placer_run"
    g = [
        good(f"seed={rng.randrange(2**31)}"), good("torch_threads=1"),
        good(f"corpus.synthetic={rng.choice([0, 1, 3])}"), good("corpus.seed=7"),
        good(f"corpus.max_nodes={rng.choice([100, 300])}"), good(f"corpus.real={rng.choice(['true', 'false'])}"),
        good(f"presets={rng.choice(['[gpu4]', '[cpu_gpu,gpu4]', '[hetero]', '[gpu8]', '[blocks:ramp32]'])}"),
        good("presets=[file,gpu4]", "corpus.real=true"),
        good(f"objectives={rng.choice(['[step]', '[latency]', '[pipeline]', '[step,pipeline]'])}"),
        good(f"net.hidden={rng.choice([16, 32])}"), good(f"net.layers={rng.choice([0, 1])}"),
        good("net.use_edges=false"), good("net.insertion=true"), good("net.cost_outputs=false"),
        good(f"net.order={rng.choice(['rank', 'full_rank', 'first'])}"), good("net.prior=0"),
        good("net.decoder=oneshot", "net.heads=2", "presets=[gpu4,cpu_gpu]"),
        good("net.decoder=oneshot", "net.max_devices=8", "presets=[gpu8]"),
        good("ppo.batch=4"), good(f"ppo.tasks_per_update={rng.choice([1, 2])}"), good("ppo.epochs=1"),
        good("ppo.clip=0.1"), good("ppo.learning_rate=1e-3"), good("ppo.ent_coef=0"), good("ppo.max_grad_norm=0.5"),
        good("ppo.infeasible_reward=-1"),
        good("validate_every=2"), good("checkpoint_every=2"), good("validation_tasks=2"),
        good("budget.updates=2", "budget.time_s=120"),
        good(f"resume={run}", "budget.updates=2", touches=PLACER_FIXED_ON_RESUME),
        good(f"resume={run / 'checkpoint.pt'}", touches=PLACER_FIXED_ON_RESUME),
    ]
    b = [
        *bad_values(rng, [
            ("seed", WRONG_INT + ["-1", str(2**64)]), ("torch_threads", ["0", "-1", "abc", "1.5"]),
            ("corpus.synthetic", ["-1", "abc", "1.5", "null"]), ("corpus.max_nodes", ["10", "0", "abc"]),
            ("corpus.real", WRONG_BOOL), ("corpus.seed", ["-1", "abc"]),
            ("presets", ["[]", "[nope]", "[auto]", "[ramp_block]", "[blocks:nope]", "gpu4", "null", "[gpu44]"])]),
        bad("presets=[file]", "corpus.real=false", names="presets"),
        *bad_values(rng, [
            ("objectives", ["[]", "[throughput]", "[Step]", "step", "null", "[step,nope]"]),
            ("net.hidden", ["0", "-4", "abc", "1.5"]), ("net.layers", ["-1", "abc"]),
            ("net.order", ["nope", "Rank", "null"]), ("net.decoder", ["x", "null", "OneShot"]),
            ("net.heads", ["0", "abc"]), ("net.max_devices", ["0", "-1", "abc"]), ("net.use_edges", WRONG_BOOL),
            ("net.prior", ["nan", "inf", "abc"])]),
        bad("net.decoder=oneshot", "net.hidden=30", names="net.heads"),
        bad("net.decoder=oneshot", f"net.max_devices={rng.choice([2, 4])}", "presets=[gpu4,hetero]",
            names="net.max_devices"),
        bad("net.decoder=oneshot", "presets=[blocks:ramp512]", names="net.max_devices"),
        *bad_values(rng, [
            ("ppo.batch", ["1", "0", "abc"]), ("ppo.tasks_per_update", ["0", "abc"]), ("ppo.epochs", ["0", "-1"]),
            ("ppo.clip", ["0", "-0.2", "abc"]), ("ppo.learning_rate", ["0", "-1", "fast", "nan"]),
            ("ppo.ent_coef", ["-0.1", "abc"]), ("ppo.max_grad_norm", ["0", "-1"]),
            ("ppo.infeasible_reward", ["1", "abc", "inf"]), ("budget.time_s", ["0", "-5", "abc", "nan"]),
            ("budget.updates", ["0", "-1", "abc"]), ("validate_every", ["0", "abc"]),
            ("validation_tasks", ["0", "-1"]), ("checkpoint_every", ["0", "abc", "1.5"]), ("progress", WRONG_BOOL)]),
        bad(f"{rng.choice(['corpus', 'net', 'ppo', 'budget'])}.foo=1"),
        bad(f"{rng.choice(['corpus', 'net', 'ppo', 'budget'])}=null"),
        *bad_values(rng, [("resume", str(path)) for path in ("/nonexistent/run", tmp / "notes.txt", run / "placer.pt",
                                                             SHIPPED_DIR / "placer_step", "''")]),
        bad(f"resume={run}", f"{rng.choice(['net.hidden=32', 'seed=5', 'ppo.batch=4', 'presets=[gpu4]'])}",
            names=("net.hidden", "seed", "ppo.batch", "presets"), touches=PLACER_FIXED_ON_RESUME),
        bad(f"{rng.choice(['foo', 'preset', 'objective', 'seeds'])}=1"),
        bad(f"+{rng.choice(['foo', 'net.foo', 'ppo.bar'])}=1", names=("foo", "net.foo", "ppo.bar")),
        bad(rng.choice(["seed=[", "seed='abc", "=1", "seed=${", "presets=)"]), names=("seed", "presets", "=1")),
        bad("seed=0,1", names="seed"),
        bad("~seed", names="seed"),
        bad(rng.choice(["--foo", "-z"]), names=("--foo", "-z"), touches="flags"),
    ]
    b += typo_atoms(rng, known, 2)
    return g, b


def with_placer_base(args: list[str], atoms: list[Atom]) -> list[str]:
    """``args`` plus the :data:`PLACER_BASE` settings no piece touches (options stay first)."""
    touched = {t for atom in atoms for t in atom.touches}
    extra = [f"{k}={v}" for k, v in PLACER_BASE.items() if k.split(".")[0] not in touched]
    flags = [a for a in args if a.startswith("-")]
    return flags + [a for a in args if not a.startswith("-")] + extra


def command_line(rng: random.Random, goods: list[Atom], bads: list[Atom], p_bad: float,
                 max_atoms: int = 3) -> tuple[list[str], list[Atom]]:
    """1..max_atoms pieces, at most one of them bad, never two touching the same key."""
    chosen: list[Atom] = []
    if rng.random() < p_bad:
        chosen.append(rng.choice(bads))
    for _ in range(rng.randint(0 if chosen else 1, max_atoms - len(chosen))):
        atom = rng.choice(goods)
        if all(not (atom.touches & c.touches) for c in chosen):
            chosen.append(atom)
    rng.shuffle(chosen)
    chosen.sort(key=lambda atom: "flags" not in atom.touches)  # options before overrides, as argparse needs
    args = [a for atom in chosen for a in atom.args]
    return args, chosen


# ------------------------------------------------------------------------------- running
@dataclass
class Outcome:
    """What one command line did."""

    code: int
    stderr: str
    traceback: str = ""


def run_inprocess(call: Callable[[], Any]) -> Outcome:
    """Run ``call`` capturing stdout/stderr and ``SystemExit``; an escaping exception is a traceback."""
    err, out = io.StringIO(), io.StringIO()
    code, tb = 0, ""
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            call()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 - exactly what the fuzzer counts
            tb = traceback.format_exc()
            code = 1
    return Outcome(code, err.getvalue(), tb)


def hydra_entry(command: str) -> Callable[[list[str]], None]:
    """The in-process body of a Hydra command: its preflight, then building what runs first."""
    from simulator.build import build_policy, build_simulation
    from simulator.cli import preflight, report_user_errors

    if command == "pacml-place":
        return place_entry()
    if command == "pacml-train-placer":
        return train_placer_entry()
    if command == "pacml-train":
        return train_entry()
    if command == "pacml-sim":
        from simulator.run import COMMAND as cmd
    else:
        from pacml.critic.distill import command as make
        cmd = make()

    def body(argv: list[str]) -> None:
        cfg = preflight(cmd, argv)
        if cfg is None:
            return

        def build() -> None:
            build_simulation(cfg)
            if command == "pacml-sim":
                build_policy(cfg)

        report_user_errors(cmd.prog, build)

    return body


def place_entry() -> Callable[[list[str]], None]:
    """``pacml-place`` in process: preflight, then the whole run (no chart) into a scratch directory."""
    from simulator.cli import preflight, report_user_errors
    from simulator.place.cli import COMMAND, run_place

    out = Path(tempfile.gettempdir()) / "pacml-fuzz-place-out"  # one fixed place, as pacml-sim's out_dir atom

    def body(argv: list[str]) -> None:
        cfg = preflight(COMMAND, argv)
        if cfg is None:
            return
        cfg.gantt = False
        done: dict[str, Any] = {}
        report_user_errors(COMMAND.prog, lambda: done.update(summary=run_place(cfg, out, {})))
        for claim in misleading_place_claims(done.get("summary")):
            print(f"{MISLEADING} {claim}", file=sys.stderr)

    return body


def train_placer_entry() -> Callable[[list[str]], None]:
    """``pacml-train-placer`` in process: preflight, then the run itself (one short update with
    :data:`PLACER_BASE`) into a scratch directory, removed afterwards."""
    import itertools
    import shutil

    from pacml.placer.cli import COMMAND, PROG, train_from_config
    from simulator.cli import preflight, report_user_errors

    root = Path(tempfile.gettempdir()) / "pacml-fuzz-train-placer-out"
    count = itertools.count()

    def body(argv: list[str]) -> None:
        cfg = preflight(COMMAND, argv)
        if cfg is None:
            return
        out = root / str(next(count))
        try:
            report_user_errors(PROG, lambda: train_from_config(COMMAND.validate(cfg, argv), out, argv))
        finally:
            shutil.rmtree(out, ignore_errors=True)

    return body


#: Marks a line of stderr that reports a misleading result of an accepted command line.
MISLEADING = "MISLEADING:"


def _values_of(node: Any, key: str) -> list[Any]:
    """Every value of ``key`` anywhere in a JSON-like tree."""
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == key] + [x for v in node.values() for x in _values_of(v, key)]
    if isinstance(node, list):
        return [x for v in node for x in _values_of(v, key)]
    return []


def misleading_place_claims(summary: Any) -> list[str]:
    """What a ``pacml-place`` summary claims that it has not shown: an optimum of anything but a
    proven pipeline split, a solver's "Optimal" with a gap, a search ending worse than one device,
    a feasible flag on an infinite value."""
    if not isinstance(summary, dict):
        return []
    out = []
    info = summary.get("info") or {}
    method = str(summary.get("method_class", ""))
    if any(v is True for v in _values_of(summary, "optimal")) and not (
            method.endswith("DPPlacer") and summary.get("objective") == "pipeline" and info.get("optimal_for")):
        out.append(f"optimal: true from {method} on objective {summary.get('objective')}")
    for status in _values_of(summary, "status"):
        if status == "Optimal" and not (info.get("gap", 1.0) <= 1e-6 and info.get("model_exact")):
            out.append(f"status Optimal with gap {info.get('gap')} (model exact: {info.get('model_exact')})")
    value, single = summary.get("value_s"), summary.get("single_device_value_s")
    if method.endswith(("LocalSearchPlacer", "AnnealPlacer")) and single is not None and (
            value is None or value > single * (1 + 1e-9)):
        out.append(f"{method} ended at {value} s, worse than one device ({single} s)")
    if summary.get("feasible") and summary.get("value_s") is None:
        out.append("feasible with no finite value")
    return out


def argparse_entry(command: str) -> Callable[[list[str]], None]:
    """``main(argv)`` of an argparse command (it always ends in ``SystemExit`` or returns)."""
    if command == "pacml-graph":
        from workloads.graph_cli import main
    else:
        from analysis.report import main
    return lambda argv: main(argv)


@functools.cache
def known_keys(config_name: str = "sim") -> frozenset[str]:
    """Dotted keys of a command's default config (typos must not hit one)."""
    from simulator.cli import Composer, HydraCommand, hydra_args
    from simulator.config import flat_keys

    cmd = HydraCommand("fuzz", config_name)
    return frozenset(flat_keys(Composer(cmd, hydra_args(cmd, [])).compose([])))


@dataclass
class Tally:
    """The figures printed per command."""

    tried: int = 0
    accepted: int = 0
    rejected: int = 0
    tracebacks: int = 0
    invalid_accepted: int = 0
    valid_rejected: int = 0
    not_naming: int = 0
    multi_line: int = 0
    bad_status: int = 0
    misleading: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, prog: str, args: list[str], atoms: list[Atom], out: Outcome) -> None:
        """Score one outcome."""
        self.tried += 1
        is_bad = any(a.bad for a in atoms)
        problem = ""
        if out.traceback or "Traceback" in out.stderr:
            self.tracebacks += 1
            problem = "traceback: " + (out.traceback or out.stderr).strip().splitlines()[-1]
        if MISLEADING in out.stderr:
            self.misleading += 1
            problem = problem or next(ln for ln in out.stderr.splitlines() if MISLEADING in ln)
        if out.code == 0:
            self.accepted += 1
            if is_bad:
                self.invalid_accepted += 1
                problem = problem or "bad line accepted"
        else:
            self.rejected += 1
            if out.code != 2:
                self.bad_status += 1
                problem = problem or f"exit status {out.code}"
            lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
            errors = [ln for ln in lines if ln.startswith(prog.replace("pacml-", "pacml ", 1)) and ": error: " in ln]
            if len(lines) != 1 or len(errors) != 1:
                self.multi_line += 1
                problem = problem or f"{len(lines)} lines on stderr"
            if not is_bad:
                self.valid_rejected += 1
                problem = problem or "good line rejected"
            else:
                names = [n for a in atoms if a.bad for n in a.names]
                if not any(n.lower() in out.stderr.lower() for n in names):
                    self.not_naming += 1
                    problem = problem or f"error names none of {names}"
        if problem and len(self.examples) < 8:
            self.examples.append(f"{prog} {' '.join(args)} -> {problem} | {out.stderr.strip()[:200]}")

    def row(self) -> str:
        """One table row (each count as wide as its heading)."""
        return " ".join(f"{getattr(self, k):{max(len(k), 6)}d}" for k in COUNTS)

    def failed(self) -> bool:
        """Whether any rule was broken."""
        return any(getattr(self, k) for k in COUNTS[3:])


COUNTS = ("tried", "accepted", "rejected", "tracebacks", "invalid_accepted", "valid_rejected", "not_naming",
          "multi_line", "bad_status", "misleading")
HEADER = f"{'command':16s} {'where':10s} " + " ".join(f"{k:>{max(len(k), 6)}}" for k in COUNTS)
HYDRA_COMMANDS = ("pacml-sim", "pacml-train", "pacml-distill", "pacml-place", "pacml-train-placer")
COMMANDS = (*HYDRA_COMMANDS, "pacml-graph", "pacml-report")


def generate(command: str, rng: random.Random, tmp: Path, sweep: Path, known: set[str],
             n: int) -> tuple[list[str], list[Atom]]:
    """The ``n``-th command line of ``command``."""
    if command == "pacml-place":
        goods, bads = place_atoms(rng, tmp, known_keys("place"))
        return command_line(rng, goods, bads, p_bad=0.7)
    if command == "pacml-train-placer":
        goods, bads = train_placer_atoms(rng, tmp, known_keys("train_placer"))
        args, atoms = command_line(rng, goods, bads, p_bad=0.7)
        return with_placer_base(args, atoms), atoms
    if command == "pacml-train":
        goods, bads = hydra_atoms(rng, command, known)
        if not (tmp / TRAIN_RUN).is_dir():  # no run to resume (main() writes one): no resume pieces
            goods, bads = ([a for a in atoms if not any("{tmp}" in x for x in a.args)] for atoms in (goods, bads))
        args, atoms = command_line(rng, goods, bads, p_bad=0.5)
        return with_train_base(args, tmp), atoms
    if command in HYDRA_COMMANDS:
        goods, bads = hydra_atoms(rng, command, known)
        return command_line(rng, goods, bads, p_bad=0.7)
    if command == "pacml-graph":
        goods, bads = graph_atoms(rng, tmp, n)
    else:
        goods, bads = report_atoms(rng, tmp, sweep, n)
    return command_line(rng, goods, bads, p_bad=0.75, max_atoms=1)


def make_sweep(tmp: Path) -> Path:
    """A two-run sweep for ``pacml-report`` (short paper-scenario episodes)."""
    from hydra import compose, initialize_config_dir

    from simulator.run import run_config

    sweep = tmp / "sweep"
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        for policy in ("para_max", "para_min"):
            cfg = compose(config_name="sim", overrides=[f"policy={policy}", "horizon_s=2e4", "progress=false"])
            run_config(cfg, sweep / f"policy={policy}", {"policy": policy, "beta": "A", "scenario": "paper"})
    return sweep


def main(argv: list[str] | None = None) -> int:
    """Run the fuzzer; print the table; return 0 when every rule holds."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-command", type=int, default=300)
    parser.add_argument("--console-sample", type=int, default=12, help="command lines per command run as processes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--commands", nargs="+", default=list(COMMANDS), choices=COMMANDS)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    import logging

    logging.disable(logging.CRITICAL)  # the commands' own log lines are not errors
    known = known_keys()
    results: dict[str, dict[str, Any]] = {}
    failed = False
    print(HEADER)
    with tempfile.TemporaryDirectory(prefix="pacml-fuzz-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "afile.txt").write_text("not a sweep\n")
        (tmp / "notes.txt").write_text("just some notes, not a graph\n")
        (tmp / "empty").mkdir()
        place_files(tmp)
        if "pacml-train-placer" in args.commands:
            from pacml.placer import cli as placer

            short_run(placer.COMMAND, placer.train_from_config, PLACER_BASE, tmp / "placer_run")
        if "pacml-train" in args.commands:
            from pacml.agent import train

            short_run(train.COMMAND, train.train_from_config, TRAIN_BASE, tmp / TRAIN_RUN)
        sweep = make_sweep(tmp) if "pacml-report" in args.commands else tmp
        for command in args.commands:
            rng = random.Random(f"{args.seed}:{command}")
            entry = hydra_entry(command) if command in HYDRA_COMMANDS else argparse_entry(command)
            lines = [generate(command, rng, tmp, sweep, known, n) for n in range(args.per_command)]
            start = time.perf_counter()
            inproc = Tally()
            for line_args, atoms in lines:
                inproc.add(command, line_args, atoms, run_inprocess(lambda a=line_args, e=entry: e(list(a))))
            inproc_s = time.perf_counter() - start
            console = Tally()
            start = time.perf_counter()
            for line_args, atoms in random.Random(f"{args.seed}:{command}:console").sample(
                    lines, min(args.console_sample, len(lines))):
                extra = ["--cfg", "job"] if command in HYDRA_COMMANDS else []
                sub = [str(BIN / "pacml"), command.removeprefix("pacml-")]  # `pacml SUB`: an alias adds a line
                proc = subprocess.run([*sub, *line_args, *extra], capture_output=True, text=True,
                                      timeout=300, cwd=tmp)
                console.add(command, line_args, atoms, Outcome(proc.returncode, proc.stderr))
            console_s = time.perf_counter() - start
            print(f"{command:16s} in-process {inproc.row()}")
            print(f"{'':16s} console    {console.row()}")
            for tally in (inproc, console):
                for example in tally.examples:
                    print(f"    ! {example}")
                failed = failed or tally.failed()
            results[command] = {"in_process": {**vars(inproc), "wall_s": round(inproc_s, 1)},
                                "console": {**vars(console), "wall_s": round(console_s, 1)}}
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    print("FAIL" if failed else "OK: 0 tracebacks, 0 invalid accepted, every rejection one line naming its key")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
