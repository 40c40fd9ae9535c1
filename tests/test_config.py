"""Config validation: every kind of bad input gets one clear line naming key, value and what is allowed."""

import pydantic
import pytest

from distrl.config import ConfigError, config_to_yaml, load_config
from tests.conftest import ROOT, run_cli


def errors(overrides, path=None):
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    return info.value.lines


def test_shipped_configs_load():
    paths = sorted((ROOT / "configs").glob("*.yaml"))
    assert {p.stem for p in paths} >= {"cartpole", "pendulum", "cartpole_lstm", "breakout"}
    for path in paths:
        if path.stem.startswith("tune_"):  # a search file for `distrl tune`, over the config of the same name
            from distrl.tune import load_search
            from distrl.tune.search import check_trials_configs

            search = load_search(path)
            base = load_config(
                load_config(ROOT / "configs" / f"{path.stem.removeprefix('tune_')}.yaml"), search.overrides
            )
            check_trials_configs(base, search)
            continue
        assert load_config(path).stop.env_steps is not None


def test_scientific_notation_and_override_types():
    config = load_config(None, ["ppo.lr=3e-4", "stop.env_steps=2e5", "model.hidden=[32, 16]", "stop.time_s=null"])
    assert config.ppo.lr == pytest.approx(3e-4)
    assert config.stop.env_steps == 200_000 and isinstance(config.stop.env_steps, int)
    assert config.model.hidden == [32, 16]


def test_config_is_frozen_and_round_trips(tmp_path):
    config = load_config(ROOT / "configs" / "cartpole.yaml")
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        config.ppo.lr = 1.0
    path = tmp_path / "c.yaml"
    path.write_text(config_to_yaml(config))
    assert load_config(path) == config


def test_unknown_key_lists_allowed_names():
    (line,) = errors(["ppo.learning_rate=0.1"])
    assert line.startswith("ppo.learning_rate=0.1: unknown key")
    assert "allowed: lr, anneal_lr" in line


def test_wrong_type():
    (line,) = errors(["rollout.num_workers=many"])
    assert line.startswith("rollout.num_workers='many'") and "integer" in line


def test_out_of_range():
    (line,) = errors(["ppo.gamma=1.5"])
    assert line.startswith("ppo.gamma=1.5") and "less than or equal to 1" in line


def test_not_one_of_allowed_values():
    (line,) = errors(["env.vectorization=threads"])
    assert line == "env.vectorization='threads': Input should be 'auto', 'native', 'sync' or 'async'"


def test_incompatible_combinations_all_reported():
    lines = errors(
        ["ppo.minibatch_size=100000", "env.action_repeat=4", "env.vectorization=native", "learner.num_learners=3"]
    )
    assert any(line.startswith("ppo.minibatch_size=100000: must be <= the batch size") for line in lines)
    assert any(line.startswith("env.action_repeat=4: needs env.vectorization auto, sync or async") for line in lines)
    assert any(line.startswith("learner.num_learners=3: must divide env.num_envs_per_worker=64") for line in lines)


def test_lstm_rules():
    # Separate towers take a core each (MAPPO's recurrent policy and critic).
    assert load_config(None, ["model.lstm_size=16"]).model.shared_trunk is False
    for trunk in ("true", "false"):
        (line,) = errors(["model.lstm_size=16", f"model.shared_trunk={trunk}", "ppo.seq_len=48"])
        assert line.startswith("ppo.seq_len=48: must divide rollout.rollout_length=128")


def test_layer_norm_is_for_dense_layers():
    assert load_config(None, ["model.layer_norm=true", "model.type=cnn"]).model.layer_norm
    # The start-up summary and setup.txt say so.
    assert load_config(None, ["model.layer_norm=true"]).model.describe_layers() == "mlp [64, 64] tanh, layer norm"
    assert load_config(None, []).model.describe_layers() == "mlp [64, 64] tanh"
    (line,) = errors(["model.layer_norm=true", "model.type=attention"])
    assert line.startswith("model.layer_norm=true: an attention model has its own LayerNorms")


def test_no_stop_condition():
    (line,) = errors(["stop.env_steps=null"])
    assert "set at least one stop condition" in line


def test_several_problems_in_one_pass():
    assert len(errors(["ppo.lr=-1", "ppo.epochs=0", "seed=-3"])) == 3


def test_bad_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("env: {id: CartPole-v1\n")
    (line,) = errors([], bad)
    assert "not valid YAML" in line
    (line,) = errors([], tmp_path / "missing.yaml")  # near no name of a file beside it or of a shipped config
    assert line.endswith("no such file")
    (line,) = errors(["ppo.lr"])
    assert "expected key.path=value" in line


def test_cli_bad_config_exits_2_with_one_line_and_writes_nothing(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli("train", "configs/cartpole.yaml", "--set", "ppo.clip_coef=-0.2", "--run-dir", str(run_dir))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "distrl: config error: ppo.clip_coef=-0.2: Input should be greater than 0"
    ]
    assert "Traceback" not in result.stderr + result.stdout
    assert not run_dir.exists()


def test_cli_unknown_env_exits_2(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli("train", "configs/cartpole.yaml", "--set", "env.id=NoSuchEnv-v9", "--run-dir", str(run_dir))
    assert result.returncode == 2, result.stderr
    assert "env.id='NoSuchEnv-v9': not a registered gymnasium env" in result.stderr
    assert "Traceback" not in result.stderr
    assert not run_dir.exists()


def test_compile_short_forms():
    assert load_config(None, ["rollout.compile=true"]).rollout.compile.backend == "inductor"
    assert load_config(None, ["rollout.compile=onnxrt"]).rollout.compile.backend == "onnxrt"
    learner = load_config(None, ["learner.compile=reduce-overhead"]).learner.compile
    assert (learner.backend, learner.mode) == ("inductor", "reduce-overhead")
    assert load_config(None, ["learner.compile=false"]).learner.compile.backend == "eager"
    assert load_config(None, ["learner.amp=off"]).learner.amp == "off"
    (line,) = errors(["learner.compile=onnxrt"])
    assert "compile='onnxrt': expected true/false, a mode" in line


def test_cuda_graph_mode_with_lstm_is_refused_with_the_reason():
    (line,) = errors(["model.lstm_size=16", "model.shared_trunk=true", "learner.compile=reduce-overhead"])
    assert line.startswith("learner.compile.mode=reduce-overhead: CUDA-graph modes cannot run recurrent models")
    assert "overwrite their outputs" in line and "use mode: default" in line


def test_an_async_update_is_whole_worker_batches_as_they_come():
    """rollout.samples_per_update auto under async: as many workers' batches as their cores sample at once, at least
    four minibatches' worth, up to a round; null (the default): a round's; sync and overlap: always a round's."""
    base = ["rollout.num_workers=4", "env.num_envs_per_worker=16", "rollout.rollout_length=64"]  # 1,024 a worker
    size = lambda *extra: load_config(ROOT / "configs/cartpole.yaml", base + list(extra)).update_size  # noqa: E731
    auto = ["rollout.pipeline=async", "rollout.samples_per_update=auto"]
    quarter = "rollout.num_cpus_per_worker=0.25"  # four workers on one core: their batches come one at a time
    assert size(*auto, "ppo.minibatch_size=256", quarter) == 1024
    assert size(*auto, "ppo.minibatch_size=512", quarter) == 2048  # four minibatches' worth: two batches
    assert size(*auto, "ppo.minibatch_size=128", "rollout.num_cpus_per_worker=0.5") == 2048  # two cores, two batches
    assert size(*auto, "ppo.minibatch_size=128") == 4096  # a core each: all four sample at once, a round
    assert size(*auto, "ppo.minibatch_size=1024", quarter) == 4096  # four minibatches need the round
    assert size("rollout.pipeline=async", "ppo.minibatch_size=256", quarter) == 4096  # the default: a round
    assert size("rollout.pipeline=sync", "ppo.minibatch_size=256", quarter, "rollout.samples_per_update=auto") == 4096
    pendulum = load_config(
        ROOT / "configs/pendulum.yaml",
        ["rollout.num_workers=4", "rollout.num_cpus_per_worker=0.25", "rollout.pipeline=async"],
    )
    assert pendulum.update_size == 2048 and pendulum.batch_size == 8192  # the shipped config takes auto


def test_an_unknown_key_near_a_known_one_is_named():
    (line,) = errors(["ppo.lrr=1e-3"])
    assert line.startswith("ppo.lrr=0.001: unknown key; did you mean lr? (allowed: lr,"), line
    (line,) = errors(["ppo.zzzz=1"])
    assert "did you mean" not in line
