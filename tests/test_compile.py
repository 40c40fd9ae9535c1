"""Worker and learner compile backends: outputs match eager after every weight change, fallbacks, recompiles."""

import logging

import gymnasium as gym
import numpy as np
import pytest
import torch

from distrl.compile import (
    CompileError,
    EagerPolicy,
    Float64Reference,
    build_inference_policy,
    check_against_eager,
    compile_policy,
    output_mismatch,
)
from distrl.compile.check import reduction_length
from distrl.config import load_config
from distrl.envs import probe_spaces
from distrl.learner import Learner
from distrl.models import build_model
from distrl.rollout import RolloutWorker
from tests.worker_backends import AVAILABLE, BACKENDS

MODELS = {
    "mlp": ([], gym.spaces.Box(-1, 1, (4,), np.float32), 64),
    "lstm": (["model.lstm_size=32", "model.shared_trunk=true"], gym.spaces.Box(-1, 1, (4,), np.float32), 64),
    # Separate towers with a core each (MAPPO's recurrent policy and critic): a 32-wide memory of two 16-wide states.
    "lstm_towers": (["model.lstm_size=16"], gym.spaces.Box(-1, 1, (4,), np.float32), 64),
    # MAPPO's LayerNorms on the input and after each dense layer.
    "layer_norm": (["model.layer_norm=true"], gym.spaces.Box(-1, 1, (4,), np.float32), 64),
    "cnn": (
        ["model.type=cnn", "model.hidden=[128]", "model.shared_trunk=true"],
        gym.spaces.Box(0, 255, (4, 84, 84), np.uint8),
        4,
    ),
}


def make(model_name, seed=0):
    overrides, obs_space, batch = MODELS[model_name]
    torch.manual_seed(seed)
    model = build_model(obs_space, gym.spaces.Discrete(3), load_config(None, overrides).model).eval()
    obs_space.seed(seed)
    obs = torch.from_numpy(np.stack([obs_space.sample() for _ in range(batch)]))
    state = (batch, model.lstm_size)
    inputs = (obs,) + ((torch.randn(state), torch.randn(state)) if model.is_recurrent else ())
    return model, inputs


def assert_acts_as_eager(got, model_name, state_dict, inputs):
    """``got`` is what an eager twin of the model with ``state_dict`` outputs, within the float32 rule."""
    twin, _ = make(model_name, seed=99)
    twin.load_state_dict(state_dict)
    arrays = tuple(x.numpy() for x in inputs)
    problem = Float64Reference(twin).mismatch(got, *arrays)
    assert problem is None, problem


@pytest.mark.parametrize("model_name", list(MODELS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_matches_eager_after_every_weight_update(backend, model_name):
    model, inputs = make(model_name)
    policy = compile_policy(model, backend, example_inputs=inputs, strict=True)
    assert policy.backend == backend
    assert_acts_as_eager(policy(*inputs), model_name, model.state_dict(), inputs)
    for step in range(3):  # new weights each time, as after learner updates
        torch.manual_seed(100 + step)
        new_state = {k: v + 0.1 * torch.randn_like(v) for k, v in model.state_dict().items()}
        policy.update_weights(new_state)
        assert_acts_as_eager(policy(*inputs), model_name, new_state, inputs)


class BakedOnnxPolicy:
    """ONNX Runtime on a plain export: the weights are initializers baked into the model."""

    backend = "onnx-baked"
    shares_module = False

    def __init__(self, module, inputs):
        import io

        import onnxruntime as ort

        buffer = io.BytesIO()
        torch.onnx.export(module, inputs, buffer, input_names=["obs"], dynamo=False)
        self.session = ort.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])

    def __call__(self, *inputs):
        return tuple(self.session.run(None, {"obs": inputs[0]}))

    def update_weights(self, state_dict):
        pass  # what a backend without weight inputs does: keeps acting with the old weights


def test_check_catches_a_graph_that_ignores_new_weights():
    model, inputs = make("mlp")
    problem = check_against_eager(BakedOnnxPolicy(model, inputs), model, tuple(x.numpy() for x in inputs))
    assert problem is not None and problem.startswith("after a weight update: output 0 differs from eager")


def test_tolerance_follows_eager_float32_error_by_hand():
    reference = (np.array([1.0, -2.0]),)
    eager = (np.array([1.0 + 1e-6, -2.0], dtype=np.float32),)  # eager's own error: 9.54e-7 once rounded to float32
    ulp_of_scale = np.finfo(np.float32).eps * 2.0  # the largest |output| is 2
    allowed = 16 * (float(np.float32(1.0 + 1e-6)) - 1.0) + 4 * np.sqrt(16) * ulp_of_scale
    assert output_mismatch((np.array([1.0 + 0.9 * allowed, -2.0], dtype=np.float32),), eager, reference, 16) is None
    problem = output_mismatch((np.array([1.0, -2.0 + 2 * allowed], dtype=np.float32),), eager, reference, 16)
    assert problem is not None and problem.startswith("output 0 differs from eager by up to")
    assert f"allowed {allowed:.3g}" in problem and "16x eager float32's own error 9.54e-07" in problem
    # Eager exact: 4 x sqrt(16) = 16 ulps of the scale remain allowed, not more.
    exact = (np.array([1.0, -2.0], dtype=np.float32),)
    assert output_mismatch((np.array([1.0, -2.0 + 12 * ulp_of_scale], dtype=np.float32),), exact, reference, 16) is None
    assert (
        output_mismatch((np.array([1.0, -2.0 + 24 * ulp_of_scale], dtype=np.float32),), exact, reference, 16)
        is not None
    )
    assert output_mismatch((np.array([np.nan, -2.0], dtype=np.float32),), exact, reference, 16) is not None
    assert output_mismatch((np.zeros(3, np.float32),), exact, reference) == "output 0 has shape (3,), eager (2,)"


def test_reduction_length_counts_every_dot_product_on_the_path():
    mlp, _ = make("mlp")  # actor 4 -> 64 -> 64 -> 3 and critic 4 -> 64 -> 64 -> 1
    assert reduction_length(mlp) == 2 * (4 + 64) + 64 + 64
    cnn, _ = make("cnn")  # conv 4x8x8, 32x4x4, 64x3x3, fc 3136 -> 128, heads 128
    assert reduction_length(cnn) == 4 * 64 + 32 * 16 + 64 * 9 + 3136 + 2 * 128
    lstm, _ = make("lstm")  # encoder 4 -> 64 -> 64, LSTM 64 + 32, heads 32
    assert reduction_length(lstm) == 4 + 64 + (64 + 32) + 2 * 32


class StalePolicy:
    """A policy that keeps acting with the weights it was built with (its own copy of the module)."""

    shares_module = False

    def __init__(self, policy):
        self.policy, self.backend = policy, policy.backend

    def __call__(self, *inputs):
        return self.policy(*inputs)

    def update_weights(self, state_dict):
        pass


def one_adam_step(state_dict, lr=2.5e-4, seed=7):
    """The weights after one optimiser step of size ``lr`` per parameter: the smallest real weight change."""
    generator = torch.Generator().manual_seed(seed)
    return {k: v + lr * torch.randn(v.shape, generator=generator).sign() for k, v in state_dict.items()}


@pytest.mark.parametrize("model_name", list(MODELS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_check_fails_stale_weights_and_one_step_behind_on_every_model(backend, model_name):
    import copy

    model, inputs = make(model_name)
    example = tuple(x.numpy() for x in inputs)
    own, _ = build_inference_policy(copy.deepcopy(model), backend, example, strict=True)
    problem = check_against_eager(StalePolicy(own), model, example)
    assert problem is not None and problem.startswith("after a weight update: output 0 differs from eager"), problem
    # Acting one optimiser step behind the weights eager has: also refused.
    behind = one_adam_step(model.state_dict())
    own.update_weights({k: v.numpy() for k, v in behind.items()})
    problem = Float64Reference(model).mismatch(own(*example), *example)
    assert problem is not None and "differs from eager" in problem


def test_inductor_freezing_is_kept_only_when_weight_updates_stay_correct():
    model, inputs = make("mlp")
    policy, report = build_inference_policy(
        model, "inductor", tuple(x.numpy() for x in inputs), options={"freezing": True}
    )
    # Whatever this torch build does with frozen weights, the policy in use must track weight changes.
    new_state = {k: v + 0.1 * torch.randn_like(v) for k, v in model.state_dict().items()}
    policy.update_weights({k: v.numpy() for k, v in new_state.items()})
    assert_acts_as_eager(policy(*(x.numpy() for x in inputs)), "mlp", new_state, inputs)
    assert report.backend in ("inductor", "eager")


def test_failure_falls_back_to_eager_with_reason(caplog):
    model, inputs = make("mlp")
    example = tuple(x.numpy() for x in inputs)
    with caplog.at_level(logging.WARNING, logger="distrl.compile"):
        policy, report = build_inference_policy(model, "onnxrt", example, options={"threads": 2})
    assert isinstance(policy, EagerPolicy) and report.backend == "eager" and report.requested == "onnxrt"
    assert "unknown onnxrt options ['threads']" in report.reason
    assert "falling back to eager" in caplog.text
    with pytest.raises(CompileError, match="rollout.compile.backend=onnxrt: ValueError: unknown onnxrt options"):
        build_inference_policy(model, "onnxrt", example, options={"threads": 2}, strict=True)


@pytest.mark.skipif(AVAILABLE["ipex"]["available"], reason="ipex is installed in this environment")
def test_ipex_missing_is_a_clear_error_naming_the_extra():
    model, inputs = make("mlp")
    with pytest.raises(CompileError, match=r"pip install 'distrl\[ipex\]'"):
        build_inference_policy(model, "ipex", tuple(x.numpy() for x in inputs), strict=True)


def test_mode_ignored_with_warning_where_meaningless(caplog):
    model, inputs = make("mlp")
    with caplog.at_level(logging.WARNING, logger="distrl.compile"):
        _, report = build_inference_policy(model, "onnxrt", tuple(x.numpy() for x in inputs), mode="max-autotune")
    assert report.backend == "onnxrt"
    assert "rollout.compile.mode=max-autotune is ignored by the onnxrt backend" in caplog.text


def test_auto_is_never_slower_than_eager():
    model, inputs = make("mlp")
    policy, report = build_inference_policy(model, "auto", tuple(x.numpy() for x in inputs))
    assert report.requested == "auto" and policy.backend == report.backend
    assert {"eager", "onnxrt"} <= report.timings_us.keys()
    assert report.timings_us[report.backend] == min(report.timings_us.values())


def test_torch_compile_onnxrt_backend_runs_in_onnx_runtime(monkeypatch):
    import onnxruntime as ort

    runs = []
    original = ort.InferenceSession.run
    monkeypatch.setattr(ort.InferenceSession, "run", lambda self, *a, **k: runs.append(1) or original(self, *a, **k))
    torch._dynamo.reset()
    model, inputs = make("mlp")
    compiled = torch.compile(model, backend="onnxrt")
    with torch.no_grad():
        assert_acts_as_eager(compiled(*inputs), "mlp", model.state_dict(), inputs)
        for p in model.parameters():
            p.add_(0.05)
        assert_acts_as_eager(compiled(*inputs), "mlp", model.state_dict(), inputs)
    assert len(runs) == 2


@pytest.mark.parametrize("backend", ["onnxrt", "inductor"])
def test_worker_acts_with_learner_weights_and_does_not_recompile(backend):
    config = load_config(
        None,
        [
            "env.num_envs_per_worker=8",
            "rollout.rollout_length=32",
            "ppo.minibatch_size=64",
            f"rollout.compile.backend={backend}",
            "rollout.compile.strict=true",
        ],
    )
    worker = RolloutWorker(config)
    learner = Learner(config, *probe_spaces(worker.config.env))
    assert worker.backend_info()["backend"] == backend
    for _ in range(3):
        worker.set_weights(learner.get_weights())
        info, batch = worker.sample()
        learner.update((info, batch))
    assert info.policy_backend == backend
    assert info.weight_sync_checks == 2  # versions 1 and 2; version 0 is the worker's own initial weights
    assert info.recompiles == 0
    worker.set_weights(learner.get_weights())
    obs = batch.obs[-1]
    arrays = (obs,)
    learner_model = learner.model.eval()
    problem = Float64Reference(learner_model).mismatch(worker.policy(*arrays), *arrays)
    assert problem is None, problem


@pytest.mark.parametrize(
    "overrides",
    [
        ["learner.compile=true"],
        ["learner.compile={backend: inductor, mode: default, critic_mode: max-autotune-no-cudagraphs}"],
    ],
)
def test_compiled_learner_matches_eager_update_and_does_not_recompile(overrides):
    base = ["env.num_envs_per_worker=8", "rollout.rollout_length=32", "ppo.minibatch_size=64"]
    worker = RolloutWorker(load_config(None, base))
    sample = worker.sample()
    eager = Learner(load_config(None, base), *probe_spaces(worker.config.env))
    compiled = Learner(load_config(None, base + overrides), *probe_spaces(worker.config.env))
    for _ in range(3):
        m_eager, m_compiled = eager.update(sample), compiled.update(sample)
        assert m_compiled["loss_value"] == pytest.approx(m_eager["loss_value"], rel=1e-3)
        assert m_compiled["loss_policy"] == pytest.approx(m_eager["loss_policy"], rel=1e-3, abs=1e-5)
    assert m_compiled["learner_recompiles"] == 0
    weights = compiled.get_weights().model
    assert weights.keys() == eager.get_weights().model.keys()  # in-place compile keeps state_dict names


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_amp_updates_are_finite(amp):
    config = load_config(
        None, ["env.num_envs_per_worker=8", "rollout.rollout_length=32", "ppo.minibatch_size=64", f"learner.amp={amp}"]
    )
    worker = RolloutWorker(config)
    learner = Learner(config, *probe_spaces(worker.config.env))
    assert learner.scaler.is_enabled() == (amp == "fp16")
    sample = worker.sample()
    for _ in range(2):
        metrics = learner.update(sample)
    assert np.isfinite(metrics["loss_value"]) and metrics["gradient_steps"] > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_gpu_learner_cuda_graph_modes(mode):
    config = load_config(
        None,
        [
            "env.num_envs_per_worker=8",
            "rollout.rollout_length=32",
            "ppo.minibatch_size=64",
            "learner.device=cuda",
            "learner.num_gpus_per_learner=1",
            "learner.compile.backend=inductor",
            f"learner.compile.mode={mode}",
            "learner.amp=bf16",
        ],
    )
    worker = RolloutWorker(config)
    learner = Learner(config, *probe_spaces(worker.config.env))
    assert learner.device.type == "cuda"
    sample = worker.sample()
    for _ in range(3):
        metrics = learner.update(sample)
    assert np.isfinite(metrics["loss_value"]) and metrics["learner_recompiles"] == 0
