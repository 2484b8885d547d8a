"""Idle-gap insertion for the decoder's earliest-finish times (HEFT's insertion policy), batched.

Each rollout ``b`` keeps, per device ``d``, the busy intervals of the groups placed there, sorted
by start. A group ready at ``ready_s`` with duration ``dur_s`` starts in the first idle gap (or
after the last interval) that holds it. Compiled with numba: a decision scans every interval of
every (rollout, device), which a numpy version would do with (B, D, G) temporaries.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray


@njit(cache=True)
def earliest_starts(starts: NDArray[np.float64], ends: NDArray[np.float64], count: NDArray[np.int64],
                    ready_s: NDArray[np.float64], dur_s: NDArray[np.float64]) -> NDArray[np.float64]:
    """``(B, D)`` earliest start ``>= ready_s[b, d]`` of a gap of ``dur_s[d]`` on each device.

    ``starts``/``ends`` are ``(B, D, K)`` busy intervals sorted by start, ``count`` ``(B, D)``
    how many are used.
    """
    b_n, d_n = ready_s.shape
    out = np.empty((b_n, d_n))
    for b in range(b_n):
        for d in range(d_n):
            start = ready_s[b, d]
            dur = dur_s[d]
            for i in range(count[b, d]):
                if start + dur <= starts[b, d, i]:
                    break
                if ends[b, d, i] > start:
                    start = ends[b, d, i]
            out[b, d] = start
    return out


@njit(cache=True)
def insert(starts: NDArray[np.float64], ends: NDArray[np.float64], count: NDArray[np.int64],
           device: NDArray[np.int64], start_s: NDArray[np.float64], end_s: NDArray[np.float64]) -> None:
    """Add interval ``[start_s[b], end_s[b])`` on ``device[b]`` of every rollout ``b``, keeping order."""
    for b in range(device.shape[0]):
        d = device[b]
        n = count[b, d]
        i = n
        while i > 0 and starts[b, d, i - 1] > start_s[b]:
            starts[b, d, i] = starts[b, d, i - 1]
            ends[b, d, i] = ends[b, d, i - 1]
            i -= 1
        starts[b, d, i] = start_s[b]
        ends[b, d, i] = end_s[b]
        count[b, d] = n + 1
