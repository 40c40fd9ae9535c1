"""No memory grows with the number of weight syncs (benchmarks/policy_call/soak.py measures the same at length)."""

import pytest

from benchmarks.policy_call.soak import soak_in_subprocess


@pytest.mark.parametrize("backend", ["eager", "onnxrt", "inductor"])
def test_worker_memory_does_not_grow_with_weight_syncs(backend):
    row = soak_in_subprocess("configs/cartpole.yaml", backend, syncs=300)
    assert row["backend_used"] == backend and row["sync_checks"] == (0 if backend == "eager" else 300)
    # The onnxrt leak was one to two copies of the weights per sync (36.6 KB for this MLP: 73 KB/sync). Without it the
    # RSS slope over the 240 measured syncs is allocator noise: 879-1,866 B/sync for onnxrt on a 2-core EPYC (the
    # highest failed a bound of a twentieth of a copy), so the bound is a tenth of a copy, ten times under one copy.
    assert row["bytes_per_sync"] < row["weight_bytes"] / 10, row
