"""The worker backends a test runs a policy through, as pytest parameters: ipex where this environment has it (CI's
second environment, torch 2.8), marked so that `pytest -m ipex` selects it."""

import pytest

from distrl.compile import available_backends

AVAILABLE = {row["name"]: row for row in available_backends()}
BACKENDS = [
    "onnxrt",
    "inductor",
    pytest.param(
        "ipex",
        marks=[
            pytest.mark.ipex,
            pytest.mark.skipif(not AVAILABLE["ipex"]["available"], reason=AVAILABLE["ipex"]["reason"]),
        ],
    ),
]
