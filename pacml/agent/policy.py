"""The per-beta learned policy behind the simulator's policy interface (``policy=pacml_beta``).

``PacMLBetaPolicy`` loads a policy checkpoint written by ``pacml train`` and decides each arriving
job from the same encoder the environment uses. Graph embeddings are cached per graph (they do
not depend on the cluster), so a decision costs one small MLP pass plus feature building.

torch and torch_geometric (seconds to import) are imported only once a checkpoint file has
been found, so ``policy=pacml_beta policy.checkpoint=<typo>`` fails at once, not after the imports.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pacml.agent.features import Encoder
from pacml.runfiles import save_torch_file
from pacml.shipped import load_payload, resolve_checkpoint
from simulator.cluster import ClusterState
from simulator.errors import ConfigError
from simulator.policy import Decision
from workloads.jobs import JobSpec

if TYPE_CHECKING:
    import torch

    from pacml.agent.model import ActorCritic

log = logging.getLogger(__name__)

POLICY_FORMAT = "pacml-policy"
POLICY_VERSION = 1


def save_policy(path: str | Path, model: ActorCritic, encoder: Encoder, meta: dict[str, Any] | None = None) -> Path:
    """Write a self-contained policy checkpoint atomically."""
    payload = {"format": POLICY_FORMAT, "version": POLICY_VERSION, "model_config": model.config,
               "model": model.state_dict(),
               "encoder": {"max_degree": encoder.max_degree, "mask": encoder.mask,
                           "fallback_interarrival_s": encoder.fallback_interarrival_s,
                           "placement_candidates": encoder.placement_candidates, "degrees": list(encoder.degrees)},
               "meta": meta or {}}
    return save_torch_file(path, payload)


def load_policy(path: str | Path, field: str = "policy.checkpoint") -> tuple[ActorCritic, Encoder, dict[str, Any]]:
    """Load a policy checkpoint: the model (eval mode), its encoder and its metadata; a bad ``path`` is a
    ConfigError on ``field`` (the key that named it)."""
    payload = load_payload(path, "policy.pt", POLICY_FORMAT, "policy", field)
    from pacml.agent.model import ActorCritic  # lazy: torch

    model = ActorCritic(**payload["model_config"])
    model.load_state_dict(payload["model"])
    model.eval()
    enc = payload["encoder"]
    encoder = Encoder(enc["max_degree"], enc["mask"], enc["fallback_interarrival_s"],
                      enc.get("placement_candidates", 0), tuple(enc.get("degrees", ())))
    return model, encoder, payload.get("meta", {})


@contextmanager
def _intra_op_threads(num_threads: int | None) -> Iterator[None]:
    """Run torch with ``num_threads`` intra-op threads inside the block, then restore the count."""
    import torch  # lazy: torch

    before = torch.get_num_threads()
    if num_threads is None or num_threads == before:
        yield
        return
    torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class PacMLBetaPolicy:
    """A trained PAC-ML agent as a simulator policy.

    Args:
        checkpoint: Policy file (or run directory holding ``policy.pt``, or a shipped name such
            as ``paper_betaC``).
        deterministic: Take the most probable valid degree (default) or sample.
        model: Use this in-memory model instead of a file (training-time evaluation).
        encoder: The encoder that goes with ``model``.
        num_threads: torch intra-op threads while deciding (restored after each decision);
            ``None`` keeps torch's setting (why 1: docs/policies.md, "The per-beta agents").
    """

    def __init__(self, checkpoint: str | Path | None = None, deterministic: bool = True,
                 model: ActorCritic | None = None, encoder: Encoder | None = None,
                 num_threads: int | None = 1) -> None:
        if num_threads is not None and (isinstance(num_threads, bool)
                                        or not isinstance(num_threads, int) or num_threads < 1):
            raise ConfigError(f"must be >= 1 or null, got {num_threads!r}",
                              field="policy.num_threads")
        self.num_threads = num_threads
        if model is None:
            if checkpoint is None:
                raise ConfigError("set policy.checkpoint=PATH", field="policy.checkpoint")
            model, encoder, self.meta = load_policy(checkpoint)
            best, rule = self.meta.get("best_val_blocking_rate"), self.meta.get("teacher_val_blocking_rate")
            if isinstance(best, float) and isinstance(rule, float) and best > rule:
                log.warning("%s validated at %.4f blocking, worse than its warm-start rule min_feasible(%s) at %.4f "
                            "(its train_summary.json: worse_than_teacher)", checkpoint, best,
                            self.meta.get("teacher_min_degree"), rule)
        else:
            self.meta = {}
        assert encoder is not None
        self.model = model
        self.encoder = encoder
        self.deterministic = deterministic
        #: ``k`` of the ``min_feasible`` rule the agent was warm-started from (``None`` if not);
        #: a lookahead planner wrapping the agent uses it as its fast rollout rule.
        teacher = self.meta.get("teacher_min_degree")
        self.teacher_min_degree: int | None = None if teacher is None else int(teacher)
        import torch  # lazy: torch

        self._embeddings: dict[str, torch.Tensor] = {}
        self._generator = torch.Generator().manual_seed(0)

    @staticmethod
    def check_config(node: dict[str, Any], topology: Any) -> None:
        """Preflight (``simulator.build.check_buildable``): the checkpoint file exists (no torch import),
        so a condition without an agent is refused before any run of a sweep starts."""
        if node.get("checkpoint") is not None:
            resolve_checkpoint(node["checkpoint"], "policy.pt", "policy", "policy.checkpoint")

    def reset(self, seed: int | None = None) -> None:
        """Reseed sampling (used only when not deterministic); keep cached embeddings."""
        self._generator.manual_seed(0 if seed is None else int(seed))

    def _embedding(self, job: JobSpec) -> torch.Tensor:
        key = job.graph.fingerprint
        emb = self._embeddings.get(key)
        if emb is None:
            import torch  # lazy: torch

            from pacml.agent.model import graph_data  # lazy: torch

            with torch.no_grad():
                emb = self.model.embed([graph_data(self.encoder.graph(job.graph))])
            self._embeddings[key] = emb
        return emb

    def probabilities(self, job: JobSpec, obs: dict) -> torch.Tensor:
        """Probability of every action of the encoded observation ``obs`` (0 where masked)."""
        import torch  # lazy: torch

        with torch.no_grad():
            logits, _ = self.model(self._embedding(job), torch.from_numpy(obs["globals"]).unsqueeze(0),
                                   torch.from_numpy(obs["actions"]).unsqueeze(0),
                                   torch.from_numpy(obs["action_mask"]).unsqueeze(0))
        return torch.softmax(logits, dim=1)[0]

    def decide(self, job: JobSpec, state: ClusterState) -> Decision:
        """The agent's degree (0 rejects) and, with learned placement, its block."""
        import torch  # lazy: torch

        with _intra_op_threads(self.num_threads):
            obs = self.encoder.encode(job, state)
            probs = self.probabilities(job, obs)
            if self.deterministic:
                action = int(torch.argmax(probs))
            else:
                action = int(torch.multinomial(probs, 1, generator=self._generator))
        degree, servers = self.encoder.decision(obs, action)
        if degree and degree not in state.feasibility.degrees:
            return Decision(0)
        return Decision(degree, servers)
