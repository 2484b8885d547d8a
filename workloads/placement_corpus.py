"""The op placer's graph corpus: pre-training graphs, the held-out real graphs, unseen graphs.

Splits (:func:`corpus`): ``train`` (the shipped real graphs of :data:`TRAIN_REAL` with the
PipeDream models' ``_inf`` forms, the torch.fx exports of ``workloads/data/placement_corpus/train/``
in both forms, and ``synthetic`` graphs of :mod:`workloads.synthetic_compute` with seeds in
:data:`TRAIN_SEEDS`); ``heldout`` (:data:`HELD_OUT_REAL`, never used in pre-training);
``unseen_synthetic`` (the fx exports of ``placement_corpus/unseen/`` and synthetic graphs of every
family, ``nasnet`` included, with seeds in :data:`UNSEEN_SEEDS`); ``all`` (the three, in that
order). The 10,000+ op scale graph is in no split (:func:`scale_graph`). Shipped graphs are read
once per process; no torch is needed.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
from functools import cache, lru_cache

import numpy as np

from workloads.compute_graph import ComputeGraph
from workloads.errors import WorkloadError
from workloads.json_format import parse_compute_graph
from workloads.loaders import DATA_DIR, load_compute_graph, shipped_models
from workloads.synthetic_compute import FAMILIES, graph_from_name, random_name

#: Shipped real graphs never used in pre-training (8 of the 16 shipped). The dnn-partitioning
#: Inception-v3 layer graphs are held out with PipeDream's ``inception_v3``: same architecture.
HELD_OUT_REAL: tuple[str, ...] = ("inception_v3", "resnext50", "squeezenet1_0", "vgg16",
                                  "bert_l-3_inference", "bert_l-3_training", "inceptionv3_inference",
                                  "inceptionv3_training")
#: The other shipped real graphs: PipeDream models, then dnn-partitioning throughput inputs.
TRAIN_REAL: tuple[str, ...] = ("alexnet", "densenet121", "gnmt", "nasnetamobile", "resnet18", "resnet50",
                               "bert24_inference", "bert24_training")
#: Directory of the torch.fx exports (``train/``, ``unseen/``, ``scale/``).
CORPUS_DIR = DATA_DIR / "placement_corpus"
#: Graph seeds of the synthetic training graphs, and of the unseen ones (disjoint ranges).
TRAIN_SEEDS = (0, 10_000)
UNSEEN_SEEDS = (10_000, 20_000)
#: Synthetic families of the training split (``nasnet`` is kept for the unseen split).
TRAIN_FAMILIES: tuple[str, ...] = FAMILIES
UNSEEN_FAMILIES: tuple[str, ...] = (*FAMILIES, "nasnet")
SPLITS = ("train", "heldout", "unseen_synthetic", "all")
#: Default number of synthetic graphs drawn per split.
DEFAULT_SYNTHETIC = 64
#: Smallest accepted ``max_nodes`` (the smallest synthetic graphs have about 10-20 nodes).
MIN_MAX_NODES = 50
_SCALE_FILE = CORPUS_DIR / "scale" / "fx_gpt_l56_h12.json.gz"


#: A shipped graph (by name) or an fx export (by path), read once per process; synthetic graphs.
_load = cache(load_compute_graph)
_synthetic = lru_cache(maxsize=1024)(graph_from_name)


@cache
def _inference_of(name: str, graph: ComputeGraph) -> ComputeGraph:
    # keyed by the (cached, so identical) graph object: ComputeGraph hashes by identity
    return dataclasses.replace(graph.forward_only(), name=name)


def _fx_graphs(split: str) -> list[tuple[str, ComputeGraph]]:
    out = []
    for path in sorted((CORPUS_DIR / split).glob("*.json")):
        graph = _load(path)
        out += [(graph.name, graph), (f"{graph.name}_inf", _inference_of(f"{graph.name}_inf", graph))]
    return out


def _drawn(count: int, rng: np.random.Generator, *, families: tuple[str, ...], seeds: tuple[int, int],
           max_nodes: int | None) -> list[tuple[str, ComputeGraph]]:
    bound = 2500 if max_nodes is None else min(max_nodes, 2500)
    names: dict[str, ComputeGraph] = {}
    while len(names) < count:
        name = random_name(rng, families=families, seeds=seeds, max_nodes=max(bound, MIN_MAX_NODES))
        if name in names:
            continue
        graph = _synthetic(name)
        if max_nodes is None or graph.num_nodes <= max_nodes:  # the name's size is an estimate
            names[name] = graph
    return list(names.items())


def _check_int(value: object, field: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise WorkloadError(f"must be an integer >= {low}, got {value!r}", field=field)
    return int(value)


def corpus(split: str, *, synthetic: int = DEFAULT_SYNTHETIC, seed: int = 0,
           max_nodes: int | None = None) -> list[tuple[str, ComputeGraph]]:
    """The graphs of ``split`` as ``(name, graph)`` pairs (see the module docstring).

    Args:
        split: ``train``, ``heldout``, ``unseen_synthetic`` or ``all``.
        synthetic: Number of synthetic graphs drawn for ``train`` and for ``unseen_synthetic``
            (each; ``all`` holds both draws).
        seed: Seed of the draw of synthetic graph names (the same seed gives the same graphs).
        max_nodes: Leave out graphs with more nodes (shipped ones are dropped; synthetic ones
            are redrawn, so ``synthetic`` graphs are still returned); ``None``: no bound. At least
            :data:`MIN_MAX_NODES`.

    Raises:
        WorkloadError: Naming the argument at fault (``split``, ``synthetic``, ``seed``,
            ``max_nodes``).
    """
    if split not in SPLITS:
        raise WorkloadError(f"unknown split {split!r} (expected one of {', '.join(SPLITS)})", field="split")
    synthetic = _check_int(synthetic, "synthetic", 0)
    seed = _check_int(seed, "seed", 0)
    if max_nodes is not None:
        max_nodes = _check_int(max_nodes, "max_nodes", MIN_MAX_NODES)
    if split == "all":
        return [item for part in SPLITS[:-1]
                for item in corpus(part, synthetic=synthetic, seed=seed, max_nodes=max_nodes)]
    if split == "heldout":
        graphs = [(name, _load(name)) for name in HELD_OUT_REAL]
    elif split == "train":
        pipedream = set(shipped_models())
        graphs = []
        for name in TRAIN_REAL:
            graphs.append((name, _load(name)))
            if name in pipedream:
                graphs.append((f"{name}_inf", _inference_of(f"{name}_inf", _load(name))))
        graphs += _fx_graphs("train")
        graphs += _drawn(synthetic, np.random.default_rng([seed, 1]), families=TRAIN_FAMILIES,
                         seeds=TRAIN_SEEDS, max_nodes=max_nodes)
    else:
        graphs = _fx_graphs("unseen")
        graphs += _drawn(synthetic, np.random.default_rng([seed, 2]), families=UNSEEN_FAMILIES,
                         seeds=UNSEEN_SEEDS, max_nodes=max_nodes)
    if max_nodes is not None:
        graphs = [(name, g) for name, g in graphs if g.num_nodes <= max_nodes]
    return graphs


@cache
def scale_graph() -> ComputeGraph:
    """The 10,000+ op scale test graph: a 56-block GPT-like decoder's training step (13,114 nodes)
    from torch.fx, read from its gzip-compressed pacml JSON file."""
    text = gzip.decompress(_SCALE_FILE.read_bytes()).decode()
    return parse_compute_graph(text, path=_SCALE_FILE)


def content_fingerprint(graph: ComputeGraph) -> str:
    """A hash of what a placer sees (per-kind times, memory, backward flags, groups, edges, edge
    bytes and costs), without the name: a renamed copy of a graph has the same content fingerprint,
    so the splits can be checked for a held-out graph under another name."""
    return graph.content_hash(hashlib.sha1())
