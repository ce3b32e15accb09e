"""Several replicas of one model behind one spec (``openai:M@http://a/v1,http://b/v1``).

Each call goes to the healthy replica with the fewest calls in flight (then the fewest
served, then the first listed). A replica whose call fails for a reason of the replica
(refused or dropped connection, timeout, HTTP 5xx, after the SDK's own retries) is taken
out for COOLDOWN_S and the call is asked again of the next one; a call the request
itself spoils (HTTP 4xx: a bad parameter, a filtered prompt) fails as it would on any
replica. When every replica is out, each is tried once more before the call fails.

The replicas serve one model: the cache key names the spec's URLs together (sorted),
never the replica that answered, so a replay finds every answer whichever replica gave
it and however many replicas a later run has up. Each answer says which replica served
it (``ChatResponse.served_by``) and which failed before it; the run's usage counts them
per role, and the summary shows them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base import ChatResponse

#: How long a failed replica is left out before it is tried again.
COOLDOWN_S = 30.0


def replica_fault(exc: BaseException) -> bool:
    """Whether a failed call is the replica's fault (another replica may answer), not the
    request's (every replica would refuse it)."""
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status >= 500
    name = type(exc).__name__
    if name in ("APIConnectionError", "APITimeoutError", "InternalServerError", "ServiceUnavailableError"):
        return True
    return isinstance(exc, (ConnectionError, TimeoutError, asyncio.TimeoutError, OSError))


class ReplicaBackend:
    """One backend per replica URL, asked in turn as above."""

    def __init__(self, urls: tuple, backends: list, cooldown: float = COOLDOWN_S, clock=time.monotonic):
        if not urls or len(urls) != len(backends):
            raise ValueError(f"a replica spec needs one backend per URL and at least one URL, got {len(urls)} "
                             f"URL(s) and {len(backends)} backend(s): list the replicas as M@http://a/v1,http://b/v1")
        self.urls = tuple(urls)
        self.backends = list(backends)
        self.cooldown = cooldown
        self._clock = clock
        self.in_flight = [0] * len(self.urls)
        self.served = [0] * len(self.urls)
        self.failed = [0] * len(self.urls)
        self.down_until = [0.0] * len(self.urls)

    @property
    def base_url(self) -> str:
        """What the cache key names: every replica, sorted (never the one that answered)."""
        return ",".join(sorted(self.urls))

    def _pick(self, tried: set) -> int | None:
        left = [i for i in range(len(self.urls)) if i not in tried]
        if not left:
            return None
        now = self._clock()
        healthy = [i for i in left if self.down_until[i] <= now]
        if healthy:
            return min(healthy, key=lambda i: (self.in_flight[i], self.served[i], i))
        return min(left, key=lambda i: (self.down_until[i], i))  # all out: the soonest back first

    async def complete(self, *args: Any, **kwargs: Any) -> ChatResponse:
        tried: set = set()
        faults: list[str] = []
        last: Exception | None = None
        while True:
            index = self._pick(tried)
            if index is None:
                # every replica was tried and failed (the constructor refuses an empty list)
                assert last is not None
                raise last
            tried.add(index)
            self.in_flight[index] += 1
            try:
                response = await self.backends[index].complete(*args, **kwargs)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not replica_fault(exc):
                    raise
                self.failed[index] += 1
                self.down_until[index] = self._clock() + self.cooldown
                faults.append(self.urls[index])
                last = exc
                continue
            finally:
                self.in_flight[index] -= 1
            self.served[index] += 1
            return dataclasses.replace(response, served_by=self.urls[index], replica_faults=tuple(faults))

    async def aclose(self) -> None:
        for backend in self.backends:
            await backend.aclose()
