"""torch.compile's process-wide counters, for recompile and graph-break metrics."""

from __future__ import annotations


def dynamo_counts() -> dict[str, int]:
    """Graphs compiled so far in this process and graph breaks seen."""
    from torch._dynamo.utils import counters

    return {
        "compiled_graphs": int(counters["stats"]["unique_graphs"]),
        "graph_breaks": int(sum(counters["graph_break"].values())),
    }
