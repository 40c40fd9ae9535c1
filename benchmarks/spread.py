"""MPE ``simple_spread`` as the multi-agent studies play and train it: mpe2's env in its own world or in MAPPO's
(``mappo_world``: an env id, ``benchmarks.spread:mappo_world``), and a per-agent return in MAPPO's scale
(``mappo_return``; ``benchmarks/learning/spread_reference.py`` says why the formula holds and checks it).

mpe2 is installed apart (``pip install --no-deps mpe2``; docs/multiagent.md).
"""

from __future__ import annotations

import numpy as np

AGENTS, STEPS = 3, 25


def mappo_return(per_agent_return: float) -> float:
    """A per-agent ``simple_spread`` return (mpe2, 3 agents, 25 steps, ``local_ratio`` 0.5) in MAPPO's scale."""
    return 2 * AGENTS * per_agent_return - AGENTS * STEPS


def mappo_step_reward(world) -> float:
    """MAPPO's MPE reward for one step of ``world``: the sum over agents of ``-G`` minus one per agent each touches,
    itself included."""
    team = -sum(min(np.linalg.norm(a.state.p_pos - mark.state.p_pos) for a in world.agents) for mark in world.landmarks)
    touches = sum(
        np.linalg.norm(a.state.p_pos - b.state.p_pos) < a.size + b.size for a in world.agents for b in world.agents
    )
    return AGENTS * team - touches


MAPPO_LANDMARK_RANGE = 0.8  # MAPPO's MPE places landmarks in [-0.8, 0.8] (mpe2: [-1, 1]); agents in [-1, 1] in both


def mappo_world(shared_reward: bool = False, **kwargs):
    """mpe2's ``simple_spread_v3`` parallel env (``kwargs`` as its own) in MAPPO's world: landmarks placed in
    [-0.8, 0.8], as MAPPO's MPE places them; everything else is mpe2's. ``env.id:
    benchmarks.spread:mappo_world`` trains on it (``benchmarks/learning/multiagent.py``'s
    ``spread_mappo_world``).

    With ``shared_reward``, every agent gets the team's mean reward each step, as MAPPO's MPE gives every agent the
    team's sum (the same up to its scale): each agent then learns the objective MAPPO's scale measures, where mpe2's
    own reward weighs the agent's own collisions by a half beside half the team's distance (1.5 times what the team's
    return counts them). The per-agent return is then the team's mean, and ``mappo_return`` converts it alike."""
    from mpe2 import simple_spread_v3

    env = simple_spread_v3.parallel_env(**kwargs)
    scenario = env.unwrapped.scenario
    place = scenario.reset_world

    def reset_world(world, np_random):
        place(world, np_random)
        for landmark in world.landmarks:
            landmark.state.p_pos = landmark.state.p_pos * MAPPO_LANDMARK_RANGE

    scenario.reset_world = reset_world
    if not shared_reward:
        return env
    from pettingzoo.utils import BaseParallelWrapper  # mpe2's own dependency

    class SharedReward(BaseParallelWrapper):
        """Every agent's reward is the team's mean reward of the step."""

        def step(self, actions):
            obs, rewards, terminations, truncations, infos = self.env.step(actions)
            team = sum(rewards.values()) / len(rewards) if rewards else 0.0
            return obs, dict.fromkeys(rewards, team), terminations, truncations, infos

    return SharedReward(env)


def spread(placement: str = "mpe2"):
    """The spread env these scripts play and train on (AGENTS agents, STEPS steps, discrete actions), in the world of
    ``placement``: ``mpe2`` (landmarks in [-1, 1]) or ``mappo`` (``mappo_world``)."""
    from mpe2 import simple_spread_v3

    make = mappo_world if placement == "mappo" else simple_spread_v3.parallel_env
    return make(N=AGENTS, max_cycles=STEPS, continuous_actions=False)
