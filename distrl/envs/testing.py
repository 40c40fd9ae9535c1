"""Misbehaving envs for exercising fault handling (``env.id: distrl.envs.testing:NAME``)."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np


class FlakyStep(gym.Wrapper):
    """Raises RuntimeError on every ``fail_every``-th step call (counted per env copy)."""

    def __init__(self, env: gym.Env, fail_every: int):
        super().__init__(env)
        self.fail_every = fail_every
        self.calls = 0

    def step(self, action):
        self.calls += 1
        if self.fail_every and self.calls % self.fail_every == 0:
            raise RuntimeError(f"simulated env crash at step call {self.calls}")
        return self.env.step(action)


class NonFinite(gym.Wrapper):
    """On every ``every``-th step, a NaN in the reward (``part="reward"``) or in the observation (``"observation"``)."""

    def __init__(self, env: gym.Env, every: int, part: str):
        super().__init__(env)
        self.every, self.part = every, part
        self.calls = 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.calls += 1
        if self.calls % self.every == 0:
            if self.part == "reward":
                reward = np.nan
            else:
                obs = np.array(obs, dtype=np.float32)
                obs[0] = np.nan
        return obs, reward, terminated, truncated, info


class StuckStep(gym.Wrapper):
    """Blocks forever in ``step`` at step call ``stuck_at`` (a simulator that deadlocked). With ``once_marker``, only
    the first process to get there blocks (it creates that file first): a restarted worker's env runs on."""

    def __init__(self, env: gym.Env, stuck_at: int, once_marker: str | None):
        super().__init__(env)
        self.stuck_at, self.once_marker = stuck_at, once_marker
        self.calls = 0

    def step(self, action):
        self.calls += 1
        if self.calls == self.stuck_at:
            import os
            import time

            if self.once_marker is None or not os.path.exists(self.once_marker):
                if self.once_marker is not None:
                    open(self.once_marker, "w").close()
                while True:
                    time.sleep(3600)
        return self.env.step(action)


def nan_obs_cartpole(every: int = 2000, **kwargs) -> gym.Env:
    """CartPole-v1 with a NaN in the observation every ``every`` steps."""
    return NonFinite(gym.make("CartPole-v1", **kwargs), every, "observation")


def stuck_cartpole(stuck_at: int = 1000, once_marker: str | None = None, **kwargs) -> gym.Env:
    """CartPole-v1 whose step blocks forever at step call ``stuck_at`` (of each env copy)."""
    return StuckStep(gym.make("CartPole-v1", **kwargs), stuck_at, once_marker)


def flaky_cartpole(fail_every: int = 500, **kwargs) -> gym.Env:
    """CartPole-v1 whose step raises now and then; it recovers after a reset."""
    return FlakyStep(gym.make("CartPole-v1", **kwargs), fail_every)


def broken_cartpole(**kwargs) -> gym.Env:
    """CartPole-v1 whose step always raises."""
    return FlakyStep(gym.make("CartPole-v1", **kwargs), 1)


def nan_reward_cartpole(every: int = 2000, **kwargs) -> gym.Env:
    """CartPole-v1 with a NaN reward every ``every`` steps."""
    return NonFinite(gym.make("CartPole-v1", **kwargs), every, "reward")


class _DictActions(gym.ActionWrapper):
    """CartPole behind a Dict action space: an env distrl cannot train (it refuses it up front)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.action_space = gym.spaces.Dict({"push": env.action_space})

    def action(self, action):
        return action["push"]


def dict_action_cartpole(**kwargs) -> gym.Env:
    return _DictActions(gym.make("CartPole-v1", **kwargs))


class _DictObservations(gym.ObservationWrapper):
    """CartPole whose observation is a Dict of two Box parts (position, velocity)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        low, high = env.observation_space.low, env.observation_space.high
        self.observation_space = gym.spaces.Dict(
            {"position": gym.spaces.Box(low[::2], high[::2]), "velocity": gym.spaces.Box(low[1::2], high[1::2])}
        )

    def observation(self, observation):
        return {"position": observation[::2], "velocity": observation[1::2]}


def dict_obs_cartpole(**kwargs) -> gym.Env:
    return _DictObservations(gym.make("CartPole-v1", **kwargs))


class _MultiDiscreteActions(gym.ActionWrapper):
    """CartPole behind a MultiDiscrete([2, 3]) action space (the second part ignored)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.action_space = gym.spaces.MultiDiscrete([2, 3])

    def action(self, action):
        return int(action[0])


def multidiscrete_cartpole(**kwargs) -> gym.Env:
    return _MultiDiscreteActions(gym.make("CartPole-v1", **kwargs))


class SleepyStep(gym.Wrapper):
    """Sleeps ``step_s`` in every step: a simulator bound by something other than this CPU (IO, a game client)."""

    def __init__(self, env: gym.Env, step_s: float):
        super().__init__(env)
        self.step_s = step_s

    def step(self, action):
        time.sleep(self.step_s)
        return self.env.step(action)


def sleepy_cartpole(
    step_s: float = 0.0005, slow_worker: int | None = None, slow_factor: float = 10.0, **kwargs
) -> gym.Env:
    """CartPole-v1 whose step sleeps ``step_s``; in rollout worker ``slow_worker`` (by its Ray actor's name,
    ``...-worker-N``) ``slow_factor`` times longer: one slow machine among fast ones
    (benchmarks/faults/straggler.py)."""
    if slow_worker is not None and _worker_index() == slow_worker:
        step_s *= slow_factor
    return SleepyStep(gym.make("CartPole-v1", **kwargs), step_s)


class EpisodeReport(gym.Wrapper):
    """Reports numbers of its own in ``info`` at each episode's end, as a task's env reports a success or a distance:
    ``success`` (the episode lasted ``success_at`` steps or more), ``steps`` (its length), and ``label`` (a string,
    where ``label`` is set: a value no metric takes); every ``skip_every``-th episode ends without ``success``."""

    def __init__(self, env: gym.Env, success_at: int, skip_every: int, label: str | None):
        super().__init__(env)
        self.success_at, self.skip_every, self.label = success_at, skip_every, label
        self.steps = self.episodes = 0

    def reset(self, **kwargs):
        self.steps = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if terminated or truncated:
            self.episodes += 1
            info = {**info, "steps": self.steps}
            if not (self.skip_every and self.episodes % self.skip_every == 0):
                info["success"] = self.steps >= self.success_at
            if self.label is not None:
                info["label"] = self.label
        return obs, reward, terminated, truncated, info


def reporting_cartpole(
    success_at: int = 50, skip_every: int = 0, label: str | None = None, step_s: float = 0.0, **kwargs
) -> gym.Env:
    """CartPole-v1 that reports ``success``, ``steps`` (and ``label``) in ``info`` at each episode's end
    (``EpisodeReport``); each step sleeps ``step_s`` where it is set."""
    env = gym.make("CartPole-v1", **kwargs)
    return EpisodeReport(SleepyStep(env, step_s) if step_s else env, success_at, skip_every, label)


def _worker_index() -> int | None:
    """This process's rollout worker index, from its Ray actor's name; None outside a worker."""
    try:
        import ray

        name = ray.get_runtime_context().get_actor_name() if ray.is_initialized() else None
    except Exception:  # not inside Ray
        return None
    if not name or "-worker-" not in name:
        return None
    return int(name.rsplit("-worker-", 1)[1])


class _ImageAndVector(gym.ObservationWrapper):
    """CartPole whose pole angle is seen only in a small image: ``{"image": uint8 [1, 16, 16], "state": [cart
    position, cart velocity, pole angular velocity]}``. The image is one lit column whose place follows the angle, so
    a policy balances the pole only if its CNN reads the image and its MLP the vector."""

    SIZE = 16

    def __init__(self, env: gym.Env):
        super().__init__(env)
        high = env.observation_space.high
        self.observation_space = gym.spaces.Dict(
            {
                "image": gym.spaces.Box(0, 255, (1, self.SIZE, self.SIZE), np.uint8),
                "state": gym.spaces.Box(-high[[0, 1, 3]], high[[0, 1, 3]], dtype=np.float32),
            }
        )
        self.limit = float(env.unwrapped.theta_threshold_radians)

    def observation(self, observation):
        image = np.zeros((1, self.SIZE, self.SIZE), np.uint8)
        column = int(np.clip((observation[2] / self.limit + 1.0) * self.SIZE / 2, 0, self.SIZE - 1))
        image[0, :, column] = 255
        return {"image": image, "state": observation[[0, 1, 3]].astype(np.float32)}


def image_cartpole(**kwargs) -> gym.Env:
    """CartPole-v1 seen through a Dict of an image and a vector (``_ImageAndVector``)."""
    return _ImageAndVector(gym.make("CartPole-v1", **kwargs))


class _PixelState(gym.ObservationWrapper):
    """CartPole seen only as an image: each of its four state values a lit column of its own band of rows, placed by
    the value. ``dtype`` uint8 (lit 255), bool or float32 (lit 1); channels last or first; every channel alike."""

    def __init__(self, env: gym.Env, height: int, width: int, channels: int, dtype: str, channels_last: bool):
        super().__init__(env)
        self.height, self.width, self.channels_last = height, width, channels_last
        self.dtype = np.dtype(dtype)
        shape = (height, width, channels) if channels_last else (channels, height, width)
        self.observation_space = gym.spaces.Box(0, 255 if self.dtype == np.uint8 else 1, shape, self.dtype)
        self.scale = np.array([2.4, 3.0, float(env.unwrapped.theta_threshold_radians), 3.0])

    def observation(self, observation):
        image = np.zeros((self.height, self.width), self.dtype)
        band = max(1, self.height // 4)
        for index, value in enumerate(observation):
            column = int(np.clip((value / self.scale[index] + 1.0) * self.width / 2, 0, self.width - 1))
            image[index * band : (index + 1) * band, column] = 255 if self.dtype == np.uint8 else 1
        channels = self.observation_space.shape[-1 if self.channels_last else 0]
        return np.stack([image] * channels, axis=-1 if self.channels_last else 0)


def pixel_cartpole(
    height: int = 64, width: int = 64, channels: int = 3, dtype: str = "uint8", channels_last: bool = True, **kwargs
) -> gym.Env:
    """CartPole-v1 as an image of any size, dtype and layout (``_PixelState``): the convolutional encoders' test env."""
    return _PixelState(gym.make("CartPole-v1", **kwargs), height, width, channels, dtype, channels_last)


class _TupleObservations(gym.ObservationWrapper):
    """CartPole whose observation is a Tuple: (the cart's Box, the pole's Box, a Discrete side the pole leans to)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        low, high = env.observation_space.low, env.observation_space.high
        self.observation_space = gym.spaces.Tuple(
            (gym.spaces.Box(low[:2], high[:2]), gym.spaces.Box(low[2:], high[2:]), gym.spaces.Discrete(2))
        )

    def observation(self, observation):
        return observation[:2], observation[2:], int(observation[2] > 0)


def tuple_obs_cartpole(**kwargs) -> gym.Env:
    return _TupleObservations(gym.make("CartPole-v1", **kwargs))


class _Float64Observations(gym.ObservationWrapper):
    """CartPole whose observations are float64, as every gymnasium MuJoCo env's are."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        space = env.observation_space
        self.observation_space = gym.spaces.Box(
            space.low.astype(np.float64), space.high.astype(np.float64), dtype=np.float64
        )

    def observation(self, observation):
        return observation.astype(np.float64)


def float64_cartpole(**kwargs) -> gym.Env:
    return _Float64Observations(gym.make("CartPole-v1", **kwargs))


# --- N-agent PettingZoo parallel envs (the ``agents`` env kind) ------------------------------------------------------
def _parallel_env_base():
    from pettingzoo.utils.env import ParallelEnv

    return ParallelEnv


class _CartPoleTeam:
    """``n`` agents, each balancing a CartPole-v1 of its own: an agent is done when its pole falls (so agents finish
    at different steps) or, for every agent left, after ``max_steps`` (truncated). Reward 1 per step alive. With
    ``dict_obs`` an agent sees ``{"cart": [position, velocity], "pole": [angle, angular velocity]}``."""

    metadata = {"name": "cartpole_team_v0"}

    def __init__(self, n: int = 3, max_steps: int = 500, dict_obs: bool = False):
        self.possible_agents = [f"pole_{i}" for i in range(n)]
        self.agents: list[str] = []
        self.max_steps = max_steps
        self.poles = {name: gym.make("CartPole-v1", max_episode_steps=None).unwrapped for name in self.possible_agents}
        self._obs_space = self.poles[self.possible_agents[0]].observation_space
        self.dict_obs = dict_obs
        if dict_obs:
            low, high = self._obs_space.low, self._obs_space.high
            self._obs_space = gym.spaces.Dict(
                {"cart": gym.spaces.Box(low[:2], high[:2]), "pole": gym.spaces.Box(low[2:], high[2:])}
            )
        self._action_space = self.poles[self.possible_agents[0]].action_space
        self.steps = 0

    def _seen(self, obs):
        return {"cart": obs[:2], "pole": obs[2:]} if self.dict_obs else obs

    def observation_space(self, agent):
        return self._obs_space

    def action_space(self, agent):
        return self._action_space

    def reset(self, seed=None, options=None):
        self.agents, self.steps = list(self.possible_agents), 0
        obs = {
            name: self._seen(self.poles[name].reset(seed=None if seed is None else seed * 31 + i)[0])
            for i, name in enumerate(self.agents)
        }
        return obs, {name: {} for name in self.agents}

    def step(self, actions):
        self.steps += 1
        obs, rewards, terminated, truncated = {}, {}, {}, {}
        for name in self.agents:
            seen, rewards[name], terminated[name], _, _ = self.poles[name].step(int(actions[name]))
            obs[name] = self._seen(seen)
            truncated[name] = self.steps >= self.max_steps and not terminated[name]
        self.agents = [name for name in self.agents if not (terminated[name] or truncated[name])]
        return obs, rewards, terminated, truncated, {name: {} for name in obs}

    def close(self):
        for pole in self.poles.values():
            pole.close()


class _DyingAgents:
    """``n`` agents on a counter: agent ``i`` lives ``lifetime * (i + 1)`` steps and is rewarded ``i + 1`` a step,
    then terminates; the episode ends with the last. Its observation is (its index, the step); any action."""

    metadata = {"name": "dying_agents_v0"}

    def __init__(self, n: int = 3, lifetime: int = 2):
        self.possible_agents = [f"agent_{i}" for i in range(n)]
        self.agents: list[str] = []
        self.lifetime = lifetime
        self.t = 0

    def observation_space(self, agent):
        return gym.spaces.Box(0.0, 1e6, (2,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(2)

    def _obs(self, name):
        return np.array([self.possible_agents.index(name), self.t], np.float32)

    # PettingZoo's global state: the step and how many agents are left
    state_space = gym.spaces.Box(0.0, 1e6, (2,), np.float32)

    def state(self):
        return np.array([self.t, len(self.agents)], np.float32)

    def reset(self, seed=None, options=None):
        self.agents, self.t = list(self.possible_agents), 0
        return {name: self._obs(name) for name in self.agents}, {name: {} for name in self.agents}

    def step(self, actions):
        assert set(actions) == set(self.agents), (sorted(actions), self.agents)  # only live agents are sent actions
        self.t += 1
        index = {name: self.possible_agents.index(name) for name in self.agents}
        obs = {name: self._obs(name) for name in self.agents}
        rewards = {name: float(index[name] + 1) for name in self.agents}
        terminated = {name: self.t >= self.lifetime * (index[name] + 1) for name in self.agents}
        truncated = {name: False for name in self.agents}
        self.agents = [name for name in self.agents if not terminated[name]]
        return obs, rewards, terminated, truncated, {name: {} for name in obs}

    def close(self):
        pass


def _as_parallel_env(cls):
    """``cls`` as a subclass of PettingZoo's ``ParallelEnv`` (imported only when such an env is built)."""
    return type(cls.__name__, (cls, _parallel_env_base()), {})


def cartpole_team(**kwargs):
    """A PettingZoo parallel env of ``n`` CartPoles, an agent each (``_CartPoleTeam``)."""
    return _as_parallel_env(_CartPoleTeam)(**kwargs)


def dying_agents(**kwargs):
    """A PettingZoo parallel env whose agents finish one after another (``_DyingAgents``)."""
    return _as_parallel_env(_DyingAgents)(**kwargs)


class _MixedSpaceAgents(_DyingAgents):
    """``_DyingAgents`` whose last agent sees a longer observation than the others (the agents left, too)."""

    def observation_space(self, agent):
        return gym.spaces.Box(0.0, 1e6, (3 if agent == self.possible_agents[-1] else 2,), np.float32)

    def _obs(self, name):
        own = super()._obs(name)
        return np.append(own, np.float32(len(self.agents))) if name == self.possible_agents[-1] else own


def mixed_space_agents(**kwargs):
    return _as_parallel_env(_MixedSpaceAgents)(**kwargs)


class _SpeakerListener:
    """Two agents whose spaces differ, in MPE's ``simple_speaker_listener`` manner: each step a target of ``n`` is
    drawn;
    the speaker sees it (one-hot, ``n``) and says one of ``n + 1`` words; the listener sees the word said the step
    before (one-hot, ``n + 1``) and the step's share of the episode, and names one of ``n`` targets. Both are rewarded
    1 when the listener names the previous step's target. ``max_steps`` steps, then truncated."""

    metadata = {"name": "speaker_listener_v0"}

    def __init__(self, n: int = 3, max_steps: int = 16):
        self.possible_agents = ["speaker", "listener"]
        self.agents: list[str] = []
        self.n, self.max_steps = n, max_steps
        self.rng = np.random.default_rng()
        self.t, self.target, self.previous, self.word = 0, 0, None, n

    def observation_space(self, agent):
        size = self.n if agent == "speaker" else self.n + 2
        return gym.spaces.Box(0.0, 1.0, (size,), np.float32)

    def action_space(self, agent):
        return gym.spaces.Discrete(self.n + 1 if agent == "speaker" else self.n)

    def _observations(self) -> dict:
        heard = np.zeros(self.n + 2, np.float32)
        heard[self.word] = 1.0
        heard[-1] = self.t / self.max_steps
        return {"speaker": np.eye(self.n, dtype=np.float32)[self.target], "listener": heard}

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents, self.t, self.previous, self.word = list(self.possible_agents), 0, None, self.n
        self.target = int(self.rng.integers(self.n))
        return self._observations(), {name: {} for name in self.agents}

    def step(self, actions):
        self.t += 1
        hit = float(self.previous is not None and int(actions["listener"]) == self.previous)
        self.previous, self.word = self.target, int(actions["speaker"])
        self.target = int(self.rng.integers(self.n))
        done = self.t >= self.max_steps
        obs = self._observations()
        self.agents = [] if done else self.agents
        flags = {name: False for name in self.possible_agents}
        return (
            obs,
            {name: hit for name in self.possible_agents},
            flags,
            {name: done for name in self.possible_agents},
            {name: {} for name in self.possible_agents},
        )

    def close(self):
        pass


def speaker_listener(**kwargs):
    """A PettingZoo parallel env of two agents with spaces of their own (``_SpeakerListener``)."""
    return _as_parallel_env(_SpeakerListener)(**kwargs)
