"""DDP between learner ranks: rank 0 hosts the process group, and the forward is wrapped so gradients average.

With ``world_size > 1`` rank r trains on shard r of every worker's batch; shards are equal, so every rank takes the
same number of minibatch steps, and what a rank decides alone (the KL early stop) is averaged first.
"""

from __future__ import annotations

import socket
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn


def rendezvous_address() -> tuple[str, int]:
    """An address and free port on this node for rank 0 to host the process group."""
    import ray.util

    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    return ray.util.get_node_ip_address(), port


def start_group(device: torch.device, address: str, port: int, rank: int, world_size: int) -> None:
    """Join the process group rank 0 hosts at ``address:port``."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(
        backend, init_method=f"tcp://{address}:{port}", rank=rank, world_size=world_size, timeout=timedelta(seconds=120)
    )


def wrap(forward: nn.Module) -> nn.Module:
    """``forward`` in DDP (which broadcasts rank 0's parameters, so every rank starts identical). Several wrapped
    modules may share the group (a learner per policy): every rank runs their collectives in the same order."""
    return nn.parallel.DistributedDataParallel(forward)


def average(value: torch.Tensor, world_size: int) -> torch.Tensor:
    """``value`` averaged over the ranks (as it is with one)."""
    if world_size > 1:
        dist.all_reduce(value, op=dist.ReduceOp.AVG)
    return value


def leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
