"""Batches: cases that run together, concurrently, on one process. An execution detail.

Test ids name cases (``suites/dymt/dymt.yaml::gender-017[implicit]``), never batches, so
``--lf``, ``--deselect``, ``-k``, snapshots and CI test history do not depend on how a run
is cut up. A batch is the next ``batch_size`` selected cases of one suite file, in
collection order; xdist keeps a batch on one worker (xdist_scheduling.py), and the worker
runs it as a whole when its first case runs. The workers and the xdist controller cut
batches with this one function, from the same list of selected node ids.
"""

from __future__ import annotations

from pathlib import Path

from .cases import DEFAULT_BATCH_SIZE
from .errors import ConfigError
from .files import looks_like_suite, read_yaml
from .runcache import current


def batch_ids(nodeids: list[str], size_of) -> dict[str, str]:
    """``{nodeid: batch id}`` for the suite cases among ``nodeids`` (in collection order);
    ``size_of(file part of the node id)`` is the batch size of that suite file, or None
    for a file that is not a suite."""
    counts: dict[str, int] = {}
    out = {}
    for nodeid in nodeids:
        file, sep, _ = nodeid.partition("::")
        if not sep:
            continue
        size = size_of(file)
        if size is None:
            continue
        index = counts.get(file, 0)
        counts[file] = index + 1
        out[nodeid] = f"{file}::batch-{index // size}"
    return out


def _file_batch_size(path: Path) -> int | None:
    """A suite file's own batch_size, read once per run (runcache.py): the controller's
    scheduler and the workers cut the same batches from it."""
    sizes = current().batch_sizes
    if path not in sizes:
        sizes[path] = _read_batch_size(path)
    return sizes[path]


def _read_batch_size(path: Path) -> int | None:
    if not looks_like_suite(path):
        return None
    try:
        data, _ = read_yaml(path, "suite file")
    except ConfigError:
        return DEFAULT_BATCH_SIZE
    size = data.get("batch_size") if isinstance(data, dict) else None
    return size if isinstance(size, int) and size >= 1 else DEFAULT_BATCH_SIZE


def suite_batch_size(path: Path, override: int | None) -> int | None:
    """The batch size of a suite file: ``--socialbias-batch-size``, else its own
    ``batch_size``, else the default; None when the file is not a suite."""
    size = _file_batch_size(Path(path))
    if size is None:
        return None
    return override or size
