"""Using a trained policy: evaluation episodes and ONNX export."""

from distrl.deploy.evaluate import evaluate, policy_from_checkpoint
from distrl.deploy.export import export_onnx

__all__ = ["evaluate", "export_onnx", "policy_from_checkpoint"]
