"""One PPO minibatch step: distrl's learner beside a bare PyTorch step on the same minibatch, in one run.

Per model (the MLP at minibatch 1024, the Nature-CNN at minibatch 256, MinAtar's two 2 x 256 MLPs at minibatch 1024
with ``--models minatar``, on real rollout batches):

- bare PyTorch: the same network, forward, clipped PPO loss, backward, global-norm clipping and
  fused Adam, written inline over a pre-gathered minibatch; on CUDA also that whole step
  captured as one CUDA graph (capturable fused Adam), the reference for the GPU target;
- distrl: the learner's epoch loop (``Learner.epochs``: minibatch gathering, the
  non-finite guard, statistics) per gradient step, for each step kind that runs here
  (``loop``; ``device``, a CUDA graph on CUDA and uncaptured on CPU; ``device inductor``, the same step with its
  loss compiled by inductor, captured all the same on CUDA).

Warm-up (and any capture) is kept out of the timed part; repeats are interleaved across the variants. Targets: on an
H100 the
CNN step <= 1.0 ms and the MLP step <= 0.35 ms, within 1.3x of the bare CUDA graph; on CPU
distrl's step within 1.2x of the bare step.

    python benchmarks/learner/learner_step.py
    python benchmarks/learner/learner_step.py --models minatar  # the MinAtar suite's learner
    python benchmarks/learner/learner_step.py --quick  # the MLP only, fewer steps
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch
from torch import nn

from benchmarks.common import finish, spread, start_study, study_parser
from distrl.algo.ppo import gae
from distrl.config import load_config
from distrl.data import TrainingSamples
from distrl.envs import probe_spaces
from distrl.learner import Learner
from distrl.rollout import RolloutWorker

MODELS = {
    "mlp": ("configs/cartpole.yaml", ["ppo.minibatch_size=1024"]),
    "cnn": (
        "configs/breakout.yaml",
        ["env.num_envs_per_worker=8", "rollout.rollout_length=128", "ppo.minibatch_size=256"],
    ),
    # MinAtar's suite config: two 2 x 256 MLPs over the flattened 10 x 10 x 4 frame, minibatch 1024 (needs minatar)
    "minatar": ("configs/minatar.yaml", []),
}


def training_samples(config, device) -> TrainingSamples:
    """A real rollout batch on ``device`` with advantages and returns, as the learner trains on it."""
    worker = RolloutWorker(
        config.model_copy(
            update={
                "rollout": config.rollout.model_copy(
                    update={"compile": config.rollout.compile.model_copy(update={"backend": "eager"})}
                )
            }
        )
    )
    _, batch = worker.sample()
    data = {k: torch.from_numpy(v).to(device) for k, v in batch.arrays().items()}
    advantages, returns = gae(
        data["rewards"],
        data["values"],
        data["terminated"],
        data["truncated"],
        data["valid"],
        config.ppo.gamma,
        config.ppo.gae_lambda,
    )
    return TrainingSamples.from_rollout(data, advantages, returns)


class BareStep:
    """The PPO step as a plain script writes it: no guard, no statistics, no gathering."""

    def __init__(self, model: nn.Module, config, minibatch: dict, capture: bool):
        self.model, self.ppo = model, config.ppo
        self.params = list(model.parameters())
        device = self.params[0].device
        lr = torch.tensor(config.ppo.lr, device=device) if capture else config.ppo.lr
        self.optimizer = torch.optim.Adam(self.params, lr=lr, eps=1e-5, fused=True, capturable=capture)
        self.mb = {k: v.clone() for k, v in minibatch.items()}
        self.graph = None
        if capture:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    self._step(zero_to_none=False)
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self._step(zero_to_none=False)

    def _step(self, zero_to_none: bool = True) -> None:
        mb, ppo = self.mb, self.ppo
        self.optimizer.zero_grad(set_to_none=zero_to_none)
        pd_params, values = self.model(mb["obs"])
        logp, entropy = self.model.dist.log_prob_entropy(pd_params, mb["actions"])
        adv = mb["advantages"]
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        ratio = (logp - mb["logp"]).exp()
        policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - ppo.clip_coef, 1 + ppo.clip_coef)).mean()
        clipped = mb["values"] + (values - mb["values"]).clamp(-ppo.clip_coef, ppo.clip_coef)
        value_loss = 0.5 * torch.max((values - mb["returns"]) ** 2, (clipped - mb["returns"]) ** 2).mean()
        loss = policy_loss + ppo.vf_coef * value_loss - ppo.ent_coef * entropy.mean()
        loss.backward()
        nn.utils.clip_grad_norm_(self.params, ppo.max_grad_norm)
        self.optimizer.step()

    def __call__(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        else:
            self._step()


def calls_for(fn, seconds: float, cuda: bool) -> int:
    """How many calls of ``fn`` take about ``seconds`` (after one warm-up call)."""
    fn()  # warm-up
    start = time.perf_counter()
    timed_ms(fn, 1, 1, cuda)
    return max(1, round(seconds / (time.perf_counter() - start)))


def timed_ms(fn, calls: int, steps_per_call: int, cuda: bool) -> float:
    """Milliseconds per gradient step over ``calls`` calls of ``fn``."""
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    if cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / (calls * steps_per_call) * 1e3


def main() -> int:
    parser = study_parser(__doc__, quick="the MLP only, 2 repeats", overrides=False)
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=["mlp", "cnn"])
    parser.add_argument("--threads", type=int, default=1, help="torch threads on CPU (a learner actor's CPUs)")
    parser.add_argument("--repeats", type=int, default=5)
    args, machine = start_study(parser)
    if args.quick:
        args.models, args.repeats = ["mlp"], 2
    torch.set_num_threads(args.threads)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    rows = []
    for model_name in args.models:
        path, overrides = MODELS[model_name]
        gpu = ["learner.device=cuda", "learner.num_gpus_per_learner=1"] if cuda else []
        config = load_config(ROOT / path, overrides + gpu)
        spaces = probe_spaces(config.env)
        samples = training_samples(config, device)
        mb_size = config.ppo.minibatch_size
        num_mb = samples.num_samples // mb_size
        steps_per_update = num_mb * config.ppo.epochs
        minibatch = {k: v[:mb_size] for k, v in samples.tensors.items()}

        def bare(graph: bool, config=config, spaces=spaces, minibatch=minibatch):
            return lambda: BareStep(Learner(config, *spaces).model, config, minibatch, graph)

        variants = [("bare eager", bare(False), 1)]
        if cuda:
            variants.append(("bare CUDA graph", bare(True), 1))
        for kind, kernels in (("loop", "eager"), ("device", "eager"), ("device", "inductor")):

            def make(
                kind=kind,
                kernels=kernels,
                path=path,
                overrides=overrides,
                gpu=gpu,
                spaces=spaces,
                samples=samples,
                num_mb=num_mb,
            ):
                learner = Learner(
                    load_config(
                        ROOT / path,
                        overrides + gpu + [f"learner.step={kind}", "learner.amp=off", f"learner.compile={kernels}"],
                    ),
                    *spaces,
                )
                return lambda: learner.epochs.run(samples, num_mb, learner.generator)

            variants.append((f"distrl {kind}" + (" inductor" if kernels == "inductor" else ""), make, steps_per_update))
        built = [(name, build(), steps) for name, build, steps in variants]
        calls = {name: calls_for(fn, 0.3 if args.quick else 2.0, cuda) for name, fn, _ in built}
        # Repeats interleaved across variants: this machine's speed drifts within a run, and timing one variant after
        # another would hand the drift to whichever came last.
        times: dict[str, list[float]] = {name: [] for name, _, _ in built}
        for _ in range(args.repeats):
            for name, fn, steps in built:
                times[name].append(timed_ms(fn, calls[name], steps, cuda))
        results = {}
        for name, _, _ in built:
            stats = spread(times[name])
            results[name] = stats["median"]
            print(
                f"{model_name:4s} mb {mb_size:5d} {name:16s} {stats['median']:8.3f} ms/step "
                f"[{stats['p25']:.3f}-{stats['p75']:.3f}]",
                flush=True,
            )
            rows.append(
                {
                    "model": model_name,
                    "minibatch": mb_size,
                    "variant": name,
                    "device": str(device),
                    "ms_per_step": stats["median"],
                    "p25": stats["p25"],
                    "p75": stats["p75"],
                }
            )
        reference = results.get("bare CUDA graph", results["bare eager"])
        for row in rows:
            if row["model"] == model_name:
                row["x_reference"] = row["ms_per_step"] / reference
                row["reference"] = "bare CUDA graph" if cuda else "bare eager"
    columns = (
        "model | minibatch | variant: step | device | ms_per_step: ms per step | x_reference: x reference | reference"
    )
    name = "learner_step" + ("_gpu" if cuda else "")
    return finish(name, args, machine, rows, columns)


if __name__ == "__main__":
    sys.exit(main())
