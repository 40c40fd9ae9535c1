"""``inductor``: ``torch.compile`` with its default compiler; the driver compiles once and shares the cache."""

from __future__ import annotations

import shutil

import torch

from distrl.compile.backends.base import Built
from distrl.compile.policy import TorchCompiledPolicy


class InductorBackend:
    name = "inductor"

    def available(self) -> tuple[bool, str]:
        compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
        if compiler is None:
            return False, "no C++ compiler on PATH"
        return True, f"torch {torch.__version__}, C++ compiler {compiler}"

    def prepare(self, module, example, mode) -> dict:
        """Compile on the driver and hand workers inductor's cache artifacts (they skip codegen)."""
        TorchCompiledPolicy(module, "inductor", self._compile_kwargs(mode, {}))(*example)
        saved = torch.compiler.save_cache_artifacts()
        return {"inductor_cache": saved[0]} if saved is not None else {}

    def build(self, module, example, mode, options, artifacts) -> Built:
        # Here, not at the top: it loads dynamo (seconds of CPU), and listing backends must not.
        import torch._inductor.config

        # Compile with this process's CPUs: inductor's default is a pool of one compiler process per
        # core of the machine, started in every worker at once (12 workers on 16 cores: minutes).
        torch._inductor.config.compile_threads = max(1, torch.get_num_threads())
        if artifacts.get("inductor_cache") is not None:
            torch.compiler.load_cache_artifacts(artifacts["inductor_cache"])
        return Built(TorchCompiledPolicy(module, "inductor", self._compile_kwargs(mode, options)))

    @staticmethod
    def _compile_kwargs(mode: str, options: dict) -> dict:
        if mode not in (None, "default"):
            return {"mode": mode}
        return {"options": dict(options)} if options else {}


BACKEND = InductorBackend()
