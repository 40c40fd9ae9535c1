"""torch.compile's process-wide counters, for recompile and graph-break metrics."""

from __future__ import annotations

import sys


def dynamo_counts() -> dict[str, int]:
    """Graphs compiled so far in this process and graph breaks seen.

    A process that never imported dynamo compiled nothing; importing it just to read zeros
    would cost an eager or onnxrt worker over a second of start-up.
    """
    if "torch._dynamo" not in sys.modules:
        return {"compiled_graphs": 0, "graph_breaks": 0}
    from torch._dynamo.utils import counters

    return {
        "compiled_graphs": int(counters["stats"]["unique_graphs"]),
        "graph_breaks": int(sum(counters["graph_break"].values())),
    }
