"""distrl: distributed PPO on Ray with compiled rollout workers and learners.

import distrl
result = distrl.train("configs/cartpole.yaml", overrides={"seed": 1})
policy = distrl.load_policy(result.best_checkpoint)
"""

__version__ = "0.1.0"

from distrl.common.lazy import lazy_exports

# Imported on first use: `import distrl` stays cheap (the CLI imports it before deciding what it needs).
_EXPORTS = {
    "train": "distrl.api",
    "load_policy": "distrl.api",
    "TrainResult": "distrl.api",
    "UsageError": "distrl.api",
    "tune": "distrl.tune",
    "Config": "distrl.config",
    "ConfigError": "distrl.config",
    "load_config": "distrl.config",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = [
    "Config",
    "ConfigError",
    "TrainResult",
    "UsageError",
    "__version__",
    "load_config",
    "load_policy",
    "train",
    "tune",
]
