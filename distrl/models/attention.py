"""A small transformer encoder over a window of recent observations (or over an observation's tokens).

Pre-norm blocks (Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture"),
learned positional embeddings, attention through ``torch.nn.functional.scaled_dot_product_attention``
so that PyTorch picks its fused kernel (flash or memory-efficient on CUDA with bf16, the math
kernel elsewhere) and every backend can export it (ONNX Runtime fuses the pattern on its side).

Input ``[B, L, F]``: ``L`` is ``model.window`` (the env's last observations, zeros before its
episode's start: the rule the LSTM's state follows) or the observation's own tokens
(``model.window: 0``). Output ``[B, d_model]``: the last token's, or the mean of all.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class _Block(nn.Module):
    def __init__(self, d_model: int, heads: int, causal: bool):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, length, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, length, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)  # [B, heads, L, d/heads]
        x = x + self.proj(attended.transpose(1, 2).reshape(b, length, d))
        return x + self.mlp(self.norm2(x))


class AttentionEncoder(nn.Module):
    def __init__(self, length: int, features: int, d_model: int, heads: int, layers: int, causal: bool, pool: str):
        super().__init__()
        self.length, self.pool = length, pool
        self.embed = nn.Linear(features, d_model)
        self.position = nn.Parameter(torch.zeros(length, d_model))
        nn.init.normal_(self.position, std=0.02)
        self.blocks = nn.ModuleList(_Block(d_model, heads, causal) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.out_dim = d_model

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens [B, L, F]`` -> ``[B, d_model]``."""
        x = self.embed(tokens.to(self.embed.weight.dtype)) + self.position
        for block in self.blocks:
            x = block(x)
        x = self.norm(x)
        return x[:, -1] if self.pool == "last" else x.mean(dim=1)
