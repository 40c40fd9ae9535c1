"""Worker batches on their way to learners: split by learner rank at the worker, joined at the learner.

A batch is a dict of numpy arrays whose axis 1 is the env axis (``obs [T+1, N, ...]``,
``rewards [T, N]``, LSTM ``h0 [T/seq_len, N, H]``...) plus ``info``, the worker's small
report. With N learners a worker returns its info and N shards, equal slices of its envs,
and learner r fetches only shard r of every worker: each learner moves batch / N bytes.
"""

from __future__ import annotations

import numpy as np

ENV_AXIS_KEYS = ("obs", "actions", "logp", "values", "rewards", "terminated", "truncated", "valid", "starts", "h0", "c0")


def split_batch(batch: dict, num_shards: int) -> tuple[dict, list[dict]]:
    """``(info, shards)``: ``num_shards`` equal, contiguous env slices of a worker batch (views, no copies)."""
    num_envs = batch["rewards"].shape[1]
    if num_envs % num_shards:
        raise ValueError(f"{num_envs} envs do not split into {num_shards} equal learner shards")
    size = num_envs // num_shards
    arrays = {k: v for k, v in batch.items() if k in ENV_AXIS_KEYS}
    shards = [{k: v[:, r * size : (r + 1) * size] for k, v in arrays.items()} for r in range(num_shards)]
    return batch.get("info", {}), shards


def join_shards(shards: list[dict]) -> dict:
    """Concatenate shards (one per worker) along the env axis."""
    return {k: np.concatenate([s[k] for s in shards], axis=1) for k in ENV_AXIS_KEYS if k in shards[0]}
