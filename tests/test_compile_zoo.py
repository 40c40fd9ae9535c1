"""compile_policy on modules as users write them: every backend compiles each one and matches eager before and
after weight updates, and a policy acting with stale weights still fails the check."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from distrl.compile import CompileError, compile_policy
from distrl.compile.check import Float64Reference
from tests.worker_backends import BACKENDS


class ScaledCNN(nn.Module):
    """CleanRL's / SB3's Atari idiom: uint8 frames converted and scaled inside forward, two heads."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Conv2d(4, 16, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(16, 32, 4, stride=2),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(32 * 3 * 3, 64),
            nn.ReLU(),
        )
        self.actor, self.critic = nn.Linear(64, 6), nn.Linear(64, 1)

    def forward(self, x):
        hidden = self.trunk(x.float() / 255.0)
        return self.actor(hidden), self.critic(hidden)


class ResidualNorm(nn.Module):
    """LayerNorm, GELU and residual blocks, a single tensor out."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 32)
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(32), nn.Linear(32, 32), nn.GELU()) for _ in range(2))
        self.out = nn.Linear(32, 4)

    def forward(self, x):
        h = self.inp(x)
        for block in self.blocks:
            h = h + block(h)
        return self.out(h)


class TokenEmbedding(nn.Module):
    """Integer tokens through an embedding, mean-pooled; float32 constants made inside forward."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.head = nn.Linear(16, 3)

    def forward(self, tokens):
        scale = torch.tensor(0.5, dtype=torch.float32)
        pooled = self.embed(tokens).mean(dim=1) * scale + torch.ones(16)
        return self.head(pooled), pooled.sum(-1)


class DictHeads(nn.Module):
    """Two heads returned as a dict, with a cast through .to(torch.float32)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 32), nn.Tanh())
        self.logits, self.value = nn.Linear(32, 5), nn.Linear(32, 1)

    def forward(self, x):
        h = self.body(x.to(torch.float32))
        return {"logits": self.logits(h), "value": self.value(h).squeeze(-1)}


class Attention(nn.Module):
    """Self-attention over a set of entities through scaled_dot_product_attention, pooled."""

    def __init__(self, features=8, d_model=32, heads=4):
        super().__init__()
        self.heads = heads
        self.embed = nn.Linear(features, d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.policy, self.value = nn.Linear(d_model, 4), nn.Linear(d_model, 1)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.embed(x)
        q, k, v = self.qkv(self.norm(h)).chunk(3, dim=-1)
        split = lambda z: z.reshape(b, t, self.heads, -1).transpose(1, 2)  # noqa: E731
        attended = F.scaled_dot_product_attention(split(q), split(k), split(v)).transpose(1, 2).reshape(b, t, -1)
        h = (h + self.proj(attended)).mean(dim=1)
        return self.policy(h), self.value(h)


def zoo_inputs(name, generator):
    if name == "scaled_cnn":
        return (torch.randint(0, 256, (5, 4, 36, 36), generator=generator, dtype=torch.uint8),)
    if name == "residual_norm":
        return (torch.randn(7, 8, generator=generator),)
    if name == "token_embedding":
        return (torch.randint(0, 50, (6, 10), generator=generator),)
    if name == "dict_heads":
        return (torch.randn(9, 6, generator=generator),)
    return (torch.randn(3, 5, 8, generator=generator),)


ZOO = {
    "scaled_cnn": ScaledCNN,
    "residual_norm": ResidualNorm,
    "token_embedding": TokenEmbedding,
    "dict_heads": DictHeads,
    "attention": Attention,
}


def flat(outputs):
    if isinstance(outputs, torch.Tensor):
        return (outputs.detach().numpy(),)
    if isinstance(outputs, dict):
        return tuple(v.detach().numpy() for v in outputs.values())
    return tuple(o.detach().numpy() for o in outputs)


def assert_matches_eager(policy, module, inputs):
    """The compiled outputs keep the module's structure and are within the rounding rule of eager's."""
    got = policy(*inputs)
    with torch.no_grad():
        eager = module(*inputs)
    assert type(got) is type(eager) or (isinstance(got, tuple) and isinstance(eager, tuple))
    if isinstance(eager, dict):
        assert list(got) == list(eager)
    # Measured against the module with its outputs as a flat tuple (compile_policy's own wrapper, sharing its weights).
    problem = Float64Reference(policy._checked.module).mismatch(flat(got), *(x.numpy() for x in inputs))
    assert problem is None, problem


def updated(module, seed):
    generator = torch.Generator().manual_seed(seed)
    return {
        k: (v + 0.05 * torch.randn(v.shape, generator=generator) if v.is_floating_point() else v)
        for k, v in module.state_dict().items()
    }


@pytest.mark.parametrize("name", list(ZOO))
@pytest.mark.parametrize("backend", BACKENDS)
def test_user_module_compiles_and_matches_eager_before_and_after_updates(backend, name):
    torch.manual_seed(0)
    module = ZOO[name]().eval()
    inputs = zoo_inputs(name, torch.Generator().manual_seed(1))
    policy = compile_policy(module, backend, example_inputs=inputs, strict=True)
    assert policy.backend == backend, policy.report.reason
    assert_matches_eager(policy, module, inputs)
    for step in range(2):
        state = updated(module, 10 + step)
        policy.update_weights(state)
        module.load_state_dict(state)
        assert_matches_eager(policy, module, inputs)
        checked = policy._checked
        checked.verify(tuple(x.numpy() for x in inputs), f"after update {step}")  # the worker's every-sync check
    assert checked.sync_checks == 2


@pytest.mark.parametrize("name", list(ZOO))
def test_stale_weights_still_fail_the_check_on_every_user_module(name):
    """The compiled policy keeps the old weights while the module moves one small step: refused."""
    torch.manual_seed(0)
    module = ZOO[name]().eval()
    inputs = zoo_inputs(name, torch.Generator().manual_seed(1))
    policy = compile_policy(module, "onnxrt", example_inputs=inputs, strict=True)
    checked = policy._checked
    generator = torch.Generator().manual_seed(3)
    step = {
        k: (v + 2.5e-4 * torch.randn(v.shape, generator=generator).sign() if v.is_floating_point() else v)
        for k, v in module.state_dict().items()
    }
    module.load_state_dict(step)  # eager moved on; the ONNX Runtime session was not told
    with pytest.raises(CompileError, match="differs from eager"):
        checked.verify(tuple(x.numpy() for x in inputs), "after a sync the policy missed")


def test_module_that_insists_on_float32_is_checked_by_perturbation():
    """A float64 copy that cannot run is no evidence against the policy: rounding is measured another way."""

    class Float32Only(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 3)

        def forward(self, x):
            if self.linear.weight.dtype != torch.float32:
                raise TypeError("this module runs in float32 only")
            return self.linear(x)

    torch.manual_seed(0)
    module = Float32Only().eval()
    inputs = (torch.randn(8, 4),)
    policy = compile_policy(module, "onnxrt", example_inputs=inputs, strict=True)
    assert policy.backend == "onnxrt"
    reference = Float64Reference(policy._checked.module)
    arrays = tuple(x.numpy() for x in inputs)
    assert reference.mismatch(flat(policy(*inputs)), *arrays) is None
    assert reference.kind == "perturbed" and "float32 only" in reference.why
    stale = copy.deepcopy(module)
    stale.load_state_dict(updated(module, 5))
    problem = reference.mismatch(flat(stale(*inputs)), *arrays)
    assert problem is not None and "under one-ulp perturbations" in problem
