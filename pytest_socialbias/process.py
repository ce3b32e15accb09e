"""What this pytest process does in a run, its part, chosen once at configure time
(``choose``). A process's part is not a conversation role (target, judge, user, guard:
modelset.ROLES, protocols.base.Roles): those name models, this names processes.

A run has one of three shapes, and each process plays one part in it:

- ``SingleProcess``: no xdist workers (``-n 0``, ``-p no:xdist``, a dry run). It starts
  every server the run needs, runs the cases (every batch at once, on its event loop),
  aggregates, gates and reports.
- ``XdistController``: the xdist controller. It starts the shared servers, calls no model
  (importing an SDK there would cost its workers CPU), never runs a case, and aggregates
  the records its workers' reports carry.
- ``XdistWorker``: an xdist worker. It takes the run's id and the shared servers' addresses
  from the controller, starts its own per-worker servers on its share of the GPUs, runs
  the batches xdist sends it (those already queued beside the current one), and reports
  nothing itself.

The hooks (plugin.py), the case runner (worker.py) and the model set (modelset.py) ask
the part object, never ``hasattr(config, "workerinput")``.
"""

from __future__ import annotations

import os
import uuid
from abc import ABC, abstractmethod
from typing import Callable


class ProcessPart(ABC):
    name = ""
    aggregates = True  # collects the records, decides the gates, writes the reports
    runs_cases = True  # calls models: warms them up, runs batches
    process = "main"  # this process as reports name it (models/batchstats.py)

    def run_id(self) -> str:
        """The run's id, shared by all its processes (endpoint checks, the cache's runs)."""
        return uuid.uuid4().hex

    @abstractmethod
    def server_share(self, per_worker: bool, gpus: str | None) -> tuple[str | None, str | None] | None:
        """Where this process starts a managed server (models/managed.py): ``(gpus, name)``
        for one it starts, None for one another process starts (or none does)."""

    def upcoming(self, runner) -> list:
        """Cases whose batches start beside the one an item waits for."""
        return []

    def usage_errors(self) -> bool:
        """Whether a model problem found at collection is a usage error here (else each of
        this process's items shows it: a worker cannot stop the run)."""
        return self.aggregates


class SingleProcess(ProcessPart):
    name = "single process"

    def server_share(self, per_worker, gpus):
        return (gpus, "main") if per_worker else (gpus, None)

    def upcoming(self, runner) -> list:
        """Every batch: this process runs them all, side by side on one event loop."""
        return [cases[0] for cases in runner.batches.values() if cases]


class XdistController(ProcessPart):
    name = "xdist controller"
    runs_cases = False
    process = "controller"

    def __init__(self, workers: int):
        self.workers = workers

    def server_share(self, per_worker, gpus):
        return None if per_worker else (gpus, None)


class XdistWorker(ProcessPart):
    name = "xdist worker"
    aggregates = False

    def __init__(self, workerinput: dict, queued: Callable[[], list] | None = None):
        self.workerinput = workerinput
        self.queued = queued  # the cases xdist has queued for this worker (plugin.py)
        # xdist's own id for this worker (from its workerinput, not the environment, which
        # a run nested inside a worker inherits)
        self.process = workerinput.get("workerid") or os.environ.get("PYTEST_XDIST_WORKER", "gw0")
        self.count = int(workerinput.get("workercount") or os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)

    def run_id(self) -> str:
        return self.workerinput.get("socialbias_run") or uuid.uuid4().hex

    def server_share(self, per_worker, gpus):
        if not per_worker:
            return None  # the controller's, reached through workerinput (managed.urls)
        from .models.managed import gpu_share

        name = self.process
        index = int(name[2:]) if name[2:].isdigit() else 0
        return gpu_share(gpus, index, self.count), name

    def upcoming(self, runner) -> list:
        return self.queued() if self.queued is not None else []


def choose(config) -> ProcessPart:
    """The part this process plays in the run of ``config``."""
    if hasattr(config, "workerinput"):
        return XdistWorker(config.workerinput)
    workers = xdist_workers(config)
    return XdistController(workers) if workers else SingleProcess()


def xdist_workers_of(part: ProcessPart) -> int:
    """How many xdist workers run cases in the run this process belongs to (0: none)."""
    if isinstance(part, XdistController):
        return part.workers
    if isinstance(part, XdistWorker):
        return part.count
    return 0


def xdist_workers(config) -> int:
    """How many xdist workers will run cases (0: this process runs them)."""
    if getattr(config.option, "dist", "no") == "no":
        return 0
    try:
        return int(getattr(config.option, "numprocesses", 0) or 0)
    except (TypeError, ValueError):
        return 1
