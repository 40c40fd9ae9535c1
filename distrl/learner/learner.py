"""Learner: the PPO update on batches from rollout workers, optionally one of several DDP ranks.

A plain class: tests drive it in-process, the driver wraps it with ``ray.remote``. With
``world_size > 1`` each rank takes an equal slice of the env axis of every update's
batch, and gradients are averaged by torch DistributedDataParallel.
"""

from __future__ import annotations

import time
from datetime import timedelta

import gymnasium as gym
import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from distrl.config.schema import Config
from distrl.models import build_model
from distrl.ppo import PPOLossCoefs, gae, ppo_loss
from distrl.rollout.obs_norm import RunningMeanStd

_TIME_AXIS_KEYS = ("obs", "actions", "logp", "values", "rewards", "terminated", "truncated", "valid", "starts", "h0", "c0")


class _TrainForward(nn.Module):
    """Routes training forwards through one ``forward`` so DDP sees (and syncs) every call."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, obs, h=None, c=None, starts=None):
        if starts is None:
            return self.model(obs)
        return self.model.forward_sequence(obs, h, c, starts)


def resolve_device(requested: str) -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


def merge_batches(batches: list[dict], rank: int = 0, world_size: int = 1) -> dict:
    """Concatenate worker batches along the env axis and keep this rank's equal slice."""
    merged = {}
    for key in _TIME_AXIS_KEYS:
        if key in batches[0]:
            merged[key] = np.concatenate([b[key] for b in batches], axis=1)
    n = merged["rewards"].shape[1]
    per_rank = n // world_size
    if world_size > 1:
        merged = {k: v[:, rank * per_rank : (rank + 1) * per_rank] for k, v in merged.items()}
    return merged


class Learner:
    def __init__(
        self,
        config: Config,
        obs_space: gym.Space,
        action_space: gym.Space,
        rank: int = 0,
        world_size: int = 1,
    ):
        self.config = config
        self.rank, self.world_size = rank, world_size
        self.device = resolve_device(config.learner.device)
        torch.set_num_threads(max(1, int(config.learner.num_cpus_per_learner)))
        torch.manual_seed(config.seed)
        self.model = build_model(obs_space, action_space, config.model).to(self.device)
        self.train_forward: nn.Module = _TrainForward(self.model)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.ppo.lr, eps=1e-5)
        self.generator = torch.Generator().manual_seed(config.seed + rank)
        self.coefs = PPOLossCoefs(
            clip_coef=config.ppo.clip_coef,
            vf_coef=config.ppo.vf_coef,
            ent_coef=config.ppo.ent_coef,
            clip_vloss=config.ppo.clip_vloss,
            norm_adv=config.ppo.norm_adv,
        )
        self.obs_rms = RunningMeanStd(obs_space.shape) if config.env.normalize_obs else None
        self.version = 0
        self.trained_env_steps = 0
        self.skipped_updates = 0

    # --- distributed -----------------------------------------------------------------
    @staticmethod
    def rendezvous_address() -> tuple[str, int]:
        """An address and free port on this node for rank 0 to host the process group."""
        import socket

        import ray.util

        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def init_distributed(self, address: str, port: int) -> None:
        backend = "nccl" if self.device.type == "cuda" else "gloo"
        dist.init_process_group(
            backend,
            init_method=f"tcp://{address}:{port}",
            rank=self.rank,
            world_size=self.world_size,
            timeout=timedelta(seconds=120),
        )
        # DDP broadcasts rank 0's parameters at construction, so every rank starts identical.
        self.train_forward = nn.parallel.DistributedDataParallel(self.train_forward)

    def device_name(self) -> str:
        return str(self.device)

    # --- weights and state -------------------------------------------------------------
    def get_weights(self) -> dict:
        return {
            "version": self.version,
            "model": {k: v.detach().cpu().numpy() for k, v in self.model.state_dict().items()},
            "obs_norm": self.obs_rms.state() if self.obs_rms is not None else None,
        }

    def state(self) -> dict:
        """Everything a checkpoint needs to resume learning exactly (tensors and plain types only)."""
        obs_norm = None
        if self.obs_rms is not None:
            obs_norm = {k: torch.as_tensor(v) for k, v in self.obs_rms.state().items()}
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "obs_norm": obs_norm,
            "generator": self.generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "version": self.version,
            "trained_env_steps": self.trained_env_steps,
            "skipped_updates": self.skipped_updates,
        }

    def load_state(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.obs_rms is not None and state.get("obs_norm") is not None:
            self.obs_rms = RunningMeanStd.from_state({k: v.numpy() for k, v in state["obs_norm"].items()})
        self.generator.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
        self.version = int(state["version"])
        self.trained_env_steps = int(state["trained_env_steps"])
        self.skipped_updates = int(state["skipped_updates"])

    # --- the update ----------------------------------------------------------------------
    def _learning_rate(self) -> float:
        total = self.config.stop.env_steps
        if not self.config.ppo.anneal_lr or total is None:
            return self.config.ppo.lr
        return self.config.ppo.lr * max(0.0, 1.0 - self.trained_env_steps / total)

    def _to_tensors(self, batch: dict) -> dict[str, torch.Tensor]:
        pin = self.device.type == "cuda"
        out = {}
        for key, value in batch.items():
            tensor = torch.from_numpy(value)
            if pin:
                tensor = tensor.pin_memory()
            out[key] = tensor.to(self.device, non_blocking=pin)
        return out

    def update(self, *batches: dict) -> dict:
        """One PPO update on the concatenation of ``batches``; returns metrics."""
        start = time.perf_counter()
        cfg = self.config.ppo
        infos = [b["info"] for b in batches]
        if self.obs_rms is not None:
            for info in infos:  # every rank merges every worker's stats, so all ranks agree
                if info["obs_stats"] is not None:
                    self.obs_rms.merge(*info["obs_stats"])
        data = self._to_tensors(merge_batches(list(batches), self.rank, self.world_size))
        rewards = data["rewards"] * cfg.reward_scale
        if cfg.reward_clip is not None:
            rewards = rewards.clamp(-cfg.reward_clip, cfg.reward_clip)
        with torch.no_grad():
            advantages, returns = gae(
                rewards, data["values"], data["terminated"], data["truncated"], data["valid"], cfg.gamma, cfg.gae_lambda
            )
        lr = self._learning_rate()
        for group in self.optimizer.param_groups:
            group["lr"] = lr

        if self.model.is_recurrent:
            stats = self._epochs_recurrent(data, advantages, returns)
        else:
            stats = self._epochs_feedforward(data, advantages, returns)

        env_steps = sum(info["env_steps"] for info in infos)
        self.trained_env_steps += env_steps
        versions_used = [info["policy_version"] for info in infos]
        values, valid = data["values"][:-1][data["valid"]], returns[data["valid"]]
        explained_var = float(1 - (valid - values).var() / valid.var().clamp(min=1e-8))
        metrics = {
            **stats,
            "lr": lr,
            "explained_variance": explained_var,
            "skipped_updates": self.skipped_updates,
            "policy_lag_mean": float(np.mean([self.version - v for v in versions_used])),
            "learn_s": time.perf_counter() - start,
            "sample_s": float(np.mean([info["sample_s"] for info in infos])),
            "policy_s": float(np.mean([info["policy_s"] for info in infos])),
            "env_steps": env_steps,
            "episode_returns": [r for info in infos for r in info["episode_returns"]],
            "episode_lengths": [n for info in infos for n in info["episode_lengths"]],
            "learner_version": self.version + 1,
        }
        self.version += 1
        return metrics

    def update_and_get_weights(self, *batches: dict) -> tuple[dict, dict]:
        metrics = self.update(*batches)
        return metrics, self.get_weights()

    def _num_minibatches(self, samples_per_rank: int, unit: int = 1) -> int:
        per_rank = self.config.ppo.minibatch_size // self.world_size // unit
        return max(1, samples_per_rank // max(1, per_rank))

    def _epochs_feedforward(self, data, advantages, returns) -> dict:
        valid = data["valid"].reshape(-1)
        index = torch.nonzero(valid).squeeze(-1)
        flat = {
            "obs": data["obs"][:-1].reshape(-1, *data["obs"].shape[2:])[index],
            "actions": data["actions"].reshape(-1, *data["actions"].shape[2:])[index],
            "logp": data["logp"].reshape(-1)[index],
            "values": data["values"][:-1].reshape(-1)[index],
            "advantages": advantages.reshape(-1)[index],
            "returns": returns.reshape(-1)[index],
        }
        num_mb = self._num_minibatches(valid.numel())
        ones = torch.ones(len(index), device=self.device)

        def minibatches():
            perm = torch.randperm(len(index), generator=self.generator).to(self.device)
            for mb in torch.tensor_split(perm, num_mb):
                yield {k: v[mb] for k, v in flat.items()}, ones[mb]

        def forward(mb):
            pd_params, new_values = self.train_forward(mb["obs"])
            return pd_params, new_values

        return self._run_epochs(minibatches, forward)

    def _epochs_recurrent(self, data, advantages, returns) -> dict:
        seq_len = self.config.ppo.seq_len
        steps, n = data["rewards"].shape

        def chunks(x: torch.Tensor) -> torch.Tensor:
            # [T, N, ...] -> [L, S, ...] with S = (T / L) * N sequences
            return x.reshape(steps // seq_len, seq_len, n, *x.shape[2:]).transpose(0, 1).reshape(seq_len, -1, *x.shape[2:])

        seqs = {
            "obs": chunks(data["obs"][:-1]),
            "actions": chunks(data["actions"]),
            "logp": chunks(data["logp"]),
            "values": chunks(data["values"][:-1]),
            "advantages": chunks(advantages),
            "returns": chunks(returns),
            "starts": chunks(data["starts"]),
            "valid": chunks(data["valid"]),
        }
        h0 = data["h0"].reshape(-1, data["h0"].shape[-1])
        c0 = data["c0"].reshape(-1, data["c0"].shape[-1])
        num_seqs = h0.shape[0]
        num_mb = self._num_minibatches(steps * n, unit=seq_len)

        def minibatches():
            perm = torch.randperm(num_seqs, generator=self.generator).to(self.device)
            for mb in torch.tensor_split(perm, min(num_mb, num_seqs)):
                picked = {k: v[:, mb] for k, v in seqs.items()}
                picked["h0"], picked["c0"] = h0[mb], c0[mb]
                yield picked, picked["valid"].reshape(-1).float()

        def forward(mb):
            pd_params, new_values = self.train_forward(mb["obs"], mb["h0"], mb["c0"], mb["starts"])
            return pd_params.reshape(-1, pd_params.shape[-1]), new_values.reshape(-1)

        return self._run_epochs(minibatches, forward, flatten=True)

    def _run_epochs(self, minibatches, forward, flatten: bool = False) -> dict:
        cfg = self.config.ppo
        totals: dict[str, float] = {}
        count = 0
        early_stop = False
        params = list(self.model.parameters())
        for _epoch in range(cfg.epochs):
            for mb, mask in minibatches():
                pd_params, new_values = forward(mb)

                def flat(x):
                    return x.reshape(-1, *x.shape[2:]) if flatten else x

                actions = flat(mb["actions"])
                new_logp, entropy = self.model.dist.log_prob_entropy(pd_params, actions)
                parts = ppo_loss(
                    new_logp,
                    flat(mb["logp"]),
                    flat(mb["advantages"]),
                    new_values,
                    flat(mb["values"]),
                    flat(mb["returns"]),
                    entropy,
                    mask,
                    self.coefs,
                )
                self.optimizer.zero_grad(set_to_none=True)
                parts["loss"].backward()
                grad_norm = nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
                # NaN/inf guard: gradients are already averaged across ranks, so every rank agrees.
                if torch.isfinite(grad_norm) and torch.isfinite(parts["loss"]):
                    self.optimizer.step()
                else:
                    self.skipped_updates += 1
                parts["grad_norm"] = grad_norm
                for key, value in parts.items():
                    totals[key] = totals.get(key, 0.0) + float(value.detach())
                count += 1
                if cfg.target_kl is not None:
                    kl = parts["approx_kl"].detach().clone()
                    if self.world_size > 1:
                        dist.all_reduce(kl, op=dist.ReduceOp.AVG)
                    if kl > cfg.target_kl:
                        early_stop = True
                        break
            if early_stop:
                break
        stats = {k: v / max(1, count) for k, v in totals.items()}
        stats.pop("loss", None)
        stats["gradient_steps"] = count
        stats["kl_early_stop"] = early_stop
        return stats

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
