"""The cyclic garbage collector during a run.

Loading an SDK makes tens of thousands of long-lived objects that the collector tracks
(openai about 80,000, anthropic about 120,000: its typed models), and a run keeps many
requests in flight, whose objects live until their answers come. CPython's collector
walks the young objects every 700 net allocations and every object at each full pass, so
on the 80-seed DyMT job it spent 1.5 s of the process's 8 s walking objects that were
never garbage (measured with gc.callbacks; benchmarks/dymt_latency.py gives the
whole-process figure). Three measures, each undone or harmless afterwards:

- ``pause()`` while the SDKs load (the warm-up thread), so the import is not walked
  again and again as it grows;
- ``settle()`` once they are loaded and once collection is done: what exists then lives
  to the end of the run, so it is frozen (``gc.freeze``: kept out of every later pass,
  including the five full passes pytest makes at exit), and the young generation's
  threshold is raised so that requests in flight are not walked on every 700
  allocations;
- ``restore()`` at the end of the session puts the threshold back; ``thaw()`` at the
  start of the next session in the same process (an IDE's runner, pytester's in-process
  runs) unfreezes what the last one froze, so that its garbage is collected as before
  and nothing accumulates. A process that simply exits never walks it again (unfreezing
  at the end instead would cost pytest's five exit passes about 0.25 s).

Reference counting still frees every object the moment it is unused; only reference
cycles wait for the collector, and they are collected as before, later.
"""

from __future__ import annotations

import gc
import threading

#: Allocations (net) between two young-generation passes while a run is going (CPython's
#: default is 700). With the freeze, it took the collector's time on the 80-seed job from
#: about 1.5 s to 0.15 s (0.6 s with the freeze alone), with the same peak memory.
YOUNG_THRESHOLD = 20_000

_lock = threading.Lock()
_saved_threshold: tuple[int, int, int] | None = None
_frozen = False  # whether settle() froze anything since the last restore()


def pause() -> bool:
    """Stop automatic collection; returns whether it was on (give it to ``settle``)."""
    was_on = gc.isenabled()
    gc.disable()
    return was_on


def settle(resume: bool = False) -> None:
    """Freeze what exists now out of later passes and raise the young threshold;
    ``resume`` turns automatic collection back on (what ``pause`` returned)."""
    global _saved_threshold, _frozen
    with _lock:
        gc.freeze()
        _frozen = True
        if _saved_threshold is None:
            _saved_threshold = gc.get_threshold()
            if 0 < _saved_threshold[0] < YOUNG_THRESHOLD:  # 0: collection is off; leave it so
                gc.set_threshold(YOUNG_THRESHOLD, *_saved_threshold[1:])
        if resume:
            gc.enable()


def restore() -> None:
    """Put the collector's thresholds back as they were before ``settle``."""
    global _saved_threshold
    with _lock:
        if _saved_threshold is not None:
            gc.set_threshold(*_saved_threshold)
            _saved_threshold = None


def thaw() -> None:
    """Unfreeze what an earlier session in this process froze (an object frozen in a
    reference cycle is never collected); nothing when none did."""
    global _frozen
    with _lock:
        if _frozen:
            gc.unfreeze()
            _frozen = False
