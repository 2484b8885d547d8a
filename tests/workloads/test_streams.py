"""JCT-target distributions, arrival processes, trace replay and the job stream."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import make_graph
from workloads.arrivals import DEFAULT_TRACE, FixedInterval, Poisson, TraceReplay, read_gavel_trace
from workloads.beta import FixedBeta, PaperBeta, PmfBeta, UniformBeta
from workloads.errors import WorkloadError
from workloads.jobs import Workload
from workloads.loaders import load_graph_set

# spec §14.1 statistics table: mean, 5/25/50/75/95 % quantiles, mean ceil(1/beta)
SPEC_BETA = {
    "A": (0.550, (0.14, 0.32, 0.55, 0.78, 0.96), 3.15),
    "B": (0.285, (0.13, 0.19, 0.26, 0.36, 0.51), 4.64),
    "C": (0.526, (0.33, 0.45, 0.53, 0.61, 0.72), 2.46),
    "D": (0.696, (0.45, 0.62, 0.72, 0.79, 0.87), 2.10),
}


@pytest.mark.parametrize("name", "ABCD")
def test_paper_beta_matches_the_spec_statistics(name: str) -> None:
    mean, quantiles, mean_ceil = SPEC_BETA[name]
    dist = PaperBeta(name)
    assert dist.mean() == pytest.approx(mean, abs=0.0025)
    for q, expected in zip((0.05, 0.25, 0.5, 0.75, 0.95), quantiles, strict=True):
        assert dist.quantile(q) == pytest.approx(expected, abs=0.011)
    assert float(np.ceil(1 / dist.values - 1e-9) @ dist.probs) == pytest.approx(mean_ceil, abs=0.02)
    assert dist.values.min() >= 0.1 - 1e-12 and dist.values.max() <= 1.0 + 1e-12


def test_beta_a_is_uniform_over_hundredths() -> None:
    dist = PaperBeta("A")
    assert dist.values.tolist() == [round(x / 100, 2) for x in range(10, 101)]
    rng = np.random.default_rng(1)
    draws = np.array([dist.sample(rng) for _ in range(20000)])
    assert draws.mean() == pytest.approx(0.55, abs=0.01)
    assert set(np.round(draws, 2)) <= set(dist.values.tolist())


def test_sampled_frequencies_follow_the_pmf() -> None:
    dist = PmfBeta([0.25, 0.5, 1.0], [0.2, 0.5, 0.3])
    rng = np.random.default_rng(0)
    draws = np.array([dist.sample(rng) for _ in range(20000)])
    for v, p in ((0.25, 0.2), (0.5, 0.5), (1.0, 0.3)):
        assert (draws == v).mean() == pytest.approx(p, abs=0.015)


@pytest.mark.parametrize(("values", "probs", "message"), [
    ([0.5, 1.0], [0.5, 0.6], "sum to 1.1"),
    ([0.0, 1.0], [0.5, 0.5], "> 0"),
    ([0.5], [0.5, 0.5], "equal-length"),
    ([0.5, 1.0], [-0.5, 1.5], ">= 0"),
])
def test_bad_pmf_is_a_clear_error(values: list, probs: list, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        PmfBeta(values, probs)


def test_fixed_and_uniform_beta() -> None:
    rng = np.random.default_rng(0)
    assert FixedBeta(0.3).sample(rng) == 0.3
    draws = [UniformBeta(0.2, 0.4).sample(rng) for _ in range(1000)]
    assert min(draws) >= 0.2 and max(draws) <= 0.4 and all(round(d, 2) == d for d in draws)
    with pytest.raises(WorkloadError):
        FixedBeta(-1)
    with pytest.raises(WorkloadError):
        UniformBeta(0.5, 0.1)


def test_fixed_interval_arrivals_are_exact() -> None:
    times = [a.time_s for a in itertools.islice(FixedInterval(1000.0).arrivals(np.random.default_rng()), 1001)]
    assert times[0] == 0.0 and times[-1] == 1e6 and times[500] == 500000.0


def test_poisson_arrivals_have_the_requested_rate() -> None:
    gaps = np.diff([a.time_s for a in itertools.islice(Poisson(rate_per_s=0.5).arrivals(np.random.default_rng(3)), 20001)])
    assert gaps.mean() == pytest.approx(2.0, rel=0.03)
    assert gaps.std() == pytest.approx(2.0, rel=0.05)  # exponential: std == mean


@pytest.mark.parametrize("kwargs", [{"rate_per_s": -1.0}, {"mean_interval_s": 0.0}, {"rate_per_s": float("nan")},
                                    {}, {"rate_per_s": 1.0, "mean_interval_s": 1.0}])
def test_bad_poisson_parameters_are_clear_errors(kwargs: dict) -> None:
    with pytest.raises(WorkloadError):
        Poisson(**kwargs)


def test_negative_interval_is_rejected() -> None:
    with pytest.raises(WorkloadError, match="arrivals.interval_s"):
        FixedInterval(-5.0)


def test_shipped_trace_parses_and_maps_every_job_type() -> None:
    jobs = read_gavel_trace(DEFAULT_TRACE)
    assert len(jobs) == 533
    replay = TraceReplay()
    arrivals = list(replay.arrivals(np.random.default_rng()))
    assert len(arrivals) == 533
    assert replay.models() <= {"resnet18", "resnet50", "gnmt", "alexnet", "squeezenet1_0", "vgg16"}
    assert all(b.time_s >= a.time_s for a, b in itertools.pairwise(arrivals))
    assert arrivals[0].model == "gnmt"  # 'Transformer (batch size 128)' on the first line


def test_trace_time_scale_and_repeat() -> None:
    fast = TraceReplay(time_scale=0.5, repeat=True)
    arrivals = list(itertools.islice(fast.arrivals(np.random.default_rng()), 1066))
    assert arrivals[532].time_s == pytest.approx(fast.jobs[-1].arrival_time_s * 0.5)
    assert arrivals[533].time_s > arrivals[532].time_s
    assert arrivals[533].model == arrivals[0].model


def test_unmapped_trace_job_type_names_the_line(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError) as info:
        TraceReplay(model_map={"ResNet-18": "resnet18"})
    assert info.value.line == 1 and info.value.field == "job_type"
    assert "Transformer" in str(info.value)
    skipped = TraceReplay(model_map={"ResNet-18": "resnet18"}, unmapped="skip")
    assert skipped.models() == {"resnet18"}


def test_malformed_trace_row(tmp_path: Path) -> None:
    bad = tmp_path / "bad.trace"
    bad.write_text("A3C\tcmd\t-n\t1\t100\tsoon\t1\n")
    with pytest.raises(WorkloadError) as info:
        read_gavel_trace(bad)
    assert (info.value.line, info.value.field) == (1, "arrival_time")


def test_job_stream_is_deterministic_and_policy_independent() -> None:
    graphs = load_graph_set("paper", time_unit_s=1.0)
    wl = Workload(graphs, FixedInterval(1000.0), PaperBeta("C"))
    a = [(j.model, j.beta, j.arrival_time_s) for j in itertools.islice(wl.jobs(7), 200)]
    b = [(j.model, j.beta, j.arrival_time_s) for j in itertools.islice(wl.jobs(7), 200)]
    c = [(j.model, j.beta) for j in itertools.islice(wl.jobs(8), 200)]
    assert a == b
    assert [x[:2] for x in a] != c
    counts = {m: sum(1 for x in a if x[0] == m) for m in {x[0] for x in a}}
    assert len(counts) == 5 and min(counts.values()) > 20  # uniform over the five graphs


def test_job_targets() -> None:
    graph = make_graph("g", [(1.0, 2.0, 0, 0)], [])
    wl = Workload([graph], FixedInterval(1.0), FixedBeta(0.25), num_training_steps=10)
    job = next(wl.jobs(0))
    assert job.sequential_jct_s == 30.0
    assert math.isclose(job.max_jct_s, 7.5)


def test_trace_needs_its_graphs_loaded() -> None:
    graphs = load_graph_set(["resnet18"])
    with pytest.raises(WorkloadError, match="not loaded: alexnet"):
        Workload(graphs, TraceReplay(), PaperBeta("A"))
