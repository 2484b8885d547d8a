"""Numpy helpers shared by the learned placer's modules (a leaf: imports nothing of the project)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray


def bucket(keys: NDArray[np.int64], values: NDArray[np.int64], n: int) -> tuple[NDArray[np.int64], ...]:
    """``values`` split by ``keys`` into ``n`` arrays."""
    order = np.argsort(keys, kind="stable")
    bounds = np.searchsorted(keys[order], np.arange(n + 1))
    sorted_values = values[order].astype(np.int64)
    return tuple(sorted_values[bounds[k]:bounds[k + 1]] for k in range(n))
