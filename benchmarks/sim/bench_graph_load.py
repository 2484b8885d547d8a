"""Graph loading speed: load + validate synthetic JSON and PipeDream graphs of 5k-50k ops.

The graphs look like traced networks: a chain with a skip edge every few ops (residual blocks).
Each size is written once to a temporary directory, then loaded ``--repeats`` times (best time
reported; loading includes reading, parsing, validation, cycle check and building the OpGraph).

Usage: python benchmarks/sim/bench_graph_load.py [--sizes 5000 20000 50000] [--repeats 3]
       [--timeout-s 120]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import tempfile
import time
from pathlib import Path

#: Every ``SKIP_EVERY``-th op also feeds the op ``SKIP_SPAN`` further on (a residual block).
SKIP_EVERY = 4
SKIP_SPAN = 3


def _edges(num_ops: int) -> list[tuple[int, int]]:
    chain = [(i, i + 1) for i in range(num_ops - 1)]
    skips = [(i, i + SKIP_SPAN) for i in range(0, num_ops - SKIP_SPAN, SKIP_EVERY)]
    return chain + skips


def write_json(path: Path, num_ops: int) -> Path:
    """A pacml JSON graph of ``num_ops`` ops (one op per line, as ``pacml-graph convert`` writes)."""
    ops = [json.dumps({"id": f"op{i}", "label": f"Conv2d({i})", "forward_time_s": 1e-4 + 1e-7 * (i % 13),
                       "backward_time_s": 2e-4, "activation_bytes": 4096.0 * (1 + i % 7),
                       "parameter_bytes": 1024.0 * (i % 5)}) for i in range(num_ops)]
    edges = [f'["op{s}", "op{d}"]' for s, d in _edges(num_ops)]
    text = ('{\n  "format": "pacml-graph",\n  "version": 1,\n  "name": "synthetic",\n'
            '  "time_unit_s": 1.0,\n  "ops": [\n    ' + ",\n    ".join(ops) + '\n  ],\n'
            '  "edges": [\n    ' + ",\n    ".join(edges) + "\n  ]\n}\n")
    path.write_text(text)
    return path


def write_pipedream(path: Path, num_ops: int) -> Path:
    """The same graph as a PipeDream ``graph.txt`` (times in milliseconds)."""
    nodes = [f"node{i} -- Conv2d({i}) -- forward_compute_time={0.1 + 1e-4 * (i % 13):.4f}, "
             f"backward_compute_time=0.2, activation_size={4096.0 * (1 + i % 7):.1f}, "
             f"parameter_size={1024.0 * (i % 5):.1f}" for i in range(num_ops)]
    edges = [f"\tnode{s} -- node{d}" for s, d in _edges(num_ops)]
    path.write_text("\n".join(nodes + edges) + "\n")
    return path


def _load(path: str, queue: mp.Queue) -> None:
    from workloads.loaders import load_graph

    start = time.perf_counter()
    graph = load_graph(path)
    queue.put((time.perf_counter() - start, graph.num_ops))


def time_load(path: Path, timeout_s: float) -> float | None:
    """Seconds to load ``path`` in a fresh process (``None`` if it took over ``timeout_s``)."""
    queue: mp.Queue = mp.Queue()
    proc = mp.Process(target=_load, args=(str(path), queue))
    proc.start()
    proc.join(timeout_s)
    if proc.is_alive():
        proc.terminate()
        proc.join()
        return None
    seconds, _ = queue.get()
    return seconds


def main() -> None:
    """Print one line per (format, size): best load time over the repeats."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 20000, 50000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout-s", type=float, default=120.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for fmt, writer, name in (("json", write_json, "g.json"), ("pipedream", write_pipedream, "graph.txt")):
            for size in args.sizes:
                folder = Path(tmp) / f"{fmt}{size}"
                folder.mkdir()
                path = writer(folder / name, size)
                times = []
                for _ in range(args.repeats):
                    seconds = time_load(path, args.timeout_s)
                    if seconds is None:
                        break
                    times.append(seconds)
                shown = f"{min(times):7.3f} s" if times else f"> {args.timeout_s:.0f} s (stopped)"
                print(f"{fmt:9s} {size:6d} ops  {path.stat().st_size / 1e6:6.1f} MB  load+validate {shown}",
                      flush=True)


if __name__ == "__main__":
    main()
