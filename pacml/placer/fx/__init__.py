"""torch.fx import: a PyTorch model as an op graph the placers read.

- :mod:`pacml.placer.fx.importer`: trace an ``nn.Module`` with torch.fx, propagate shapes, cost every
  op (roofline estimate or measured) and return or save it as an :class:`~workloads.graph.OpGraph`
  (``save_module_graph`` writes the JSON graph format).
- :mod:`pacml.placer.fx.corpus_models`: the PyTorch models whose traced graphs form the learned
  placer's pre-training corpus (``scripts/export_placement_corpus.py`` writes them to
  ``workloads/data/placement_corpus/``); models of the corpus, not placers.

Imports: torch and :mod:`workloads` only (never :mod:`simulator`, nor the rest of :mod:`pacml`).
"""
