"""Each env's last observations, for attention policies: the window a worker acts on (``memory/window.py`` keeps it,
with ``shifted``).

A window is ``[N, W, *obs]`` with the newest observation last. At an episode's first
observation everything before it is zeroed, the rule the LSTM's state follows, so an
observation from a finished episode never reaches the next one's window. A batch records the
``W - 1`` positions the window held before its first step (``context``); with the batch's
observations and episode starts that is all the learner needs to rebuild every step's window
(``windows``), instead of ``W`` stored copies of each observation.
"""

from __future__ import annotations

import torch


def windows(context: torch.Tensor, obs: torch.Tensor, starts: torch.Tensor, window: int) -> torch.Tensor:
    """Every step's window ``[T, N, W, *obs]`` from the batch's ``obs [T, N, *obs]``, the window's earlier positions
    before step 0 ``context [W-1, N, *obs]`` and ``starts [T, N]`` (an episode begins at that observation).

    Step t's window is positions t .. t+W-1 of ``context`` followed by ``obs``, with everything before the newest
    episode start at or before t zeroed: what the worker's ``ObservationWindow`` held when it acted.
    """
    steps = obs.shape[0]
    sequence = torch.cat([context, obs], dim=0)  # [W-1+T, N, ...]
    index = torch.arange(steps, device=obs.device)[:, None] + torch.arange(window, device=obs.device)[None, :]
    stacked = sequence[index]  # [T, W, N, ...]
    # Where each step's episode began, as a position in `sequence`; -1 when before the batch (context holds it).
    began = torch.where(starts, torch.arange(steps, device=obs.device)[:, None] + window - 1, -1)
    began = torch.cummax(began, dim=0).values  # [T, N]
    keep = index[:, :, None] >= began[:, None, :]  # [T, W, N]
    stacked = stacked * keep.reshape(*keep.shape, *([1] * (obs.dim() - 2))).to(stacked.dtype)
    return stacked.transpose(1, 2)  # [T, N, W, ...]
