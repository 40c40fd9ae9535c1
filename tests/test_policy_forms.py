"""Worker policies in bf16 and channels-last (``distrl/compile/forms.py``): checked against eager fp32 within their own
rounding, weight syncs reaching them, the forms each setting builds, and the fallback when a form is wrong.

This box may lack bf16 instructions (bf16 then runs emulated: slow, but the same arithmetic), so tests that need a
bf16 CPU say it has one by patching ``forms.cpu_bf16``, as the learner's trial tests do."""

import gymnasium as gym
import numpy as np
import pytest
import torch

import distrl.compile.forms as forms
from distrl.compile import EagerPolicy, build_inference_policy, check_against_eager
from distrl.compile.backends.base import Form
from distrl.compile.build import CheckedPolicy
from distrl.compile.check import Float64Reference
from distrl.config import load_config
from distrl.models import build_model


def cnn(seed=0, batch=4):
    torch.manual_seed(seed)
    overrides = ["model.type=cnn", "model.hidden=[64]", "model.shared_trunk=true"]
    space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    model = build_model(space, gym.spaces.Discrete(3), load_config(None, overrides).model).eval()
    space.seed(seed)
    return model, (np.stack([space.sample() for _ in range(batch)]),)


def mlp(seed=0):
    torch.manual_seed(seed)
    model = build_model(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2), load_config(None, []).model)
    return model.eval(), (np.random.default_rng(seed).standard_normal((16, 4)).astype(np.float32),)


def new_weights(model, seed):
    generator = torch.Generator().manual_seed(seed)
    return {k: (v + 0.05 * torch.randn(v.shape, generator=generator)).numpy() for k, v in model.state_dict().items()}


@pytest.fixture
def bf16_cpu(monkeypatch):
    monkeypatch.setattr(forms, "cpu_bf16", lambda: "AMX")


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_a_bf16_policy_passes_the_bf16_check_fails_the_fp32_one_and_follows_weight_syncs(backend, bf16_cpu):
    model, example = cnn()
    checked = CheckedPolicy(model, backend, example, precision="bf16", memory_format="auto", strict=True)
    policy, report = checked.policy, checked.report
    assert report.form == Form("bf16", "channels_last") and report.backend == backend
    # Its outputs really are bf16's: off by far more than fp32 rounding, within what bf16 rounding does.
    assert check_against_eager(policy, model, example, "bf16") is None
    problem = Float64Reference(model).mismatch(policy(*example), *example)
    assert problem is not None and "differs from eager" in problem
    for seed in range(2):  # weight syncs reach the bf16 copy (the eager module follows them too)
        weights = new_weights(model, seed)
        checked.update_weights(weights)
        checked.verify(example, "after a sync")
        eager = EagerPolicy(cnn(seed=9)[0])
        eager.update_weights(weights)
        np.testing.assert_allclose(checked(*example)[1], eager(*example)[1], rtol=0.05, atol=0.05)
    assert checked.backend == backend and checked.sync_checks == 2


def test_the_bf16_check_refuses_a_bf16_policy_acting_with_stale_weights_and_the_worker_falls_back(
    bf16_cpu, monkeypatch
):
    model, example = cnn()
    # A bf16 form that drops weight syncs (what a wrong graph would do): its first check, after a weight change, fails.
    monkeypatch.setattr(forms.Bf16Forward, "load_state_dict", lambda self, state_dict, strict=True, assign=False: None)
    policy, report = build_inference_policy(model, "eager", example, precision="bf16")
    assert isinstance(policy, EagerPolicy) and report.backend == "eager" and report.form == Form()
    assert report.reason.startswith("after a weight update: output 0 differs from eager"), report.reason
    assert "under one-ulp perturbations" in report.reason


def test_channels_last_keeps_its_layout_through_syncs_and_acts_as_eager():
    model, example = cnn()
    policy, report = build_inference_policy(model, "eager", example, memory_format="channels_last", strict=True)
    assert report.form == Form("fp32", "channels_last")
    assert next(model.parameters()).is_contiguous()  # the worker's own module keeps its layout: the form is a copy
    for seed in range(2):
        weights = new_weights(model, seed)
        policy.update_weights(weights)
        model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
        convs = [m for m in policy.module.modules() if isinstance(m, torch.nn.Conv2d)]
        assert convs and all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs)
        assert Float64Reference(model).mismatch(policy(*example), *example) is None


def test_which_forms_each_setting_builds():
    conv, _ = cnn()
    dense, _ = mlp()
    plain = Form()
    assert forms.forms_for("auto", "auto", "eager", conv, bf16="")[0] == [plain]  # no bf16 CPU: fp32, contiguous
    assert forms.forms_for("auto", "auto", "inductor", conv, bf16="")[0] == [plain]
    assert forms.forms_for("auto", "channels_last", "inductor", conv, bf16="")[0] == [Form("fp32", "channels_last")]
    assert forms.forms_for("auto", "auto", "inductor", dense, bf16="AMX")[0] == [plain, Form("bf16")]  # no convolutions
    both, why = forms.forms_for("auto", "auto", "eager", conv, bf16="AMX")
    assert both == [plain, Form("bf16", "channels_last")] and "this CPU has AMX; fp32 and bf16 timed" in why
    assert forms.forms_for("auto", "contiguous", "eager", conv, bf16="AMX")[0] == [plain, Form("bf16")]
    assert forms.forms_for("bf16", "auto", "onnxrt", conv, bf16="AMX")[0] == [plain]  # refused by the config; fp32
    assert forms.forms_for("fp32", "auto", "inductor", conv, bf16="AMX")[0] == [plain]
    only, why = forms.forms_for("bf16", "auto", "eager", conv, bf16="")
    assert only == [plain] and "this CPU has no bf16 instructions" in why  # a worker on a node without them


def test_auto_times_each_backend_in_each_form_on_a_bf16_cpu_and_keeps_the_fastest(bf16_cpu):
    model, example = mlp()
    policy, report = build_inference_policy(model, "auto", example, precision="auto")
    assert {"eager", "eager (bf16, contiguous)", "onnxrt"} <= report.timings_us.keys(), report.timings_us
    kept = min(report.timings_us, key=report.timings_us.get)
    assert kept.split(" ")[0] == report.backend == policy.backend
    assert (report.form.precision == "bf16") == ("bf16" in kept)
