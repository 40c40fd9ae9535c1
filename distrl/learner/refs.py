"""What a learner actor does with a round's object refs, the same for one policy's ``Learner`` and several policies'
``PolicySetLearner``: fetch this rank's shards (leaving out batches lost with their node), update, and hand back the
new weights and state."""

from __future__ import annotations

from distrl.data.messages import SampleInfo, SampleReport, UpdateResult, Weights


class UpdatesByRef:
    """Needs of its class: ``hardware`` (its cores), ``version``, ``_update(infos, shards, min_version)``,
    ``get_weights()`` and ``snapshot()``."""

    def update_refs(self, sample_report: SampleReport, shard_refs: tuple) -> UpdateResult:
        """One update on the workers' infos (``sample_report.infos``, from the coordinator), fetching this rank's shard
        of each batch by ref (under Ray).

        A batch whose object is gone (it lived in the object store of a node that died before this fetch) is left
        out: the update trains on the others, and ``lost_batches`` names it (its index in the report) so the driver
        counts neither its env steps nor its episodes. Every rank loses the same batches (a batch's shards are
        stored together). With every batch gone there is no update (the version unchanged).
        """
        with self.hardware.cores.updating():
            return self._fetch_and_update(sample_report, shard_refs)

    def update_refs_and_snapshot(
        self, sample_report: SampleReport, shard_refs: tuple, snapshot: bool = True
    ) -> tuple[UpdateResult, Weights, dict | None]:
        """``update_refs``, then the new weights (for workers) and, when ``snapshot``, the full state (kept by the
        driver, for restarts; ``learner.snapshot_every_s`` decides which updates send it)."""
        with self.hardware.cores.updating():
            result = self._fetch_and_update(sample_report, shard_refs)
            return result, self.get_weights(), self.snapshot() if snapshot else None

    def _fetch_and_update(self, sample_report: SampleReport, shard_refs: tuple) -> UpdateResult:
        infos, shards, lost = fetch_shards(sample_report, shard_refs)
        if not shards:
            return UpdateResult(version=self.version, lost_batches=lost)
        result = self._update(infos, shards, sample_report.min_version)
        result.lost_batches = lost
        return result


def fetch_shards(sample_report: SampleReport, shard_refs: tuple) -> tuple[list[SampleInfo], list, list[int]]:
    """The infos and this rank's shards of the batches still there, and the report indices of those lost with their
    node (``Learner.update_refs``)."""
    import ray

    infos, lost = list(sample_report.infos), []
    try:
        shards = ray.get(list(shard_refs))  # every transfer at once
    except ray.exceptions.ObjectLostError:  # a node's object store is gone (OwnerDiedError is one too): which?
        infos, shards = [], []
        for index, (info, ref) in enumerate(zip(sample_report.infos, shard_refs)):
            try:
                shards.append(ray.get(ref))
                infos.append(info)
            except ray.exceptions.ObjectLostError:
                lost.append(index)
    return infos, shards, lost
