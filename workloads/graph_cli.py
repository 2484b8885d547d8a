"""``pacml graph``: validate graph files, convert them to pacml JSON, describe graphs.

The format of a file is recognised from its content, never its name: PipeDream ``graph.txt``,
pacml JSON (version 1: a forward graph; version 2: a computation graph) or the JSON of
msr-fiddle/dnn-partitioning. ``validate`` says which format it read; ``convert`` writes a
dnn-partitioning graph as version 2, keeping its per-device-kind times, colour classes (groups),
backward nodes and edge costs.

Examples::

    pacml graph validate my_model.json other/graph.txt bert24_training
    pacml graph convert profiles/resnet18/graph.txt resnet18.json
    pacml graph convert bert24_training bert24_training.pacml.json
    pacml graph info resnet18 path/to/graphs/

Exit status 0 when every file is valid, 2 otherwise (one line per problem on stderr).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from workloads.errors import WorkloadError
from workloads.graph import TrainingGraph
from workloads.io import atomic_write_text
from workloads.json_format import (
    COMPUTE_FORMAT_VERSION,
    FORMAT_VERSION,
    compute_graph_to_json,
    graph_to_json,
)
from workloads.loaders import (
    DNN_PARTITIONING,
    PIPEDREAM,
    DetectedGraph,
    compute_graph_of,
    detect_graph_format,
    load_graph_set,
    op_graph_from_compute_graph,
    op_graph_of,
    resolve_graph_paths,
)
from workloads.pipedream import PIPEDREAM_TIME_UNIT_S

PROG = "pacml graph"


def _resolve(spec: str) -> list[Path]:
    """Files of a specification: files, directories, shipped PipeDream or placement graph names."""
    try:
        return resolve_graph_paths(spec)
    except WorkloadError as exc:
        # The simulator's key (workload.graphs) means nothing on this command line.
        if exc.field == "workload.graphs":
            exc.field = None
        raise


def _describe(detected: DetectedGraph, time_unit_s: float) -> str:
    """Load a recognised file as its format requires; one line saying what it holds."""
    if detected.format == PIPEDREAM or detected.version == FORMAT_VERSION:
        graph = op_graph_of(detected, time_unit_s=time_unit_s)
        return f"{graph.name}, {graph.num_ops} ops, {graph.num_edges} edges"
    cg = compute_graph_of(detected)
    n_back = int(cg.is_backward.sum())
    text = (f"{cg.name}, {cg.num_nodes} nodes ({cg.num_nodes - n_back} forward, {n_back} backward), "
            f"{cg.num_edges} edges, {cg.num_groups} groups, kinds {', '.join(cg.kind_time_s)}")
    if "max_accelerators" in cg.meta:
        text += (f", own devices: {cg.meta['max_accelerators']} accelerators of "
                 f"{float(cg.meta['accelerator_memory_bytes']) / 1e9:.3g} GB + CPU")
    try:
        op_graph_from_compute_graph(cg)
    except WorkloadError as exc:
        text += f"; not a cluster-simulator workload: {exc.message}"
    return text


def _validate(paths: Sequence[str], time_unit_s: float) -> int:
    bad = 0
    for spec in paths:
        try:
            files = _resolve(spec)
        except WorkloadError as exc:
            sys.stderr.write(f"{PROG}: error: {exc}\n")
            bad += 1
            continue
        for path in files:
            detected = None
            try:
                detected = detect_graph_format(path)
                text = _describe(detected, time_unit_s)
            except WorkloadError as exc:
                sys.stderr.write(f"{PROG}: error: {exc}\n")
                # stdout says which format was read (stderr keeps its one line per problem).
                tried = f"read as {detected.description}" if detected else "format not recognised"
                sys.stdout.write(f"bad {path} ({tried})\n")
                bad += 1
            else:
                sys.stdout.write(f"ok {path} ({detected.description}): {text}\n")
    return 2 if bad else 0


def _convert(src: str, dst: str, time_unit_s: float, version: int | None) -> int:
    try:
        detected = detect_graph_format(_resolve(src)[0])
        # A computation graph (dnn-partitioning, version 2) is written as version 2 so that its
        # per-kind times, groups, backward nodes and edge costs survive.
        computational = detected.format == DNN_PARTITIONING or detected.version == COMPUTE_FORMAT_VERSION
        if version == FORMAT_VERSION and computational:
            raise WorkloadError("holds a computation graph (per-kind times, groups, backward nodes): "
                                "version 1 would lose them; write version 2", path=detected.path)
        if version == COMPUTE_FORMAT_VERSION or computational:
            graph = compute_graph_of(detected)
            text = compute_graph_to_json(graph, notes=f"converted by {PROG} from {detected.description}")
            what = (f"pacml JSON version 2 from {detected.description}: {graph.num_nodes} nodes, "
                    f"{graph.num_groups} groups, kinds {', '.join(graph.kind_time_s)}")
        else:
            op_graph = op_graph_of(detected, time_unit_s=time_unit_s)
            text = graph_to_json(op_graph, notes=f"converted by {PROG} from {op_graph.source}")
            # The file records the unit of its times (time_unit_s), so it loads back on any clock.
            what = f"times in units of {op_graph.time_unit_s:g} s"
    except WorkloadError as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return 2
    try:
        atomic_write_text(dst, text)
    except OSError as exc:
        sys.stderr.write(f"{PROG}: error: {dst}: cannot write: {exc.strerror or exc}\n")
        return 2
    sys.stdout.write(f"wrote {dst} ({what})\n")
    return 0


def _info(specs: Sequence[str], time_unit_s: float) -> int:
    try:
        graphs = load_graph_set(list(specs), time_unit_s=time_unit_s)
    except WorkloadError as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return 2
    sys.stdout.write(f"{'model':16s} {'ops':>6s} {'deps':>6s} {'step_s':>10s} {'crit_path_s':>11s} "
                     f"{'memory_GB':>9s} {'demand_GB':>9s}\n")
    for g in graphs:
        t = TrainingGraph(g)
        sys.stdout.write(f"{g.name:16s} {t.num_ops:6d} {t.num_edges:6d} {t.step_time_s:10.4f} "
                         f"{t.critical_path_s:11.4f} {t.total_memory_bytes / 1e9:9.2f} {t.demand_bytes / 1e9:9.2f}\n")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse with the house error style: one line, exit status 2 (no usage block)."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {message} (see {PROG} --help)\n")
        raise SystemExit(2)


def _time_unit(text: str) -> float:
    """``--time-unit-s``: a finite number > 0 (``nan``, ``inf`` and ``-1`` are refused)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> None:
    """Console entry point (``pacml graph``)."""
    parser = _Parser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--time-unit-s", type=_time_unit, default=PIPEDREAM_TIME_UNIT_S,
                        help="seconds per PipeDream profile time unit (default 1e-3: milliseconds); "
                             "JSON graphs are converted to the same clock")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p_val = sub.add_parser("validate", help="check graph files and say which format each is in (recognised "
                                            "by content: PipeDream graph.txt, pacml JSON, dnn-partitioning JSON)")
    p_val.add_argument("paths", nargs="+")
    p_conv = sub.add_parser("convert", help="write a graph in the pacml JSON format")
    p_conv.add_argument("src")
    p_conv.add_argument("dst")
    p_conv.add_argument("--version", type=int, choices=(FORMAT_VERSION, COMPUTE_FORMAT_VERSION), default=None,
                        help="pacml JSON version to write (default: 2 for a dnn-partitioning or version-2 "
                             "graph, which keeps per-kind times, groups and edge costs; else 1)")
    p_info = sub.add_parser("info", help="describe graphs (files, directories or shipped names)")
    p_info.add_argument("specs", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "validate":
        code = _validate(args.paths, args.time_unit_s)
    elif args.command == "convert":
        code = _convert(args.src, args.dst, args.time_unit_s, args.version)
    else:
        code = _info(args.specs, args.time_unit_s)
    raise SystemExit(code)


if __name__ == "__main__":
    main()
