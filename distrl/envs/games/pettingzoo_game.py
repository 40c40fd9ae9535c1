"""Two-player PettingZoo games, named by their PettingZoo registry id (``pettingzoo/classic/connect_four-v3``).

Parallel games (every agent acts each step) are used as they are. Turn-based AEC games go
through PettingZoo's own ``turn_based_aec_to_parallel`` conversion: every agent submits an
action each step and only the agent whose turn it is has its action applied; the next agent to
move is in its ``infos[agent]["active_agent"]``. Classic games put a legal-move ``action_mask``
beside the ``observation`` in a Dict; it is split off here and honoured wherever distrl acts.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np

from distrl.envs.games.base import GameError, StepResult
from distrl.envs.games.connect_four import heuristic as connect_four_heuristic

PREFIX = "pettingzoo/"
HEURISTICS = {"classic/connect_four-v3": connect_four_heuristic}  # scripted players, by registry id


def _make(name: str, kwargs: dict):
    """The env (parallel API) and whether it is turn-based; GameError when PettingZoo does not know ``name``."""
    import pettingzoo
    from pettingzoo.utils.conversions import turn_based_aec_to_parallel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PettingZoo's deprecation notes on its own wrappers
        try:
            pettingzoo.spec("parallel", name)
            return pettingzoo.make("parallel", name, **kwargs), False
        except pettingzoo.env_registry.exceptions.PettingZooRegistryError:
            pass
        try:
            aec = pettingzoo.make("aec", name, **kwargs)
        except pettingzoo.env_registry.exceptions.PettingZooRegistryError as exc:
            raise GameError(
                f"env.id='{PREFIX}{name}': not a PettingZoo registry id ({str(exc).splitlines()[0][:160]})"
            ) from None
        return turn_based_aec_to_parallel(aec), True


def _terminates_illegal(env) -> bool:
    """Whether an illegal move ends the game (PettingZoo's TerminateIllegalWrapper): such a game needs masks."""
    from pettingzoo.utils.wrappers import TerminateIllegalWrapper

    node = getattr(env, "aec_env", env)
    while node is not None:
        if isinstance(node, TerminateIllegalWrapper):
            return True
        node = getattr(node, "env", None)
    return False


class PettingZooGame:
    def __init__(self, name: str, num_envs: int, kwargs: dict | None = None):
        self.name = name
        self.num_envs = num_envs
        built = [_make(name, dict(kwargs or {})) for _ in range(num_envs)]
        self.envs = [env for env, _ in built]
        self.turn_based = built[0][1]
        first = self.envs[0]
        self.agents = list(first.possible_agents)
        if len(self.agents) != 2:
            raise GameError(
                f"env.id='{PREFIX}{name}': has {len(self.agents)} agents ({', '.join(self.agents)}); a league "
                "game has exactly two"
            )
        space = first.observation_space(self.agents[0])
        self.masked = isinstance(space, gym.spaces.Dict) and "action_mask" in space.spaces
        if self.masked:
            space = space["observation"]
        elif isinstance(space, gym.spaces.Dict):
            raise GameError(
                f"env.id='{PREFIX}{name}': observations are a Dict {list(space.spaces)} without the "
                "'observation' and 'action_mask' keys distrl reads"
            )
        if _terminates_illegal(first) and not self.masked:
            raise GameError(
                f"env.id='{PREFIX}{name}': an illegal move ends this game, but its observations carry no "
                "action_mask to avoid one"
            )
        if not isinstance(space, gym.spaces.Box):
            raise GameError(f"env.id='{PREFIX}{name}': observation space {space} is not a Box")
        self.observation_space = gym.spaces.Box(
            space.low.astype(np.float32), space.high.astype(np.float32), space.shape, np.float32
        )
        self.action_space = first.action_space(self.agents[0])
        self.shaping_terms: tuple[str, ...] = ()
        self.team_size = 1  # two players: a member a side
        self._heuristic = HEURISTICS.get(name)
        self.obs = [dict() for _ in range(num_envs)]
        self.moving = np.zeros((num_envs, 2), dtype=bool)
        self.returns = np.zeros((num_envs, 2))
        self.moves: list[list] = [[] for _ in range(num_envs)]

    @property
    def has_heuristic(self) -> bool:
        return self._heuristic is not None

    def reset(self, copies: np.ndarray, seed: int | None = None) -> None:
        for i in np.flatnonzero(copies):
            env = self.envs[i]
            obs, _ = env.reset(seed=None if seed is None else seed + int(i))
            self.obs[i] = obs
            self.returns[i] = 0.0
            self.moves[i] = []
            if self.turn_based:
                mover = env.aec_env.agent_selection
                self.moving[i] = [agent == mover for agent in self.agents]
            else:
                self.moving[i] = [agent in env.agents for agent in self.agents]

    def to_move(self) -> np.ndarray:
        return self.moving.copy()

    def observe(self, seat: int, copies: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        agent = self.agents[seat]
        index = np.flatnonzero(copies)
        raw = [self.obs[i][agent] for i in index]
        if self.masked:
            obs = (
                np.stack([r["observation"] for r in raw]).astype(np.float32)
                if raw
                else np.zeros((0, *self.observation_space.shape), np.float32)
            )
            mask = (
                np.stack([r["action_mask"] for r in raw]).astype(bool)
                if raw
                else np.zeros((0, self.action_space.n), bool)
            )
            return obs, mask
        obs = np.stack(raw).astype(np.float32) if raw else np.zeros((0, *self.observation_space.shape), np.float32)
        return obs, None

    def step(self, actions: np.ndarray, acting: np.ndarray) -> StepResult:
        result = StepResult.nothing_yet(self.num_envs)
        rewards, done, score = result.rewards, result.done, result.score
        for i in np.flatnonzero(acting.any(axis=1)):
            env = self.envs[i]
            # Every agent submits an action; a turn-based conversion applies only the mover's.
            step_actions = {agent: _plain(actions[i, seat, 0]) for seat, agent in enumerate(self.agents)}
            self.moves[i].append(
                [int(s) for s in np.flatnonzero(acting[i])]
                + [_plain(actions[i, s, 0]) for s in np.flatnonzero(acting[i])]
            )
            obs, reward, terminated, truncated, infos = env.step(step_actions)
            self.obs[i].update(obs)
            rewards[i, :, 0] = [float(reward.get(agent, 0.0)) for agent in self.agents]
            self.returns[i] += rewards[i, :, 0]
            finished = not env.agents or all(terminated.get(a, False) or truncated.get(a, False) for a in self.agents)
            if finished:
                done[i] = True
                self.moving[i] = False
                r0, r1 = self.returns[i]
                score[i] = 1.0 if r0 > r1 else 0.5 if r0 == r1 else 0.0
            elif self.turn_based:
                mover = infos[self.agents[0]].get("active_agent", infos[self.agents[1]].get("active_agent"))
                self.moving[i] = [agent == mover for agent in self.agents]
            else:
                self.moving[i] = [agent in env.agents for agent in self.agents]
        return result

    def heuristic(self, obs, mask, rng, noise: float = 0.0):
        if self._heuristic is None:
            raise GameError(f"env.id='{PREFIX}{self.name}': distrl has no scripted player for this game")
        return self._heuristic(obs, mask, rng, noise)

    def record(self, copy: int) -> dict:
        """The moves of the copy's current game: ``[seat, action]`` per move (seats as they acted)."""
        return {"moves": [list(m) for m in self.moves[copy]]}


def _plain(action):
    value = np.asarray(action)
    return int(value) if value.ndim == 0 else value.astype(np.float32)
