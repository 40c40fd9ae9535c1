"""The training driver: actors, loop, metrics, checkpoints."""

from distrl.driver.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from distrl.driver.driver import Driver, PlacementError, connect_ray

__all__ = ["CheckpointError", "Driver", "PlacementError", "connect_ray", "load_checkpoint", "save_checkpoint"]
