"""Export a trained policy to ONNX, observation normalisation included, and check it against torch."""

from __future__ import annotations

import contextlib
import logging
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from distrl.common.spaces import obs_layout
from distrl.data.memory import memory_for
from distrl.deploy.policy import chosen_checkpoint, policy_from_checkpoint


class DeployedPolicy(nn.Module):
    """Raw observation in, ``(pd_params, value[, h, c])`` out, with the run's normaliser baked in.

    A Dict or Tuple observation comes in by parts (a dict of tensors, one ONNX input per part, named by its
    key), each flattened as gymnasium flattens it (Discrete parts as their integer, one-hot inside the graph)."""

    def __init__(self, model: nn.Module, mean=None, var=None, clip: float = 10.0, skip=None):
        super().__init__()
        self.model = model
        self.normalize = mean is not None
        if self.normalize:
            self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float32))
            self.register_buffer("inv_std", torch.as_tensor(1.0 / np.sqrt(var + 1e-8), dtype=torch.float32))
            self.register_buffer("skip", None if skip is None else torch.as_tensor(skip, dtype=torch.bool))
        self.clip = clip
        self.parts = obs_layout(model.observation_space)

    def _flatten(self, parts: dict) -> torch.Tensor:
        flat = []
        for part in self.parts:
            x, space = parts[part.name], part.space
            if isinstance(space, gym.spaces.Discrete):
                x = torch.nn.functional.one_hot(x.long() - int(space.start), int(space.n))
            elif isinstance(space, gym.spaces.MultiDiscrete):
                x = torch.cat(
                    [
                        torch.nn.functional.one_hot(x[:, i].long() - int(s), int(n))
                        for i, (n, s) in enumerate(zip(space.nvec, space.start))
                    ],
                    dim=-1,
                )
            flat.append(x.reshape(x.shape[0], part.size).to(torch.float32))
        return torch.cat(flat, dim=-1)

    def forward(self, obs, h=None, c=None):  # named inputs: torch.export cannot give *args dynamic shapes
        if self.parts:
            obs = self._flatten(obs)
        if self.normalize:
            normalized = ((obs - self.mean) * self.inv_std).clamp(-self.clip, self.clip)
            obs = normalized if self.skip is None else torch.where(self.skip, obs.to(normalized.dtype), normalized)
        return self.model(obs) if h is None else self.model(obs, h, c)


EXPORTERS = ("dynamo", "torchscript")


@contextlib.contextmanager
def _quiet_exporters():
    """The exporters' own chatter (torchvision ops it skips, deprecations of their internals) is not the user's
    business: warnings and torch.onnx's log records below ERROR are dropped while they run."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _write_onnx(
    deployed: nn.Module, inputs: tuple, path: Path, input_names: list[str], output_names: list[str], exporter: str
) -> str:
    """Export with ``exporter``; returns the one used. The dynamo exporter (torch.export + onnxscript, what torch
    recommends) is the default; the TorchScript one stays as the fallback where dynamo cannot export (an op it
    lacks, or no onnxscript, as in the torch 2.8 + ipex environment)."""
    with _quiet_exporters():
        return _export(deployed, inputs, path, input_names, output_names, exporter)


def _export(
    deployed: nn.Module, inputs: tuple, path: Path, input_names: list[str], output_names: list[str], exporter: str
) -> str:
    batch_axis = lambda axis: tuple({k: {0: axis} for k in x} if isinstance(x, dict) else {0: axis} for x in inputs)  # noqa: E731
    args = (
        (*inputs, {}) if isinstance(inputs[-1], dict) else inputs
    )  # a trailing dict would be read as keyword arguments
    if exporter == "dynamo":
        try:
            program = torch.onnx.export(
                deployed,
                args,
                input_names=input_names,
                output_names=output_names,
                dynamo=True,
                dynamic_shapes=batch_axis(torch.export.Dim("batch", min=1, max=65536)),
                verbose=False,
            )
            program.save(str(path))
            return "dynamo"
        except Exception as exc:  # noqa: BLE001 (any failure: the TorchScript exporter is still there)
            from distrl.common.errors import describe_error
            from distrl.common.log import get_logger

            get_logger("export").warning(
                f"the dynamo ONNX exporter failed ({describe_error(exc)}); using the TorchScript exporter"
            )
    torch.onnx.export(
        deployed,
        args,
        str(path),
        input_names=input_names,
        output_names=output_names,
        dynamic_axes={name: {0: "batch"} for name in input_names + output_names},
        dynamo=False,
        opset_version=17,
    )
    return "torchscript"


def export_policies(
    checkpoint: str | Path,
    out: str | Path,
    env_id: str | None = None,
    trusted_envs=(),
    exporter: str = "dynamo",
    policy: str | None = None,
    which: str = "best",
) -> list[dict]:
    """``export_onnx`` for the checkpoint's policy, or the one named; a checkpoint of several trained policies
    (``agents.policies``) with none named: one file per policy, ``OUT_STEM.NAME.onnx`` beside ``out``. A run
    directory's best checkpoint, or its newest with ``which`` latest (``chosen_checkpoint``); each result names it."""
    checkpoint, how, names = chosen_checkpoint(checkpoint, which)
    if not names or policy is not None:
        done = [
            export_onnx(checkpoint, out, env_id=env_id, trusted_envs=trusted_envs, exporter=exporter, policy=policy)
        ]
    else:
        out = Path(out)
        done = [
            export_onnx(
                checkpoint,
                out.with_name(f"{out.stem}.{name}{out.suffix or '.onnx'}"),
                env_id=env_id,
                trusted_envs=trusted_envs,
                exporter=exporter,
                policy=name,
            )
            for name in names
        ]
    return [{**result, "checkpoint": str(checkpoint), "chosen": how} for result in done]


def export_onnx(
    checkpoint: str | Path,
    out: str | Path,
    batch: int = 8,
    env_id: str | None = None,
    trusted_envs=(),
    exporter: str = "dynamo",
    policy: str | None = None,
) -> dict:
    """Write ``out`` and return the largest absolute difference from torch on random observations. ``policy``: which of
    a run's several trained policies (None: its one)."""
    import onnxruntime as ort

    config, model, rms, obs_space, _, _ = policy_from_checkpoint(checkpoint, env_id, trusted_envs, policy)
    deployed = DeployedPolicy(
        model,
        None if rms is None else rms.mean,
        None if rms is None else rms.var,
        config.env.obs_clip,
        None if rms is None else rms.skip,
    ).eval()
    rng = np.random.default_rng(0)
    memory = memory_for(model)  # its state (an LSTM's h, c) is an input and an output; a window is the input
    if deployed.parts:  # a Dict or Tuple: one input per part, named by its key, then the memory's state
        feeds = _part_examples(obs_space, deployed.parts, batch, rng)
        inputs, input_names = [{k: torch.from_numpy(v) for k, v in feeds.items()}], list(feeds)
        state = memory.example(np.empty((batch, 0), np.float32), rng)[1:] if len(memory.input_names) > 1 else ()
        feeds.update(zip(memory.input_names[1:], state))
        inputs += [torch.from_numpy(x) for x in state]
        input_names += memory.input_names[1:]
    else:
        obs = np.asarray([obs_space.sample() for _ in range(batch * memory.rows_per_example())], dtype=obs_space.dtype)
        if obs.dtype != np.uint8:
            obs = rng.normal(size=obs.shape).astype(np.float32)
        example = memory.example(obs, rng)
        inputs, input_names = [torch.from_numpy(x) for x in example], list(memory.input_names)
        feeds = dict(zip(input_names, example))
    output_names = ["pd_params", "value", *memory.output_names]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    try:
        used = _write_onnx(deployed, tuple(inputs), tmp, input_names, output_names, exporter)
        session = ort.InferenceSession(str(tmp), providers=["CPUExecutionProvider"])
        ort_out = session.run(None, feeds)
        with torch.inference_mode():
            torch_out = deployed(*inputs)
        max_diff = max(float(np.abs(a - b.numpy()).max()) for a, b in zip(ort_out, torch_out))
        if not max_diff <= 1e-4:
            raise RuntimeError(f"exported ONNX model differs from torch by {max_diff:.3g}; nothing written")
        tmp.replace(out)
    finally:  # whatever happened, no OUT.tmp is left behind
        tmp.unlink(missing_ok=True)
    return {
        "path": str(out),
        "inputs": input_names,
        "outputs": output_names,
        "max_abs_diff": max_diff,
        "exporter": used,
    }


def _part_examples(space: gym.Space, parts: list, batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A batch of each part of a Dict or Tuple observation, as the exported model takes them: Box parts in float32
    (uint8 images as they are), Discrete parts as int64 indices, MultiDiscrete and MultiBinary as int64 arrays."""
    feeds = {}
    for part in parts:
        sub = part.space
        if isinstance(sub, (gym.spaces.Dict, gym.spaces.Tuple)):
            raise ValueError(
                f"observation part {part.name!r}: a nested {type(sub).__name__} cannot be exported by "
                "parts; flatten it in the env (gymnasium.wrappers.FlattenObservation)"
            )
        values = np.stack([np.asarray(sub.sample()) for _ in range(batch)])
        if isinstance(sub, gym.spaces.Box):
            values = values if sub.dtype == np.uint8 else rng.normal(size=values.shape).astype(np.float32)
        else:
            values = values.astype(np.int64)
        feeds[part.name] = values
    return feeds
