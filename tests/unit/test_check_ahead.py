"""Endpoint checks sent ahead (client.CallPool.check_ahead): the endpoints of the roles a
run needs are checked at once when its first call is about to be sent, and a check sent
ahead that failed is the attempt of the first call that needs its endpoint, never an
extra request. Deterministic: stand-in models whose checks wait on events, no server
(the end-to-end tests cannot count attempts per call: two calls asking the same request
at once share one, client._answer)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from pytest_socialbias.errors import ModelCallError
from pytest_socialbias.models.client import CallPool


@dataclass
class Check:
    order: int = 0


@dataclass
class StandIn:
    """What CallPool's checks read of a Model: its role, endpoint and check; ``run_check``
    records each attempt and fails while ``down``."""

    role: str
    endpoint_key: str
    down: bool = False
    check: Check = field(default_factory=Check)
    attempts: int = 0
    release: asyncio.Event | None = None  # the check waits for it (set in the loop)

    async def run_check(self) -> None:
        self.attempts += 1
        attempt = self.attempts
        if self.release is not None:
            await self.release.wait()
        if self.down:
            raise ModelCallError(self.role, self.endpoint_key, f"endpoint check failed: attempt {attempt}")


async def settle() -> None:
    """Let every ready task run until it waits."""
    for _ in range(5):
        await asyncio.sleep(0)


def pool_of(*models: StandIn, ahead=("target", "judge")) -> CallPool:
    pool = CallPool(check_ahead=frozenset(ahead))
    for model in models:
        pool.register_check(model)
    return pool


def test_the_first_call_checks_the_needed_endpoints_at_once():
    user, target, judge = StandIn("user", "U"), StandIn("target", "T"), StandIn("judge", "J")
    other = StandIn("guard", "G")  # a role the selected cases do not need: checked before its own call

    async def main():
        gate = asyncio.Event()
        for model in (user, target, judge, other):
            model.release = gate
        pool = pool_of(user, target, judge, other)
        first = asyncio.ensure_future(pool.ensure_checked(user))
        await settle()
        # Every needed endpoint's check is out before the first one answers.
        assert (user.attempts, target.attempts, judge.attempts, other.attempts) == (1, 1, 1, 0)
        gate.set()
        await first
        await pool.ensure_checked(target)  # checked ahead: nothing sent again
        await pool.ensure_checked(judge)
        assert (target.attempts, judge.attempts, other.attempts) == (1, 1, 0)
        await pool.ensure_checked(other)
        assert other.attempts == 1
        await pool.aclose()

    asyncio.run(main())


def test_a_failed_check_sent_ahead_is_the_first_waiting_calls_attempt():
    user, judge = StandIn("user", "U"), StandIn("judge", "J", down=True)

    async def main():
        pool = pool_of(user, judge)
        gate = asyncio.Event()
        judge.release = gate
        await pool.ensure_checked(user)  # sends the judge's check ahead, still out
        await settle()
        assert judge.attempts == 1
        # Two judge calls wait while it is out: the first takes its failure, the second
        # checks again (one attempt each, as if each had sent its own).
        calls = [asyncio.ensure_future(pool.ensure_checked(judge)) for _ in range(2)]
        await settle()
        gate.set()
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert [str(r).rsplit(": ", 1)[-1] for r in results] == ["attempt 1", "attempt 2"]
        assert judge.attempts == 2
        with pytest.raises(ModelCallError, match="attempt 3"):  # and so on: a check each
            await pool.ensure_checked(judge)
        judge.down = False
        await pool.ensure_checked(judge)
        await pool.ensure_checked(judge)  # checked now: nothing more sent
        assert judge.attempts == 4
        await pool.aclose()

    asyncio.run(main())


def test_a_check_sent_ahead_that_no_call_needs_is_cancelled_at_close():
    user, judge = StandIn("user", "U"), StandIn("judge", "J")

    async def main():
        pool = pool_of(user, judge)
        judge.release = asyncio.Event()  # never set: the judge's check never answers
        await pool.ensure_checked(user)
        await settle()
        assert judge.attempts == 1
        await pool.aclose()
        await settle()
        assert pool._ahead and all(task.cancelled() for task in pool._ahead)

    asyncio.run(main())


def test_no_roles_to_check_ahead_checks_each_endpoint_before_its_own_call():
    user, judge = StandIn("user", "U"), StandIn("judge", "J")

    async def main():
        pool = pool_of(user, judge, ahead=())
        await pool.ensure_checked(user)
        assert (user.attempts, judge.attempts) == (1, 0)
        await pool.ensure_checked(judge)
        assert judge.attempts == 1
        await pool.aclose()

    asyncio.run(main())
