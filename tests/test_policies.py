"""Several trained policies in a multi-agent run (``agents.policies``): shared, one per agent, one per team. Each acts
for its own agents' slots in the worker, trains in its own learner and is checkpointed, exported and played by name.
Real PettingZoo envs from ``distrl/envs/testing.py`` (agents that finish one after another; a team of CartPoles)."""

import json

import numpy as np
import pytest
import torch

from distrl.common.checkpoint import save_checkpoint
from distrl.common.errors import EnvSpecError
from distrl.config import load_config
from distrl.deploy import evaluate, export_policies
from distrl.deploy.policy import Policy
from distrl.driver.run_state import RunState
from distrl.envs import make_run_vec_env, probe_run_spaces
from distrl.envs.policy_map import resolve
from distrl.learner import Learner
from distrl.learner.policy_set import PolicySetLearner, learner_class
from distrl.rollout import make_worker
from tests.conftest import run_cli

DYING = "distrl.envs.testing:dying_agents"
TEAM = "distrl.envs.testing:cartpole_team"
SPEAKER = "distrl.envs.testing:speaker_listener"


def config_for(env_id: str, copies: int, policies, *overrides: str):
    return load_config(
        None,
        {
            "env.id": env_id,
            "env.num_envs_per_worker": copies,
            "ppo.minibatch_size": 32,
            "rollout.compile.backend": "eager",
            "agents.policies": policies,
            **dict(o.split("=", 1) for o in overrides),
        },
    )


def test_a_mapping_gives_each_policy_its_agents_slots_in_every_copy():
    names = ("blue_0", "blue_1", "red_0", "red_1")
    teams = resolve({"red": ["red_*"], "blue": ["blue_*"]}, names)
    assert teams.names == ("red", "blue") and teams.agents == (("red_0", "red_1"), ("blue_0", "blue_1"))
    red, blue = teams.columns(12)  # 3 copies x 4 agents
    np.testing.assert_array_equal(red, [2, 3, 6, 7, 10, 11])
    np.testing.assert_array_equal(blue, [0, 1, 4, 5, 8, 9])
    each = resolve("per_agent", names)
    assert each.names == names and [list(c) for c in each.columns(8)] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    with pytest.raises(EnvSpecError, match="agent 'red_1' matches no policy"):
        resolve({"blue": ["blue_*"], "red": ["red_0"]}, names)
    with pytest.raises(EnvSpecError, match="agent 'red_0' matches red and any"):
        resolve({"red": ["red_*"], "any": ["*_0"], "rest": ["blue_1"]}, names)


def test_each_policy_acts_for_and_batches_only_its_own_agents():
    """dying_agents: agent i lives 2(i+1) steps, rewarded i+1 a step; the copy resets on the step after the last one
    finished (a 7-step cycle). ``first`` has agent_0, ``rest`` agents 1 and 2: each one's batch, episodes and env steps
    are its own slots', and together they are the worker's."""
    config = config_for(
        DYING,
        2,
        {"first": ["agent_0"], "rest": ["agent_1", "agent_2"]},
        "rollout.rollout_length=14",
        "ppo.minibatch_size=28",
    )
    worker = make_worker(config)
    info, batches = worker.sample()
    first, rest = batches.batches["first"], batches.batches["rest"]
    assert first.num_envs == 2 and rest.num_envs == 4
    assert set(np.unique(first.rewards)) <= {0.0, 1.0} and set(np.unique(rest.rewards)) == {0.0, 2.0, 3.0}
    np.testing.assert_array_equal(first.valid.sum(axis=0), [4, 4])  # two cycles of agent_0's two own steps
    np.testing.assert_array_equal(rest.valid.sum(axis=0), [8, 12, 8, 12])  # slots: copy 0's agents 1, 2, copy 1's
    assert sorted(info.policies["first"].episode_returns) == [2] * 4
    assert sorted(info.policies["rest"].episode_returns) == [8] * 4 + [18] * 4
    assert sorted(info.episode_returns) == sorted([2] * 4 + [8] * 4 + [18] * 4)
    assert info.policies["first"].env_steps == 28 and info.policies["rest"].env_steps == 56 and info.env_steps == 84
    assert batches.nbytes == first.nbytes + rest.nbytes == info.batch_bytes
    worker.close()


@pytest.mark.parametrize(
    "policies, expected",
    [
        ("shared", None),
        ("per_agent", ("pole_0", "pole_1", "pole_2")),
        ({"solo": ["pole_0"], "pair": ["pole_1", "pole_2"]}, ("solo", "pair")),
    ],
)
def test_each_mapping_trains_a_learner_per_policy_on_that_policys_data_alone(policies, expected):
    """Every mapping kind has as many learners as policies. A policy's learner after an update equals a plain learner
    of that policy (same seed) updated on that policy's part of the batch alone: nothing of another policy's slots
    reaches it, and the workers start from the learners' own version 0."""
    config = config_for(TEAM, 2, policies, "rollout.rollout_length=32")
    spaces = probe_run_spaces(config)
    worker = make_worker(config)
    sample = worker.sample()
    learner = learner_class(config)(config, *spaces)
    if expected is None:
        assert isinstance(learner, Learner)
        return
    assert isinstance(learner, PolicySetLearner) and tuple(learner.learners) == expected
    for k, name in enumerate(expected):  # version 0 on both sides
        for key, value in learner.learners[name].model.state_dict().items():
            torch.testing.assert_close(worker.models[k].state_dict()[key], value, rtol=0, atol=0)
    result = learner.update(sample)
    assert result.version == 1 and result.env_steps == sample[0].env_steps
    info, batches = sample
    for k, name in enumerate(expected):
        alone = Learner(config, *spaces, policy_index=k)
        alone_result = alone.update((info.for_policy(name), batches.batches[name]))
        assert result.metrics[f"{name}/loss_value"] == alone_result.metrics["loss_value"]
        for key, value in alone.model.state_dict().items():
            torch.testing.assert_close(learner.learners[name].model.state_dict()[key], value, rtol=0, atol=0)
    worker.set_weights(learner.get_weights())
    assert worker.policy_version == 1 and worker.sample()[0].policy_version == 1
    worker.close()


def test_a_multi_policy_checkpoint_resumes_exports_and_plays_each_policy_by_name(tmp_path):
    config = config_for(TEAM, 2, "per_agent", "rollout.rollout_length=32", "env.normalize_obs=true")
    spaces = probe_run_spaces(config)
    worker = make_worker(config)
    learner = PolicySetLearner(config, *spaces)
    learner.update(worker.sample())
    payload = {"counters": RunState().state(), "learner": learner.state(), "config": config.model_dump(mode="json")}
    path = save_checkpoint(tmp_path / "run", 1, payload, keep=1)

    resumed = PolicySetLearner(config, *spaces)
    resumed.load_state(learner.snapshot())
    assert resumed.version == 1
    for name, weights in learner.get_weights().policies.items():
        mine = resumed.get_weights().policies[name]
        assert all(np.array_equal(weights.model[k], mine.model[k]) for k in weights.model)
        assert weights.obs_norm is not None and np.array_equal(weights.obs_norm["mean"], mine.obs_norm["mean"])
    with pytest.raises(ValueError, match="has no policy pole_0, pole_1, pole_2"):
        resumed.load_state(Learner(config, *spaces).state())  # a one-policy state

    written = export_policies(path, tmp_path / "out" / "policy.onnx")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [f"policy.pole_{i}.onnx" for i in range(3)]
    assert all(info["max_abs_diff"] < 1e-4 for info in written)
    own = Policy.from_checkpoint(path, policy="pole_1")
    torch.testing.assert_close(own.model.state_dict(), learner.learners["pole_1"].model.state_dict())
    assert len(evaluate(path, episodes=4, policy="pole_2")) == 4
    with pytest.raises(Exception, match="policy='pole_9': not in checkpoint"):
        evaluate(path, episodes=2, policy="pole_9")
    with pytest.raises(Exception, match="no policy named in checkpoint .* it holds pole_0, pole_1, pole_2"):
        Policy.from_checkpoint(path)
    worker.close()


@pytest.mark.slow
def test_a_team_mapping_learns_both_policies_through_ray_and_resumes(tmp_path):
    """A policy per team on the CartPole team, each with a central critic (every agent's observation), through Ray on
    two DDP learner ranks: each policy's agents learn (random play: about 22), the metrics row says each one's return,
    the checkpoint holds both, and a resumed run (its ranks joined again) goes on from them."""
    run = tmp_path / "run"
    common = [
        "--set",
        f"env.id={TEAM}",
        "--set",
        "env.num_envs_per_worker=16",
        "--set",
        "agents.policies={solo: [pole_0], pair: [pole_1, pole_2]}",
        "--set",
        "agents.critic=observations",
        "--set",
        "learner.num_learners=2",
        "--set",
        "learner.num_cpus_per_learner=0.5",
    ]
    done = run_cli(
        "train", "configs/cartpole.yaml", *common, "--set", "stop.env_steps=150000", "--run-dir", str(run), timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]
    assert last["solo/episode_return_mean"] > 60 and last["pair/episode_return_mean"] > 60, last
    assert "solo/loss_value" in last and "pair/loss_value" in last
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary["policy_return_means"]) == {"solo", "pair"}
    assert {"learner-0", "learner-1"} <= set(json.loads((run / "placement.json").read_text()))
    more = run_cli("train", "--resume", str(run), "--set", "stop.env_steps=180000", timeout=300)
    assert more.returncode == 0, more.stderr[-2000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["learner_version"] > last["learner_version"] and rows[-1]["iteration"] > last["iteration"]
    played = run_cli("eval", str(run), "--policy", "pair", "--episodes", "4", timeout=120)
    assert played.returncode == 0 and ", policies solo, pair" in played.stdout and "4 episodes" in played.stdout


def test_policies_whose_agents_spaces_differ_act_train_export_and_play_in_their_own_spaces(tmp_path):
    """speaker_listener: the speaker sees 3 numbers and says one of 4 words, the listener sees 5 and names one of 3.
    A policy each: each acts, batches, trains, exports and plays in its own agents' spaces; and they learn to talk
    (random play scores 1/3 a step after the first, 5 an episode)."""
    config = config_for(
        SPEAKER,
        32,
        "per_agent",
        "rollout.rollout_length=16",
        "ppo.minibatch_size=256",
        "ppo.lr=0.003",
        "ppo.ent_coef=0.003",
        "ppo.gamma=0.5",
    )
    worker = make_worker(config)
    learner = learner_class(config)(config, *probe_run_spaces(config))
    speaker, listener = learner.learners["speaker"], learner.learners["listener"]
    assert speaker.model.policy_head.out_features == 4 and listener.model.policy_head.out_features == 3
    returns = []
    for _ in range(60):
        info, batches = worker.sample()
        assert batches.batches["speaker"].obs.shape[2:] == (3,) and batches.batches["listener"].obs.shape[2:] == (5,)
        assert batches.batches["speaker"].actions.max() <= 3 and batches.batches["listener"].actions.max() <= 2
        returns.append(info.policies["listener"].episode_returns)
        learner.update((info, batches))
        worker.set_weights(learner.get_weights())
    first, last = np.mean(sum(returns[:6], [])), np.mean(sum(returns[-6:], []))
    assert first < 7 and last > 10, (first, last)
    payload = {"counters": RunState().state(), "learner": learner.state(), "config": config.model_dump(mode="json")}
    path = save_checkpoint(tmp_path / "run", 1, payload, keep=1)
    written = export_policies(path, tmp_path / "out" / "policy.onnx")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["policy.listener.onnx", "policy.speaker.onnx"]
    assert all(info["max_abs_diff"] < 1e-4 for info in written)
    assert Policy.from_checkpoint(path, policy="listener").observation_space.shape == (5,)
    assert np.mean(evaluate(path, episodes=16, policy="listener")) > 10
    worker.close()
    envs = make_run_vec_env(config)  # the joint env's own action space: each slot's kind (what distrl diagnose samples)
    envs.reset(seed=0)
    sampled = envs.action_space.sample()
    assert len(sampled) == 64 and max(sampled[0::2]) <= 3 and max(sampled[1::2]) <= 2
    assert envs.step(sampled)[0].shape == (64, 5)
