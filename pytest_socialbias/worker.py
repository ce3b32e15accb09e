"""The worker side of a run: runs cases on this process (each xdist worker, or the only
process), batch by batch, on the process's event loop.

When the first case of a batch runs, the whole batch starts concurrently; each case then
reports its own record. A single process starts every selected case at once (the run's
wall time approaches its longest dialogue's chain of calls); an xdist worker starts its
batch and every batch xdist has already queued for it, so its batches overlap too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import time
from dataclasses import replace

from .models import UsageCounter
from .models.base import RoleUsage
from .models.planner import Planner
from .models.priority import CALL_PRIORITY
from .protocols import PROTOCOLS, outcome_of
from .protocols.user_check import RULES_CHECK, SIMULATOR_CHECKS
from .record import CaseRecord, case_identity, case_record, error_from, failed_result
from .vocabulary import GUARD_ERROR


class CaseRunner:
    def __init__(self, models):
        self.models = models  # its process part (process.py) says which batches start beside a waited one
        # Batches this process may run: batch id -> selected cases, in collection order.
        self.batches: dict[str, list] = {}
        self._batch_of_case: dict[str, str] = {}
        # Cases this process started (case key -> future) and their records.
        self._futures: dict[str, concurrent.futures.Future] = {}
        self.results: dict[str, dict] = {}
        self.progress = None  # callable(str | None) set by the plugin when on a terminal
        self._place: dict[str, int] = {}  # case key -> its place in this process's run (priority.py)

    def add(self, case, batch_id: str) -> None:
        self.batches.setdefault(batch_id, []).append(case)
        self._batch_of_case[case.key] = batch_id
        self._place.setdefault(case.key, len(self._place))

    def stop(self) -> None:
        """The run stops early (-x, --maxfail): every case still running is cancelled at
        once. The calls answered so far are in the cache; a case asked for after this (an
        xdist worker finishing its item) starts again."""
        self.models.runner.cancel_all()

    def record_for(self, case) -> dict:
        """The record of ``case``; starts its whole batch on first use."""
        key = case.key
        batch_id = self._batch_of_case.get(key, key)
        if key not in self._futures:
            self._start(batch_id, [case])
        self._start_queued()
        self._wait(batch_id, case)
        return self.results[key]

    def _start_queued(self) -> None:
        """Start the batches this process's role runs beside the current one: every batch
        on a single process, the batches xdist has already queued on a worker (checked
        again while waiting: they may arrive late)."""
        for case in self.models.part.upcoming(self):
            if case.key not in self._futures and case.key in self._batch_of_case:
                self._start(self._batch_of_case[case.key], [])

    def _start(self, batch_id: str, extra: list) -> None:
        """Submit every not yet started case of the batch (and ``extra``) to the loop."""
        roles = self.models.roles()
        for case in self.batches.get(batch_id, []) + extra:
            if case.key not in self._futures:
                self._submit(case, roles)

    def _submit(self, case, roles) -> concurrent.futures.Future:
        future = self.models.runner.submit(_in_place(self._place.get(case.key, len(self._place)), run_case(case, roles)))
        self._futures[case.key] = future
        return future

    def _wait(self, batch_id: str, case) -> None:
        key = case.key
        future = self._futures[key]
        started = time.monotonic()
        try:
            while True:
                try:
                    self.results[key] = future.result(timeout=0.25)
                    return
                except concurrent.futures.CancelledError:
                    # Cancelled by stop() while this case was still wanted: run it again.
                    future = self._submit(case, self.models.roles())
                except concurrent.futures.TimeoutError:
                    self._start_queued()
                    if self.progress is not None:
                        self.progress(self._progress_text(batch_id, started))
        except BaseException:
            # Interrupted (Ctrl-C, -x): stop every dialogue still running, all at once.
            self.models.runner.cancel_all()
            raise
        finally:
            if self.progress is not None:
                self.progress(None)

    def _progress_text(self, batch_id: str, started: float) -> str:
        keys = [case.key for case in self.batches.get(batch_id, [])]
        done = sum(1 for k in keys if k in self._futures and self._futures[k].done())
        totals = self.models.pool.totals.to_dict()
        calls = sum(r["calls"] for r in totals.values())
        hits = sum(r["hits"] for r in totals.values())
        return (
            f"[socialbias] {batch_id}: {done}/{len(keys)} cases, {calls} calls "
            f"({hits} cached), {time.monotonic() - started:.0f}s"
        )

    # ---- planning: the dry run, shards ---------------------------------------------------

    def plan(self, cases: list, roles) -> list[CaseRecord]:
        """The records of ``cases`` run with ``roles`` whose pool plans (CallPool.planner,
        models/planner.py: every call answered at once by a stand-in, nothing sent): the
        calls each case would make, per role, and their estimated tokens. The one
        planning of the run: the dry run (``dry_run_plan``) and the deal of shards
        (``planned_calls``) both read it."""

        async def plan_all():
            return await asyncio.gather(*(run_case(case, roles) for case in cases))

        return self.models.run(plan_all())

    def dry_run_plan(self, cases: list) -> dict:
        """The dry run: the cases planned on the run's own models, whose pool a dry run
        gives the planning backend (ModelSet.pool), so a recorded answer is taken as a
        real run would take it and counted cached. Summed per role, with the problems
        the plan already shows and the servers missing."""
        if self.models.pool.planner is None:
            raise RuntimeError("a dry run plans on a pool with a planner (Settings.dry_run)")
        records = self.plan(cases, self.models.roles())
        usage = UsageCounter()
        for record in records:
            for role, counts in record["usage"].items():
                total = usage.roles.setdefault(role, RoleUsage())
                for key, value in counts.items():
                    if key != "replicas":  # a dry run is served by no replica
                        setattr(total, key, getattr(total, key) + value)
        problems = sorted({e["kind"] for r in records for e in r["errors"] if e["kind"] != GUARD_ERROR})
        return {"cases": len(cases), "usage": usage.to_dict(), "problems": problems, "missing": self.models.missing_servers()}

    def planned_calls(self, cases: list) -> dict[str, int]:
        """Case key -> the calls the plan counts for it (every role, repeats included),
        planned on twins of the run's models that share a planning pool of their own and
        no cache, so every shard counts the same: nothing of the run's pool (cache,
        endpoint checks, usage totals) is touched."""
        records = self.plan(cases, self._planning_roles())
        return {case.key: sum(int(u.get("calls", 0)) for u in record["usage"].values()) for case, record in zip(cases, records)}

    def _planning_roles(self):
        """The run's roles, each model twinned onto a fresh planning pool."""
        from .models.client import CallPool
        from .protocols.base import GuardRole

        pool = CallPool(planner=Planner(), placeholders=set(self.models.placeholders))

        def twin(model):
            if model is None:
                return None
            copied = copy.copy(model)
            copied.pool = pool
            copied._backend = None
            return copied

        roles = self.models.roles()
        guard = roles.guard
        return replace(
            roles, target=twin(roles.target), judge=twin(roles.judge), user=twin(roles.user),
            guard=GuardRole(twin(guard.model), guard.kind, guard.policy, guard.unit) if guard is not None else None,
            extra_judges=[twin(judge) for judge in roles.extra_judges],
        )


async def _in_place(place: int, coro):
    """Run a case's coroutine with its place in the run as the priority of its calls."""
    CALL_PRIORITY.set(place)  # this task's context, and the tasks it starts
    return await coro


async def run_case(case, roles) -> CaseRecord:
    """Run one case with its protocol; always returns a record (errors inside it)."""
    usage = UsageCounter()
    roles = _case_roles(case, roles)
    try:
        result = await PROTOCOLS[case.protocol].run(case, roles, usage)
    except Exception as exc:  # a bug must show as this case's error, not kill the batch
        result = failed_result(error_from(exc))
    return case_record(case_identity(case), result, outcome=outcome_of(result["labels"], result["errors"]),
                       usage=usage.to_dict(), adapted=roles.adaptations())


def _case_roles(case, roles):
    """The run's roles as this case's suite sets them (its judge parameters, simulator
    findings and check), its prompt overrides set for this task."""
    if case.judge_params:
        roles = roles.with_judge_params(dict(case.judge_params))
    if case.simulator_findings:
        roles = replace(roles, simulator_findings=case.simulator_findings)
    if SIMULATOR_CHECKS.index(case.simulator_check or RULES_CHECK) > SIMULATOR_CHECKS.index(roles.simulator_check):
        # A suite's key raises its cases' check, never lowers the run's: the stronger applies.
        roles = replace(roles, simulator_check=case.simulator_check)
    if case.prompts:
        from . import prompts

        prompts.SUITE_OVERRIDES.set(dict(case.prompts))  # this task's context only (prompts.py)
    return roles
