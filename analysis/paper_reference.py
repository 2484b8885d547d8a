"""The PAC-ML paper's headline numbers, to set beside ours.

Source: ``/work/shared/reference/pacml_spec.md`` §14.2 (blocking rate, mean of 3 seeds) and
§14.3 (throughput, ``mean_demand_total_throughput``, our ``demand_throughput_Bps``). PAC-ML is the
"final" checkpoint (last evaluated epoch, mean of 3 training seeds). Keys are our policy config
names (``conf/policy/<name>.yaml``); the paper's labels are in :data:`PAPER_POLICY_LABELS`.

The paper's PAC-ML is one GNN + PPO agent per beta distribution: our ``policy=pacml_beta``, the
like-for-like reproduction. ``policy=pacml`` is this project's adaptive agent (one agent for every
beta, with block placement), not the paper's method, so no paper number is keyed to it.

The numbers hold for the paper's setup only (spec §14.1, our ``scenario=paper``): a job every
1000 time units (our ``mean_interarrival_s``) up to a horizon of 1e6.
"""

from __future__ import annotations

PAPER_MEAN_INTERARRIVAL_S = 1000.0
"""Load of the paper's main results (time units treated as seconds, spec §9.1)."""

PAPER_HORIZON_S = 1.0e6
"""Horizon of the paper's main results (seconds)."""

PAPER_POLICY_LABELS: dict[str, str] = {
    "para_max": "Para_max",
    "para_min": "Para_min",
    "random": "Random",
    "pacml_beta": "PAC-ML",
}
"""Our policy name -> the paper's label (the paper's PAC-ML is our per-beta agent, ``pacml_beta``)."""

PAPER_BLOCKING_RATE: dict[str, dict[str, float]] = {
    "para_max": {"A": 0.2624, "B": 0.2631, "C": 0.2674, "D": 0.2631},
    "para_min": {"A": 0.3087, "B": 0.3956, "C": 0.3074, "D": 0.1419},
    "random": {"A": 0.5172, "B": 0.6011, "C": 0.5055, "D": 0.4652},
    "pacml_beta": {"A": 0.2209, "B": 0.2641, "C": 0.1247, "D": 0.1037},
}
"""Blocking rate (fraction of arrived jobs) by policy and beta distribution (spec §14.2)."""

PAPER_DEMAND_THROUGHPUT_BPS: dict[str, dict[str, float]] = {
    "para_max": {"A": 2.325e7, "B": 2.351e7, "C": 2.356e7, "D": 2.351e7},
    "para_min": {"A": 2.204e7, "B": 1.923e7, "C": 2.211e7, "D": 2.733e7},
    "random": {"A": 1.537e7, "B": 1.282e7, "C": 1.568e7, "D": 1.723e7},
    "pacml_beta": {"A": 2.470e7, "B": 2.343e7, "C": 2.779e7, "D": 2.840e7},
}
"""Demand throughput (bytes per second) by policy and beta distribution (spec §14.3)."""
