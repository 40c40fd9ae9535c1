"""distrl export: the dynamo ONNX exporter on every model kind (TorchScript as the fallback), checked by ONNX
Runtime."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from distrl.common.checkpoint import save_checkpoint
from distrl.config import load_config
from distrl.deploy import export_onnx
from distrl.envs import probe_spaces
from distrl.learner import Learner

MODELS = {
    "mlp": ("configs/cartpole.yaml", ["env.normalize_obs=true"]),
    "lstm": ("configs/cartpole_lstm.yaml", []),
    "lstm_towers": ("configs/cartpole_lstm.yaml", ["model.shared_trunk=false"]),  # an LSTM core in each tower
    "layer_norm": ("configs/cartpole.yaml", ["model.layer_norm=true"]),  # MAPPO's LayerNorms
    "cnn": ("configs/breakout.yaml", []),
}


def _checkpoint(tmp_path, name):
    path, overrides = MODELS[name]
    if name == "cnn":
        pytest.importorskip("ale_py")
    config = load_config(path, overrides)
    learner = Learner(config, *probe_spaces(config.env))
    payload = {"counters": {}, "learner": learner.state(), "config": config.model_dump(mode="json")}
    return save_checkpoint(tmp_path / name, 1, payload, keep=1), learner


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
@pytest.mark.parametrize("name", list(MODELS))
def test_export_each_model_with_each_exporter(tmp_path, name, exporter):
    checkpoint, learner = _checkpoint(tmp_path, name)
    out = tmp_path / f"{name}.onnx"
    info = export_onnx(checkpoint, out, exporter=exporter)
    assert info["exporter"] == exporter and info["max_abs_diff"] <= 1e-4
    onnx.checker.check_model(onnx.load(str(out)))
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == info["inputs"]
    # A batch size the export never saw: the batch axis is dynamic.
    obs_space = probe_spaces(learner.config.env)[0]
    obs = np.stack([obs_space.sample() for _ in range(3)])
    feeds = {"obs": obs if obs.dtype == np.uint8 else obs.astype(np.float32)}
    if learner.model.is_recurrent:
        feeds["h"] = feeds["c"] = np.zeros((3, learner.model.lstm_size), np.float32)
    outputs = session.run(None, feeds)
    assert outputs[0].shape[0] == 3 and outputs[1].shape[0] == 3
    if name != "mlp":  # (the MLP's export bakes in observation normalisation: compared in export_onnx itself)
        with torch.no_grad():
            expected = learner.model.eval()(*(torch.from_numpy(v) for v in feeds.values()))
        np.testing.assert_allclose(outputs[0], expected[0].numpy(), atol=1e-4)
