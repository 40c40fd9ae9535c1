"""Using a trained policy: evaluation episodes and ONNX export."""

from distrl.deploy.evaluate import evaluate
from distrl.deploy.export import export_onnx, export_policies
from distrl.deploy.policy import Policy, policy_from_checkpoint

__all__ = ["Policy", "evaluate", "export_onnx", "export_policies", "policy_from_checkpoint"]
