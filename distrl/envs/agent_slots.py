"""N-agent PettingZoo parallel envs as one gymnasium vector env: each agent of each env copy is a slot of the batch
(Sample Factory's model), all slots acting with one shared policy (parameter sharing) or each policy with its own
(``agents.policies``: a view of its slots per policy, ``distrl/envs/slot_views.py``).

Slot ``c * N + i`` is agent ``i`` (in ``possible_agents`` order) of copy ``c``. A step sends every live agent its
slot's action and returns one row per slot:

- a live agent's observation, reward and flags, as the parallel env returns them;
- an agent that finished on an earlier step while others play on: a *dead* step, its last observation, reward 0,
  ``terminated`` and ``info["_env_reset"]`` set, so the worker keeps the step out of the loss and out of the
  episode statistics (the episode was counted on the step the agent finished);
- gymnasium's NEXT_STEP autoreset per copy: once no agent of a copy is left, its next step resets it (the actions
  are ignored) and returns the new episode's observations.

An agent's episode return is its own rewards summed; the statistics report one episode per agent. Observations
that are Dicts or Tuples are flattened per agent, as a gymnasium env's are (``distrl/common/spaces.py``); the model
reads the parts back from ``structured_observation_space``. Agents of different policies may see different spaces:
each agent's observation is then flattened into one zero-padded array (``widths``: each agent's part), and each
policy's view reads its own.
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from distrl.common.spaces import is_structured


class AgentSlotsVectorEnv(gym.vector.VectorEnv):
    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self, make_env: Callable[[], object], copies: int, critic: str = "local", info_keys: tuple[str, ...] = ()
    ):
        """``make_env()``: one PettingZoo ``ParallelEnv`` (``distrl/envs/agents.py`` checks its spaces before Ray
        starts:
        alike for every agent of a policy, vectors of one dtype where policies' differ). ``critic`` (``agents.critic``):
        ``local``, or what
        each slot's observation adds for a central critic as its ``critic`` part: the env's ``state()`` (``state``),
        or every agent's observation in the copy, in slot order (``observations``). ``info_keys``
        (``env.info_metrics``): the agents' info entries each step's info carries, per slot (``_KEY`` marking the slots
        that have one)."""
        self.info_keys = tuple(info_keys)
        self.envs = [make_env() for _ in range(copies)]
        first = self.envs[0]
        self.agent_names = list(first.possible_agents)
        self.slot_of = {name: i for i, name in enumerate(self.agent_names)}
        self.num_agents = len(self.agent_names)
        self.num_envs = copies * self.num_agents
        self.critic = critic
        spaces = [first.observation_space(name) for name in self.agent_names]
        # Agents whose spaces differ (each policy's agents alike: distrl/envs/agents.py checks) share one array: each
        # agent's flattened observation, zero-padded to the widest; a policy's view reads its own width.
        self._structured = [space if is_structured(space) else None for space in spaces]
        flats = [gym.spaces.flatten_space(space) if is_structured(space) else space for space in spaces]
        self.widths = [int(np.prod(f.shape)) for f in flats]
        own, own_flat = spaces[0], flats[0]
        self._padded = any(f != own_flat for f in flats[1:])
        if self._padded:
            wide = max(self.widths)
            low, high = np.zeros((2, len(flats), wide), own_flat.dtype)
            for i, f in enumerate(flats):
                low[i, : self.widths[i]], high[i, : self.widths[i]] = f.low.reshape(-1), f.high.reshape(-1)
            own = own_flat = gym.spaces.Box(low.min(axis=0), high.max(axis=0), (wide,), own_flat.dtype)
        obs_space = own
        if critic != "local":  # the actor reads "actor", the critic both (model.critic_parts)
            extra = central_part_space(getattr(first, "state_space", None), critic, own_flat, self.num_agents)
            obs_space = gym.spaces.Dict({"actor": own, "critic": extra})
        self.structured_observation_space = obs_space if is_structured(obs_space) else None
        self.single_observation_space = gym.spaces.flatten_space(obs_space) if is_structured(obs_space) else obs_space
        self.single_action_space = first.action_space(self.agent_names[0])
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        acting = [first.action_space(name) for name in self.agent_names]
        if any(space != acting[0] for space in acting[1:]):  # agents of different policies: a slot's own kind of action
            self.action_space = gym.spaces.Tuple([acting[i % self.num_agents] for i in range(self.num_envs)])
        space = self.single_observation_space
        self._obs = np.zeros((self.num_envs, *space.shape), dtype=space.dtype)
        # each agent's own observation (flattened): the whole observation, or its actor part with a central critic
        self._own = self._obs if critic == "local" else np.zeros((self.num_envs, *own_flat.shape), own_flat.dtype)
        self._alive = np.zeros(self.num_envs, dtype=bool)  # the agent is in its copy's ``agents``
        self._needs_reset = np.zeros(copies, dtype=bool)  # no agent left: the next step resets the copy

    def _write(self, copy: int, observations: dict) -> None:
        base = copy * self.num_agents
        for name, obs in observations.items():
            i = self.slot_of[name]
            structured = self._structured[i]
            flat = gym.spaces.flatten(structured, obs) if structured is not None else obs
            if self._padded:
                self._own[base + i, : self.widths[i]] = flat
            else:
                self._own[base + i] = flat
        if self.critic == "local":
            return
        # every slot of the copy: its own observation, then the copy's central part (an agent that finished: its last)
        own = self._own[base : base + self.num_agents]
        central = (
            np.asarray(self.envs[copy].state(), np.float32).reshape(-1) if self.critic == "state" else own.reshape(-1)
        )
        self._obs[base : base + self.num_agents] = np.concatenate(
            [own, np.broadcast_to(central, (len(own), central.size))], axis=1
        )

    def _reset_copy(self, copy: int, seed: int | None) -> None:
        observations, _ = self.envs[copy].reset(seed=seed)
        base = copy * self.num_agents
        self._own[base : base + self.num_agents] = 0
        self._write(copy, observations)
        self._alive[base : base + self.num_agents] = [name in observations for name in self.agent_names]
        self._needs_reset[copy] = not self._alive[base : base + self.num_agents].any()

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        for copy in range(len(self.envs)):
            self._reset_copy(copy, None if seed is None else seed + copy)
        return self._obs.copy(), {}

    def step(self, actions):
        n = self.num_agents
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminated = np.zeros(self.num_envs, dtype=bool)
        truncated = np.zeros(self.num_envs, dtype=bool)
        dead = np.zeros(self.num_envs, dtype=bool)
        info_values = {key: np.zeros(self.num_envs, dtype=object) for key in self.info_keys}
        info_has = {key: np.zeros(self.num_envs, dtype=bool) for key in self.info_keys}
        for copy, env in enumerate(self.envs):
            base = copy * n
            if self._needs_reset[copy]:  # NEXT_STEP: this step only starts the copy's next episode
                self._reset_copy(copy, None)
                continue
            was_alive = self._alive[base : base + n].copy()
            sent = {name: actions[base + self.slot_of[name]] for name in env.agents}
            observations, reward, term, trunc, infos = env.step(sent)
            self._write(copy, observations)
            for name, i in self.slot_of.items():
                slot = base + i
                if not was_alive[i]:
                    terminated[slot] = dead[slot] = True  # finished earlier: no transition of its own
                    continue
                rewards[slot] = reward.get(name, 0.0)
                for key in self.info_keys:
                    if key in (infos.get(name) or {}):
                        info_values[key][slot], info_has[key][slot] = infos[name][key], True
                terminated[slot] = bool(term.get(name, False))
                truncated[slot] = bool(trunc.get(name, False)) and not terminated[slot]
            live = set(env.agents)
            self._alive[base : base + n] = [name in live for name in self.agent_names]
            # An agent gone from ``agents`` without a flag of its own (an env that only drops it) finished now.
            vanished = (
                was_alive & ~self._alive[base : base + n] & ~terminated[base : base + n] & ~truncated[base : base + n]
            )
            terminated[base : base + n] |= vanished
            self._needs_reset[copy] = not live
        info = {"_env_reset": dead} if dead.any() else {}
        for key in self.info_keys:
            info[key], info[f"_{key}"] = info_values[key], info_has[key]
        return self._obs.copy(), rewards, terminated, truncated, info

    def close(self, **kwargs) -> None:
        for env in self.envs:
            env.close()


def central_part_space(state_space, critic: str, own_flat: gym.Space, num_agents: int) -> gym.spaces.Box:
    """The ``critic`` part of each slot's observation for ``agents.critic``: the env's ``state_space`` flattened, or
    every agent's (flattened) observation side by side."""
    if critic == "state":
        space = gym.spaces.flatten_space(state_space)
        return gym.spaces.Box(space.low, space.high, space.shape, np.float32)
    return gym.spaces.Box(np.tile(own_flat.low, num_agents), np.tile(own_flat.high, num_agents), dtype=np.float32)
