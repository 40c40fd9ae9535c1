"""Attention policies: windows reset at episode starts, the learner rebuilds what workers acted on, every backend
matches eager before and after weight updates, export, and a short run that learns."""

import json
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from distrl.compile import CompileError, compile_policy
from distrl.config import load_config
from distrl.data.memory.window import WindowMemory
from distrl.data.window import windows
from distrl.envs import probe_spaces
from distrl.learner import Learner
from distrl.models import build_model
from distrl.rollout import RolloutWorker
from tests.conftest import run_cli
from tests.test_train_e2e import check_run_dir
from tests.worker_backends import BACKENDS

SMALL = [
    "model.type=attention",
    "model.window=4",
    "model.d_model=16",
    "model.heads=2",
    "model.layers=1",
    "env.num_envs_per_worker=6",
    "rollout.rollout_length=40",
    "ppo.minibatch_size=48",
    "rollout.compile.backend=eager",
]


def test_window_zeroes_everything_before_an_episode_start():
    window = WindowMemory(SimpleNamespace(window=3, input_space=SimpleNamespace(shape=(1,))))
    state = window.initial(2)

    def push(value, starts):
        nonlocal state
        (out,), seen = window.inputs(state, np.full((2, 1), value, np.float32), np.array(starts))
        state = window.after(seen, ())
        return out

    for value in (1.0, 2.0, 3.0):
        out = push(value, [False, False])
    assert out[:, :, 0].tolist() == [[1, 2, 3], [1, 2, 3]]
    out = push(4.0, [False, True])  # env 1's new episode
    assert out[:, :, 0].tolist() == [[2, 3, 4], [0, 0, 4]]
    (peeked,), _ = window.inputs(state, np.full((2, 1), 5.0, np.float32), np.array([True, False]))
    assert peeked[:, :, 0].tolist() == [[0, 0, 5], [0, 4, 5]]
    assert state[:, :, 0].tolist() == [[2, 3, 4], [0, 0, 4]]  # inputs alone keep nothing


class _Recorder:
    """Wraps a worker's policy to keep every window it was called with."""

    def __init__(self, policy):
        self.policy, self.seen = policy, []

    def __call__(self, *inputs):
        self.seen.append(inputs[0].copy())
        return self.policy(*inputs)

    def __getattr__(self, name):
        return getattr(self.policy, name)


def test_learner_rebuilds_exactly_the_windows_the_worker_acted_on_and_no_episode_leaks_into_the_next():
    config = load_config(None, SMALL)
    worker = RolloutWorker(config)
    recorder = _Recorder(worker.policy)
    worker.policy = recorder
    for _ in range(3):  # several batches: the context carries windows across batch boundaries
        recorder.seen.clear()
        _, batch = worker.sample()
        acted = np.stack(recorder.seen[:-1])  # [T, N, W, F]; the last call is the bootstrap value
        rebuilt = windows(
            torch.from_numpy(batch.context),
            torch.from_numpy(batch.obs[:-1]),
            torch.from_numpy(batch.starts),
            config.model.window,
        ).numpy()
        np.testing.assert_array_equal(rebuilt, acted)
        # Where an episode starts, its window holds nothing but that first observation.
        t, n = np.nonzero(batch.starts)
        assert len(t) > 0 and not acted[t, n, :-1].any()
        np.testing.assert_array_equal(acted[t, n, -1], batch.obs[t, n])


def test_learner_trains_on_windows_and_reproduces_the_behaviour_log_probs():
    config = load_config(None, SMALL)
    worker = RolloutWorker(config)
    learner = Learner(config, *probe_spaces(config.env))
    worker.set_weights(learner.get_weights())
    info, batch = worker.sample()
    data = learner.hardware.to_tensors(batch)
    obs = windows(data["context"], data["obs"][:-1], data["starts"], config.model.window)
    with torch.no_grad():
        pd, _ = learner.model(obs.reshape(-1, *obs.shape[2:]))
        logp, _ = learner.model.dist.log_prob_entropy(pd, data["actions"].reshape(-1))
    torch.testing.assert_close(logp.reshape(batch.logp.shape), data["logp"], rtol=1e-4, atol=1e-5)
    metrics = learner.update((info, batch))
    assert metrics["gradient_steps"] > 0 and np.isfinite(metrics["loss_value"])


def _attention_model(window, seed=0):
    torch.manual_seed(seed)
    cfg = load_config(
        None,
        [
            "model.type=attention",
            f"model.window={window}",
            "model.d_model=32",
            "model.heads=4",
            "model.layers=2",
            "model.shared_trunk=true",
        ],
    ).model
    obs_space = gym.spaces.Box(-1, 1, (4,) if window else (6, 5), np.float32)
    return build_model(obs_space, gym.spaces.Discrete(3), cfg).eval(), obs_space


@pytest.mark.parametrize("window", [8, 0])
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_matches_eager_before_and_after_weight_updates(backend, window):
    model, obs_space = _attention_model(window)
    shape = (64, window, 4) if window else (64, 6, 5)
    inputs = (torch.from_numpy(np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)),)
    policy = compile_policy(model, backend, example_inputs=inputs, strict=True)
    assert policy.backend == backend
    checked = policy._checked
    for step in range(2):
        generator = torch.Generator().manual_seed(step)
        state = {k: v + 0.02 * torch.randn(v.shape, generator=generator) for k, v in model.state_dict().items()}
        policy.update_weights(state)
        model.load_state_dict(state)
        checked.verify(tuple(x.numpy() for x in inputs), f"after update {step}")
    if checked.policy.shares_module:  # inductor and ipex run the module itself: they cannot fall behind it
        return
    # A policy one small step behind fails the check.
    generator = torch.Generator().manual_seed(9)
    model.load_state_dict(
        {k: v + 2.5e-4 * torch.randn(v.shape, generator=generator).sign() for k, v in model.state_dict().items()}
    )
    with pytest.raises(CompileError, match="differs from eager"):
        checked.verify(tuple(x.numpy() for x in inputs), "stale")


def test_tokens_without_a_window_and_bad_shapes_are_one_line_errors():
    from distrl.models import check_model_fits

    cfg = load_config(None, ["model.type=attention", "model.window=0"]).model
    check_model_fits(gym.spaces.Box(-1, 1, (6, 5), np.float32), gym.spaces.Discrete(2), cfg)
    with pytest.raises(ValueError, match="model.window=0: needs observations that are a sequence"):
        check_model_fits(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2), cfg)
    from distrl.config import ConfigError

    with pytest.raises(ConfigError, match="model.heads=3: must divide model.d_model=64"):
        load_config(None, ["model.type=attention", "model.heads=3"])


@pytest.mark.slow
def test_attention_config_learns_exports_and_plays(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(
        "train",
        "configs/cartpole_attention.yaml",
        "--run-dir",
        str(run_dir),
        "--set",
        "stop.env_steps=150000",
        "--set",
        "stop.episode_return_mean=null",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "policy backend onnxrt" in result.stdout
    rows, summary = check_run_dir(run_dir)
    first = next(r["episode_return_mean"] for r in rows if r["episode_return_mean"] is not None)
    assert summary["episode_return_mean"] > max(60.0, 2 * first), (first, summary["episode_return_mean"])
    assert all(r["weight_sync_checks"] >= 1 for r in rows[1:]) and rows[-1]["policy_backend"] == "onnxrt"
    out = tmp_path / "policy.onnx"
    exported = run_cli("export", str(run_dir), str(out))
    assert exported.returncode == 0 and out.exists(), exported.stderr[-2000:]
    played = run_cli("eval", str(run_dir), "--episodes", "4")
    assert played.returncode == 0, played.stderr[-2000:]
    assert json.loads((run_dir / "summary.json").read_text())["stop_reason"] == "env_steps"


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("layers", [1, 2])
def test_last_token_pool_computes_only_the_last_query_and_matches_the_full_encoder(causal, layers):
    """pool: last runs its final block for the last token alone; the result is the full encoder's last token."""
    from distrl.models.attention import AttentionEncoder

    torch.manual_seed(0)
    encoder = AttentionEncoder(8, 3, 16, 2, layers, causal, "last").double()
    tokens = torch.randn(32, 8, 3, dtype=torch.float64)
    x = encoder.embed(tokens) + encoder.position
    for block in encoder.blocks:
        x = block(x)  # every token through every block
    torch.testing.assert_close(encoder(tokens), encoder.norm(x)[:, -1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("window", [8, 0])
def test_onnxrt_graph_computes_no_shapes_at_run_time(window, tmp_path):
    """Every size in the attention graph is a constant (the batch is -1): once ONNX Runtime has folded them, no node
    reads a shape, slices a weight or computes the score scale at each call (they cost ~30 % of a batch-64 forward)."""
    import onnx
    import onnxruntime as ort

    from distrl.compile.backends.onnxrt import export_policy_onnx

    model, _ = _attention_model(window)
    example = torch.zeros((64, window, 4) if window else (64, 6, 5))
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    ort.InferenceSession(export_policy_onnx(model, (example,)), options, providers=["CPUExecutionProvider"])
    ops = [node.op_type for node in onnx.load(tmp_path / "optimized.onnx").graph.node]
    assert not {"Shape", "Slice", "Sqrt", "Concat", "Cast"} & set(ops), ops
    assert ops.count("Gemm") >= 6 and "Softmax" in ops
