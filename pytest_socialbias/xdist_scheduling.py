"""An xdist scheduler for suite batches: loadscope, with batches as scopes, all handed out
at once.

Items of a suite file are direct children of the file (their ids name cases, not
batches), so xdist's own scope (the node id up to its last ``::``) would keep a whole
suite file on one worker. This scheduler's scope of a suite case is its batch
(batching.py), cut from the same list of node ids the workers cut it from. xdist's
``loadscope`` hands a worker its next scope only when the current one is nearly done; a
batch runs all its dialogues concurrently, so a worker can run several side by side.
When every scope of the run is a suite batch, this scheduler gives each worker all its
batches at the start (each next batch to the worker with the fewest cases), and the
worker starts every batch queued for it (worker.CaseRunner). Runs that also collect
ordinary Python tests keep loadscope's own pacing.
"""

from __future__ import annotations

from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

from .batching import batch_ids, suite_batch_size


class SuiteBatchScheduling(LoadScopeScheduling):
    def __init__(self, config, log=None, batch_size: int | None = None):
        super().__init__(config, log)
        self._batch_size = batch_size
        self._batches: dict[str, str] = {}

    def _split_scope(self, nodeid: str) -> str:
        return self._batches.get(nodeid) or super()._split_scope(nodeid)

    def schedule(self) -> None:
        initial = self.collection is None
        if initial and self.registered_collections:
            collection = list(next(iter(self.registered_collections.values())))
            root = Path(self.config.rootpath)
            self._batches = batch_ids(collection, lambda file: suite_batch_size(root / file, self._batch_size))
        super().schedule()
        if not initial or not self.collection or not self.workqueue:
            return
        if not all(nodeid in self._batches for nodeid in self.collection):
            return
        while self.workqueue:
            node = min(self.nodes, key=lambda n: sum(len(unit) for unit in self.assigned_work.get(n, {}).values()))
            self._assign_work_unit(node)
        for node in self.nodes:
            node.shutdown()
