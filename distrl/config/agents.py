"""The ``agents`` section of a run's config: which trained policy acts for which agent of a multi-agent env.

No torch here: the config validates before anything heavy loads. The agents' names come from the env itself, so a
mapping is checked against them where the env is probed (``distrl/envs/policy_map.py``), still before Ray starts.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

POLICY_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")  # a policy's name is part of its ONNX file's name
SHARED = "shared"


class AgentsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)

    policies: Literal["shared", "per_agent"] | dict[str, Annotated[list[str], Field(min_length=1)]] = Field(
        SHARED,
        description="which trained policy acts for which agent of a PettingZoo parallel env: shared (one policy "
        "for every agent: parameter sharing), per_agent (a policy per agent, named as the agent), or a mapping from "
        "policy names to agent-name patterns (fnmatch: {blue: ['blue_*'], red: ['red_*']}, a policy per team); every "
        "agent must match exactly one policy. Each policy has its own learner state, metrics, checkpoint entry and "
        "exported ONNX",
    )

    critic: Literal["local", "state", "observations"] = Field(
        "local",
        description="what each agent's critic sees besides its own observation: local (nothing: independent "
        "critics), state (the env's global state(): a central critic, MAPPO's), observations (every agent's "
        "observation in its env copy: MAPPO's concatenated local observations). The actor acts on its own observation "
        "alone (model.critic_parts); the critic's part is added as the 'critic' part of a Dict observation",
    )

    @field_validator("policies")
    @classmethod
    def _names(cls, value):
        if isinstance(value, dict):
            if not value:
                raise ValueError("agents.policies={}: names no policy; use shared, per_agent or {name: [patterns]}")
            for name in value:
                if not POLICY_NAME.match(name):
                    raise ValueError(
                        f"agents.policies: policy name {name!r}: letters, digits, '_', '-' and '.' only (it "
                        "names files)"
                    )
        return value

    @property
    def several(self) -> bool:
        """Whether more than the one shared policy may train (per agent, or a mapping)."""
        return self.policies != SHARED
