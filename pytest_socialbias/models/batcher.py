"""Gathering the calls in flight into batches, for the in-process models (``hf:`` and
``hfcls:``): a call's row waits at most ``batch_wait_s`` for company, a batch holds at
most ``max_batch`` rows, and one thread of the backend's own runs each batch (the model's
work leaves the event loop free). Every row's future is settled when its batch ends: with
its result, or with the batch's error (never left waiting). It counts what it gathered
(``stats``): the run reports it beside each in-process role (models/batchstats.py)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable


class RowBatcher:
    def __init__(self, name: str, max_batch: int, batch_wait_s: float, run_batch: Callable[[list], None]):
        self.name = name
        self.max_batch = max_batch
        self.batch_wait_s = batch_wait_s
        self.run_batch = run_batch  # fills each row's result; raises to fail the batch
        self._pending: list = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        #: Batches run, rows in them, and the largest (counted by the batcher's thread).
        self.batches = 0
        self.rows = 0
        self.rows_max = 0

    def stats(self) -> dict:
        """What this batcher gathered so far: batches run, rows in them, the largest."""
        return {"batches": self.batches, "rows": self.rows, "rows_max": self.rows_max}

    def submit(self, row) -> None:
        """Queue ``row`` (it has ``future`` and ``loop``); the thread starts with the first."""
        with self._lock:
            self._pending.append(row)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                self._thread.start()
        self._wake.set()

    def _take(self) -> list:
        """Wait up to batch_wait for more rows (at most max_batch), then take them."""
        if self.batch_wait_s:
            deadline = time.monotonic() + self.batch_wait_s
            while time.monotonic() < deadline:
                with self._lock:
                    if len(self._pending) >= self.max_batch:
                        break
                time.sleep(min(0.001, self.batch_wait_s))
        with self._lock:
            rows, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch:]
            if not self._pending:
                self._wake.clear()
        return rows

    def _serve(self) -> None:
        while not self._closed:
            self._wake.wait(0.5)
            with self._lock:
                if not self._pending:
                    self._wake.clear()
                    continue
            rows = self._take()
            self.batches += 1
            self.rows += len(rows)
            self.rows_max = max(self.rows_max, len(rows))
            try:
                self.run_batch(rows)
            except BaseException as exc:  # every waiting call gets the error
                for row in rows:
                    row.loop.call_soon_threadsafe(settle, row.future, exc)
                continue
            for row in rows:
                row.loop.call_soon_threadsafe(settle, row.future, None)

    def close(self) -> None:
        self._closed = True
        self._wake.set()


def settle(future: asyncio.Future, exc: BaseException | None) -> None:
    """Settle a row's future once: with None (its result is on the row) or the error."""
    if future.done():
        return
    if exc is None:
        future.set_result(None)
    else:
        future.set_exception(exc)
