"""Keeping a run alive through envs that raise inside ``step`` or return non-finite numbers.

A copy of the env that raises is reset and its step reported as truncated with
``info["env_error"]`` set; the rollout worker masks that step out of the loss and counts
it, and the driver logs it. A step whose observation or reward is NaN or infinite is handled
the same way with ``info["env_nonfinite"]`` naming the array, so the learner never sees it. A
copy that fails ``max_consecutive_errors`` times in a row (or cannot even be reset) is broken,
and ``EnvFailure`` stops the run with the env's own error message.

Native vector envs (one object stepping every copy, no per-copy reset) are reset as a whole.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from distrl.common.errors import EnvFailure, OwnCodeError

__all__ = ["EnvFailure", "GuardedEnv", "GuardedVectorEnv", "nonfinite_parts"]


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:300]


class _ErrorBudget:
    """Counts consecutive step errors; past the budget the env is broken and the run stops."""

    def __init__(self, limit: int, what: str):
        self.limit, self.what, self.consecutive = limit, what, 0

    def failed(self, exc: BaseException) -> str:
        """Record a failure; its one-line description, or EnvFailure when the budget is spent."""
        self.consecutive += 1
        message = _describe(exc)
        if self.consecutive >= self.limit:
            raise EnvFailure(
                f"{self.what} failed {self.consecutive} times in a row (env.max_consecutive_errors={self.limit}); "
                f"last error {message}",
                self.consecutive,
            ) from None
        return message

    def succeeded(self) -> None:
        self.consecutive = 0


def nonfinite_parts(obs, reward) -> str:
    """Which of ``obs`` and ``reward`` (one env's) hold NaN or infinity: "", "observation", "reward" or both."""
    parts = []
    obs = np.asarray(obs)
    if obs.dtype.kind in "fc" and not np.isfinite(obs).all():
        parts.append("observation")
    if not np.isfinite(reward):
        parts.append("reward")
    return " and ".join(parts)


class _NonFinite(Exception):
    """An env step returned NaN or infinity (handled like an error the env raised); a vector env's carries which copies
    (``mask``) and the step's ``result``."""

    def __init__(self, message: str, mask: np.ndarray | None = None, result: tuple | None = None):
        super().__init__(message)
        self.mask, self.result = mask, result


class GuardedEnv(gym.Wrapper):
    def __init__(
        self, env: gym.Env, max_consecutive_errors: int, structured_observation_space: gym.Space | None = None
    ):
        super().__init__(env)
        self.errors = _ErrorBudget(max_consecutive_errors, "env step")
        # A Dict or Tuple space flattened below this guard (the model's encoders read it); None for any other. Always
        # set, so a vector env's get_attr finds it on every copy.
        self.structured_observation_space = structured_observation_space

    def step(self, action):
        try:
            result = self.env.step(action)
            bad = nonfinite_parts(result[0], result[1])
            if bad:
                raise _NonFinite(f"{bad} not finite")
        except (EnvFailure, OwnCodeError):
            raise
        except Exception as exc:  # any error of the env's own code, or numbers no loss can use
            message = self.errors.failed(exc)
            try:
                obs, info = self.env.reset()
            except Exception as reset_exc:
                raise EnvFailure(
                    f"env step raised {message}, and reset then raised {_describe(reset_exc)}", 1
                ) from None
            key = "env_nonfinite" if isinstance(exc, _NonFinite) else "env_error"
            return obs, 0.0, False, True, {**info, key: str(exc) if key == "env_nonfinite" else message}
        self.errors.succeeded()
        return result


class GuardedVectorEnv(gym.vector.VectorWrapper):
    """The same protection for native vector envs, which fail (and are reset) as a whole."""

    def __init__(self, env: gym.vector.VectorEnv, max_consecutive_errors: int):
        super().__init__(env)
        self.errors = _ErrorBudget(max_consecutive_errors, "vector env step")
        self._send_error: BaseException | None = None  # a send that raised, reported by the recv after it

    def reset(self, **kwargs):
        try:
            return self.env.reset(**kwargs)
        except Exception as exc:  # a native vector env that cannot even start: one line, like a failing step
            raise EnvFailure(f"vector env reset raised {_describe(exc)}", 1) from None

    @property
    def can_send(self) -> bool:
        """Whether the env underneath steps between ``send`` and ``recv`` by itself (ale-py's: its thread pool)."""
        return callable(getattr(self.env, "send", None)) and callable(getattr(self.env, "recv", None))

    def send(self, actions) -> None:
        """Begin a step (``can_send`` envs); ``recv`` returns it as ``step`` would, errors handled the same way."""
        self._send_error = None
        try:
            self.env.send(actions)
        except (EnvFailure, OwnCodeError):
            raise
        except Exception as exc:  # reported by recv, as step reports it
            self._send_error = exc

    def recv(self):
        error, self._send_error = self._send_error, None
        return self._guarded(self.env.recv, error)

    def step(self, actions):
        return self._guarded(lambda: self.env.step(actions))

    def recv_ready(self) -> tuple[tuple | None, str, np.ndarray | None]:
        """``recv`` for an env that returns its copies as they become ready (ale-py's ``batch_size``, their ids in
        ``info["env_id"]``): ``(result, "", None)``; where the step (or the send before it) raised, ``(None, message,
        None)``; where it returned non-finite numbers, ``(result, message, nonfinite)`` (per returned copy). Either is
        counted against the error budget (past it, ``EnvFailure``). Such an env cannot be reset here: its other copies'
        steps are in flight, and a reset in their midst mixes up its queue (seen with ale-py 0.12), so the caller
        builds a new one."""
        error, self._send_error = self._send_error, None
        try:
            result = self._checked(self.env.recv, error)
        except (EnvFailure, OwnCodeError):
            raise
        except Exception as exc:
            bad = exc if isinstance(exc, _NonFinite) else None
            return (None if bad is None else bad.result), self.errors.failed(exc), (None if bad is None else bad.mask)
        self.errors.succeeded()
        return result, "", None

    def _checked(self, step, error: BaseException | None) -> tuple:
        """``step()``'s result; raises the send's ``error`` before it, or ``_NonFinite`` where the result holds NaN or
        infinity."""
        if error is not None:
            raise error
        result = step()
        nonfinite = self._nonfinite(result[0], result[1])
        if nonfinite is not None:
            message = f"{int(nonfinite.sum())} of {len(nonfinite)} copies returned non-finite numbers"
            raise _NonFinite(message, nonfinite, result)
        return result

    def _guarded(self, step, error: BaseException | None = None):
        """``step()``'s result, or where it (or the send before it: ``error``) raised or returned non-finite numbers,
        the reset copies as a truncated step with the error in its info."""
        try:
            result = self._checked(step, error)
        except (EnvFailure, OwnCodeError):
            raise
        except Exception as exc:
            message = self.errors.failed(exc)
            try:
                obs, info = self.env.reset()
            except Exception as reset_exc:
                raise EnvFailure(
                    f"vector env step raised {message}, and reset then raised {_describe(reset_exc)}", 1
                ) from None
            n = self.num_envs
            if isinstance(
                exc, _NonFinite
            ):  # the copies at fault are counted; the rest were reset with them (masked too)
                parts = np.array([nonfinite_parts(o, r) + " not finite" for o, r in zip(*exc.result[:2])], dtype=object)
                info = {
                    **info,
                    "env_nonfinite": parts,
                    "_env_nonfinite": exc.mask,
                    "_env_reset": np.ones(n, dtype=bool),
                }
            else:
                info = {**info, "env_error": np.full(n, message, dtype=object), "_env_error": np.ones(n, dtype=bool)}
            return obs, np.zeros(n), np.zeros(n, dtype=bool), np.ones(n, dtype=bool), info
        self.errors.succeeded()
        return result

    @staticmethod
    def _nonfinite(obs: np.ndarray, rewards: np.ndarray) -> np.ndarray | None:
        """Per copy, whether its observation or reward is NaN or infinite; None when all are finite."""
        bad = ~np.isfinite(np.asarray(rewards, dtype=np.float64))
        obs = np.asarray(obs)
        if obs.dtype.kind in "fc":
            bad |= ~np.isfinite(obs.reshape(len(obs), -1)).all(axis=1)
        return bad if bad.any() else None
