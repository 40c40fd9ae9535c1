"""A critic that sees more than its actor: a multi-agent run's central critic (``agents.critic``: the env's global state
or every agent's observation) and an asymmetric actor-critic (``model.critic_parts``: Dict parts only the critic
reads). Real PettingZoo envs from ``distrl/envs/testing.py`` and CartPole with a Dict observation."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from distrl.common.checkpoint import save_checkpoint
from distrl.config import load_config
from distrl.deploy.policy import Policy
from distrl.driver.run_state import RunState
from distrl.envs import make_run_vec_env, probe_run_spaces
from distrl.learner import Learner
from distrl.models import build_model
from distrl.rollout import make_worker

DYING = "distrl.envs.testing:dying_agents"


def config_for(env_id: str, copies: int, **overrides):
    return load_config(
        None,
        {
            "env.id": env_id,
            "env.num_envs_per_worker": copies,
            "ppo.minibatch_size": 32,
            "rollout.compile.backend": "eager",
            **overrides,
        },
    )


@pytest.mark.parametrize("critic", ["state", "observations"])
def test_each_slot_sees_its_own_observation_then_the_copys_central_part(critic):
    """dying_agents: agent i observes (i, t); the state is (t, agents left); agent i finishes at t = 2(i + 1). At
    t = 3 agent 0 has finished: the others' central part keeps its last observation (0, 2)."""
    config = config_for(DYING, 2, **{"agents.critic": critic})
    obs_space, _ = probe_run_spaces(config)
    assert list(obs_space.spaces) == ["actor", "critic"]
    assert obs_space["critic"].shape == ((2,) if critic == "state" else (6,))
    envs = make_run_vec_env(config)
    obs, _ = envs.reset(seed=0)
    for _ in range(3):
        obs, *_ = envs.step(np.zeros(6, np.int64))
    own = [[0, 2], [1, 3], [2, 3]]
    central = [3, 2] if critic == "state" else [0, 2, 1, 3, 2, 3]
    np.testing.assert_array_equal(obs[:3], [o + central for o in own])
    np.testing.assert_array_equal(obs[3:], obs[:3])  # the second copy: the same
    envs.close()


def test_the_actor_reads_its_own_part_alone_and_the_critic_reads_both():
    space = gym.spaces.Dict({"actor": gym.spaces.Box(-1, 1, (4,)), "critic": gym.spaces.Box(-1, 1, (12,))})
    config = load_config(None, [])
    torch.manual_seed(0)
    model = build_model(space, gym.spaces.Discrete(2), config.model)
    assert model.critic_only == ("critic",)
    obs = torch.randn(5, 16)
    other = obs.clone()
    other[:, 4:] = torch.randn(5, 12)  # only the critic's part differs
    (pd_a, value_a), (pd_b, value_b) = model(obs), model(other)
    torch.testing.assert_close(pd_a, pd_b, rtol=0, atol=0)
    assert not torch.allclose(value_a, value_b)
    with pytest.raises(ValueError, match="model.shared_trunk=true: the observation has parts only the critic reads"):
        build_model(space, gym.spaces.Discrete(2), config.model.model_copy(update={"shared_trunk": True}))


@pytest.mark.parametrize("recurrent", [False, True], ids=["feedforward", "recurrent"])
def test_a_central_critic_run_trains_and_its_policy_acts_on_the_agents_own_observations_alone(tmp_path, recurrent):
    # recurrent: MAPPO's recurrent policy and critic, an LSTM core in each tower.
    memory = {"model.lstm_size": 8, "ppo.seq_len": 16} if recurrent else {}
    config = config_for(
        "distrl.envs.testing:cartpole_team",
        2,
        **{"agents.critic": "observations", "rollout.rollout_length": 32, **memory},
    )
    spaces = probe_run_spaces(config)
    worker = make_worker(config)
    learner = Learner(config, *spaces)
    info, batch = worker.sample()
    if recurrent:  # each chunk's starting state: the actor's core then the critic's
        assert learner.model.lstm_size == 16 and batch.h0.shape[-1] == 16
    result = learner.update((info, batch))
    assert result.updated and np.isfinite(result["loss_value"]) and np.isfinite(result["loss_policy"])
    payload = {"counters": RunState().state(), "learner": learner.state(), "config": config.model_dump(mode="json")}
    policy = Policy.from_checkpoint(save_checkpoint(tmp_path / "run", 1, payload, keep=1))
    full = worker.envs.reset(seed=3)[0]
    own = full[:, :4]  # the actor part: each CartPole's own 4 numbers
    actions, _ = policy.predict(full)
    by_parts, _ = policy.predict({"actor": own, "critic": full[:, 4:]})
    alone, _ = policy.predict({"actor": own})  # decentralised execution: no critic part given
    np.testing.assert_array_equal(actions, by_parts)
    np.testing.assert_array_equal(actions, alone)
    worker.close()


def test_an_asymmetric_single_agent_critic_reads_privileged_parts_the_actor_does_not():
    """CartPole as a Dict (position, velocity) with model.critic_parts=[velocity]: the actor acts on positions alone."""
    config = config_for(
        "distrl.envs.testing:dict_obs_cartpole", 8, **{"model.critic_parts": ["velocity"], "env.vectorization": "sync"}
    )
    worker = make_worker(config)
    assert worker.model.critic_only == ("velocity",)
    actor_inputs = sum(
        p.shape[1] for n, p in worker.model.actor_encoder.named_parameters() if n.endswith("0.net.0.weight")
    )
    assert actor_inputs == 2  # position and angle
    info, batch = worker.sample()
    learner = Learner(config, *probe_run_spaces(config))
    assert learner.update((info, batch)).version == 1
    worker.close()
