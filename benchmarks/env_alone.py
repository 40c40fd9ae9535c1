"""The env alone: how fast a config's vector env steps with random actions and no policy, the ceiling a worker's
sampling is measured against (``worker/env_groups.py``, ``scaling/scale_machine.py``)."""

from __future__ import annotations

import multiprocessing as mp
import time


def _env_alone(config_path: str, overrides: list[str], seconds: float, seed: int, out) -> None:
    """One process: step the config's vector env with random actions for ``seconds``; puts its steps/s."""

    from distrl.config import load_config
    from distrl.envs import make_vec_env

    cfg = load_config(config_path, overrides).env
    envs = make_vec_env(cfg, num_threads=1)
    envs.reset(seed=seed)
    envs.action_space.seed(seed)
    for _ in range(20):  # warm-up
        envs.step(envs.action_space.sample())
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        envs.step(envs.action_space.sample())
        steps += envs.num_envs
    out.put(steps * cfg.action_repeat / (time.perf_counter() - start))
    envs.close()


def ale_async(config_path: str, overrides: list[str], envs: int, threads: int, seconds: float) -> float | None:
    """Env steps/s of ale-py's own async mode: ``envs`` copies in one process, ``batch_size`` half of them, on
    ``threads`` threads, random actions (``send`` the half just received, ``recv`` the next that finish). None for
    a config that is not an Atari game on the native vector env."""
    from distrl.config import load_config
    from distrl.envs.factory import is_atari, resolve_vectorization

    cfg = load_config(config_path, overrides).env
    if not is_atari(cfg.id) or resolve_vectorization(cfg)[0] != "native":
        return None
    import ale_py
    import gymnasium as gym
    import numpy as np

    gym.register_envs(ale_py)
    kwargs = {**cfg.kwargs, "reward_clipping": False, "num_threads": threads}
    batch = max(1, envs // 2)
    vec = gym.make_vec(cfg.id, num_envs=envs, vectorization_mode="vector_entry_point", batch_size=batch, **kwargs)
    vec.reset(seed=0)
    rng = np.random.default_rng(0)
    actions = vec.single_action_space.n

    def step() -> int:
        vec.send(rng.integers(0, actions, batch))
        return len(vec.recv()[4]["env_id"])

    for _ in range(20):  # warm-up
        step()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        steps += step()
    rate = steps * cfg.action_repeat / (time.perf_counter() - start)
    vec.close()
    return rate


def env_alone_aggregate(config_path: str, overrides: list[str], processes: int, seconds: float) -> float:
    """Summed env steps/s of ``processes`` processes stepping the env at once."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_env_alone, args=(config_path, overrides, seconds, i, out)) for i in range(processes)]
    for p in procs:
        p.start()
    rates = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    return sum(rates)
