"""Export a trained policy to ONNX, observation normalisation included, and check it against torch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from distrl.deploy.policy import policy_from_checkpoint


class DeployedPolicy(nn.Module):
    """Raw observation in, ``(pd_params, value[, h, c])`` out, with the run's normaliser baked in."""

    def __init__(self, model: nn.Module, mean=None, var=None, clip: float = 10.0):
        super().__init__()
        self.model = model
        self.normalize = mean is not None
        if self.normalize:
            self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float32))
            self.register_buffer("inv_std", torch.as_tensor(1.0 / np.sqrt(var + 1e-8), dtype=torch.float32))
        self.clip = clip

    def forward(self, obs, h=None, c=None):  # named inputs: torch.export cannot give *args dynamic shapes
        if self.normalize:
            obs = ((obs - self.mean) * self.inv_std).clamp(-self.clip, self.clip)
        return self.model(obs) if h is None else self.model(obs, h, c)


EXPORTERS = ("dynamo", "torchscript")


def _write_onnx(deployed: nn.Module, inputs: tuple, path: Path, input_names: list[str], output_names: list[str],
                exporter: str) -> str:  # fmt: skip
    """Export with ``exporter``; returns the one used. The dynamo exporter (torch.export + onnxscript, what torch
    recommends) is the default; the TorchScript one stays as the fallback where dynamo cannot export (an op it
    lacks, or no onnxscript, as in the torch 2.8 + ipex environment)."""
    if exporter == "dynamo":
        try:
            batch = torch.export.Dim("batch", min=1, max=65536)
            program = torch.onnx.export(deployed, inputs, input_names=input_names, output_names=output_names, dynamo=True,
                                        dynamic_shapes=tuple({0: batch} for _ in inputs), verbose=False)  # fmt: skip
            program.save(str(path))
            return "dynamo"
        except Exception as exc:  # noqa: BLE001 (any failure: the TorchScript exporter is still there)
            from distrl.common.errors import describe_error
            from distrl.common.log import get_logger

            get_logger("export").warning(f"the dynamo ONNX exporter failed ({describe_error(exc)}); using the TorchScript exporter")
    torch.onnx.export(
        deployed, inputs, str(path), input_names=input_names, output_names=output_names,
        dynamic_axes={name: {0: "batch"} for name in input_names + output_names}, dynamo=False, opset_version=17,
    )  # fmt: skip
    return "torchscript"


def export_onnx(checkpoint: str | Path, out: str | Path, batch: int = 8, env_id: str | None = None,
                trusted_envs=(), exporter: str = "dynamo") -> dict:  # fmt: skip
    """Write ``out`` and return the largest absolute difference from torch on random observations."""
    import onnxruntime as ort

    config, model, rms, obs_space, _ = policy_from_checkpoint(checkpoint, env_id, trusted_envs)
    deployed = DeployedPolicy(
        model, None if rms is None else rms.mean, None if rms is None else rms.var, config.env.obs_clip
    ).eval()
    rng = np.random.default_rng(0)
    window = model.window  # an attention model's input: each env's last observations [batch, W, *obs]
    obs = np.asarray([obs_space.sample() for _ in range(batch * max(1, window))], dtype=obs_space.dtype)
    if obs.dtype != np.uint8:
        obs = rng.normal(size=obs.shape).astype(np.float32)
    if window:
        obs = obs.reshape(batch, window, *obs_space.shape)
    inputs = [torch.from_numpy(obs)]
    input_names, output_names = ["obs_window" if window else "obs"], ["pd_params", "value"]
    if model.is_recurrent:
        h = torch.from_numpy(rng.normal(size=(batch, model.lstm_size)).astype(np.float32))
        inputs += [h, h.clone()]
        input_names += ["h", "c"]
        output_names += ["h_out", "c_out"]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    try:
        used = _write_onnx(deployed, tuple(inputs), tmp, input_names, output_names, exporter)
        session = ort.InferenceSession(str(tmp), providers=["CPUExecutionProvider"])
        ort_out = session.run(None, {name: x.numpy() for name, x in zip(input_names, inputs)})
        with torch.inference_mode():
            torch_out = deployed(*inputs)
        max_diff = max(float(np.abs(a - b.numpy()).max()) for a, b in zip(ort_out, torch_out))
        if not max_diff <= 1e-4:
            raise RuntimeError(f"exported ONNX model differs from torch by {max_diff:.3g}; nothing written")
        tmp.replace(out)
    finally:  # whatever happened, no OUT.tmp is left behind
        tmp.unlink(missing_ok=True)
    return {"path": str(out), "inputs": input_names, "outputs": output_names, "max_abs_diff": max_diff, "exporter": used}
