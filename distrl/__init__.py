"""distrl: distributed PPO on Ray with compiled rollout workers and learners."""

__version__ = "0.1.0"
