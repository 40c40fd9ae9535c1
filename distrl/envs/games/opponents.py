"""Learned opponents inside a rollout worker: the learner's own policy (``latest``) and frozen snapshots.

A snapshot's weights reach the worker once, through the object store, when a plan first names
it; it then acts through a policy built on the worker's own backend (onnxrt, inductor, ...) and
checked against eager on the worker's observations, like the worker's own policy after a sync.
Policies of snapshots no longer drawn are kept for reuse by the next new snapshot.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


class LearnedOpponents:
    def __init__(self, latest, new_policy: Callable, inputs: Callable[[], tuple], dist):
        """``latest``: the worker's policy; ``new_policy()``: another policy of the same model on the same backend;
        ``inputs()``: the observations the worker acts on (for the check); ``dist``: the model's ``ActionDist``."""
        self.latest = latest
        self.new_policy = new_policy
        self.inputs = inputs
        self.dist = dist
        self.policies: dict[str, object] = {}
        self.spare: list = []
        self.checks = 0

    def sync(self, weights: dict, playing: set[str] = frozenset()) -> None:
        """Hold a policy for every snapshot in ``weights`` (name -> weights, or an object-store ref to them), and
        keep those of ``playing``: snapshots in games still going on, which a new plan may no longer name."""
        for name in [n for n in self.policies if n not in weights and n not in playing]:
            self.spare.append(self.policies.pop(name))
        for name, held in weights.items():
            if name in self.policies:
                continue
            if not isinstance(held, dict):  # an ObjectRef (under Ray)
                import ray

                held = ray.get(held)
            policy = self.spare.pop() if self.spare else self.new_policy()
            policy.update_weights(held)
            policy.verify(self.inputs(), f"league opponent {name}")
            self.checks += 1
            self.policies[name] = policy

    def backends(self) -> set[str]:
        return {p.backend for p in self.policies.values()}

    def act(self, names: np.ndarray, obs: np.ndarray, mask: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
        """Sampled actions (stochastic, as the learner acts) for the rows of ``obs``, row ``i`` played by ``names[i]``
        (``latest`` or a snapshot): one call per policy on its rows, then one draw for every row."""
        pd_params = None
        for name in sorted(set(names)):
            rows = names == name
            policy = self.latest if name == "latest" else self.policies[name]
            out = policy(obs[rows])[0]
            if pd_params is None:
                pd_params = np.empty((len(obs), *out.shape[1:]), dtype=out.dtype)
            pd_params[rows] = out
        return self.dist.sample_numpy(pd_params, rng, mask)[0]
