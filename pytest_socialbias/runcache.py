"""The caches of one run: what a run reads or learns once and the next run in the same
process (an IDE's runner, pytester's in-process runs, ``pytest.main`` called twice) must
not see: another prompts folder, a suite or seeds file edited in between, the servers
another run started, a model whose load failed.

They are the fields of one ``RunCaches`` object. ``pytest_configure`` makes a fresh one
(``begin``) and ``pytest_unconfigure`` puts back the one in use before (``end``), so an
in-process run inside another run leaves the outer run's caches as they were. Every
reader reaches them through ``current()``: there is no list of caches to reset by hand. A
process that runs no pytest session (a subcommand, a test calling a loader directly) uses
the one made at import.

Caches that stay module-level elsewhere are pure: ``lru_cache`` of functions of their
arguments alone, or of files the installed packages ship, which no run changes (each says
why where it is declared).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class RunCaches:
    # protocols.load_suite: (file, mtime, size, overrides) -> its Suite (read once per run:
    # preflight, then collection)
    suites: dict = field(default_factory=dict)
    # protocols/seeds.py: a seeds file's key -> (seeds, YAML node)
    seeds: dict = field(default_factory=dict)
    # prompts.use_overrides: template name -> the run's override file (--socialbias-prompts)
    prompt_overrides: dict[str, Path] = field(default_factory=dict)
    # prompts.load: template name -> Template (the run's override, else ours)
    prompts: dict = field(default_factory=dict)
    # prompts: (template name, override file) -> Template (the run's and suites' overrides)
    prompt_files: dict = field(default_factory=dict)
    # models/managed.py: server key -> URL of a managed server of this run (on an xdist
    # worker, the controller's, handed over in workerinput)
    servers: dict[str, str] = field(default_factory=dict)
    # models/managed.checkpoint_identity: checkpoint path -> what names it in the cache key
    checkpoints: dict[str, str] = field(default_factory=dict)
    # models/hf_backend.py: (model, device, dtype, gguf_file, gpus) -> (tokenizer, model, device)
    hf_models: dict = field(default_factory=dict)
    # models/hf_backend.py: the same key -> the error a failed load gave (not tried again)
    hf_failed: dict = field(default_factory=dict)
    # models/hf_classifier.py: (folder, fingerprint, device, dtype, max_length, gpus) ->
    # (tokenizer, model, device, limit)
    classifier_models: dict = field(default_factory=dict)
    # models/hf_classifier.py: model id -> its snapshot folder in the local Hugging Face cache
    hub_snapshots: dict[str, Path] = field(default_factory=dict)
    # judges/classifier.resolve_head: (spec, config.json stats) -> ClassifierHead
    classifier_heads: dict = field(default_factory=dict)
    # batching.suite_batch_size: suite file -> its own batch_size
    batch_sizes: dict = field(default_factory=dict)


#: The caches in use: the running session's, else the process's own.
_current = RunCaches()


def current() -> RunCaches:
    """The caches of the run going on in this process."""
    return _current


def begin() -> RunCaches:
    """Start a run with empty caches; returns those in use before (give them to ``end``)."""
    global _current
    before, _current = _current, RunCaches()
    return before


def end(before: RunCaches) -> None:
    """End the run ``begin`` started: ``before``'s caches are in use again."""
    global _current
    _current = before


@contextlib.contextmanager
def scope():
    """Fresh caches for the length of a ``with`` block (yields them), as a run has; then
    those in use before (tests, and tools that act as one run)."""
    before = begin()
    try:
        yield current()
    finally:
        end(before)
