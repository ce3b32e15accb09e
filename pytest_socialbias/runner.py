"""One asyncio event loop per process, in a background thread.

Model clients (httpx connection pools) are bound to the loop that first uses them, so a
persistent loop lets every batch of the run reuse the same clients and connections. The
pytest thread submits a batch and waits for it (and can draw a progress line meanwhile).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading


class LoopRunner:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name="socialbias-loop", daemon=True
                )
                self._thread.start()
            return self._loop

    def submit(self, coro) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro, timeout: float | None = None):
        """Run a coroutine on the loop and wait for its result (from a non-loop thread)."""
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except BaseException:
            future.cancel()
            raise

    def cancel_all(self) -> None:
        """Cancel every coroutine on the loop, all in one turn of it (an interrupt).

        Cancelled one by one from another thread, through their futures, the loop would
        run between two cancellations, and a coroutine not yet cancelled (or one whose
        first step was already due) could take the concurrency slot a cancelled one had
        just freed and send a request after the interrupt. A task cancelled before its
        first step never starts."""
        loop = self._loop
        if loop is None:
            return

        def cancel() -> None:
            for task in asyncio.all_tasks(loop):
                task.cancel()

        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing runs any more
            loop.call_soon_threadsafe(cancel)

    def close(self, cleanup=None) -> None:
        """Run an optional async cleanup (closing clients), then stop the loop."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None:
            return
        try:
            # Coroutines still pending (an interrupt cancelled them, or nothing awaited them)
            # are cancelled and run to their end here: left pending in a closed loop, each
            # would be finalized later by the garbage collector, running its cleanup code
            # against a closed loop at an arbitrary moment (even inside another module's
            # import, where CPython 3.11's AST construction is not re-entrant: gh-106905).
            asyncio.run_coroutine_threadsafe(_drain(), loop).result(10)
        except Exception:  # a coroutine that will not end must never hang or fail a run
            pass
        if cleanup is not None:
            try:
                asyncio.run_coroutine_threadsafe(cleanup(), loop).result(10)
            except Exception:  # closing connections must never fail a run
                pass
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(5)
        if not loop.is_running():
            loop.close()


async def _drain(timeout: float = 5.0) -> None:
    """Cancel every other task of the running loop and wait (at most ``timeout``) for them
    to finish."""
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=timeout)
