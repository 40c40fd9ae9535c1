"""The learner's Adam: torch's own, without the wrappers that import ``torch._dynamo``.

``torch.optim.Optimizer`` wraps ``add_param_group``, ``zero_grad``, ``state_dict`` and ``load_state_dict`` in
``torch._disable_dynamo``, and ``step`` in ``_use_grad_for_differentiable``: wrappers that keep a compiler from
tracing the optimiser, and that import ``torch._dynamo`` on their first call (creating an optimiser is one). That
import is 1-3 s of CPU (sympy, the tracer's rules), paid on the way to a run's first update by every learner,
though distrl compiles only the minibatch loss and never traces the optimiser (``benchmarks/startup/startup.py``).

``Adam`` here is ``torch.optim.Adam`` with those methods taken from under their wrappers (``inspect.unwrap``), and
``step`` with gradients off (unless ``differentiable``), as its wrapper sets them. The update, the state and
``state_dict``'s layout are torch's, so checkpoints load either way. Where a torch version stops wrapping a method,
unwrapping gives the method itself (tests/test_optimizer.py checks both the steps and the import).
"""

from __future__ import annotations

import inspect

import torch

__all__ = ["Adam"]

_step = inspect.unwrap(torch.optim.Adam.step)


class Adam(torch.optim.Adam):
    add_param_group = inspect.unwrap(torch.optim.Optimizer.add_param_group)
    zero_grad = inspect.unwrap(torch.optim.Optimizer.zero_grad)
    state_dict = inspect.unwrap(torch.optim.Optimizer.state_dict)
    load_state_dict = inspect.unwrap(torch.optim.Optimizer.load_state_dict)

    def step(self, closure=None):
        with torch.set_grad_enabled(self.defaults["differentiable"]):
            return _step(self, closure)
