"""The ways a learner can run its update (step, kernels, precision): the rules that offer them, and the first update
that times them and holds the one it keeps to the plain fp32 loop. Real torch, real inductor, real env batches."""

import copy

import pytest
import torch

from distrl.common.hardware import cpu_bf16, has_wide_layers
from distrl.config import load_config
from distrl.envs import probe_spaces
from distrl.learner import Learner
from distrl.learner import learner as learner_module
from distrl.learner.epochs import LoopEpochs
from distrl.learner.hardware import choose_threads
from distrl.learner.step_rules import choose_kernels, choose_precision
from distrl.rollout import RolloutWorker

CNN = [
    "env.id=ALE/Breakout-v5",
    "model.type=cnn",
    "model.hidden=[64]",
    "model.shared_trunk=true",
    "learner.amp=off",
    "env.num_envs_per_worker=4",
    "rollout.rollout_length=32",
    "ppo.minibatch_size=32",
    "ppo.epochs=2",
]
MINATAR = [  # configs/minatar.yaml's network and batch
    "env.id=MinAtar/Asterix-v1",
    "model.hidden=[256, 256]",
    "model.activation=relu",
    "env.num_envs_per_worker=64",
    "rollout.rollout_length=128",
    "ppo.minibatch_size=1024",
    "ppo.lr=5e-4",
    "ppo.gamma=0.999",
    "ppo.ent_coef=0.01",
]
PENDULUM = [
    "env.id=Pendulum-v1",
    "env.vectorization=sync",
    "env.num_envs_per_worker=8",
    "rollout.rollout_length=32",
    "ppo.minibatch_size=64",
]


def _worker_and_learner(overrides):
    config = load_config(None, overrides)
    worker, learner = RolloutWorker(config), Learner(config, *probe_spaces(config.env))
    worker.set_weights(learner.get_weights())
    return worker, learner


def test_the_rules_offer_a_second_way_only_where_it_can_pay():
    config = load_config(None, [])
    assert choose_kernels(config, "device", "cuda", 1, False)[0] == ["eager", "inductor"]
    assert choose_kernels(config, "loop", "cpu", 1, True)[0] == ["eager", "inductor"]
    kernels, why = choose_kernels(config, "loop", "cpu", 1, False)
    assert kernels == ["eager"] and "without convolutions" in why
    assert choose_kernels(config, "device", "cpu", 1, False)[0] == [
        "eager"
    ]  # on CPU the device step's kernels = loop's
    assert choose_kernels(config, "loop", "cpu", 2, True) == (
        ["eager"],
        "auto: DDP ranks would each time their own and could choose differently",
    )
    assert choose_kernels(load_config(None, ["learner.compile=inductor"]), "loop", "cpu", 1, False)[0] == ["inductor"]
    assert choose_precision(config, "cpu", 1, True, "AMX") == (
        ["fp32", "bf16"],
        "auto: this CPU has AMX; fp32 and bf16 timed on the first update",
    )
    kinds, why = choose_precision(config, "cpu", 1, True, None)
    assert kinds == ["fp32"] and "no bf16 instructions" in why
    assert choose_precision(config, "cpu", 1, False, "AVX512-BF16")[0] == ["fp32"]
    assert choose_precision(config, "cpu", 1, False, "AVX512-BF16", wide=True)[0] == ["fp32", "bf16"]
    assert choose_precision(config, "cpu", 1, False, None, wide=True)[0] == ["fp32"]
    assert choose_precision(config, "cuda", 1, True, "AMX")[0] == ["fp32"]
    assert choose_precision(load_config(None, ["learner.amp=bf16"]), "cpu", 1, False, None) == (
        ["bf16"],
        "learner.amp=bf16",
    )
    assert choose_precision(load_config(None, ["learner.amp=off"]), "cpu", 1, True, "AMX")[0] == ["fp32"]


def test_a_cpu_learner_takes_the_cores_its_workers_leave_idle_while_it_updates():
    cnn = ["model.type=cnn", "rollout.pipeline=overlap", "rollout.num_workers=1"]
    assert choose_threads(load_config(None, cnn), "cpu", 1, 2, True) == (
        2,
        "auto: its 1 CPU(s) and the workers' 1 (up to its machine's 2 cores), idle while it updates (overlap)",
    )
    assert choose_threads(load_config(None, [*cnn, "rollout.num_workers=4"]), "cpu", 1, 16, True)[0] == 5
    assert (
        choose_threads(load_config(None, [*cnn, "rollout.num_workers=4"]), "cpu", 1, 3, True)[0] == 3
    )  # the machine's
    assert choose_threads(load_config(None, [*cnn, "learner.num_cpus_per_learner=2"]), "cpu", 1, 2, True)[0] == 2
    for keeps, args in (
        (["rollout.pipeline=async"], ("cpu", 1, 2, True)),
        ([], ("cuda", 1, 2, True)),
        ([], ("cpu", 2, 2, True)),
        (["learner.reserve_cores=true"], ("cpu", 1, 2, True)),
        ([], ("cpu", 1, 2, False)),
    ):
        threads, why = choose_threads(load_config(None, [*cnn, *keeps]), *args)
        assert threads == 1 and why.startswith("auto: its 1 CPU(s); "), (keeps, args, why)
    assert choose_threads(load_config(None, [*cnn, "learner.num_threads=3"]), "cpu", 1, 2, True) == (
        3,
        "learner.num_threads=3",
    )


def test_a_plain_loop_learner_tries_nothing():
    worker, learner = _worker_and_learner(
        ["env.num_envs_per_worker=8", "rollout.rollout_length=64", "ppo.minibatch_size=128"]
    )
    assert not learner.epochs.checking and learner.describe()["kernels"] == "eager"
    result = learner.update(worker.sample())
    assert "learner_step" not in result and learner.describe()["trial"] is None


def test_wide_layers_are_what_bf16_is_tried_for_on_a_model_without_convolutions():
    def model(overrides):
        config = load_config(None, overrides)
        return Learner(config, *probe_spaces(config.env)).model

    assert not has_wide_layers(model([]))  # CartPole's 64 x 64
    assert has_wide_layers(model(["model.hidden=[256, 256]"]))
    assert not has_wide_layers(model(["model.hidden=[256, 256]", "model.lstm_size=64"]))


def test_under_a_bf16_autocast_the_heads_compute_in_fp32_and_the_layers_before_them_in_bf16():
    config = load_config(None, ["model.hidden=[256, 256]", "learner.amp=bf16"])
    model = Learner(config, *probe_spaces(config.env)).model
    seen = {}
    model.actor_encoder.register_forward_hook(lambda module, args, out: seen.update(encoder=out.dtype))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        pd_params, values = model(torch.rand(8, 4))
    assert seen["encoder"] == torch.bfloat16 and pd_params.dtype == values.dtype == torch.float32
    twin = copy.deepcopy(model)  # computes with its own weights, in fp32 at the heads as well
    with torch.no_grad():
        twin.value_head.bias.add_(1.0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, twin_values = twin(torch.zeros(8, 4))
        _, values = model(torch.zeros(8, 4))
    assert twin_values.dtype == torch.float32 and torch.allclose(twin_values, values + 1.0)
    plain = load_config(None, ["model.hidden=[256, 256]", "learner.amp=off"])
    assert type(Learner(plain, *probe_spaces(plain.env)).model.value_head) is torch.nn.Linear  # fp32: left as it is


@pytest.mark.skipif(cpu_bf16() is None, reason="this CPU has no bf16 instructions: bf16 is not tried")
def test_a_learner_with_wide_layers_times_bf16_beside_fp32_and_keeps_one_that_matched():
    worker, learner = _worker_and_learner(
        ["model.hidden=[256, 256]", "env.num_envs_per_worker=8", "rollout.rollout_length=64", "ppo.minibatch_size=256"]
    )
    assert learner.epochs.checking and learner.describe()["precision"] == "fp32 or bf16"
    result = learner.update(worker.sample())
    tried = [way["way"] for way in learner.describe()["trial"] if way["step_ms"] is not None]
    assert len(tried) == 2 and any("bf16" in way for way in tried) and any("fp32" in way for way in tried), tried
    assert result["learner_step"]["precision"] in ("fp32", "bf16")
    assert learner.step_check is None or learner.step_check.ok, learner.step_check.reason


def test_a_bf16_update_is_held_to_the_fp32_loop_and_a_wrong_one_is_not_kept(monkeypatch):
    """learner.amp=bf16: the first update is checked against fp32 with bf16's tolerance, the changes of the weights
    compared. An update half the size it should be (a bf16 path that drops part of the gradient) is refused, and the
    fp32 loop's update stands."""
    worker, learner = _worker_and_learner(PENDULUM + ["learner.amp=bf16"])
    result = learner.update(worker.sample())
    assert learner.step_check.ok, learner.step_check.reason
    assert result["learner_step"]["precision"] == "bf16" and learner.epochs.loss.precision == "bf16"

    run = LoopEpochs.run

    def half_the_change(self, samples, num_mb, generator):
        before = [p.detach().clone() for p in self.model.parameters()]
        stats = run(self, samples, num_mb, generator)
        if self.loss.precision == "bf16":
            with torch.no_grad():
                for p, b in zip(self.model.parameters(), before):
                    p.copy_(b + (p - b) * 0.5)
        return stats

    monkeypatch.setattr(LoopEpochs, "run", half_the_change)
    worker, learner = _worker_and_learner(PENDULUM + ["learner.amp=bf16"])
    plain_worker, plain = _worker_and_learner(PENDULUM + ["learner.amp=off"])
    sample = worker.sample()
    assert learner.update(sample)["learner_step"]["precision"] == "fp32"
    assert not learner.step_check.ok and "the change of weight" in learner.step_check.reason
    assert "the loop, eager kernels, bf16: its first update did not match" in learner.step_reason
    plain.update(sample)
    for key, value in plain.model.state_dict().items():  # the fp32 loop's update is the one kept
        torch.testing.assert_close(learner.model.state_dict()[key], value, rtol=0, atol=0)


def test_a_share_of_the_samples_is_held_to_the_samples_not_finer():
    """clip_frac counts samples past the clip's edge: another way that moves one sample across it (1 in 32,768 on
    MinAtar's first update) is within the check, however the nudged loop fell; five samples' worth is not."""
    from distrl.learner.step_check import BF16_MULTIPLE, UpdateState, compare_updates

    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.Adam(model.parameters())
    state = UpdateState.capture(model, optimizer, torch.Generator().manual_seed(0))
    loop = {"clip_frac": 0.005, "approx_kl": 0.002, "gradient_steps": 32, "skipped_steps": 0, "kl_early_stop": False}
    one_sample = 1 / (1024 * 32)

    def check(difference, samples_per_step):
        other = {**loop, "clip_frac": loop["clip_frac"] + difference}
        return compare_updates(
            (loop, state),
            (loop, state),
            (other, state),
            model,
            multiple=BF16_MULTIPLE,
            samples_per_step=samples_per_step,
        )

    assert check(one_sample, 1024).ok
    assert not check(one_sample, None).ok  # without the count, a sample's flip is far past float32's rounding
    refused = check(5 * one_sample, 1024)
    assert not refused.ok and "clip_frac differs" in refused.reason


@pytest.mark.skipif(cpu_bf16() is None, reason="this CPU has no bf16 instructions: bf16 is not tried")
@pytest.mark.parametrize("seed", [1, 2])
def test_minatars_bf16_first_update_matches_the_loop_on_the_seeds_it_missed(seed):
    """MinAtar Asterix with configs/minatar.yaml's network and batch, seeds 1 and 2: correct bf16 updates that the
    check once refused (the gradient norm, the value head's change: a few one-ulp spreads off, as a nudge of the
    weights leaves out the rounding of activations and gradients), so such runs trained in fp32 at half the speed."""
    pytest.importorskip("minatar")
    worker, learner = _worker_and_learner([*MINATAR, f"seed={seed}", "learner.amp=bf16"])
    result = learner.update(worker.sample())
    assert learner.step_check.ok and result["learner_step"]["precision"] == "bf16", learner.step_check.reason


def test_inductor_inside_the_device_step_matches_the_loop_on_cpu():
    """learner.step=device with learner.compile=inductor: the step's loss compiled, run uncaptured on CPU (captured
    on CUDA, tests/test_gpu.py); held to the eager loop on its first update, then kept."""
    worker, learner = _worker_and_learner(PENDULUM + ["learner.step=device", "learner.compile=inductor"])
    result = learner.update(worker.sample())
    assert learner.step_check.ok, learner.step_check.reason
    assert learner.step_kind == "device" and result["learner_step"]["kernels"] == "inductor"
    assert learner.device_step.loss_fn != learner.device_step.loss.terms  # the compiled one
    report = result["learner_step"]["trial"]
    assert [r["way"] for r in report] == ["device step, inductor kernels, fp32"] and report[0]["prepare_s"] > 0
    assert torch.isfinite(torch.tensor(learner.update(worker.sample())["loss_value"]))


@pytest.mark.slow
def test_a_cnn_on_cpu_times_eager_and_inductor_and_keeps_one_that_matched():
    """learner.compile auto on a CPU learner with convolutions: both compiled and timed on the first update, the faster
    kept once it matched the eager loop; what was timed is in the report."""
    worker, learner = _worker_and_learner(CNN)
    assert learner.describe()["kernels"] == "eager or inductor"
    result = learner.update(worker.sample())
    step = result["learner_step"]
    assert learner.step_check.ok, learner.step_check.reason
    assert step["kernels"] in ("eager", "inductor") and step["kernels"] == learner.epochs.way.kernels
    assert [r["way"] for r in step["trial"]] == ["loop, eager kernels, fp32", "loop, inductor kernels, fp32"]
    assert (
        all(r["step_ms"] > 0 for r in step["trial"]) and "the fastest step that matched the loop" in step["step_reason"]
    )
    assert "learner_step" not in learner.update(worker.sample())


@pytest.mark.slow
def test_competing_precisions_are_settled_on_eager_kernels_before_anything_compiles(monkeypatch):
    """A CNN with kernels and precision both auto on a CPU with bf16 instructions (said to have them here, so that the
    AMD boxes run it too): fp32 and bf16 timed on eager kernels first, and only the faster precision's inductor way
    compiled; the other's is reported passed over, never prepared."""
    monkeypatch.setattr(learner_module, "cpu_bf16", lambda: "AMX")
    worker, learner = _worker_and_learner([item for item in CNN if item != "learner.amp=off"])
    assert learner.describe()["precision"] == "fp32 or bf16"
    step = learner.update(worker.sample())["learner_step"]
    assert learner.step_check.ok, learner.step_check.reason
    trial = {r["way"]: r for r in step["trial"]}
    eager = {p: trial[f"loop, eager kernels, {p}"]["step_ms"] for p in ("fp32", "bf16")}
    won = "bf16" if eager["bf16"] < 0.95 * eager["fp32"] else "fp32"
    lost = {"fp32": "bf16", "bf16": "fp32"}[won]
    compiled, skipped = trial[f"loop, inductor kernels, {won}"], trial[f"loop, inductor kernels, {lost}"]
    assert compiled["prepare_s"] > 0 and compiled["step_ms"] > 0 and "passed_over" not in compiled
    assert skipped["prepare_s"] is None and skipped["step_ms"] is None
    assert skipped["passed_over"].startswith(f"not prepared: {won}'s eager step")
    assert step["precision"] == won  # the faster precision's eager or inductor way, checked against the fp32 loop


def test_a_compile_that_fails_leaves_the_eager_way(monkeypatch):
    def broken(self, loss_terms):
        def compiled(minibatch):
            raise RuntimeError("inductor: no C++ compiler found")

        return compiled

    monkeypatch.setattr(Learner, "_compile", broken)
    worker, learner = _worker_and_learner(CNN)
    result = learner.update(worker.sample())
    assert result["learner_step"]["kernels"] == "eager" and learner.step_check.ok
    trial = {r["way"]: r for r in result["learner_step"]["trial"]}
    assert (
        "preparing it raised RuntimeError: inductor: no C++ compiler found"
        in trial["loop, inductor kernels, fp32"]["problem"]
    )


@pytest.mark.parametrize("value", ["fp8", "yes"])
def test_bad_amp_values_are_refused(value):
    from distrl.config import ConfigError

    with pytest.raises(ConfigError, match="learner.amp=.*Input should be 'auto', 'off', 'bf16' or 'fp16'"):
        load_config(None, [f"learner.amp={value}"])
