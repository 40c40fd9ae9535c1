"""Does a compiled policy act as eager does? A tolerance set by the computation, not by one CPU.

Float32 results depend on the order in which a CPU's kernels accumulate: blocked GEMMs and
convolutions, FMA and vector widths differ between Intel and AMD, oneDNN and ONNX Runtime. A
fixed tolerance tuned on one machine (1e-5 absolute was) fails a correct Nature-CNN on another.
So a compiled result is compared with a float64 run of the same module on the same inputs,
and accepted when its error is within a small multiple of eager float32's own error there:
a different summation order is about as accurate as eager's, while a graph acting with stale
weights or computing something else is off by orders of magnitude more. A module whose float64
copy cannot run (or does not stay float64 inside) is measured against eager instead, with
eager's rounding estimated by one-ulp perturbations of its weights and inputs.
"""

from __future__ import annotations

import copy
import logging
import math

import numpy as np
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from distrl.common.errors import describe_error
from distrl.compile.check_answers import Answers, ShippedCheck, inputs_key
from distrl.compile.policy import EagerPolicy, as_tuple
from distrl.compile.tolerance import BF16_MULTIPLE, OutputCheck, check_output, output_mismatch

log = logging.getLogger("distrl.compile")


def reduction_length(module: nn.Module) -> int:
    """The summed length of the dot products a forward pass chains: the model's size for rounding."""
    total = 0
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            total += layer.in_features
        elif isinstance(layer, nn.modules.conv._ConvNd):
            total += layer.in_channels // layer.groups * math.prod(layer.kernel_size)
        elif isinstance(layer, nn.RNNBase):
            total += layer.input_size + layer.hidden_size
    return max(total, 1)


class ReferenceUnavailable(Exception):
    """The float64 twin of a module cannot run, or does not compute in float64 inside."""


class _Float64Casts(TorchFunctionMode):
    """Inside the float64 twin, what the module casts or creates as float32 is made float64 instead.

    User modules convert their inputs themselves (``x.float() / 255.0`` in CleanRL's and SB3's CNNs),
    create float32 tensors (``torch.zeros(n)``) or cast with ``.to(torch.float32)``: each would
    either fail beside float64 weights or round the twin back to float32."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = {k: (torch.float64 if v is torch.float32 else v) for k, v in (kwargs or {}).items()}
        args = tuple(torch.float64 if a is torch.float32 else a for a in args)
        if func is torch.Tensor.float:
            func = torch.Tensor.double
        result = func(*args, **kwargs)
        return _widen(result)


def _widen(result):
    """float32 tensors (a factory's default dtype) as float64; anything else as it is."""
    if isinstance(result, torch.Tensor) and result.dtype == torch.float32:
        return result.double()
    if isinstance(result, tuple) and any(isinstance(r, torch.Tensor) for r in result):
        return type(result)(*map(_widen, result)) if hasattr(result, "_fields") else tuple(map(_widen, result))
    return result


class Float64Reference:
    """The yardstick for a float32 policy's outputs, following ``module``'s weights.

    Normally a float64 copy of the module (its float32 casts widened): a compiled result may be
    ``ERROR_MULTIPLE`` times as far from it as eager float32 is. Where that copy cannot run (a
    module that insists on float32, a custom op without a float64 kernel) or does not compute in
    float64, rounding is measured instead by eager float32 on weights and inputs moved by one
    ulp (two draws): what a different summation order does to this computation, on these inputs.
    A reference that cannot run is never held against the compiled policy.
    """

    def __init__(self, module: nn.Module):
        self.source = module
        self.reductions = reduction_length(module)
        self.kind = "float64"  # "perturbed" once the float64 twin has been found unusable
        self.why = ""  # why the float64 twin is not used
        try:
            self.module: nn.Module | None = copy.deepcopy(module).double().eval()
        except Exception as exc:  # a module that cannot even be copied to float64
            self.module = None
            self._give_up_float64(exc)
        self._perturbed: nn.Module | None = None

    def _give_up_float64(self, exc: BaseException) -> None:
        self.kind, self.why = "perturbed", describe_error(exc, 200)
        log.info(
            "compile check: no float64 reference for %s (%s); rounding measured by one-ulp perturbations instead",
            type(self.source).__name__,
            self.why,
        )

    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        """The module's outputs in float64 on ``inputs``, with the source module's current weights.

        Raises ``ReferenceUnavailable`` when the float64 twin cannot run or returns other than float64."""
        if self.module is None:
            raise ReferenceUnavailable(self.why)
        with torch.no_grad():
            for name, value in self.source.state_dict().items():
                self.module.state_dict()[name].copy_(value)
            tensors = (
                torch.from_numpy(
                    np.asarray(x, dtype=np.float64)
                    if np.issubdtype(np.asarray(x).dtype, np.floating)
                    else np.ascontiguousarray(x)
                )
                for x in inputs
            )
            try:
                with _Float64Casts():
                    outputs = as_tuple(self.module(*tensors))
            except Exception as exc:
                raise ReferenceUnavailable(f"the float64 copy raised {describe_error(exc, 200)}") from exc
        narrow = [str(o.dtype) for o in outputs if o.is_floating_point() and o.dtype != torch.float64]
        if narrow:
            raise ReferenceUnavailable(f"the float64 copy returned {', '.join(narrow)}: it does not compute in float64")
        return tuple(o.numpy() for o in outputs)

    def perturbed_rounding(
        self, inputs: tuple[np.ndarray, ...], eager: tuple[np.ndarray, ...], unit: str = "fp32"
    ) -> list[float]:
        """Per output, the largest change eager float32 shows when every weight and float input moves by one ulp
        (of float32, or of bf16 with ``unit="bf16"``)."""
        if self._perturbed is None:
            self._perturbed = copy.deepcopy(self.source).eval()
        rounding = [0.0] * len(eager)
        for draw in range(2):
            generator = torch.Generator().manual_seed(draw)
            with torch.no_grad():
                twin_state = self._perturbed.state_dict()
                for name, value in self.source.state_dict().items():
                    twin_state[name].copy_(_one_ulp(value, generator, unit) if value.is_floating_point() else value)
            moved = tuple(
                _one_ulp(torch.from_numpy(np.ascontiguousarray(x)), generator, unit).numpy()
                if np.issubdtype(np.asarray(x).dtype, np.floating)
                else x
                for x in inputs
            )
            outputs = EagerPolicy(self._perturbed)(*moved)
            for i, (a, b) in enumerate(zip(outputs, eager)):
                diff = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
                rounding[i] = max(rounding[i], float(np.max(np.where(np.isfinite(diff), diff, 0.0), initial=0.0)))
        return rounding

    def mismatch(self, got: tuple[np.ndarray, ...], *inputs: np.ndarray, precision: str = "fp32") -> str | None:
        """``output_mismatch`` of ``got`` against the source module run eagerly on ``inputs``; a bf16 ``got`` within
        ``BF16_MULTIPLE`` times what one bf16 ulp moves eager."""
        got = tuple(np.asarray(o) for o in got)
        eager = EagerPolicy(self.source)(*inputs)
        if precision == "bf16":
            rounding = self.perturbed_rounding(inputs, eager, unit="bf16")
            return output_mismatch(got, eager, eager, self.reductions, rounding=rounding, multiple=BF16_MULTIPLE)
        if self.kind == "float64":
            try:
                return output_mismatch(got, eager, self(*inputs), self.reductions)
            except ReferenceUnavailable as exc:
                self._give_up_float64(exc)
        return output_mismatch(got, eager, eager, self.reductions, rounding=self.perturbed_rounding(inputs, eager))

    def outputs(self, inputs: tuple[np.ndarray, ...]) -> tuple[tuple, tuple, list[float] | None]:
        """``(eager, reference, rounding)`` on ``inputs``: rounding None with a float64 reference."""
        eager = EagerPolicy(self.source)(*inputs)
        if self.kind == "float64":
            try:
                return eager, self(*inputs), None
            except ReferenceUnavailable as exc:
                self._give_up_float64(exc)
        return eager, eager, self.perturbed_rounding(inputs, eager)


def _one_ulp(tensor: torch.Tensor, generator: torch.Generator, unit: str = "fp32") -> torch.Tensor:
    """``tensor`` with every element moved one ulp (its own dtype's, or bf16's with ``unit="bf16"``) up or down
    (random signs): a rounding-sized change."""
    sign = torch.randint(0, 2, tensor.shape, generator=generator).bool()
    if unit == "bf16":
        _, exponent = torch.frexp(
            tensor
        )  # |x| = m * 2**e with m in [0.5, 1): bf16's 8-bit significand's ulp is 2**(e-8)
        ulp = torch.pow(2.0, (exponent - 8).to(tensor.dtype)) * (tensor != 0)
        return tensor + torch.where(sign, ulp, -ulp)
    inf = torch.tensor(float("inf"), dtype=tensor.dtype)
    return torch.nextafter(tensor, torch.where(sign, inf, -inf))


def checks_against_eager(
    got: tuple[np.ndarray, ...], module: nn.Module, inputs: tuple[np.ndarray, ...]
) -> list[OutputCheck]:
    """Every output of ``got`` measured against ``module`` run eagerly on ``inputs``, for reports."""
    reference = Float64Reference(module)
    eager, expected, rounding = reference.outputs(inputs)
    return [
        check_output(i, a, b, r, reference.reductions, None if rounding is None else rounding[i])
        for i, (a, b, r) in enumerate(zip(got, eager, expected))
    ]


def _perturbed_weights(module: nn.Module) -> dict[str, np.ndarray]:
    """``module``'s weights, each floating one moved by 5 % noise (seeded): a weight change a policy must follow."""
    generator = torch.Generator().manual_seed(0)
    return {
        k: (v + 0.05 * torch.randn(v.shape, generator=generator) if v.is_floating_point() else v).detach().numpy()
        for k, v in module.state_dict().items()
    }


def check_against_eager(
    policy, module: nn.Module, example: tuple[np.ndarray, ...], precision: str = "fp32"
) -> str | None:
    """Whether ``policy`` acts as eager ``module`` does on ``example``, now and after a weight change
    (the weights are restored afterwards); ``None`` when it does, else what differs. ``precision``: the policy's
    (``forms.py``), which sets the tolerance."""
    reference = Float64Reference(module)
    problem = reference.mismatch(policy(*example), *example, precision=precision)
    if problem:
        return problem
    original = {k: v.detach().clone() for k, v in module.state_dict().items()}
    perturbed = _perturbed_weights(module)
    eager = EagerPolicy(module)
    try:
        eager.update_weights(perturbed)
        policy.update_weights(perturbed)
        problem = reference.mismatch(policy(*example), *example, precision=precision)
        if problem:
            return f"after a weight update: {problem}"
    finally:
        restored = {k: v.numpy() for k, v in original.items()}
        eager.update_weights(restored)
        policy.update_weights(restored)
    return None


class CheckAnswers:
    """Eager float32's and float64's outputs of a CPU copy of ``module`` on ``inputs``, with the weights asked for: the
    answers a worker that checks without torch compares its own outputs with (``check_answers.py``). Built from the
    module before anything compiles it (the copy must run eagerly); each call loads the weights it is given."""

    def __init__(self, module: nn.Module, inputs: tuple[np.ndarray, ...]):
        self.twin = copy.deepcopy(module).cpu().eval()
        self.reference = Float64Reference(self.twin)
        self.inputs = tuple(inputs)
        self.key = inputs_key(self.inputs)

    def __call__(self, weights: dict[str, np.ndarray]) -> Answers:
        EagerPolicy(self.twin).update_weights(weights)
        eager, reference, rounding = self.reference.outputs(self.inputs)
        return Answers(self.key, eager, reference, rounding, self.reference.reductions)


def shipped_check(module: nn.Module, example: tuple[np.ndarray, ...]) -> ShippedCheck:
    """What ``check_against_eager`` compares an fp32 policy's outputs with, computed here for a worker that checks
    without torch (``shipped.py``): eager float32's and float64's outputs on ``example`` with ``module``'s weights,
    then with the same perturbed weights."""
    answers = CheckAnswers(module, example)
    weights = {k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}
    return ShippedCheck(answers.inputs, [(w, answers(w)) for w in (weights, _perturbed_weights(module))])
