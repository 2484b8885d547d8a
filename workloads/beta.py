"""JCT-target distributions: each job must finish within ``beta x`` its sequential JCT.

The paper's four distributions (spec §14.1) are :class:`PaperBeta` ``A``-``D``; users also get
:class:`FixedBeta`, :class:`UniformBeta` and :class:`PmfBeta` (any discrete distribution).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from workloads.errors import WorkloadError

_PMF_FILE = Path(__file__).resolve().parent / "data" / "beta_pmfs.json"


@runtime_checkable
class BetaDistribution(Protocol):
    """Draws each job's JCT target as a fraction ``beta`` of its sequential JCT."""

    def sample(self, rng: np.random.Generator) -> float:
        """Draw one ``beta`` (> 0)."""
        ...


class PmfBeta:
    """A discrete distribution over ``values`` with probabilities ``probs``.

    Args:
        values: Support (each in (0, 1]: a target above the sequential JCT means nothing).
        probs: Probabilities (>= 0, summing to 1 within 1e-6; renormalised exactly).
        name: Label used in records and plots.
    """

    def __init__(self, values: Sequence[float], probs: Sequence[float], name: str = "pmf") -> None:
        v = np.asarray(list(values), dtype=np.float64)
        p = np.asarray(list(probs), dtype=np.float64)
        field = f"beta ({name})"
        if v.ndim != 1 or v.size == 0 or v.shape != p.shape:
            raise WorkloadError(f"values and probs must be equal-length non-empty lists "
                                f"(got {v.size} values, {p.size} probs)", field=field)
        if not np.all(np.isfinite(v)) or np.any(v <= 0) or np.any(v > 1):
            raise WorkloadError(f"every value must be > 0 and <= 1 (a target is a fraction of the "
                                f"sequential JCT), got {v[(v <= 0) | (v > 1) | ~np.isfinite(v)][:3].tolist()}", field=field)
        if not np.all(np.isfinite(p)) or np.any(p < 0):
            raise WorkloadError("probabilities must be finite and >= 0", field=field)
        if not math.isclose(float(p.sum()), 1.0, abs_tol=1e-6):
            raise WorkloadError(f"probabilities sum to {p.sum():.6g}, not 1", field=field)
        self.values: NDArray[np.float64] = v
        self.probs: NDArray[np.float64] = p / p.sum()
        self._cdf = np.cumsum(self.probs)
        self._cdf[-1] = 1.0
        self.name = name

    def sample(self, rng: np.random.Generator) -> float:
        """Draw one value by inverse-CDF sampling (one uniform draw per job)."""
        return float(self.values[int(np.searchsorted(self._cdf, rng.random(), side="right"))])

    def mean(self) -> float:
        """Expected value."""
        return float(self.values @ self.probs)

    def quantile(self, q: float) -> float:
        """Smallest value whose CDF reaches ``q``."""
        return float(self.values[int(np.searchsorted(self._cdf, q - 1e-12))])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, mean={self.mean():.3f})"


@cache
def _paper_pmfs() -> dict[str, tuple[list[float], list[float]]]:
    doc = json.loads(_PMF_FILE.read_text())
    return {k: (d["values"], d["probs"]) for k, d in doc["distributions"].items()}


class PaperBeta(PmfBeta):
    """The paper's distributions (spec §14.1).

    ``A``: uniform over {0.10, 0.11, ..., 1.00}. ``B``/``C``/``D``: the original's
    ``CustomSkewNorm`` with skew +5 (tight targets), 0, -5 (loose targets), drawn once and
    shipped as ``data/beta_pmfs.json`` (see ``scripts/make_beta_pmfs.py``).
    """

    def __init__(self, name: Literal["A", "B", "C", "D"]) -> None:
        if name == "A":
            values = [round(x / 100, 2) for x in range(10, 101)]
            super().__init__(values, [1 / len(values)] * len(values), name="A")
            return
        pmfs = _paper_pmfs()
        if name not in pmfs:
            raise WorkloadError(f"unknown paper distribution {name!r} (choose A, B, C or D)", field="beta.name")
        super().__init__(*pmfs[name], name=name)


class FixedBeta:
    """Every job gets the same ``value`` (in (0, 1]: a fraction of the sequential JCT)."""

    def __init__(self, value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float) or not (0 < value <= 1):
            raise WorkloadError(f"must be a number in (0, 1] (a fraction of the sequential JCT), got {value!r}",
                                field="beta.value")
        self.value = float(value)
        self.name = f"fixed({value:g})"

    def sample(self, rng: np.random.Generator) -> float:
        """Return the fixed value (consumes no randomness)."""
        return self.value


class UniformBeta:
    """Uniform over ``[low, high]`` (within (0, 1]), rounded to ``decimals`` places if given."""

    def __init__(self, low: float, high: float, decimals: int | None = 2) -> None:
        for key, bound in (("low", low), ("high", high)):
            if isinstance(bound, bool) or not isinstance(bound, int | float) or not (0 < bound <= 1):
                raise WorkloadError(f"must be a number in (0, 1] (a fraction of the sequential JCT), got {bound!r}",
                                    field=f"beta.{key}")
        if low > high:
            raise WorkloadError(f"need low <= high, got low={low}, high={high}", field="beta.low")
        if decimals is not None and (isinstance(decimals, bool) or not isinstance(decimals, int) or decimals < 0):
            raise WorkloadError(f"must be null or an integer >= 0, got {decimals!r}", field="beta.decimals")
        self.low, self.high, self.decimals = float(low), float(high), decimals
        self.name = f"uniform({low:g},{high:g})"

    def sample(self, rng: np.random.Generator) -> float:
        """Draw one value."""
        x = float(rng.uniform(self.low, self.high))
        if self.decimals is not None:
            x = min(max(round(x, self.decimals), self.low), self.high)
        return x
