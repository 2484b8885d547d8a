"""A Gymnasium environment over the simulator: one step per arriving job (docs/policies.md,
"Environment").

``step(action)`` applies ``Decision(degree=action)`` to the pending job, rewards its outcome and
advances to the next arrival; the episode terminates when the simulation ends (no truncation).
A masked action is applied as 0 (reject) and reported in ``info["invalid_action"]``. Caches
persist across episodes. Training episode seeds lie in ``[TRAIN_SEED_LOW, 2**31)``, above every
evaluation seed.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from hydra import compose, initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_config_search_path
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import OverrideType
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from pacml.agent.features import EDGE_FEATURES, GLOBAL_FEATURES, NODE_FEATURES, Encoder
from pacml.agent.rewards import JobAcceptance, StepOutcome
from simulator.build import build_feasibility, build_simulation, build_topology, build_workload
from simulator.feasibility import MaskKind
from simulator.policy import Decision
from simulator.simulation import Simulation
from workloads.jobs import JobSpec

#: Training episodes draw simulation seeds at or above this; evaluation seeds lie below it.
TRAIN_SEED_LOW = 1_000_000
CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


def compose_sim_config(overrides: Sequence[str] = ()) -> DictConfig:
    """The simulator config (``conf/sim.yaml`` of this package, never a user's ``--config-dir``)
    with Hydra overrides, inside or outside a Hydra app (``pacml train`` draws random conditions
    inside one: there a private config loader leaves the app's global Hydra state alone)."""
    if GlobalHydra.instance().is_initialized():
        loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(CONF_DIR)))
        cfg = loader.load_configuration("sim", list(overrides), run_mode=RunMode.RUN)
        with open_dict(cfg):
            del cfg["hydra"]
        return cfg
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(config_name="sim", overrides=list(overrides))


@functools.lru_cache(maxsize=64)
def _composed_groups(groups: tuple[str, ...]) -> DictConfig:
    return compose_sim_config([*groups, "progress=false"])


def compose_condition(overrides: Sequence[str]) -> DictConfig:
    """:func:`compose_sim_config` of ``overrides`` plus ``progress=false``, fast for many conditions
    that share their config-group choices (``beta=A``, ``arrivals=poisson``): the groups are
    composed once (cached), and the value overrides (``mean_interarrival_s=...``,
    ``workload.graphs=[...]``) are set on a copy, as Hydra parses and applies them. A Hydra composition
    per episode would cost a training run far more than the episode's decisions. Anything but plain ``key=value`` overrides is composed by Hydra as is.
    """
    parsed = OverridesParser.create().parse_overrides(list(overrides))
    if any(o.type != OverrideType.CHANGE or o.package is not None for o in parsed):
        return compose_sim_config([*overrides, "progress=false"])
    groups = tuple(o.input_line for o in parsed if "." not in o.key_or_group
                   and (CONF_DIR / o.key_or_group).is_dir())
    cfg = copy.deepcopy(_composed_groups(groups))
    for o in parsed:
        if o.input_line not in groups:
            OmegaConf.update(cfg, o.key_or_group, o.value(), merge=False)
    return cfg


class ClusterEnv(gym.Env[dict, int]):
    """Job partitioning on the RAMP cluster as a Gymnasium environment.

    Args:
        sim_config: A composed simulator config (``conf/sim.yaml``); ``None`` composes the
            default (paper scenario) with ``overrides``.
        overrides: Hydra overrides used when ``sim_config`` is ``None`` (e.g. ``["beta=C"]``).
        mask: Feasibility mask the agent acts under (``feasible``, ``placeable`` or ``paper``).
        reward: Reward function of a :class:`~pacml.agent.rewards.StepOutcome` (default +1/-1).
        share_with: Another environment of the same config whose placer/lookahead caches,
            workload and encoder this one shares (parallel environments warm one cache).
        placement_candidates: 0: the action is the degree and first-fit places the job.
            ``K > 0``: learned placement; the action picks one of the first ``K`` free blocks of
            a degree and the job is placed inside it (``pacml.agent.features.placement_candidates``).
        condition_sampler: Draws each training episode's condition (Hydra overrides, on this env's
            cluster) from the env's RNG, e.g. :class:`pacml.adaptive.conditions.ClusterConditions`;
            ``None``, or a reset with ``options={"sim_seed": s}``: ``sim_config``.
    """

    metadata = {"render_modes": []}

    def __init__(self, sim_config: DictConfig | Mapping[str, Any] | None = None, overrides: Sequence[str] = (),
                 mask: MaskKind = "feasible", reward: Callable[[StepOutcome], float] | None = None,
                 share_with: ClusterEnv | None = None, placement_candidates: int = 0,
                 condition_sampler: Callable[[np.random.Generator], Sequence[str]] | None = None) -> None:
        super().__init__()
        if sim_config is None:
            sim_config = compose_sim_config(overrides)
        elif not isinstance(sim_config, DictConfig):
            sim_config = OmegaConf.create(dict(sim_config))
        self.sim_config = sim_config
        if share_with is not None:
            self.topology, self.feasibility = share_with.topology, share_with.feasibility
            self.workload = share_with.workload
        else:
            self.topology = build_topology(sim_config)
            self.feasibility = build_feasibility(self.topology, sim_config.get("sim", {}))
            self.workload = build_workload(sim_config)
        self.max_degree = max(self.topology.degrees)
        fallback = float(sim_config.get("mean_interarrival_s") or 1.0)
        self.encoder = Encoder(self.max_degree, mask, fallback_interarrival_s=fallback,
                               placement_candidates=placement_candidates, degrees=self.topology.degrees)
        if (share_with is not None and share_with.encoder.mask == mask
                and share_with.encoder.placement_candidates == placement_candidates):
            self.encoder = share_with.encoder
        self.reward_fn = reward if reward is not None else JobAcceptance()
        n_actions = self.encoder.num_actions
        self.action_space = spaces.Discrete(n_actions)
        self.observation_space = spaces.Dict({
            "graph": spaces.Graph(node_space=spaces.Box(0.0, 1.0, (NODE_FEATURES,), np.float32),
                                  edge_space=spaces.Box(0.0, 1.0, (EDGE_FEATURES,), np.float32)),
            "globals": spaces.Box(-10.0, 10.0, (GLOBAL_FEATURES,), np.float32),
            "actions": spaces.Box(-1.0, 10.0, (n_actions, self.encoder.num_action_features), np.float32),
            "action_mask": spaces.MultiBinary(n_actions),
        })
        self.condition_sampler = condition_sampler
        #: Overrides of the current episode's condition (``None``: ``sim_config`` itself).
        self.episode_condition: list[str] | None = None
        self.sim: Simulation | None = None
        self._job: JobSpec | None = None
        self._obs: dict[str, Any] | None = None
        self._raw: dict[str, Any] | None = None
        self.episode_seed: int | None = None
        self.episode_actions: list[int] = []
        self.episode_return = 0.0

    # ------------------------------------------------------------------ Gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        """Start an episode; ``options={"sim_seed": s}`` fixes the simulation seed (evaluation),
        ``options={"condition": overrides}`` the condition (with a ``condition_sampler``)."""
        super().reset(seed=seed)
        options = options or {}
        condition = options.get("condition")
        if condition is None and self.condition_sampler is not None and "sim_seed" not in options:
            condition = list(self.condition_sampler(self.np_random))
        if "sim_seed" in options:
            sim_seed = int(options["sim_seed"])
        else:
            sim_seed = int(self.np_random.integers(TRAIN_SEED_LOW, 2**31 - 1))
        self.episode_seed = sim_seed
        self.episode_condition = None if condition is None else list(condition)
        self.episode_actions = []
        self.episode_return = 0.0
        if condition is None:
            cfg, workload = self.sim_config, self.workload
        else:
            # Same cluster (the sampler's promise), so the feasibility caches carry over.
            cfg = compose_condition(condition)
            workload = build_workload(cfg)
        self.sim = build_simulation(cfg, seed=sim_seed, feasibility=self.feasibility, workload=workload)
        self._job = self.sim.next_job()
        if self._job is None:
            raise RuntimeError("the episode has no arrivals (check horizon_s and the arrival process)")
        self._encode()
        return self._obs, self._info()

    def step(self, action: int) -> tuple[dict, float, bool, bool, dict]:
        """Decide the pending job's degree and advance to the next arrival."""
        assert self.sim is not None and self._job is not None, "call reset() before step()"
        assert self.action_space.contains(action), f"{action!r} is not in {self.action_space}"
        action = int(action)
        invalid = not bool(self._raw["action_mask"][action])
        degree, servers = (0, None) if invalid else self.encoder.decision(self._raw, action)
        job = self._job
        record = self.sim.apply(Decision(degree, servers))
        self.episode_actions.append(action)
        reward = float(self.reward_fn(StepOutcome(job, degree, record is None, record)))
        self.episode_return += reward
        self._job = self.sim.next_job()
        info: dict[str, Any] = {"invalid_action": invalid, "accepted": record is None}
        terminated = self._job is None
        if terminated:
            result = self.sim.finalize()
            info["summary"] = result.summary
            info["episode_return"] = self.episode_return
        else:
            self._encode()
            info.update(self._info())
        return self._obs, reward, terminated, False, info

    def action_masks(self) -> np.ndarray:
        """Valid actions of the pending job (bool array; the sb3-contrib convention)."""
        assert self._raw is not None, "call reset() first"
        return self._raw["action_mask"].copy()

    # ------------------------------------------------------------------ helpers
    @property
    def current_job(self) -> JobSpec:
        """The job waiting for a decision."""
        assert self._job is not None, "call reset() first"
        return self._job

    def current_state(self) -> Any:
        """The simulator's :class:`~simulator.cluster.ClusterState` for the pending job (what a
        heuristic policy would see; used to imitate one)."""
        assert self.sim is not None, "call reset() first"
        return self.sim.state()

    @property
    def raw_observation(self) -> dict[str, Any]:
        """The encoder's output for the pending job (graph features object, arrays)."""
        assert self._raw is not None, "call reset() first"
        return self._raw

    def _encode(self) -> None:
        assert self.sim is not None and self._job is not None
        raw = self.encoder.encode(self._job, self.sim.state())
        self._raw = raw
        g = raw["graph"]
        self._obs = {
            # Fresh arrays: callers may keep or modify what they are given (graph features are cached).
            "graph": spaces.GraphInstance(nodes=g.nodes.copy(), edges=g.edges.copy(), edge_links=g.edge_index.T.copy()),
            "globals": np.clip(raw["globals"], -10.0, 10.0),
            "actions": raw["actions"],
            "action_mask": raw["action_mask"].astype(np.int8),
        }

    def _info(self) -> dict[str, Any]:
        assert self._job is not None
        return {"graph_key": self._job.graph.fingerprint, "job_id": self._job.job_id, "model": self._job.model}

    def snapshot(self) -> dict[str, Any]:
        """Enough to rebuild this env's exact state: episode seed and condition, actions so far,
        RNG state."""
        return {"episode_seed": self.episode_seed, "actions": list(self.episode_actions),
                "np_random": self.np_random.bit_generator.state, "condition": self.episode_condition}

    def restore(self, snap: dict[str, Any]) -> None:
        """Rebuild the state of :meth:`snapshot` by replaying the episode (the simulator is
        deterministic given its seed and the actions)."""
        self.reset(options={"sim_seed": snap["episode_seed"], "condition": snap.get("condition")})
        for action in snap["actions"]:
            _, _, terminated, _, _ = self.step(action)
            if terminated:
                raise RuntimeError("snapshot replay ended the episode early")
        self.np_random.bit_generator.state = snap["np_random"]
