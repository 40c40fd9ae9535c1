"""distrl config show: the resolved config with each key's type, default and description."""

import yaml

from distrl.config import Config
from tests.conftest import run_cli


def note_of(text: str, key: str) -> str:
    """A key's comment: on its line, or in the comment lines just above it (where the line would pass 80 columns)."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{key}:"))
    if "#" in lines[at]:
        return lines[at]
    above = []
    for line in reversed(lines[:at]):
        if not line.strip().startswith("#"):
            break
        above.insert(0, line.strip().removeprefix("# "))
    return " ".join(above)


def test_config_show_prints_every_key_with_type_default_and_description():
    result = run_cli("config", "show", "configs/cartpole.yaml", "--set", "ppo.lr=1e-3")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert yaml.safe_load(text)["ppo"]["lr"] == 1e-3  # still YAML: the comments are comments
    assert Config.model_validate(yaml.safe_load(text)).ppo.lr == 1e-3
    line = note_of(text, "num_envs_per_worker")
    assert "int > 0" in line and "default 64" in line and "copies of the env" in line
    assert "(set)" in note_of(text, "lr")
    keys = [line for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    settings = [key for key in keys if key.split(":", 1)[1].split("#")[0].strip()]  # a value: not a section
    assert len(settings) >= 60 and all("default" in note_of(text, key.split(":")[0].strip()) for key in settings)
    assert all(len(line) <= 80 for line in text.splitlines()), max(text.splitlines(), key=len)


def test_train_help_points_to_config_show_and_bad_values_stay_one_line():
    assert "distrl config show" in run_cli("train", "--help").stdout
    result = run_cli("config", "show", "--set", "ppo.epochs=0")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1 and "ppo.epochs=0" in result.stderr


def test_config_show_describes_a_league_and_reads_back():
    from distrl.config import load_config
    from distrl.config.describe import describe_config

    config = load_config("configs/league_connect4.yaml")
    text = describe_config(config)
    assert Config.model_validate(yaml.safe_load(text)) == config  # the curriculum's stages included
    line = note_of(text, "pfsp")
    assert "'hard' | 'variance'" in line and "AlphaStar" in line


def test_explain_names_each_auto_choice_with_its_reason_as_a_run_would(tmp_path):
    shown = run_cli("config", "show", "configs/cartpole.yaml", "--explain")
    assert shown.returncode == 0, shown.stderr[-2000:]
    explained = shown.stdout.split("# what auto chooses here")[1].splitlines()
    assert all(len(line) <= 80 for line in shown.stdout.splitlines()), max(shown.stdout.splitlines(), key=len)
    for start in (
        "  env      CartPole-v1: 1 workers x 64 envs (native, chosen by auto)",
        "           env groups: 1 group",
    ):
        assert any(line.startswith(start) for line in explained), (start, explained)
    for auto in ("kernels: eager (auto: ", "precision: fp32 (auto: ", "CPU threads: 1 (auto: "):
        assert any(auto in line for line in explained), (auto, explained)
    # building the env imports it: a factory named only by the file is refused, as for train, and never called
    sent = tmp_path / "sent.yaml"
    sent.write_text("env: {id: 'os:system'}\n")
    refused = run_cli("config", "show", str(sent), "--explain")
    assert refused.returncode == 2 and "--trust-env os:system" in refused.stderr, refused.stderr[-2000:]
    assert refused.stdout == ""
