"""Where a return on MPE ``simple_spread`` stands: scripted policies' returns in distrl's scale and in MAPPO's.

distrl (and RLlib, in ``benchmarks/learning/multiagent.py``) report the per-agent return of mpe2's ``simple_spread_v3``
(3 agents, 25 steps, ``local_ratio`` 0.5): each agent's reward is half the team's (minus the sum over landmarks of the
nearest agent's distance, ``G``) and half its own (minus one per other agent it touches). MAPPO's code reports "average
episode rewards" from an MPE of its own, where every agent gets the sum of all agents' rewards, each being ``-G`` minus
one per agent it touches, itself included (its collision test counts an agent touching itself). Per step the two differ
by a scale and a constant, so over an episode

    MAPPO's return = 6 x distrl's per-agent return - 75

exactly, on the same world (this script checks it on every episode it plays, from the world's positions). The worlds
differ in one way the formula cannot carry: MAPPO's MPE places landmarks in [-0.8, 0.8], mpe2 in [-1, 1], so the same
play scores lower in mpe2's. ``benchmarks.spread.mappo_world`` is mpe2's env with MAPPO's placement, so the scripted
teams play both worlds (``--worlds``), and ``benchmarks/learning/multiagent.py`` trains on it (``spread_mappo_world``).

Scripted teams give the scale its landmarks: random actions, standing still, every agent to the landmarks' centre,
every agent to its nearest landmark (agents may share one), and the team's assignment (each agent to the landmark of
the assignment with the least total distance, which every agent can compute from what it observes).

    python benchmarks/learning/spread_reference.py                # 200 episodes a policy, in both worlds
    python benchmarks/learning/spread_reference.py --quick        # 10 episodes a policy
    python benchmarks/learning/spread_reference.py --scale -20.2  # a per-agent return in MAPPO's scale (no episodes)

mpe2 is installed apart (``pip install --no-deps mpe2``; docs/multiagent.md).
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.common import finish, start_study, study_parser
from benchmarks.spread import AGENTS, mappo_return, mappo_step_reward, spread

# Actions of mpe2's discrete MPE agents: 0 no-op, 1 left, 2 right, 3 down, 4 up.
NOOP, LEFT, RIGHT, DOWN, UP = range(5)


def toward(agent, target) -> int:
    """The move that brings ``agent`` closer to ``target`` along its larger gap (its speed counted in, so it brakes),
    or none when it is there."""
    gap = target - agent.state.p_pos - 0.3 * agent.state.p_vel
    if np.abs(gap).max() < 0.05:
        return NOOP
    if abs(gap[0]) > abs(gap[1]):
        return RIGHT if gap[0] > 0 else LEFT
    return UP if gap[1] > 0 else DOWN


def assignment(world) -> tuple[int, ...]:
    """The landmark of each agent in the assignment with the least total distance."""

    def cost(order):
        return sum(
            np.linalg.norm(world.agents[i].state.p_pos - world.landmarks[j].state.p_pos) for i, j in enumerate(order)
        )

    return min(itertools.permutations(range(len(world.landmarks))), key=cost)


def nearest(world, i: int):
    return min(
        (mark.state.p_pos for mark in world.landmarks), key=lambda p: np.linalg.norm(p - world.agents[i].state.p_pos)
    )


# name -> (what it does, its actions for one step: (world, rng, the episode's assignment) -> one action per agent)
POLICIES = {
    "random": ("a uniformly random action each step", lambda w, rng, plan: rng.integers(5, size=AGENTS).tolist()),
    "stay": ("no move", lambda w, rng, plan: [NOOP] * AGENTS),
    "centre": (
        "every agent to the landmarks' centre",
        lambda w, rng, plan: [toward(a, np.mean([m.state.p_pos for m in w.landmarks], axis=0)) for a in w.agents],
    ),
    "nearest": (
        "every agent to its nearest landmark",
        lambda w, rng, plan: [toward(a, nearest(w, i)) for i, a in enumerate(w.agents)],
    ),
    "assignment": (
        "each agent to its landmark in the least-distance assignment (fixed at the start)",
        lambda w, rng, plan: [toward(a, w.landmarks[plan[i]].state.p_pos) for i, a in enumerate(w.agents)],
    ),
}


def play(policy: str, episodes: int, seed: int, placement: str = "mpe2") -> dict:
    """``episodes`` episodes of ``policy`` in the world of ``placement`` (``mpe2``, or ``mappo``: MAPPO's landmark
    placement): its per-agent returns, MAPPO's returns read off the world, and the largest gap between MAPPO's return
    and ``mappo_return`` of the per-agent return."""
    env = spread(placement)
    act = POLICIES[policy][1]
    rng = np.random.default_rng(seed)
    ours, theirs = [], []
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        world = env.unwrapped.world
        plan = assignment(world)
        per_agent, mappo = 0.0, 0.0
        while env.agents:
            names = list(env.agents)
            _, rewards, *_ = env.step(dict(zip(names, act(world, rng, plan))))
            per_agent += float(np.mean([rewards[name] for name in names]))
            mappo += mappo_step_reward(world)
        ours.append(per_agent)
        theirs.append(mappo)
    env.close()
    ours, theirs = np.array(ours), np.array(theirs)
    return {
        "policy": policy,
        "world": placement,
        "what": POLICIES[policy][0],
        "episodes": episodes,
        "return": float(ours.mean()),
        "return_std": float(ours.std()),
        "mappo_return": float(theirs.mean()),
        "largest_gap": float(np.abs(theirs - mappo_return(ours)).max()),
    }


def main(argv=None) -> int:
    parser = study_parser(__doc__, quick="10 episodes a policy", overrides=False)
    parser.add_argument("--episodes", type=int, default=200, help="episodes a policy")
    parser.add_argument("--seed", type=int, default=1000, help="the first episode's seed")
    parser.add_argument("--policies", nargs="+", choices=sorted(POLICIES), default=list(POLICIES))
    parser.add_argument(
        "--worlds",
        nargs="+",
        choices=["mpe2", "mappo"],
        default=["mpe2", "mappo"],
        help="mpe2's landmark placement ([-1, 1]) and MAPPO's ([-0.8, 0.8], mappo_world)",
    )
    parser.add_argument(
        "--scale",
        type=float,
        nargs="+",
        metavar="RETURN",
        help="print these per-agent returns in MAPPO's scale and stop",
    )
    args, info = start_study(parser, argv)
    if args.scale:
        for value in args.scale:
            print(f"per-agent return {value:g} -> MAPPO's scale {mappo_return(value):.1f}")
        return 0
    episodes = 10 if args.quick else args.episodes
    rows = []
    for world, policy in itertools.product(args.worlds, args.policies):
        row = play(policy, episodes, args.seed, world)
        rows.append(row)
        print(
            f"{world:<6} {policy:<10} per-agent return {row['return']:7.2f} (std {row['return_std']:.2f})   "
            f"MAPPO's scale {row['mappo_return']:8.1f}   formula off by at most {row['largest_gap']:.1e}",
            flush=True,
        )
    off = max(row["largest_gap"] for row in rows)
    failures = [] if off < 1e-6 else [f"MAPPO's return read off the world is {off:.3g} from 6 x per-agent - 75"]
    columns = (
        "world | policy | what: what it does | "
        "return: per-agent return (distrl's, RLlib's) | mappo_return: MAPPO's scale | "
        "episodes"
    )
    return finish("spread_reference", args, info, rows, columns, failures=failures)


if __name__ == "__main__":
    sys.exit(main())
