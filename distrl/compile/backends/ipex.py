"""``ipex``: ``torch.compile`` with intel-extension-for-pytorch's backend (torch 2.8 only)."""

from __future__ import annotations

from distrl.compile.backends.base import Built
from distrl.compile.policy import TorchCompiledPolicy


class IpexBackend:
    name = "ipex"

    def available(self) -> tuple[bool, str]:
        try:
            import intel_extension_for_pytorch  # noqa: F401  (registers the "ipex" dynamo backend)
        except ImportError:
            return False, (
                "intel-extension-for-pytorch is not installed; it needs torch 2.8: "
                "pip install 'distrl[ipex]' in an environment of its own"
            )
        except Exception as exc:  # ipex refuses to import on a torch it was not built for
            return False, f"intel-extension-for-pytorch failed to import: {str(exc).splitlines()[0][:200]}"
        return True, f"intel-extension-for-pytorch {intel_extension_for_pytorch.__version__}"

    def prepare(self, module, example, mode) -> dict:
        return {}  # ipex's graphs are not cacheable across processes

    def build(self, module, example, mode, options, artifacts) -> Built:
        ok, reason = self.available()
        if not ok:
            raise RuntimeError(reason)
        return Built(TorchCompiledPolicy(module, "ipex"))


BACKEND = IpexBackend()
