"""Worker and learner compile backends: outputs match eager after every weight change, fallbacks, recompiles."""

import logging

import gymnasium as gym
import numpy as np
import pytest
import torch

from distrl.compile import (
    CompileError,
    EagerPolicy,
    available_backends,
    build_inference_policy,
    check_against_eager,
    compile_policy,
)
from distrl.config import load_config
from distrl.learner import Learner
from distrl.models import build_model
from distrl.rollout import RolloutWorker

AVAILABLE = {row["name"]: row for row in available_backends()}
BACKENDS = [
    "onnxrt",
    "inductor",
    pytest.param("ipex", marks=[pytest.mark.ipex, pytest.mark.skipif(not AVAILABLE["ipex"]["available"], reason=AVAILABLE["ipex"]["reason"])]),
]
MODELS = {
    "mlp": ([], gym.spaces.Box(-1, 1, (4,), np.float32), 64),
    "lstm": (["model.lstm_size=32", "model.shared_trunk=true"], gym.spaces.Box(-1, 1, (4,), np.float32), 64),
    "cnn": (["model.type=cnn", "model.hidden=[128]", "model.shared_trunk=true"], gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), 4),
}


def make(model_name, seed=0):
    overrides, obs_space, batch = MODELS[model_name]
    torch.manual_seed(seed)
    model = build_model(obs_space, gym.spaces.Discrete(3), load_config(None, overrides).model).eval()
    obs_space.seed(seed)
    obs = torch.from_numpy(np.stack([obs_space.sample() for _ in range(batch)]))
    inputs = (obs,) + ((torch.randn(batch, 32), torch.randn(batch, 32)) if model.is_recurrent else ())
    return model, inputs


def eager_outputs(model_name, state_dict, inputs):
    reference, _ = make(model_name, seed=99)
    reference.load_state_dict(state_dict)
    with torch.no_grad():
        return reference(*inputs)


def assert_close(got, expected):
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("model_name", list(MODELS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_matches_eager_after_every_weight_update(backend, model_name):
    model, inputs = make(model_name)
    policy = compile_policy(model, backend, example_inputs=inputs, strict=True)
    assert policy.backend == backend
    assert_close(policy(*inputs), eager_outputs(model_name, model.state_dict(), inputs))
    for step in range(3):  # new weights each time, as after learner updates
        torch.manual_seed(100 + step)
        new_state = {k: v + 0.1 * torch.randn_like(v) for k, v in model.state_dict().items()}
        policy.update_weights(new_state)
        assert_close(policy(*inputs), eager_outputs(model_name, new_state, inputs))


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


def test_inductor_freezing_is_kept_only_when_weight_updates_stay_correct():
    model, inputs = make("mlp")
    policy, report = build_inference_policy(model, "inductor", tuple(x.numpy() for x in inputs), options={"freezing": True})
    # Whatever this torch build does with frozen weights, the policy in use must track weight changes.
    new_state = {k: v + 0.1 * torch.randn_like(v) for k, v in model.state_dict().items()}
    policy.update_weights({k: v.numpy() for k, v in new_state.items()})
    got = policy(*(x.numpy() for x in inputs))
    assert_close(tuple(torch.from_numpy(o) for o in got), eager_outputs("mlp", new_state, inputs))
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
        assert_close(compiled(*inputs), model(*inputs))
        for p in model.parameters():
            p.add_(0.05)
        assert_close(compiled(*inputs), model(*inputs))
    assert len(runs) == 2


@pytest.mark.parametrize("backend", ["onnxrt", "inductor"])
def test_worker_acts_with_learner_weights_and_does_not_recompile(backend):
    config = load_config(None, ["env.num_envs_per_worker=8", "rollout.rollout_length=32", "ppo.minibatch_size=64",
                                f"rollout.compile.backend={backend}", "rollout.compile.strict=true"])  # fmt: skip
    worker = RolloutWorker(config)
    learner = Learner(config, *worker.spaces())
    assert worker.backend_info()["backend"] == backend
    for _ in range(3):
        worker.set_weights(learner.get_weights())
        batch = worker.sample()
        learner.update(batch)
    assert batch["info"]["policy_backend"] == backend
    assert batch["info"]["weight_sync_checks"] == 3
    assert batch["info"]["recompiles"] == 0
    worker.set_weights(learner.get_weights())
    obs = batch["obs"][-1]
    with torch.no_grad():
        expected = learner.model(torch.from_numpy(obs))
    assert_close(tuple(torch.from_numpy(o) for o in worker.policy(obs)), expected)


@pytest.mark.parametrize("overrides", [["learner.compile=true"], ["learner.compile={backend: inductor, mode: default, critic_mode: max-autotune-no-cudagraphs}"]])
def test_compiled_learner_matches_eager_update_and_does_not_recompile(overrides):
    base = ["env.num_envs_per_worker=8", "rollout.rollout_length=32", "ppo.minibatch_size=64"]
    worker = RolloutWorker(load_config(None, base))
    batch = worker.sample()
    eager = Learner(load_config(None, base), *worker.spaces())
    compiled = Learner(load_config(None, base + overrides), *worker.spaces())
    for _ in range(3):
        m_eager, m_compiled = eager.update(batch), compiled.update(batch)
        assert m_compiled["loss_value"] == pytest.approx(m_eager["loss_value"], rel=1e-3)
        assert m_compiled["loss_policy"] == pytest.approx(m_eager["loss_policy"], rel=1e-3, abs=1e-5)
    assert m_compiled["learner_recompiles"] == 0
    weights = compiled.get_weights()["model"]
    assert weights.keys() == eager.get_weights()["model"].keys()  # in-place compile keeps state_dict names


@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_amp_updates_are_finite(amp):
    config = load_config(None, ["env.num_envs_per_worker=8", "rollout.rollout_length=32", "ppo.minibatch_size=64", f"learner.amp={amp}"])
    worker = RolloutWorker(config)
    learner = Learner(config, *worker.spaces())
    assert learner.scaler.is_enabled() == (amp == "fp16")
    batch = worker.sample()
    for _ in range(2):
        metrics = learner.update(batch)
    assert np.isfinite(metrics["loss_value"]) and metrics["gradient_steps"] > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune"])
def test_gpu_learner_cuda_graph_modes(mode):
    config = load_config(None, ["env.num_envs_per_worker=8", "rollout.rollout_length=32", "ppo.minibatch_size=64",
                                "learner.device=cuda", "learner.num_gpus_per_learner=1", f"learner.compile.backend=inductor",
                                f"learner.compile.mode={mode}", "learner.amp=bf16"])  # fmt: skip
    worker = RolloutWorker(config)
    learner = Learner(config, *worker.spaces())
    assert learner.device.type == "cuda"
    batch = worker.sample()
    for _ in range(3):
        metrics = learner.update(batch)
    assert np.isfinite(metrics["loss_value"]) and metrics["learner_recompiles"] == 0
