"""``pacml-graph``: validate graph files, convert PipeDream profiles to JSON, describe graphs.

Examples::

    pacml-graph validate my_model.json other/graph.txt
    pacml-graph convert profiles/resnet18/graph.txt resnet18.json
    pacml-graph info resnet18 path/to/graphs/

Exit status 0 when every file is valid, 2 otherwise (one line per problem on stderr).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from workloads.errors import WorkloadError
from workloads.graph import TrainingGraph
from workloads.json_format import write_json_graph
from workloads.loaders import load_graph, load_graph_set, resolve_graph_paths
from workloads.pipedream import PIPEDREAM_TIME_UNIT_S

PROG = "pacml-graph"


def _validate(paths: Sequence[str], time_unit_s: float) -> int:
    bad = 0
    for spec in paths:
        try:
            files = resolve_graph_paths(spec)
        except WorkloadError as exc:
            sys.stderr.write(f"{PROG}: error: {exc}\n")
            bad += 1
            continue
        for path in files:
            try:
                graph = load_graph(path, time_unit_s=time_unit_s)
            except WorkloadError as exc:
                sys.stderr.write(f"{PROG}: error: {exc}\n")
                bad += 1
            else:
                sys.stdout.write(f"ok {path}: {graph.name}, {graph.num_ops} ops, {graph.num_edges} edges\n")
    return 2 if bad else 0


def _convert(src: str, dst: str, time_unit_s: float) -> int:
    try:
        graph = load_graph(resolve_graph_paths(src)[0], time_unit_s=time_unit_s)
    except WorkloadError as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return 2
    try:
        # The file records the unit of its times (time_unit_s), so it loads back on any clock.
        write_json_graph(graph, dst, notes=f"converted by {PROG} from {graph.source}")
    except OSError as exc:
        sys.stderr.write(f"{PROG}: error: {dst}: cannot write: {exc.strerror or exc}\n")
        return 2
    sys.stdout.write(f"wrote {dst} (times in units of {graph.time_unit_s:g} s)\n")
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
    """Console entry point (``pacml-graph``)."""
    parser = _Parser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--time-unit-s", type=_time_unit, default=PIPEDREAM_TIME_UNIT_S,
                        help="seconds per PipeDream profile time unit (default 1e-3: milliseconds); "
                             "JSON graphs are converted to the same clock")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p_val = sub.add_parser("validate", help="check graph files (JSON or PipeDream)")
    p_val.add_argument("paths", nargs="+")
    p_conv = sub.add_parser("convert", help="write a graph in the pacml JSON format")
    p_conv.add_argument("src")
    p_conv.add_argument("dst")
    p_info = sub.add_parser("info", help="describe graphs (files, directories or shipped names)")
    p_info.add_argument("specs", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "validate":
        code = _validate(args.paths, args.time_unit_s)
    elif args.command == "convert":
        code = _convert(args.src, args.dst, args.time_unit_s)
    else:
        code = _info(args.specs, args.time_unit_s)
    raise SystemExit(code)


if __name__ == "__main__":
    main()
