"""Whether the calling code runs inside a Ray actor (a run's worker or learner), not a test's or a tool's own process.

Set-up that belongs to a run's process alone (its niceness, its cores, the GPUs Ray gave it) asks this first.
"""

from __future__ import annotations


def in_ray_actor() -> bool:
    try:
        import ray

        return ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None
    except Exception:  # not inside Ray at all
        return False
