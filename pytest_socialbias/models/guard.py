"""What bounds one model call: a total deadline, the endpoint's circuit, a cap on the
answer's size, and the known keys masked in what comes back.

The SDKs' ``timeout`` bounds each read, and they retry a timed-out request (5 times by
default): a server that sends its headers and then nothing held every call for the
timeout times the retries (619 s with the defaults), and a suite's calls, one after
another, for hours. So:

* every call to an HTTP endpoint has a **deadline** for the whole of it, the SDK's
  retries included: ``?deadline=SECONDS``, by default DEADLINE_FACTOR times the timeout
  (one read that times out leaves room for a quick retry, not for another whole wait);
* an endpoint that times out, or refuses or drops the connection, FAILURES_TO_OPEN calls
  in a row has its **circuit opened**: the calls still queued for it, and those that come
  after, fail at once as model errors naming the endpoint, never sent; PROBE_EVERY_S after
  the last failure one call goes through as a probe, and an answer closes the circuit
  (any HTTP answer, an error status included: the endpoint is there). The summary says
  how many calls each open circuit failed (``circuit_lines``);
* an answer longer than ``?max_answer_bytes=N`` (DEFAULT_MAX_ANSWER_BYTES) is a model
  error naming its size and the cap, before it reaches the cache or a report;
* a known API key's value (providers.known_keys) in an answer or an error message is
  masked (secrets.py).

In-process models (local, hf) get the size cap and the masking only: nothing to wait for
over a network, and a computation on a thread cannot be cut short.

The circuits and the deadline watch belong to the run's CallPool (RunBounds: one circuit
per endpoint URL and process).
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ModelCallError
from .replicas import COOLDOWN_S
from .secrets import MASK, mask_keys

#: A call's deadline, unless the spec sets one: this many times its (per-read) timeout.
DEADLINE_FACTOR = 1.5
#: Timeouts or refused connections in a row that open an endpoint's circuit.
FAILURES_TO_OPEN = 3
#: Seconds an open circuit waits before it lets one call through to see if the endpoint is back.
PROBE_EVERY_S = COOLDOWN_S
#: The largest answer (text and reasoning, UTF-8 bytes) a call takes, unless the spec says.
DEFAULT_MAX_ANSWER_BYTES = 1_000_000
#: Seconds between two looks at the calls in flight for one past its deadline.
WATCH_TICK_S = 0.25
#: Bytes a character takes in UTF-8, at most: an answer of fewer characters than the cap
#: over this is under it without being encoded.
MAX_UTF8_BYTES = 4

_REFUSED = ("not sent: {url} timed out or refused the last {failures} calls in a row, so its circuit is open: "
            "calls to it fail at once, and one call every {probe:.0f} s is let through to see if it answers again")
#: Reads the endpoint back from a refusal's message (the summary counts them per endpoint).
_REFUSED_PATTERN = re.compile(r"not sent: (?P<url>\S+) timed out or refused the last (?P<failures>\d+) calls in a row")


def unreachable(exc: BaseException) -> bool:
    """Whether a failed call says the endpoint did not answer at all: a timeout, or a
    connection refused, dropped or never made (not an HTTP answer, whatever its status)."""
    if getattr(exc, "status_code", None) is not None:
        return False
    if type(exc).__name__ in ("APITimeoutError", "APIConnectionError"):
        return True
    return isinstance(exc, (ConnectionError, TimeoutError))


@dataclass
class Circuit:
    """One endpoint's circuit in this process (see the module docstring)."""

    url: str
    failures: int = 0  # timeouts and refused connections in a row
    opened_at: float | None = None  # when it (last) opened; None: closed
    probing: bool = False  # a probe is out
    refused: int = 0  # calls failed at once while open
    clock: Callable[[], float] = time.monotonic

    def admit(self) -> str | None:
        """None to send the call (the circuit is closed, or this call is the probe), else
        why it fails at once."""
        if self.opened_at is None:
            return None
        if not self.probing and self.clock() - self.opened_at >= PROBE_EVERY_S:
            self.probing = True
            return None
        self.refused += 1
        return _REFUSED.format(url=self.url, failures=max(self.failures, FAILURES_TO_OPEN), probe=PROBE_EVERY_S)

    def failed(self) -> None:
        """A call timed out or found no connection: open at FAILURES_TO_OPEN in a row (a
        failed probe opens it again at once)."""
        self.failures += 1
        if self.probing or self.failures >= FAILURES_TO_OPEN:
            self.opened_at, self.probing = self.clock(), False

    def answered(self) -> None:
        if self.failures or self.opened_at is not None:
            self.failures, self.opened_at, self.probing = 0, None, False

    def abandoned(self) -> None:
        """A call was cancelled: if it was the probe, the next call probes instead."""
        self.probing = False


class DeadlineWatch:
    """The deadlines of the calls in flight on one event loop, checked every WATCH_TICK_S
    by one timer that runs only while calls are in flight: a call past its deadline has
    its task cancelled, and CallGuard.send turns that into the call's error. (A timer per
    call, ``asyncio.timeout``, costs ten times the client CPU; and Python 3.10 has none.)"""

    def __init__(self) -> None:
        self.due: dict = {}  # task -> the loop time its call is due
        self.expired: set = set()  # tasks this watch cancelled, not yet told
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, task, seconds: float) -> None:
        loop = task.get_loop()
        self.due[task] = loop.time() + seconds
        if self._timer is None or self._loop is not loop:  # (a run's loop before this one was closed)
            self._loop, self._timer = loop, loop.call_later(WATCH_TICK_S, self._check)

    def stop(self, task) -> None:
        self.due.pop(task, None)
        if task in self.expired:  # cancelled, but the call came back anyway: not late after all
            self.took(task)

    def took(self, task) -> bool:
        """Whether ``task``'s cancellation was this watch's (then it is taken back) and
        nothing else cancels the task too (then it stays cancelled)."""
        if task not in self.expired:
            return False
        self.expired.discard(task)
        uncancel = getattr(task, "uncancel", None)  # Python 3.11+
        return uncancel is None or uncancel() == 0

    def _check(self) -> None:
        loop = self._loop
        assert loop is not None  # the timer runs only once start() set the loop
        now = loop.time()
        for task, due in list(self.due.items()):
            if due <= now:
                del self.due[task]
                self.expired.add(task)
                task.cancel()
        self._timer = loop.call_later(WATCH_TICK_S, self._check) if self.due else None


@dataclass
class RunBounds:
    """What the bounds of every call of a run share, per process (CallPool.bounds): the
    endpoints' circuits, by URL, and the watch of the calls' deadlines."""

    circuits: dict = dataclasses.field(default_factory=dict)
    deadlines: DeadlineWatch = dataclasses.field(default_factory=DeadlineWatch)


class CallGuard:
    """The bounds of one role's calls (module docstring); ``send`` wraps each backend call."""

    def __init__(self, role: str, spec, circuit: Circuit | None, deadline: float | None, max_bytes: int,
                 keys: tuple[str, ...], watch: DeadlineWatch | None = None):
        self.role, self.spec = role, str(spec)
        self.circuit, self.deadline, self.max_bytes, self.keys = circuit, deadline, max_bytes, keys
        self.watch = watch if deadline is not None else None

    async def send(self, call):
        """Await ``call`` (the backend's coroutine) within the bounds; ModelCallError for an
        open circuit, a deadline passed or an answer over the cap; the backend's own
        exceptions otherwise, counted by the circuit."""
        circuit = self.circuit
        if circuit is not None:
            refused = circuit.admit()
            if refused is not None:
                call.close()  # never started
                raise ModelCallError(self.role, self.spec, refused)
        watch = self.watch
        task = asyncio.current_task() if watch is not None else None
        if task is not None:
            watch.start(task, self.deadline)
        try:
            response = await call
        except asyncio.CancelledError:
            if task is not None and watch.took(task):
                if circuit is not None:
                    circuit.failed()
                raise ModelCallError(self.role, self.spec, self._late()) from None
            if circuit is not None:
                circuit.abandoned()
            raise
        except Exception as exc:
            if circuit is not None:
                if unreachable(exc):
                    circuit.failed()
                else:
                    circuit.answered()
            raise
        finally:
            if task is not None:
                watch.stop(task)
        if circuit is not None:
            circuit.answered()
        return self.checked(response)

    def checked(self, response):
        """``response`` held to the size cap, with known keys masked."""
        text, reasoning = response.text, response.reasoning or ""
        if (len(text) + len(reasoning)) * MAX_UTF8_BYTES > self.max_bytes:
            size = len(text.encode("utf-8", "replace")) + len(reasoning.encode("utf-8", "replace"))
            if size > self.max_bytes:
                raise ModelCallError(
                    self.role, self.spec,
                    f"the answer is {_size(size)}, over the cap of {_size(self.max_bytes)} an answer may take; it was "
                    f"not recorded. If answers this long are expected, raise the cap: ?max_answer_bytes={size}",
                )
        for key in self.keys:
            if key in text or key in reasoning:
                return dataclasses.replace(response, text=text.replace(key, MASK),
                                           reasoning=response.reasoning and response.reasoning.replace(key, MASK))
        return response

    def mask(self, text: str) -> str:
        return mask_keys(text, self.keys)

    def _late(self) -> str:
        url = self.circuit.url if self.circuit is not None else "the endpoint"
        return (f"no answer within the call's deadline of {self.deadline:g} s (the SDK's retries included): {url} "
                "is stuck or too slow; if its answers take this long, raise ?timeout= (per read) or ?deadline= "
                "(the whole call)")


def guard_for(role: str, spec, url: str | None, bounds: RunBounds) -> CallGuard:
    """The CallGuard of a role's calls: ``url`` is the HTTP endpoint they go to (None for
    an in-process model: no deadline, no circuit); ``bounds`` the run's."""
    from .providers import DEFAULT_TIMEOUT, known_keys

    max_bytes = spec.transport.get("max_answer_bytes", DEFAULT_MAX_ANSWER_BYTES)
    if url is None:
        return CallGuard(role, spec, None, None, max_bytes, known_keys())
    circuit = bounds.circuits.get(url)
    if circuit is None:
        circuit = bounds.circuits[url] = Circuit(url)
    deadline = spec.transport.get("deadline") or DEADLINE_FACTOR * spec.transport.get("timeout", DEFAULT_TIMEOUT)
    return CallGuard(role, spec, circuit, deadline, max_bytes, known_keys(), bounds.deadlines)


def _size(n: int) -> str:
    return f"{n / 1_000_000:.1f} MB" if n >= 100_000 else f"{n:,} bytes"


def circuit_lines(records) -> list[str]:
    """One line per endpoint whose open circuit failed calls at once in this run."""
    refused: dict[str, int] = {}
    for record in records:
        for error in record.get("errors", []):
            match = _REFUSED_PATTERN.search(error.get("message", ""))
            if match:
                refused[match["url"]] = refused.get(match["url"], 0) + 1
    return [
        f"endpoint {url} stopped answering: it timed out or refused {FAILURES_TO_OPEN} calls in a row, so its "
        f"circuit opened and {n} case error(s) come from calls failed at once, never sent; a probe every "
        f"{PROBE_EVERY_S:.0f} s lets it back in; check the server and run again"
        for url, n in sorted(refused.items())
    ]
