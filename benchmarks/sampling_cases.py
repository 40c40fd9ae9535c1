"""The rollout workers the sampling studies run: the ways a worker's env copies can step (``STEPPING``) and the
worker configs ``sampling.py`` measures (``CASES``, ``case_config``), which ``worker_inference.py`` and
``env_groups.py`` take too."""

from __future__ import annotations

from distrl.config import load_config
from distrl.envs.kinds import resolve_agents

# The ways a worker's env copies can step, as the sampling benchmarks compare them (sampling.py, env_groups.py):
# name -> (rollout.env_groups, half the copies acted on as they become ready: rollout.ready_envs)
STEPPING = {"1": (1, False), "2": (2, False), "ready": (1, True)}


def stepping_settings(way: str, copies: int) -> list[str]:
    """``--set`` items for the way ``way`` of stepping ``copies`` env copies."""
    groups, ready = STEPPING[way]
    return [f"rollout.env_groups={groups}", f"rollout.ready_envs={copies // 2 if ready else 0}"]


def stepping_label(way: str, copies: int) -> str:
    """The way ``way`` of stepping ``copies`` env copies, in a results table's words."""
    groups, ready = STEPPING[way]
    return f"the first {copies // 2} of {copies} ready" if ready else f"{groups} group" + "s" * (groups > 1)


CASES = {
    # name: (config overrides, rollout length)
    "cartpole_mlp_64": (["env.id=CartPole-v1", "env.num_envs_per_worker=64"], 128),
    "cartpole_lstm_16": (
        [
            "env.id=distrl.envs.wrappers:cartpole_no_velocity",
            "env.vectorization=sync",
            "env.num_envs_per_worker=16",
            "model.lstm_size=64",
            "model.shared_trunk=true",
            "model.hidden=[64]",
            "ppo.seq_len=16",
        ],
        128,
    ),
    # N agents as slots (``distrl/envs/agents.py``) beside the one-agent env stepped the same way: 48 CartPoles in
    # Python either way, as 48 envs or as 16 copies of a 3-agent team
    "cartpole_sync_48": (["env.id=CartPole-v1", "env.vectorization=sync", "env.num_envs_per_worker=48"], 128),
    "cartpole_team_48": (["env.id=distrl.envs.testing:cartpole_team", "env.num_envs_per_worker=16"], 128),
    # the same team with a policy per agent (agents.policies): three policies, each acting for its 16 slots
    "cartpole_team_48_per_agent": (
        ["env.id=distrl.envs.testing:cartpole_team", "env.num_envs_per_worker=16", "agents.policies=per_agent"],
        128,
    ),
    "breakout_cnn_8": (
        [
            "env.id=ALE/Breakout-v5",
            "env.num_envs_per_worker=8",
            "model.type=cnn",
            "model.hidden=[512]",
            "model.shared_trunk=true",
            "model.activation=relu",
        ],
        32,
    ),
    "breakout_cnn_32": (
        [
            "env.id=ALE/Breakout-v5",
            "env.num_envs_per_worker=32",
            "model.type=cnn",
            "model.hidden=[512]",
            "model.shared_trunk=true",
            "model.activation=relu",
        ],
        32,
    ),
}


def case_config(name: str, backend: str, stepping: str = "1"):
    overrides, length = CASES[name]
    num_envs = int(next(o for o in overrides if o.startswith("env.num_envs_per_worker=")).split("=")[1])
    config = load_config(
        None,
        [
            *overrides,
            f"rollout.rollout_length={length}",
            f"ppo.minibatch_size={num_envs * length}",
            f"rollout.compile.backend={backend}",
            f"rollout.compile.strict={backend != 'auto'}",
            "rollout.compile.verify_every_sync=false",
            *stepping_settings(stepping, num_envs),
        ],
    )
    config = resolve_agents(config)  # an N-agent env's copies fill copies x agents slots: one minibatch of them all
    return load_config(config, {"ppo.minibatch_size": config.worker_batch_size})
