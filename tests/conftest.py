"""Shared fixtures: tiny hand-made graphs, the paper's cluster and composed configs."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

from simulator.build import SimKnobs, build_feasibility
from simulator.feasibility import Feasibility
from simulator.topology import RampTopology
from workloads.graph import OpGraph, TrainingGraph
from workloads.json_format import graph_to_json, parse_json_graph

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")

PAPER_KNOBS = SimKnobs(min_op_time_s=0.01, edge_sizing="paper", placement="op_first_fit", comm_quirks=True)


def make_graph(name: str, ops: Sequence[tuple[float, float, float, float]],
               edges: Sequence[tuple[int, int]], loss: int | None = None) -> OpGraph:
    """A forward graph from ``(fwd_s, bwd_s, activation_bytes, parameter_bytes)`` rows."""
    arr = np.array(ops, dtype=np.float64).reshape(-1, 4)
    n = len(ops)
    return OpGraph(name=name, op_ids=tuple(f"n{i}" for i in range(n)), labels=tuple(f"op{i}" for i in range(n)),
                   forward_time_s=arr[:, 0], backward_time_s=arr[:, 1], activation_bytes=arr[:, 2],
                   parameter_bytes=arr[:, 3], edges=np.array(edges, dtype=np.int64).reshape(-1, 2),
                   loss_index=n - 1 if loss is None else loss, source=f"<{name}>")


@pytest.fixture(autouse=True)
def _torch_threads_from_environment() -> None:
    """``PACML_TEST_TORCH_THREADS=N`` runs every test with N torch threads (a test or a trainer may
    still set its own). ``scripts/check_learning_tests.sh`` uses it, with ``ATEN_CPU_CAPABILITY``,
    to run the learning tests as other CPUs would: summation order changes with both."""
    threads = os.environ.get("PACML_TEST_TORCH_THREADS")
    if threads:
        import torch

        torch.set_num_threads(int(threads))


@pytest.fixture
def paper_topology() -> RampTopology:
    """The paper's 4x4x2 RAMP."""
    return RampTopology()


@pytest.fixture
def paper_feasibility(paper_topology: RampTopology) -> Feasibility:
    """Feasibility (placer + lookahead) with the paper's knobs."""
    return build_feasibility(paper_topology, PAPER_KNOBS)


@pytest.fixture
def chain_graph() -> TrainingGraph:
    """Two ops a -> b: a takes 1 s forward / 3 s backward, b 2 s / 4 s; no bytes."""
    return TrainingGraph(make_graph("chain", [(1.0, 3.0, 0, 0), (2.0, 4.0, 0, 0)], [(0, 1)]))


@pytest.fixture
def write_json_graph_file(tmp_path: Path) -> Callable[..., Path]:
    """Write a graph (or raw JSON document) to a file in tmp_path."""

    def write(graph: OpGraph | dict | str, name: str = "g.json") -> Path:
        path = tmp_path / name
        if isinstance(graph, OpGraph):
            path.write_text(graph_to_json(graph))
        elif isinstance(graph, dict):
            path.write_text(json.dumps(graph, indent=2))
        else:
            path.write_text(graph)
        return path

    return write


def roundtrip(graph: OpGraph) -> OpGraph:
    """Serialise and re-parse a graph."""
    return parse_json_graph(graph_to_json(graph))
