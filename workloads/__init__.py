"""Workloads: graph loaders, job specs, arrival processes and JCT-target distributions.

Imports only numpy (and the standard library): no simulator, torch or gymnasium.
"""

from workloads.arrivals import Arrival, ArrivalProcess, FixedInterval, Poisson, TraceReplay
from workloads.beta import BetaDistribution, FixedBeta, PaperBeta, PmfBeta, UniformBeta
from workloads.errors import WorkloadError
from workloads.graph import OpGraph, TrainingGraph
from workloads.jobs import JobSpec, Workload
from workloads.json_format import load_json_graph, parse_json_graph, write_json_graph
from workloads.loaders import PAPER_MODELS, load_graph, load_graph_set, shipped_models
from workloads.pipedream import load_pipedream

__all__ = [
    "PAPER_MODELS", "Arrival", "ArrivalProcess", "BetaDistribution", "FixedBeta", "FixedInterval",
    "JobSpec", "OpGraph", "PaperBeta", "PmfBeta", "Poisson", "TraceReplay", "TrainingGraph",
    "UniformBeta", "Workload", "WorkloadError", "load_graph", "load_graph_set",
    "load_json_graph", "load_pipedream", "parse_json_graph", "shipped_models", "write_json_graph",
]
