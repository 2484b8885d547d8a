"""Regenerate workloads/data/beta_pmfs.json: the paper's JCT-target distributions B, C, D.

Follows the original construction (spec §14.1, CustomSkewNorm): draw 50 000 skew-normal samples
(loc=1, scale=1), min-max normalise them to [0, 1], clamp values <= 0.1 to 0.1, histogram them
into 1000 bins and use the bins' right edges rounded to 2 decimals as the support. The original
redrew this PMF from scipy's global RNG at every construction, so its statistics varied from run
to run (the mean of C ranges over about 0.47-0.53 across seeds). We draw it once per distribution
with a fixed seed, chosen (by a search over seeds 0-299) so that the PMF matches the statistics
table of the spec (mean, 5/25/50/75/95 % quantiles, mean ceil(1/beta)) that was measured on the
original code; every run and every machine then uses the same distribution.

Usage: python scripts/make_beta_pmfs.py
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from scipy import stats

OUT = Path(__file__).resolve().parents[1] / "workloads" / "data" / "beta_pmfs.json"
SKEWS = {"B": 5.0, "C": 0.0, "D": -5.0}
#: Per-distribution seeds whose draw matches the spec's statistics table exactly.
SEEDS = {"B": 106, "C": 230, "D": 196}


def custom_skew_norm_pmf(skew: float, rng: np.random.Generator) -> dict[float, float]:
    x = stats.skewnorm.rvs(a=skew, loc=1.0, scale=1.0, size=50_000, random_state=rng)
    x = x - x.min()
    x = x / x.max()
    x[x <= 0.1] = 0.1
    counts, edges = np.histogram(x, bins=1000)
    support = np.round(edges[1:], 2)
    pmf: dict[float, float] = {}
    for value, count in zip(support, counts, strict=True):
        if count:
            pmf[float(value)] = pmf.get(float(value), 0.0) + float(count)
    total = sum(pmf.values())
    return {k: v / total for k, v in sorted(pmf.items())}


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    out = {"generator": "scripts/make_beta_pmfs.py", "distributions": {}}
    for name, skew in SKEWS.items():
        pmf = custom_skew_norm_pmf(skew, np.random.default_rng(SEEDS[name]))
        out["distributions"][name] = {"skew": skew, "seed": SEEDS[name], "values": list(pmf),
                                      "probs": list(pmf.values())}
        v, p = np.array(list(pmf)), np.array(list(pmf.values()))
        cdf = np.cumsum(p)
        q = [float(v[np.searchsorted(cdf, t)]) for t in (0.05, 0.25, 0.5, 0.75, 0.95)]
        print(name, "mean", round(float(v @ p), 3), "quantiles", q,
              "mean ceil(1/b)", round(float(np.ceil(1 / v - 1e-9) @ p), 2))
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
