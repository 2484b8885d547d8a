"""Bring-your-own-model import: nn.Module -> torch.fx -> OpGraph -> JSON -> simulator."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pacml.fx_import import (
    A100_FP32_FLOPS,
    A100_MEMORY_BANDWIDTH_BPS,
    graph_from_module,
    save_module_graph,
)
from simulator.build import SimKnobs, build_feasibility
from simulator.topology import RampTopology
from workloads.errors import WorkloadError
from workloads.graph import OpGraph, TrainingGraph
from workloads.json_format import load_json_graph

F32 = 4  # bytes per fp32 element
BATCH, H, W = 2, 16, 16


class TinyNet(nn.Module):
    """conv(3->8) -> relu -> conv(8->8) + residual -> adaptive avg pool -> flatten -> linear(8->10)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x: Tensor) -> Tensor:
        h = F.relu(self.conv1(x))
        y = self.conv2(h) + h
        return self.fc(self.pool(y).flatten(1))


class Branchy(nn.Module):
    """A folded parameter, an in-place op, torch.cat, view/size and a tuple output."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))
        self.lin = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        a = torch.relu(x) * self.scale
        b = self.lin(x)
        b.relu_()  # in-place: cat below must come after it although fx records it as a user of lin
        c = torch.cat([a, b], dim=1).view(x.size(0), -1)
        return a.sum(), c


class DataDependent(nn.Module):
    """Python control flow on tensor values: symbolic tracing cannot follow it."""

    def forward(self, x: Tensor) -> Tensor:
        if x.sum() > 0:
            return x * 2
        return x


def _tiny_graph(**kwargs: object) -> OpGraph:
    torch.manual_seed(0)
    return graph_from_module(TinyNet(), torch.randn(BATCH, 3, H, W), name="tinynet", **kwargs)


def _named_edges(graph: OpGraph) -> list[tuple[str, str]]:
    return [(graph.op_ids[s], graph.op_ids[d]) for s, d in graph.edges.tolist()]


def _by_id(graph: OpGraph, values: np.ndarray) -> dict[str, float]:
    return dict(zip(graph.op_ids, values.tolist(), strict=True))


@pytest.fixture(scope="module")
def tiny() -> OpGraph:
    """TinyNet on a (2, 3, 16, 16) input with the default (A100 roofline) estimate."""
    return _tiny_graph()


def test_structure_follows_fx_nodes(tiny: OpGraph) -> None:
    assert tiny.op_ids == ("x", "conv1", "relu", "conv2", "add", "pool", "flatten", "fc")
    assert tiny.labels == ("Input(x)", "Conv2d(conv1)", "relu", "Conv2d(conv2)", "add",
                           "AdaptiveAvgPool2d(pool)", ".flatten()", "Linear(fc)")
    assert _named_edges(tiny) == [
        ("x", "conv1"), ("conv1", "relu"), ("relu", "conv2"), ("relu", "add"),  # residual
        ("conv2", "add"), ("add", "pool"), ("pool", "flatten"), ("flatten", "fc"),
    ]
    assert tiny.op_ids[tiny.loss_index] == "fc"
    assert tiny.source == "torch.fx:TinyNet"


def test_activation_and_parameter_bytes(tiny: OpGraph) -> None:
    feature_map = BATCH * 8 * H * W * F32  # 16384
    assert _by_id(tiny, tiny.activation_bytes) == {
        "x": BATCH * 3 * H * W * F32, "conv1": feature_map, "relu": feature_map,
        "conv2": feature_map, "add": feature_map, "pool": BATCH * 8 * F32,
        "flatten": BATCH * 8 * F32, "fc": BATCH * 10 * F32,
    }
    assert _by_id(tiny, tiny.parameter_bytes) == {
        "x": 0, "conv1": (8 * 3 * 3 * 3 + 8) * F32, "relu": 0, "conv2": (8 * 8 * 3 * 3 + 8) * F32,
        "add": 0, "pool": 0, "flatten": 0, "fc": (8 * 10 + 10) * F32,
    }


def test_roofline_estimate_by_hand(tiny: OpGraph) -> None:
    fwd = _by_id(tiny, tiny.forward_time_s)
    n_conv_out = BATCH * 8 * H * W  # 4096 output elements per conv
    # Conv: 2 * N_out * (C_in / groups) * kh * kw + N_out (bias).
    conv1_flops = 2 * n_conv_out * 3 * 3 * 3 + n_conv_out  # 225_280
    conv2_flops = 2 * n_conv_out * 8 * 3 * 3 + n_conv_out  # 593_920
    # Bytes moved = input activation + parameters + output activation.
    conv1_bytes = BATCH * 3 * H * W * F32 + (8 * 27 + 8) * F32 + n_conv_out * F32  # 23_424
    conv2_bytes = n_conv_out * F32 + (8 * 72 + 8) * F32 + n_conv_out * F32  # 35_104
    # Linear: 2 * N_out * in_features + N_out (bias), N_out = 2 * 10.
    fc_flops = 2 * (BATCH * 10) * 8 + BATCH * 10  # 340
    fc_bytes = BATCH * 8 * F32 + (80 + 10) * F32 + BATCH * 10 * F32  # 504
    flops, bandwidth = 19.5e12, 1.555e12
    assert (flops, bandwidth) == (A100_FP32_FLOPS, A100_MEMORY_BANDWIDTH_BPS)
    assert fwd["conv1"] == pytest.approx(max(conv1_flops / flops, conv1_bytes / bandwidth))
    assert fwd["conv2"] == pytest.approx(max(conv2_flops / flops, conv2_bytes / bandwidth))
    assert fwd["fc"] == pytest.approx(max(fc_flops / flops, fc_bytes / bandwidth))
    # conv2 is compute-bound on an A100, conv1 and fc are memory-bound: both roofline arms run.
    assert conv2_flops / flops > conv2_bytes / bandwidth
    assert conv1_flops / flops < conv1_bytes / bandwidth
    # Elementwise relu: 1 FLOP/element, so bytes (in + out) dominate.
    assert fwd["relu"] == pytest.approx(2 * n_conv_out * F32 / bandwidth)
    assert fwd["x"] == 0.0
    np.testing.assert_allclose(tiny.backward_time_s, 2.0 * tiny.forward_time_s)
    assert np.all(tiny.forward_time_s[1:] > 0)


def test_device_numbers_and_element_size_are_used() -> None:
    slow = _tiny_graph(device_flops=1e9, memory_bandwidth_Bps=1e12, backward_factor=3.0)
    fc = slow.op_ids.index("fc")
    assert slow.forward_time_s[fc] == pytest.approx(340 / 1e9)  # now compute-bound
    np.testing.assert_allclose(slow.backward_time_s, 3.0 * slow.forward_time_s)
    half = _tiny_graph(bytes_per_element=2)
    assert half.activation_bytes[fc] == BATCH * 10 * 2
    assert half.parameter_bytes[fc] == 90 * 2


def test_folded_parameters_inplace_and_tuple_output() -> None:
    graph = graph_from_module(Branchy(), torch.randn(2, 4), name="branchy")
    assert graph.op_ids == ("x", "relu", "mul", "lin", "relu_", "cat", "size", "view", "sum_1")
    assert _named_edges(graph) == [
        ("x", "relu"), ("x", "lin"), ("x", "size"), ("relu", "mul"), ("mul", "cat"),
        ("mul", "sum_1"), ("lin", "relu_"), ("lin", "cat"), ("relu_", "cat"),  # in-place order
        ("cat", "view"), ("size", "view"),
    ]
    # The output tuple is (sum_1, view): the loss op is the last of them in op order.
    assert graph.op_ids[graph.loss_index] == "sum_1"
    params = _by_id(graph, graph.parameter_bytes)
    assert params["mul"] == 4 * F32  # self.scale, folded in from get_attr
    assert params["lin"] == (16 + 4) * F32
    acts = _by_id(graph, graph.activation_bytes)
    assert (acts["cat"], acts["size"], acts["sum_1"]) == (2 * 8 * F32, 0, F32)


def test_json_round_trip_and_training_graph(tiny: OpGraph, tmp_path) -> None:
    torch.manual_seed(0)
    path = save_module_graph(TinyNet(), torch.randn(BATCH, 3, H, W), tmp_path / "tiny.json",
                             name="tinynet")
    loaded = load_json_graph(path)
    assert loaded.name == tiny.name
    assert loaded.op_ids == tiny.op_ids and loaded.labels == tiny.labels
    assert loaded.loss_index == tiny.loss_index
    np.testing.assert_array_equal(loaded.edges, tiny.edges)
    for field in ("forward_time_s", "backward_time_s", "activation_bytes", "parameter_bytes"):
        np.testing.assert_array_equal(getattr(loaded, field), getattr(tiny, field))
    assert loaded.fingerprint == tiny.fingerprint
    tg = TrainingGraph(loaded)
    assert tg.num_ops == 2 * tiny.num_ops
    assert tg.num_edges == 2 * tiny.num_edges + 1


def test_runs_through_the_simulator(tiny: OpGraph) -> None:
    feas = build_feasibility(RampTopology(), SimKnobs(min_op_time_s=1e-9, edge_sizing="activation",
                                                      placement="block", comm_quirks=False))
    tg = TrainingGraph(tiny)
    one = feas.placer.place(tg, 1, 0)
    assert one is not None
    # One server: no communication and no splitting, so the step is the sequential sum.
    assert feas.step_model.step(tg, 1, one).step_time_s == pytest.approx(tg.step_time_s)
    pl = feas.placer.place(tg, 2, 0)
    assert pl is not None
    step = feas.step_model.step(tg, 2, pl).step_time_s
    assert math.isfinite(step) and step > 0
    # Splitting across 2 servers can at best halve each op on the critical path.
    assert step >= tg.critical_path_s / 2 * (1 - 1e-9)


def test_profile_costs_are_measured() -> None:
    graph = graph_from_module(TinyNet(), torch.randn(1, 3, 8, 8), name="tinynet", costs="profile",
                              profile_repeats=3)
    assert graph.op_ids[0] == "x"
    assert graph.forward_time_s[0] == 0.0 and graph.backward_time_s[0] == 0.0
    compute = slice(1, None)
    assert np.all(np.isfinite(graph.forward_time_s)) and np.all(np.isfinite(graph.backward_time_s))
    assert np.all(graph.forward_time_s[compute] > 0)
    # Every TinyNet op is differentiable, so each gets a timed autograd backward.
    assert np.all(graph.backward_time_s[compute] > 0)
    # Sizes do not depend on how costs are obtained.
    estimate = graph_from_module(TinyNet(), torch.randn(1, 3, 8, 8), name="tinynet")
    np.testing.assert_array_equal(graph.activation_bytes, estimate.activation_bytes)
    np.testing.assert_array_equal(graph.edges, estimate.edges)


def test_profile_leaves_the_module_unchanged() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(inplace=True))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(2, 3, 6, 6)
    x_before = x.clone()
    graph_from_module(model, x, name="seq", costs="profile", profile_repeats=1)
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert torch.equal(x, x_before)


def test_untraceable_module_names_torch_fx() -> None:
    with pytest.raises(WorkloadError, match="could not be traced by torch.fx") as info:
        graph_from_module(DataDependent(), torch.randn(3), name="datadep")
    message = str(info.value)
    assert "\n" not in message
    assert "control flow" in message  # the first line of fx's own explanation


def test_bad_example_inputs_name_the_node() -> None:
    with pytest.raises(WorkloadError, match=r"at node 'conv1'.*channels") as info:
        graph_from_module(TinyNet(), torch.randn(BATCH, 1, H, W), name="tinynet")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("kwargs", [{"costs": "guess"}, {"device_flops": 0.0},
                                    {"memory_bandwidth_Bps": -1.0}, {"profile_repeats": 0}])
def test_bad_arguments(kwargs: dict[str, object]) -> None:
    with pytest.raises(WorkloadError):
        _tiny_graph(**kwargs)
