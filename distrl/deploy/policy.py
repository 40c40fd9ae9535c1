"""A trained policy that acts on numpy observations: what ``distrl.load_policy`` returns."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import numpy as np
import torch

from distrl.common.checkpoint import BestCheckpoint, CheckpointError, list_checkpoints, load_checkpoint_file
from distrl.common.running_mean_std import RunningMeanStd
from distrl.common.spaces import flatten_batch, is_structured
from distrl.common.threads import torch_threads
from distrl.config import Config, checkpoint_config
from distrl.config.trust import check_code_trust
from distrl.data.batch import policy_observation
from distrl.data.memory import memory_for
from distrl.envs import probe_run_spaces
from distrl.models import ActorCritic, build_model


def policy_names(payload: dict) -> tuple[str, ...]:
    """The trained policies a checkpoint holds by name (``agents.policies``); () for a run's one policy."""
    return tuple(payload["learner"].get("policies", {}))


def chosen_checkpoint(path: str | Path, which: str = "best") -> tuple[Path, str, tuple[str, ...]]:
    """The checkpoint file a policy is played or exported from, how it was chosen (``path`` itself, or a run
    directory's best: ``which`` best, the highest mean return it checkpointed at; or its newest: ``latest``), and the
    trained policies it holds by name (``policy_names``)."""
    payload, file = load_checkpoint_file(path, which)
    names = policy_names(payload)
    if not Path(path).is_dir():
        return file, "the file given", names
    best = BestCheckpoint.of(payload, Path(path))
    if best is not None and best.iteration == int(payload["counters"]["iteration"]):
        how = f"the run's best, by its {best.describe()}"
        return file, how + (", and its newest" if file == list_checkpoints(path)[-1] else ""), names
    return file, "the run's newest" + (", as asked" if which == "latest" else ": none is named the best"), names


def policy_state(payload: dict, path, policy: str | None) -> dict:
    """The learner state of ``policy`` in a checkpoint (None: its one policy); CheckpointError naming the choices."""
    names = policy_names(payload)
    if not names:
        if policy is not None:
            raise CheckpointError(f"policy={policy!r}: checkpoint {str(path)!r} holds one policy; give no policy name")
        return payload["learner"]
    if policy not in names:
        asked = "no policy named" if policy is None else f"policy={policy!r}: not"
        raise CheckpointError(f"{asked} in checkpoint {str(path)!r}; it holds {', '.join(names)} (name one)")
    return payload["learner"]["policies"][policy]


def policy_from_checkpoint(
    path: str | Path,
    env_id: str | None = None,
    trusted_envs: Collection[str] = (),
    policy: str | None = None,
    which: str = "best",
) -> tuple[Config, ActorCritic, RunningMeanStd | None, object, object, Path]:
    """The config, the trained model (eval mode), its observation normaliser, the env spaces and the checkpoint file
    they came from (a run directory's best, or its newest intact one with ``which`` latest: ``chosen_checkpoint``).
    ``policy``: which of a run's several trained policies
    (``agents.policies``; None for a run's one policy).

    The env is the checkpoint's own, or ``env_id`` (named by the caller, so trusted). An env
    factory or encoder read from the checkpoint is imported only when named in ``trusted_envs``
    (``distrl/config/trust.py``): a checkpoint is data.
    """
    payload, file = load_checkpoint_file(path, which)
    state = policy_state(payload, path, policy)
    config = checkpoint_config(payload, path)
    if env_id is not None:  # the checkpoint's env kwargs belonged to its own env: not carried over
        config = config.model_copy(update={"env": config.env.model_copy(update={"id": env_id, "kwargs": {}})})
        trusted_envs = [*trusted_envs, env_id]
    # --trust-env keeps the checkpoint's env.kwargs; --env ID would build ID without them.
    check_code_trust(config, trusted_envs, f"checkpoint {str(path)!r}")
    try:
        return (config, *policy_parts(config, state, policy), file)
    except (KeyError, RuntimeError) as exc:
        raise CheckpointError(f"checkpoint={str(path)!r}: does not match its own config ({exc})") from None


def policy_parts(config: Config, state: dict, policy: str | None = None) -> tuple:
    """The trained model (eval mode), its observation normaliser and its env spaces, from one policy's learner state
    (``policy_state``) under ``config``, whose env is trusted already (a run's own, or one named by the caller)."""
    obs_space, action_space = probe_run_spaces(config, policy)  # a league run's policy: one seat of its game
    model = build_model(obs_space, action_space, config.model)
    model.load_state_dict({k: v if torch.is_tensor(v) else torch.as_tensor(v) for k, v in state["model"].items()})
    obs_norm = state.get("obs_norm")
    rms = RunningMeanStd.from_state(obs_norm) if obs_norm else None
    return model.eval(), rms, obs_space, action_space


class Policy:
    """The checkpoint's actor-critic with its observation normaliser, in eval mode on the CPU.

    ``predict`` follows Stable-Baselines3: one observation or a batch in, actions (and the
    recurrent state, for an LSTM) out.
    """

    def __init__(
        self,
        config,
        model,
        obs_rms,
        observation_space,
        action_space,
        checkpoint: Path | None = None,
        name: str | None = None,
    ):
        """``checkpoint``: the file the policy was loaded from (None: built in memory); ``name``: which of a run's
        several trained policies it is (None: the run's one)."""
        self.config = config
        self.name = name
        self.checkpoint = checkpoint
        self.model = model.eval()
        self.obs_rms = obs_rms
        self.observation_space = observation_space
        self.action_space = action_space
        self._takes_dicts = is_structured(observation_space)  # a Dict or Tuple: given by parts, or flattened
        self._rng = np.random.default_rng()
        self.memory = memory_for(self.model)

    @classmethod
    def from_checkpoint(
        cls,
        checkpoint: str | Path,
        env_id: str | None = None,
        trusted_envs: Collection[str] = (),
        policy: str | None = None,
        which: str = "best",
    ) -> Policy:
        """``checkpoint``: a file, or a run directory (its best checkpoint, or its newest with ``which`` latest)."""
        return cls(*policy_from_checkpoint(checkpoint, env_id, trusted_envs, policy, which), name=policy)

    @classmethod
    def from_state(cls, config: Config, state: dict, policy: str | None = None) -> Policy:
        """From a learner state under a run's own ``config`` (evaluation during training); ``policy``: which of
        several."""
        return cls(config, *policy_parts(config, state, policy), name=policy)

    @property
    def is_recurrent(self) -> bool:
        return self.model.is_recurrent

    def initial_state(self, batch: int) -> tuple[np.ndarray, np.ndarray] | np.ndarray | None:
        """The LSTM's ``(h, c)``, an attention model's window ``[batch, W, *obs]`` of zeros, or None."""
        return self.memory.initial(batch)

    def seed(self, seed: int) -> None:
        """Seed the sampling of stochastic actions."""
        self._rng = np.random.default_rng(seed)

    def predict(
        self,
        observation,
        state=None,
        episode_start=None,
        deterministic: bool = True,
        action_mask=None,
        action_masks=None,
    ):
        """Actions for ``observation`` (one, or a batch along axis 0) -> ``(actions, state)``.

        ``state``: the LSTM state (an attention model's window of recent observations) from the previous call
        (None: a fresh one); ``episode_start``: a bool per observation, True where an episode began, which resets
        that row's state. Feed-forward policies return state None. ``action_mask``: the legal actions (a board
        game's ``action_mask``, one row per observation); an illegal one is never chosen. ``action_masks`` is the
        same under sb3-contrib's MaskablePPO name, and a PettingZoo observation dict ``{"observation": ...,
        "action_mask": ...}`` gives both at once. A Dict observation's parts only the critic reads
        (``model.critic_parts``;
        a central critic's ``critic``) may be left out. A league run's policy plays one seat: give it that seat's
        observation. Observations of any dtype are taken (MuJoCo's float64 included) and cast as the workers cast them.
        """
        if action_masks is not None:
            if action_mask is not None:
                raise ValueError("predict: give action_mask or action_masks (its sb3-contrib name), not both")
            action_mask = action_masks
        if (
            isinstance(observation, dict)
            and "observation" in observation
            and "action_mask" in observation
            and not self._takes_dicts
        ):  # PettingZoo's classic games: the mask rides in the observation
            if action_mask is None:
                action_mask = observation["action_mask"]
            observation = observation["observation"]
        if self._takes_dicts and isinstance(
            observation, (dict, tuple, list)
        ):  # by parts: flattened as the env copies are
            # the parts only the critic reads may be left out: acting never reads them
            obs, single = flatten_batch(self.observation_space, observation, self.model.critic_only)
        else:  # a Box observation, or a Dict's flattening (what distrl's own vector envs return)
            obs = np.asarray(observation)
            shape = self.model.input_space.shape
            single = obs.shape == shape
            if single:
                obs = obs[None]
            if obs.shape[1:] != shape:
                raise ValueError(
                    f"observation shape {tuple(np.asarray(observation).shape)}: expected {shape} or a batch of them"
                )
        if self.obs_rms is not None:
            obs = self.obs_rms.normalize(obs, self.config.env.obs_clip)
        obs = policy_observation(obs)
        # The model memory's state (an LSTM's, an attention model's window) is the caller's, as in SB3.
        inputs, seen = self.memory.inputs(
            state if state is not None else self.initial_state(len(obs)), obs, episode_start
        )
        with torch.inference_mode(), torch_threads(1):  # as a worker acts: one thread, whatever the cores' load
            pd, _, *extra = self.model(*(torch.as_tensor(x) for x in inputs))
        state = self.memory.after(seen, tuple(x.numpy() for x in extra))
        pd = pd.numpy()
        dist = self.model.dist
        mask = None if action_mask is None else np.asarray(action_mask, dtype=bool).reshape(len(obs), -1)
        actions = dist.greedy_numpy(pd, mask) if deterministic else dist.sample_numpy(pd, self._rng, mask)[0]
        actions = dist.env_actions(actions, self.action_space)
        return (actions[0] if single else actions), state

    __call__ = predict
