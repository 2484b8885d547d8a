"""Shared by the adaptive agent's test files: the first agent's settings and small stand-ins."""

from __future__ import annotations

import numpy as np

from pacml.adaptive.policy import PacMLPolicy
from pacml.adaptive.selector import CONDITION_FEATURES, RULE_FEATURES

SHORT = ["scenario=paper", "beta=B", "horizon_s=60000", "progress=false"]


#: The settings of the first adaptive agent (the selector alone, first fit, no guard): most tests
#: change one setting from these, so that the behaviour they check is that setting's alone.
FIRST_AGENT = {"shadow_rules": 0, "shadow_margin": 3, "shadow_all_above_servers": None, "selector_margin": 0.0,
               "shadow_novelty": None, "shadow_familiar_z": None, "shadow_novel_margin": None,
               "shadow_warmup_scales": False, "lookup_after_window": False, "hold_until_window": False,
               "hold_from_job": 1, "block_search": 0, "shadow_blocks": False, "horizon_guard": False,
               "condition_critics": None, "feasible_fallback": False}


def _agent(*args, **settings) -> PacMLPolicy:
    """:class:`PacMLPolicy` with :data:`FIRST_AGENT`'s settings, then ``settings``."""
    return PacMLPolicy(*args, **{**FIRST_AGENT, **settings})


def _mlp(value: float = 0.0) -> list:
    """A one-layer 'MLP' scoring every rule ``value`` (a fallback that can be told apart)."""
    return [(np.zeros((1, CONDITION_FEATURES + RULE_FEATURES)), np.full(1, value))]
