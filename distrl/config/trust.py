"""Which code distrl may import: an env factory or an encoder is code, and code runs only when the user names it.

A registered gymnasium id (``CartPole-v1``, ``ALE/Breakout-v5``) is a name and is always built.
An id with a ``:`` (``package.module:factory``, or gymnasium's ``module:EnvId``) imports a
module and calls into it, so it is data only when distrl ships it (``SHIPPED_FACTORIES``);
any other is built only when the user names that exact id on the command line: ``--set
env.id=ID`` or ``--trust-env ID`` for ``train`` and ``diagnose``, ``--env ID`` or
``--trust-env ID`` for ``eval`` and ``export``. A config file, a checkpoint or a run
directory someone sent can therefore never make distrl import or call anything.

``model.encoder`` (``package.module:factory``) follows the same rule: a shipped one is data, any other is built only
when named on the command line (``--set model.encoder=ID`` or ``--trust-model ID``; in Python ``trusted_models``).
"""

from __future__ import annotations

from collections.abc import Collection

from distrl.common.errors import EnvSpecError
from distrl.config.loader import ConfigError

SHIPPED_FACTORIES = frozenset(
    {
        "distrl.envs.wrappers:cartpole_no_velocity",
        "distrl.envs.testing:flaky_cartpole",
        "distrl.envs.testing:broken_cartpole",
        "distrl.envs.testing:nan_reward_cartpole",
        "distrl.envs.testing:dict_action_cartpole",
        "distrl.envs.testing:sleepy_cartpole",
        "distrl.envs.testing:reporting_cartpole",
        "distrl.envs.testing:dict_obs_cartpole",
        "distrl.envs.testing:image_cartpole",
        "distrl.envs.testing:pixel_cartpole",
        "distrl.envs.testing:tuple_obs_cartpole",
        "distrl.envs.testing:multidiscrete_cartpole",
        "distrl.envs.testing:float64_cartpole",
        "distrl.envs.testing:cartpole_team",
        "distrl.envs.testing:dying_agents",
        "distrl.envs.testing:mixed_space_agents",
        "distrl.envs.testing:speaker_listener",
    }
)


def is_factory(env_id: str) -> bool:
    return ":" in env_id


def check_env_trust(env_id: str, named: Collection[str], source: str, flag: str = "--trust-env") -> None:
    """Refuse an env factory from ``source`` (a config file, a checkpoint) that the user did not name."""
    if not is_factory(env_id) or env_id in SHIPPED_FACTORIES or env_id in named:
        return
    raise EnvSpecError(
        f"env.id={env_id!r} (from {source}): an env factory is code, and distrl imports code only when you name "
        f"it; if you trust it, add {flag} {env_id} (in Python: trusted_envs=[{env_id!r}])"
    )


SHIPPED_ENCODERS = frozenset(
    {"distrl.models.examples:residual_mlp", "distrl.models.examples:dict_cnn", "distrl.models.examples:minatar_cnn"}
)


def check_encoder_trust(encoder: str | None, named: Collection[str], source: str) -> None:
    """Refuse an encoder from ``source`` (a config file, a checkpoint) that the user did not name."""
    if encoder is None or encoder in SHIPPED_ENCODERS or encoder in named:
        return
    raise ConfigError(
        [
            f"model.encoder={encoder!r} (from {source}): an encoder is code, and distrl imports code only when you "
            f"name it; if you trust it, add --trust-model {encoder} (in Python: trusted_models=[{encoder!r}])"
        ]
    )


def check_code_trust(config, named: Collection[str], source: str, env_flag: str = "--trust-env") -> None:
    """Both rules for a config read from ``source``: its env factory and its encoder, each named by the user (in
    ``named``: the ids given on the command line) or shipped with distrl."""
    check_env_trust(config.env.id, named, source, env_flag)
    check_encoder_trust(config.model.encoder, named, source)


def named_code(overrides: Collection[str]) -> list[str]:
    """The code ids named by ``env.id=ID`` and ``model.encoder=ID`` overrides: named by the caller, so trusted."""
    keys = ("env.id", "model.encoder")
    return [o.partition("=")[2].strip() for o in overrides if o.partition("=")[0].strip() in keys]
