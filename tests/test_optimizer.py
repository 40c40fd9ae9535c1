"""The learner's Adam (``distrl/learner/optimizer.py``): torch's update and state, without importing torch._dynamo."""

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from distrl.learner.optimizer import Adam

ROOT = Path(__file__).resolve().parents[1]


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def _steps(model, optimizer, n, seed=1):
    generator = torch.Generator().manual_seed(seed)
    for _ in range(n):
        x = torch.randn(32, 6, generator=generator)
        optimizer.zero_grad(set_to_none=True)
        loss = model(x).pow(2).mean()
        loss.backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("kind", [{"fused": True}, {"foreach": True}, {"foreach": False}])
def test_it_takes_torchs_adam_steps_and_saves_torchs_state(kind):
    ours, theirs = _model(), _model()
    ours_opt = Adam(ours.parameters(), lr=3e-3, eps=1e-5, **kind)
    theirs_opt = torch.optim.Adam(theirs.parameters(), lr=3e-3, eps=1e-5, **kind)
    for a, b in zip(_steps(ours, ours_opt, 5), _steps(theirs, theirs_opt, 5)):
        assert torch.equal(a, b)
    # A checkpoint of either loads into the other and the runs go on alike (resuming across versions of distrl).
    saved_ours, saved_theirs = ours_opt.state_dict(), theirs_opt.state_dict()
    assert saved_ours.keys() == saved_theirs.keys() and saved_ours["param_groups"] == saved_theirs["param_groups"]
    for k, state in saved_ours["state"].items():
        assert all(torch.equal(v, saved_theirs["state"][k][name]) for name, v in state.items())
    resumed_ours, resumed_theirs = copy.deepcopy(theirs), copy.deepcopy(ours)
    into_ours = Adam(resumed_ours.parameters(), lr=3e-3, eps=1e-5, **kind)
    into_ours.load_state_dict(saved_theirs)
    into_theirs = torch.optim.Adam(resumed_theirs.parameters(), lr=3e-3, eps=1e-5, **kind)
    into_theirs.load_state_dict(saved_ours)
    for a, b in zip(_steps(resumed_ours, into_ours, 3, seed=2), _steps(resumed_theirs, into_theirs, 3, seed=2)):
        assert torch.equal(a, b)


def test_a_cpu_learners_update_imports_no_torch_dynamo():
    """Creating the optimiser and stepping it used to import torch._dynamo (1-3 s of CPU before a run's first
    update); a learner that compiles nothing now never does. Checked in a fresh interpreter."""
    code = """
import sys
from distrl.config import load_config
from distrl.envs import probe_spaces
from distrl.learner import Learner
from distrl.rollout import RolloutWorker
config = load_config("configs/cartpole.yaml", ["env.num_envs_per_worker=8", "rollout.rollout_length=16",
                                                "ppo.minibatch_size=64"])
learner = Learner(config, *probe_spaces(config.env))
worker = RolloutWorker(config)
worker.set_weights(learner.get_weights())
metrics = learner.update(worker.sample())
learner.load_state(learner.snapshot())  # a checkpoint's round trip
assert learner.version == 1 and metrics["env_steps"] == 8 * 16, metrics
print("torch._dynamo" in sys.modules)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "False"
