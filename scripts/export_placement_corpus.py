"""Regenerate workloads/data/placement_corpus/: the torch.fx exports of the op placer's corpus.

Every model of ``pacml.placer.fx.corpus_models.MODELS`` is traced on the meta device with deterministic
roofline costs and written as a pacml JSON version-2 file (its training step: forward ops and their
backward mirrors) under the directory of its split: ``train/`` (pre-training), ``unseen/`` (the
"graphs nobody here has" check) and ``scale/`` (the 10,000+ op scale test graph, gzip-compressed
with a fixed header so that the bytes are the same on every run). The output is byte-identical
across runs and machines (no wall-clock timing enters it).

Usage: python scripts/export_placement_corpus.py [--only NAME ...] [--out DIR]
"""

from __future__ import annotations

import argparse
import gzip
import logging
import sys
from pathlib import Path

from pacml.placer.fx.corpus_models import MODELS, export_graph
from workloads.io import atomic_write
from workloads.json_format import compute_graph_to_json, write_compute_graph

OUT = Path(__file__).resolve().parents[1] / "workloads" / "data" / "placement_corpus"


def main(argv: list[str] | None = None) -> int:
    """Export the corpus models; return the exit status."""
    parser = argparse.ArgumentParser(prog="export_placement_corpus", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", metavar="NAME", help="export only these models")
    parser.add_argument("--out", type=Path, default=OUT, help="corpus directory (default: the shipped one)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.only or ()) - set(MODELS))
    if unknown:
        parser.error(f"unknown model {unknown[0]!r} (known: {', '.join(MODELS)})")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name, spec in MODELS.items():
        if args.only and name not in args.only:
            continue
        graph = export_graph(spec)
        notes = f"{spec.description}; exported by scripts/export_placement_corpus.py (roofline costs)"
        if spec.split == "scale":
            data = gzip.compress(compute_graph_to_json(graph, notes=notes).encode(), mtime=0)
            path = atomic_write(args.out / spec.split / f"{name}.json.gz", lambda f, data=data: f.write(data))
        else:
            path = write_compute_graph(graph, args.out / spec.split / f"{name}.json", notes=notes)
        logging.info("%s: %d nodes, %d edges -> %s", name, graph.num_nodes, graph.num_edges, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
