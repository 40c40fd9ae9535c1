"""Stepping a vector env in the background: a worker's policy acts for one group of env copies while another
group's step runs (``rollout.env_groups``, Sample Factory's double-buffered sampling).

A stepper's ``start(actions)`` begins a step and returns at once where the env can run without its caller;
``finish()`` waits for the step's result, exactly what ``envs.step(actions)`` would have returned. The way depends
on the env:

- gymnasium's ``AsyncVectorEnv``: its own ``step_async`` / ``step_wait`` (the copies step in their subprocesses);
- ale-py's native vector env: ``send`` / ``recv`` (its thread pool steps the copies, outside the GIL), with the
  guard's error handling (``GuardedVectorEnv.send`` / ``recv``);
- any other vector env: a stepping thread of the group's own. Its step overlaps the policy where either side
  releases the GIL (ONNX Runtime's and torch's kernels do, a numpy env's large array operations do);
- ``SerialStepper``: ``start`` keeps the actions and ``finish`` steps, as a worker of one group always did.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import gymnasium as gym
import numpy as np

from distrl.envs.factory import is_atari, resolve_vectorization


class SerialStepper:
    """The step runs in ``finish``, on the caller's thread."""

    kind = "serial"

    def __init__(self, envs: gym.vector.VectorEnv):
        self.envs = envs
        self._actions = None

    def start(self, actions: np.ndarray) -> None:
        self._actions = actions

    def finish(self) -> tuple:
        actions, self._actions = self._actions, None
        return self.envs.step(actions)

    def close(self) -> None:
        pass


class AsyncVectorStepper(SerialStepper):
    """gymnasium's ``AsyncVectorEnv``: the step runs in the copies' subprocesses between ``start`` and ``finish``."""

    kind = "subprocesses"

    def start(self, actions: np.ndarray) -> None:
        self.envs.step_async(actions)

    def finish(self) -> tuple:
        return self.envs.step_wait()


class SendRecvStepper(SerialStepper):
    """A vector env with ``send`` / ``recv`` (ale-py's, behind the guard): its own threads step the copies."""

    kind = "send/recv"

    def start(self, actions: np.ndarray) -> None:
        self.envs.send(actions)

    def finish(self) -> tuple:
        return self.envs.recv()


class ThreadStepper(SerialStepper):
    """A thread of this group's own runs ``envs.step``; an error it raises is raised again by ``finish``."""

    kind = "thread"

    def __init__(self, envs: gym.vector.VectorEnv):
        super().__init__(envs)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="distrl-env-step")
        self._pending: Future | None = None

    def start(self, actions: np.ndarray) -> None:
        self._pending = self._thread.submit(self.envs.step, actions)

    def finish(self) -> tuple:
        pending, self._pending = self._pending, None
        return pending.result()

    def close(self) -> None:
        self._thread.shutdown(wait=True)


def background_stepper(envs: gym.vector.VectorEnv) -> SerialStepper:
    """The stepper that runs ``envs``' steps without its caller: see the module's docstring for which, and why."""
    if isinstance(envs, gym.vector.AsyncVectorEnv):
        return AsyncVectorStepper(envs)
    if getattr(envs, "can_send", False):
        return SendRecvStepper(envs)
    return ThreadStepper(envs)


def env_groups(config) -> tuple[int, str]:
    """``rollout.env_groups`` for ``config``'s workers, and why where ``auto`` chose it.

    ``auto`` splits a worker's copies in two where their step runs outside Python's lock (ale-py's native vector
    env, its thread pool through send/recv; ``env.vectorization: async``, a process per copy) and the pipeline is
    ``sync``, whose learner leaves its cores to the workers while they sample: under overlap the CPU learner's
    update takes the core the second group needs. Elsewhere the step holds the lock while it runs, and a stepping
    thread only adds its switches (docs/performance.md has both figures)."""
    chosen = config.rollout.env_groups
    if chosen != "auto":
        return chosen, ""
    if config.league is not None:
        return 1, "a league's game table steps as one"
    if config.rollout.ready_envs:
        return 1, "rollout.ready_envs acts on the copies as they become ready, which overlaps the env and the policy"
    from distrl.envs.kinds import env_kind  # (the kinds' table imports every kind)

    if env_kind(config) == "agents":
        return 1, "a PettingZoo env's copies step in Python, which holds its lock"
    copies = config.env.num_envs_per_worker
    if copies < 2 or copies % 2:
        return 1, f"{copies} env copies do not split into two equal groups"
    mode = resolve_vectorization(config.env)[0]
    if not ((mode == "native" and is_atari(config.env.id)) or mode == "async"):
        return 1, f"a {mode} vector env's step holds Python's lock, so it cannot overlap the policy"
    if config.rollout.pipeline != "sync":
        return 1, (
            f"the learner updates while the workers sample ({config.rollout.pipeline}), so the overlap would "
            "need a core it uses; set 2 where the workers have cores to spare (a GPU learner, a node of its own)"
        )
    if mode == "async":
        return 2, "one group's copies step in their processes while the policy acts for the other"
    return 2, "ale-py steps one group (send/recv) while the policy acts for the other"
