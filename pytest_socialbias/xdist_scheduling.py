"""An xdist scheduler for suite batches: loadscope, with every batch handed out at once.

xdist's ``loadscope`` keeps a scope (here: one batch of cases) on one worker, which a
batch needs, but it hands a worker its next scope only when the current one is nearly
done. A batch runs all its dialogues concurrently, so a worker could run several batches
side by side, and waiting makes a worker with two batches take twice as long. When every
scope of the run is a suite batch, this scheduler gives each worker all its batches at
the start (each next batch to the worker with the fewest cases), and the worker starts
every batch queued for it (session.record_for). Runs that also collect ordinary Python
tests keep loadscope's own behaviour.
"""

from __future__ import annotations

from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

from .cases import looks_like_suite


class SuiteBatchScheduling(LoadScopeScheduling):
    def schedule(self) -> None:
        initial = self.collection is None
        super().schedule()
        if not initial or not self.collection or not self.workqueue:
            return
        scopes = list(self.workqueue) + [s for assigned in self.assigned_work.values() for s in assigned]
        root = Path(self.config.rootpath)
        if not all(looks_like_suite(root / scope.split("::", 1)[0]) for scope in scopes):
            return
        while self.workqueue:
            node = min(self.nodes, key=lambda n: sum(len(unit) for unit in self.assigned_work.get(n, {}).values()))
            self._assign_work_unit(node)
        for node in self.nodes:
            node.shutdown()
