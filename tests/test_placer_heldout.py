"""The held-out graphs of the learned placers' check (benchmarks/place/bench_placer_heldout.py): they load,
they are not training graphs by content, and their dnn-partitioning forms carry the fx graph."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "place"))

import bench_placer_heldout as bench  # noqa: E402
import heldout_placer_graphs as heldout  # noqa: E402

from workloads.dnn_partitioning import parse_dnn_partitioning  # noqa: E402
from workloads.loaders import load_compute_graph  # noqa: E402
from workloads.placement_corpus import content_fingerprint, corpus  # noqa: E402


def _fx(name: str):
    return load_compute_graph(bench.DATA / "fx" / f"{name}.json")


def test_every_registered_file_exists_and_loads() -> None:
    files = sorted(p.stem for p in (bench.DATA / "dnn").glob("*.json"))
    assert files == sorted(bench.PIPELINE_FILES) and len(files) == 16
    assert sorted(p.stem for p in (bench.DATA / "fx").glob("*.json")) == sorted(bench.MODELS)
    for name in bench.PIPELINE_FILES:
        g = load_compute_graph(bench.DATA / "dnn" / f"{name}.json")
        assert g.meta["format"] == "dnn-partitioning"
        assert g.meta["max_accelerators"] == heldout.ACCELERATORS[name.rsplit("_", 1)[1]]


def test_no_held_out_graph_is_a_training_graph() -> None:
    train = {content_fingerprint(g) for _, g in corpus("train", synthetic=48, seed=0, max_nodes=4000)}
    graphs = [_fx(m) for m in bench.MODELS]
    graphs += [load_compute_graph(bench.DATA / "dnn" / f"{f}.json") for f in bench.PIPELINE_FILES]
    assert not {content_fingerprint(g) for g in graphs} & train
    bench.check_held_out(list(zip([*bench.MODELS, *bench.PIPELINE_FILES], graphs, strict=True)))  # does not exit


def test_check_refuses_a_training_graph() -> None:
    name, graph = corpus("train", synthetic=0)[0]
    with pytest.raises(SystemExit, match=name):
        bench.check_held_out([(name, graph)])


@pytest.mark.parametrize("links", ["fast", "slow"])
def test_dnn_form_keeps_times_groups_and_prices_edges_by_bytes(links: str) -> None:
    fx = _fx("ho_moe_l3_e3")
    dnn = parse_dnn_partitioning(heldout.to_dnn_partitioning(fx, links), name="x")
    acc = fx.kind_time_s[fx.reference_kind]
    np.testing.assert_allclose(dnn.kind_time_s["accelerator"], acc, rtol=1e-12)
    np.testing.assert_allclose(dnn.kind_time_s["cpu"], heldout.CPU_SLOWDOWN * acc, rtol=1e-12)
    np.testing.assert_array_equal(dnn.group, fx.group)  # one colour class per group, same order
    np.testing.assert_array_equal(dnn.edges, fx.edges)
    ms_per_byte = heldout.LINK_MS_PER_BYTE[links]
    np.testing.assert_allclose(dnn.edge_cost_s, fx.edge_bytes * ms_per_byte * 1e-3, rtol=1e-12)
    # the shipped file is the same document
    shipped = json.loads((bench.DATA / "dnn" / f"ho_moe_l3_e3_train_{links}.json").read_text())
    assert shipped == json.loads(json.dumps(heldout.to_dnn_partitioning(fx, links)))
