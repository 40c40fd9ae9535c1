"""Dict and Tuple observations and MultiDiscrete actions: flattening, encoders, and the round trip through worker
(every backend), learner, checkpoint, ``load_policy`` and the exported ONNX model (named inputs)."""

import gymnasium as gym
import numpy as np
import onnxruntime as ort
import pytest
import torch

from distrl.common.checkpoint import save_checkpoint
from distrl.common.spaces import flat_observation_space, flatten_batch, image_part_mask, obs_layout
from distrl.config import load_config
from distrl.deploy import export_onnx
from distrl.deploy.policy import Policy
from distrl.envs import probe_spaces
from distrl.envs import testing as testing_envs
from distrl.learner import Learner
from distrl.models import ActionDist, build_model
from distrl.rollout import RolloutWorker

SPACE = gym.spaces.Dict(
    {
        "camera": gym.spaces.Box(0, 255, (12, 10, 3), np.uint8),  # channels last
        "joints": gym.spaces.Box(-1, 1, (2, 3), np.float32),
        "mode": gym.spaces.Discrete(3, start=1),
        "flags": gym.spaces.MultiBinary(4),
        "gears": gym.spaces.MultiDiscrete([2, 5]),
    }
)


def test_flatten_batch_is_gymnasiums_flatten_row_by_row():
    SPACE.seed(0)
    samples = [SPACE.sample() for _ in range(5)]
    expected = np.stack([gym.spaces.flatten(SPACE, s) for s in samples]).astype(np.float32)
    batch = {k: np.stack([s[k] for s in samples]) for k in SPACE.spaces}
    flat, single = flatten_batch(SPACE, batch)
    assert not single and flat.dtype == np.float32
    np.testing.assert_array_equal(flat, expected)
    one, single = flatten_batch(SPACE, samples[2])
    assert single
    np.testing.assert_array_equal(one[0], expected[2])
    assert flat.shape[1] == flat_observation_space(SPACE).shape[0] == sum(p.size for p in obs_layout(SPACE))
    with pytest.raises(ValueError, match="keys"):
        flatten_batch(SPACE, {"camera": batch["camera"]})


def test_layout_finds_images_and_their_channel_order():
    parts = {p.name: p for p in obs_layout(SPACE)}
    assert parts["camera"].image and parts["camera"].channels_last
    assert not parts["joints"].image and parts["joints"].shape == (2, 3)
    mask = image_part_mask(SPACE)
    assert mask.sum() == 12 * 10 * 3 and mask[: 12 * 10 * 3].all()
    chw = gym.spaces.Dict({"a": gym.spaces.Box(0, 255, (3, 40, 40), np.uint8)})
    assert not obs_layout(chw)[0].channels_last


def test_structured_encoder_reads_each_part_from_its_slice():
    cfg = load_config(None).model
    model = build_model(SPACE, gym.spaces.Discrete(2), cfg).eval()
    SPACE.seed(1)
    flat, _ = flatten_batch(SPACE, {k: np.stack([SPACE.sample()[k] for _ in range(4)]) for k in SPACE.spaces})
    pd, value = model(torch.from_numpy(flat))
    assert pd.shape == (4, 2) and value.shape == (4,)
    # The image part goes through the convolutions as [C, H, W], its uint8 pixels scaled to [0, 1]: permuting and
    # scaling it by hand into them gives the same features.
    camera = torch.from_numpy(flat[:, :360]).reshape(4, 12, 10, 3).permute(0, 3, 1, 2) * (1.0 / 255.0)
    encoder, image = model.actor_encoder, model.actor_encoder.encoders[0]
    with torch.no_grad():
        np.testing.assert_allclose(
            encoder(torch.from_numpy(flat))[:, : image.out_dim], image.fc(image.conv(camera)), rtol=1e-5, atol=1e-6
        )


def test_multidiscrete_is_independent_categoricals():
    dist = ActionDist.for_space(gym.spaces.MultiDiscrete([2, 3, 4]))
    assert dist.kind == "multi_categorical" and dist.action_dim == 9 and dist.action_shape == (3,)
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 9)).astype(np.float32)
    actions, logp = dist.sample_numpy(logits, rng)
    assert actions.shape == (6, 3) and (actions < np.array([2, 3, 4])).all()
    torch_logp, entropy = dist.log_prob_entropy(torch.from_numpy(logits), torch.from_numpy(actions))
    np.testing.assert_allclose(logp, torch_logp.numpy(), rtol=1e-5, atol=1e-6)
    parts = torch.from_numpy(logits).split([2, 3, 4], dim=-1)
    expected = sum(torch.distributions.Categorical(logits=p).entropy() for p in parts)
    np.testing.assert_allclose(entropy.numpy(), expected.numpy(), rtol=1e-5)
    greedy = dist.greedy_numpy(logits)
    np.testing.assert_array_equal(greedy, np.stack([p.argmax(-1).numpy() for p in parts], axis=-1))
    # A mask over every component's actions (sb3-contrib's layout) is never violated.
    mask = np.ones((6, 9), bool)
    mask[:, 2] = False  # component 1 may not take action 0
    masked, _ = dist.sample_numpy(logits, rng, mask)
    assert (masked[:, 1] != 0).all()


ENVS = {
    "dict image+vector": "distrl.envs.testing:image_cartpole",
    "tuple with discrete": "distrl.envs.testing:tuple_obs_cartpole",
    "multidiscrete actions": "distrl.envs.testing:multidiscrete_cartpole",
}


def _config(env_id, backend, *extra):
    return load_config(
        None,
        [
            f"env.id={env_id}",
            "env.num_envs_per_worker=4",
            "rollout.rollout_length=16",
            "ppo.minibatch_size=32",
            f"rollout.compile.backend={backend}",
            "env.normalize_obs=true",
            *extra,
        ],
    )


@pytest.mark.parametrize("backend", ["eager", "onnxrt", "inductor"])
@pytest.mark.parametrize(
    "env",  # the image env's compiled policies take the longest to build: in the slow tier
    [pytest.param(name, marks=pytest.mark.slow) if "image" in name else name for name in ENVS],
)
def test_worker_learner_policy_round_trip(tmp_path, env, backend):
    config = _config(ENVS[env], backend)
    worker = RolloutWorker(config)
    assert worker.policy.backend == backend, worker.policy.report.reason  # no fallback to eager
    obs_space, action_space = probe_spaces(config.env)
    learner = Learner(config, obs_space, action_space)
    for _ in range(2):
        info, batch = worker.sample(learner.get_weights())
        assert batch.obs.shape[2:] == flat_observation_space(obs_space).shape
        metrics = learner.update((info, batch))
        assert (
            np.isfinite(metrics["loss_policy"]) and np.isfinite(metrics["loss_value"]) and metrics["skipped_steps"] == 0
        )
    worker.set_weights(learner.get_weights())  # checked against eager after the sync, on the compiled backend
    assert worker.policy.sync_checks >= (backend != "eager")
    payload = {"counters": {}, "learner": learner.state(), "config": config.model_dump(mode="json")}
    checkpoint = save_checkpoint(tmp_path / "run", 1, payload, keep=1)
    policy = Policy.from_checkpoint(checkpoint)
    env_obj = getattr(testing_envs, ENVS[env].partition(":")[2])()
    samples = [env_obj.reset(seed=i)[0] for i in range(3)]
    flat = np.stack([gym.spaces.flatten(env_obj.observation_space, s) for s in samples]).astype(np.float32)
    by_flat, _ = policy.predict(flat)
    if isinstance(samples[0], dict):
        by_parts, _ = policy.predict({k: np.stack([s[k] for s in samples]) for k in samples[0]})
        one, _ = policy.predict(samples[1])
        np.testing.assert_array_equal(one, by_parts[1])
    elif isinstance(samples[0], tuple):
        by_parts, _ = policy.predict(
            tuple(np.stack([np.asarray(s[i]) for s in samples]) for i in range(len(samples[0])))
        )
    else:
        by_parts = by_flat
    np.testing.assert_array_equal(by_flat, by_parts)
    assert action_space.contains(np.asarray(by_flat[0], dtype=action_space.dtype))
    if backend != "eager":
        return
    out = export_onnx(checkpoint, tmp_path / "policy.onnx")
    assert out["exporter"] == "dynamo" and out["max_abs_diff"] <= 1e-4
    session = ort.InferenceSession(str(out["path"]), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    if isinstance(samples[0], dict):
        assert names == list(env_obj.observation_space.spaces)  # one named input per key
        feeds = {k: np.stack([s[k] for s in samples]).astype(np.uint8 if k == "image" else np.float32) for k in names}
    elif isinstance(samples[0], tuple):
        assert names == ["0", "1", "2"]
        feeds = {"0": flat[:, :2], "1": flat[:, 2:4], "2": np.array([int(s[2]) for s in samples], np.int64)}
    else:
        assert names == ["obs"]
        feeds = {"obs": flat}
    pd = session.run(None, feeds)[0]
    with torch.no_grad():
        expected = policy.model(torch.from_numpy(policy.obs_rms.normalize(flat, config.env.obs_clip)))[0].numpy()
    np.testing.assert_allclose(pd, expected, atol=1e-4)
