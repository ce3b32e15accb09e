"""The limit of requests in flight, served in the cases' order.

A process starts every case of its batches at once and lets ``--socialbias-concurrency``
requests fly. Served first come first served, the first case's second turn would queue
behind every other case's first turn, and the first case would end when nearly the whole
batch had been paid for: a run stopped by ``-x`` after its first failure would have paid
for the batch anyway. Served by the case's place in the run, a free slot goes to the
earliest case that waits: cases end about in collection order (and are reported so), the
slots stay as full as before, and a stopped run has paid for little beyond what it
reported.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools

#: The place of the running case in the process's run (0, 1, ...): set by the worker for
#: each case's task, inherited by the tasks it starts. Calls outside any case (endpoint
#: checks, the judge check) come first.
CALL_PRIORITY: contextvars.ContextVar[int] = contextvars.ContextVar("socialbias_call_priority", default=-1)


class PrioritySemaphore:
    """An asyncio semaphore whose waiters are served lowest CALL_PRIORITY first (ties in
    arrival order). Used as ``async with``."""

    def __init__(self, value: int) -> None:
        self._value = value
        self._waiters: list = []  # heap of (priority, arrival, future)
        self._arrivals = itertools.count()

    async def acquire(self) -> None:
        if self._value > 0 and not self._waiters:
            self._value -= 1
            return
        granted = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (CALL_PRIORITY.get(), next(self._arrivals), granted))
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self.release()  # granted, then cancelled before it could use the slot
            else:
                granted.cancel()  # left in the heap; _wake skips it
            raise

    def release(self) -> None:
        self._value += 1
        self._wake()

    def _wake(self) -> None:
        while self._value > 0 and self._waiters:
            _, _, granted = heapq.heappop(self._waiters)
            if not granted.done():
                self._value -= 1
                granted.set_result(None)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc) -> None:
        self.release()
