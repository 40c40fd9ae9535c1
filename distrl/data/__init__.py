"""What moves between the parts of a run: the batch a worker fills, the samples an update draws minibatches
from, observation windows, the typed messages (``messages.py``), model memory kinds (``memory/``) and the async
staleness bound (``staleness.py``). Names are loaded on first use."""

from __future__ import annotations

from distrl.common.lazy import lazy_exports

_EXPORTS = {
    "Batch": "distrl.data.batch",
    "TrainingSamples": "distrl.data.samples",
    "SampleInfo": "distrl.data.messages",
    "SampleReport": "distrl.data.messages",
    "Weights": "distrl.data.messages",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
