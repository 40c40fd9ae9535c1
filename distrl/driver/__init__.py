"""The training driver: actors, loop, metrics, checkpoints."""

from distrl.driver.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from distrl.driver.driver import Driver, connect_ray
from distrl.driver.placement import PlacementError

__all__ = ["CheckpointError", "Driver", "PlacementError", "connect_ray", "load_checkpoint", "save_checkpoint"]
