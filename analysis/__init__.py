"""Analysis of ``pacml sim`` outputs: load sweeps, aggregate seeds, plot, and write reports.

Reads only what runs wrote (``summary.json``, ``jobs.csv``, ``.hydra/*.yaml``); never imports
the simulator. ``pacml report SWEEP_DIR`` (:mod:`analysis.report`) puts it all together.
"""
