"""Which trained policy acts for which agent slot of a multi-agent run (``agents.policies``).

The mapping is data in the config (shared, per_agent, or policy names to agent-name patterns), resolved here against
the agents the env itself names, before Ray starts. Slot ``c * N + i`` is agent ``i`` of copy ``c``
(``distrl/envs/agent_slots.py``), so a policy's slots are the same columns of every worker's batch: the worker acts
for them with that policy and the learner trains that policy on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

import numpy as np

from distrl.common.errors import EnvSpecError
from distrl.config.agents import POLICY_NAME


@dataclass(frozen=True)
class PolicyMap:
    names: tuple[str, ...]  # the trained policies, in the config's order (per_agent: the agents' order)
    agents: tuple[tuple[str, ...], ...]  # each policy's agents, in slot order
    agent_names: tuple[str, ...]  # every agent, in slot order (the env's possible_agents)

    def columns(self, num_slots: int) -> list[np.ndarray]:
        """Each policy's slot indices among ``num_slots`` (whole copies of the env's agents), ascending."""
        n = len(self.agent_names)
        index = {name: i for i, name in enumerate(self.agent_names)}
        copies = np.arange(num_slots // n)[:, None] * n
        return [np.sort((copies + np.array([index[a] for a in agents])[None]).reshape(-1)) for agents in self.agents]

    def describe(self) -> str:
        """The policies and their agents, in the start-up summary's words."""
        return "; ".join(f"{name}: {', '.join(agents)}" for name, agents in zip(self.names, self.agents))


def resolve(policies, agent_names: tuple[str, ...]) -> PolicyMap:
    """``agents.policies`` (per_agent, or a mapping) against the env's ``agent_names``; EnvSpecError naming the agent or
    policy where an agent has no policy, two, or a policy has no agent."""
    if policies == "per_agent":
        for name in agent_names:
            if not POLICY_NAME.match(name):
                raise EnvSpecError(
                    f"agents.policies=per_agent: agent {name!r} cannot name a policy (letters, digits, "
                    "'_', '-' and '.' only); map it by pattern instead"
                )
        return PolicyMap(tuple(agent_names), tuple((name,) for name in agent_names), tuple(agent_names))
    owners: dict[str, list[str]] = {name: [] for name in agent_names}
    for policy, patterns in policies.items():
        matched = [agent for agent in agent_names if any(fnmatchcase(agent, p) for p in patterns)]
        if not matched:
            raise EnvSpecError(
                f"agents.policies.{policy}={patterns}: matches no agent; the env's agents are {', '.join(agent_names)}"
            )
        for agent in matched:
            owners[agent].append(policy)
    for agent, owned in owners.items():
        if not owned:
            raise EnvSpecError(
                f"agents.policies: agent {agent!r} matches no policy's patterns; every agent needs one "
                f"(policies: {', '.join(policies)})"
            )
        if len(owned) > 1:
            raise EnvSpecError(
                f"agents.policies: agent {agent!r} matches {' and '.join(owned)}; every agent needs exactly one policy"
            )
    agents = tuple(tuple(a for a in agent_names if owners[a][0] == policy) for policy in policies)
    return PolicyMap(tuple(policies), agents, tuple(agent_names))
