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
    def __init__(self, length: int, d_model: int, heads: int, causal: bool):
        super().__init__()
        # Sizes as Python ints, never read off the input (the batch is -1 in every reshape): an exported graph then
        # reshapes, slices the weights and scales the scores with constants, which ONNX Runtime folds when it builds
        # its session, instead of computing shapes at every call.
        self.length, self.d_model, self.heads, self.causal = length, d_model, heads, causal
        self.head_dim = d_model // heads
        self.scale = self.head_dim**-0.5
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """``x [B, L, d]`` -> ``[B, L, d]``, or with ``last_only`` the last token's output ``[B, d]``.

        The last token attends to every token (causal or not), so its output needs the keys and values of all of
        them but the query, the projection and the MLP of itself alone: ``pool: last``'s final block does a 1/L share
        of that work, with the same weights and the same result. Its linear layers run on 2-d inputs: an exported
        graph then runs each as one Gemm with its bias, not a MatMul, an Add and the reshapes around them.
        """
        length, d, heads, head_dim = self.length, self.d_model, self.heads, self.head_dim
        h = self.norm1(x)
        if last_only:
            w_q, w_kv = self.qkv.weight.split([d, 2 * d])
            b_q, b_kv = self.qkv.bias.split([d, 2 * d])
            q = F.linear(h[:, -1], w_q, b_q).reshape(-1, heads, 1, head_dim)
            kv = F.linear(h.reshape(-1, d), w_kv, b_kv)
            k, v = kv.reshape(-1, length, 2, heads, head_dim).permute(2, 0, 3, 1, 4)
            attended = F.scaled_dot_product_attention(q, k, v, scale=self.scale)  # [B, heads, 1, d/heads]
            x = x[:, -1] + self.proj(attended.reshape(-1, d))
        else:
            q, k, v = self.qkv(h).reshape(-1, length, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
            # [B, heads, L, d/heads]
            attended = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, scale=self.scale)
            x = x + self.proj(attended.transpose(1, 2).reshape(-1, length, d))
        return x + self.mlp(self.norm2(x))


class AttentionEncoder(nn.Module):
    def __init__(self, length: int, features: int, d_model: int, heads: int, layers: int, causal: bool, pool: str):
        super().__init__()
        self.length, self.pool = length, pool
        self.embed = nn.Linear(features, d_model)
        self.position = nn.Parameter(torch.zeros(length, d_model))
        nn.init.normal_(self.position, std=0.02)
        self.blocks = nn.ModuleList(_Block(length, d_model, heads, causal) for _ in range(layers))
        self.norm = nn.LayerNorm(d_model)
        self.out_dim = d_model

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens [B, L, F]`` -> ``[B, d_model]``."""
        # The bias and the positions added as one tensor: a graph's single Add after the MatMul (ONNX Runtime folds
        # bias + positions into one constant).
        x = F.linear(tokens.to(self.embed.weight.dtype), self.embed.weight) + (self.embed.bias + self.position)
        last = len(self.blocks) - 1
        for i, block in enumerate(self.blocks):
            x = block(x, last_only=self.pool == "last" and i == last)  # pool last: [B, d] after the final block
        return self.norm(x) if self.pool == "last" else self.norm(x).mean(dim=1)
