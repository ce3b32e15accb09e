"""One run split over several machines, and put back together.

A job too long for one runner runs as N shards (``--socialbias-shard=K/N``), one per
machine of a CI matrix, a Kubernetes Indexed Job or a Slurm array. Every shard collects
the same cases, estimates each case's calls the way the dry run counts them, and keeps
its share: the cases are dealt out heaviest first, each to the shard with the fewest
calls so far (ties to the lower shard), by their stable ids, so every shard computes the
same split without talking to the others. A shard runs its cases as usual (``-n N``
inside it too), decides no gate, and writes its records with the run's metadata to one
partial file (``--socialbias-partial``). ``combine`` (``python -m pytest_socialbias
combine``) checks that the parts belong to one run, none missing or doubled, and computes
the report, the comparison with a baseline and the gates from all the records exactly
as a single run would (combine.py). The calls of a case are planned by
worker.CaseRunner.planned_calls.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from . import __version__
from .errors import ConfigError

PARTIAL_FORMAT = "socialbias-partial"
PARTIAL_VERSION = 1

#: Settings that change what a case's record holds: every shard of a run must share them
#: (paths as the user gave them, relative to the rootdir, so machines may differ).
RESULT_SETTINGS = (
    "target", "judges", "user", "system_prompt", "prompts", "turns", "fairmt_dir", "guard", "guard_kind",
    "guard_policy", "simulator_check", "guard_risk", "sample", "guidance", "dialogues", "guard_unit",
    "judge_demographics", "demographic_flips", "strict", "judge_check", "allow_partial", "fairmt_release", "preset",
    "simulator_findings",
)

#: Where ``--socialbias-shard=auto`` finds its index and count, in order: (name, index
#: variable, count variable, first index). Kubernetes gives no count: ``auto/N`` does.
SCHEDULERS = (
    ("GitLab parallel", "CI_NODE_INDEX", "CI_NODE_TOTAL", 1),
    ("Slurm array", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", None),  # first: SLURM_ARRAY_TASK_MIN
    ("Kubernetes Indexed Job", "JOB_COMPLETION_INDEX", None, 0),
)
#: The plain variable for anything else (GitHub's matrix): ``SOCIALBIAS_SHARD=K/N``.
PLAIN_VARIABLE = "SOCIALBIAS_SHARD"


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (from 1) of ``total``; ``source`` says where it was read from."""

    index: int
    total: int
    source: str = "--socialbias-shard"

    def __str__(self) -> str:
        return f"{self.index}/{self.total}"


def _fraction(text: str, where: str) -> Shard:
    index, _, total = text.partition("/")
    try:
        shard = Shard(int(index), int(total), where)
    except ValueError:
        raise ConfigError(f"{where}={text!r}: expected K/N, shard K (from 1) of N, e.g. 2/3") from None
    if shard.total < 1 or not 1 <= shard.index <= shard.total:
        raise ConfigError(f"{where}={text!r}: K must be between 1 and N (shards count from 1), e.g. 2/3")
    return shard


def parse_shard(raw: str, environ=None) -> Shard:
    """``K/N``, or ``auto`` (``auto/N`` where the scheduler gives no count): the index and
    count from the environment (SCHEDULERS, then SOCIALBIAS_SHARD)."""
    environ = os.environ if environ is None else environ
    raw = raw.strip()
    if not raw.startswith("auto"):
        return _fraction(raw, "--socialbias-shard")
    given = raw[len("auto"):]
    if given and not given.startswith("/"):
        raise ConfigError(f"--socialbias-shard={raw!r}: expected K/N, auto or auto/N")
    count = None
    if given:
        count = _fraction(f"1{given}", "--socialbias-shard").total
    for name, index_var, count_var, first in SCHEDULERS:
        if environ.get(index_var, "") == "":
            continue
        if first is None:
            first = environ.get("SLURM_ARRAY_TASK_MIN", "0")
        total = environ.get(count_var) if count_var else None
        if total in (None, ""):
            if count is None:
                raise ConfigError(
                    f"--socialbias-shard=auto: {name} ({index_var}={environ[index_var]}) gives no shard count; "
                    f"pass --socialbias-shard=auto/N with the job's completions (parallelism of the array)"
                )
            total = count
        try:
            index = int(environ[index_var]) - int(first) + 1
            shard = Shard(index, int(total), f"{name} ({index_var}={environ[index_var]})")
        except ValueError:
            raise ConfigError(f"--socialbias-shard=auto: {index_var}={environ[index_var]!r} is not a number") from None
        if count is not None and shard.total != count:
            raise ConfigError(f"--socialbias-shard={raw}: {name} says {shard.total} shards, the option {count}")
        if not 1 <= shard.index <= shard.total:
            raise ConfigError(f"--socialbias-shard=auto: {name} gives shard {shard.index} of {shard.total}")
        return shard
    if environ.get(PLAIN_VARIABLE):
        return _fraction(environ[PLAIN_VARIABLE], PLAIN_VARIABLE)
    raise ConfigError(
        "--socialbias-shard=auto: no shard index in the environment (GitLab CI_NODE_INDEX/CI_NODE_TOTAL, "
        "Slurm SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT, Kubernetes JOB_COMPLETION_INDEX, or "
        f"{PLAIN_VARIABLE}=K/N); pass --socialbias-shard=K/N instead"
    )


def assign(weights: dict[str, float], total: int) -> dict[str, int]:
    """Id -> shard (from 1): heaviest first (ties by id), each to the shard with the least
    weight so far (ties to the lower shard). Depends only on the ids and weights."""
    load = [0.0] * total
    out = {}
    for key, weight in sorted(weights.items(), key=lambda kv: (-kv[1], kv[0])):
        shard = min(range(total), key=lambda i: (load[i], i))
        load[shard] += weight
        out[key] = shard + 1
    return out


def record_key(record: dict) -> str:
    """A record's case key, as cases.Case.key writes it: ``suite::id`` or ``suite::id[style]``."""
    return f"{record['suite']}::{record['id']}" + (f"[{record['style']}]" if record.get("style") else "")


def selection_digest(keys) -> str:
    """The sha256 of the sorted ids selected before sharding: equal on every shard of a run."""
    return hashlib.sha256("\n".join(sorted(keys)).encode()).hexdigest()


def result_settings(settings) -> dict:
    """The settings of RESULT_SETTINGS as JSON values (paths relative to the rootdir)."""
    out = {}
    for name in RESULT_SETTINGS:
        value = getattr(settings, name)
        if isinstance(value, Path):
            try:
                value = value.resolve().relative_to(Path(settings.root).resolve()).as_posix()
            except ValueError:
                value = value.as_posix()
        elif isinstance(value, tuple):
            value = list(value)
        out[name] = value
    return out


# ---- partial files -----------------------------------------------------------------


def partial_data(shard: Shard, selection: dict, settings, models, aggregator, *, failures_before: int,
                 judge_check: dict | None = None) -> dict:
    """What a shard's partial file holds: its records and what combine checks them by,
    read from the run's settings, its model set (``models``: the specs, the warnings)
    and its aggregator (the records, notes, whether it stopped early, the suite files,
    the batchers' counts, the selection filters)."""
    records = sorted(aggregator.records, key=lambda r: (r["suite"], r["id"], r.get("style") or ""))
    suite_files = aggregator.suite_files or {}
    calls = sum(int(u.get("calls", 0)) for r in records for u in (r.get("usage") or {}).values())
    cached = sum(int(u.get("hits", 0)) for r in records for u in (r.get("usage") or {}).values())
    return {
        "format": PARTIAL_FORMAT,
        "version": PARTIAL_VERSION,
        "plugin_version": __version__,
        "shard": {"index": shard.index, "total": shard.total, "source": shard.source},
        "selection": selection,
        "settings": result_settings(settings),
        "models": models.spec_dicts(),
        "suites": {r["suite"]: r.get("suite_sha256") or "" for r in records},
        "notes": list(aggregator.notes),
        "warnings": list(models.warnings),
        "failures_before": failures_before,
        "stopped_early": aggregator.partial,
        "cache": {"calls": calls, "cached": cached},
        # --socialbias-judge-check: shard 1 asks the judge about the reference replies
        # ({"shown", "items", "answers", "usage"}); combine scores them against every record.
        "judge_check": judge_check,
        # Suite -> its file, relative to the rootdir (combine looks for its snapshots there).
        "suite_files": {suite: _relative(info["path"], settings.root) for suite, info in sorted(suite_files.items())},
        # Suite -> the cases its file holds, and the options that selected part of them
        # (-k, -m, node ids): combine marks the run partial as a single run would.
        "suite_cases": {suite: info.get("cases", 0) for suite, info in sorted(suite_files.items())},
        "selection_filters": list(aggregator.selection_filters or []),
        # The in-process batchers' counts, per process of this shard (models/batchstats.py).
        "batching": {"concurrency": settings.concurrency, "processes": list(aggregator.batching() or [])},
        "records": records,
    }


def write_shard(settings, models, aggregator, selection: dict | None, share: dict | None,
                failures_before: int) -> tuple[list[str], str | None]:
    """A shard's end (plugin.AggregatingHooks): its records and the run's metadata
    (partial_data) written to ``--socialbias-partial``; no gate, no comparison, no report
    (combine makes them from every shard's file). ``selection``: what was selected before
    sharding, and ``share``: this shard's part of it (None: the whole run as shard 1/1).
    Returns the lines the terminal summary shows and the problem writing the file, if any."""
    from .files import shown_path

    aggregator.name_local_models()
    shard = settings.shard or Shard(1, 1, "--socialbias-partial")
    selection = selection or {
        "cases": len(aggregator.records),
        "sha256": selection_digest(record_key(r) for r in aggregator.records),
    }
    judge_check = None
    if aggregator.judge_reference is not None and shard.index == 1:  # asked once per run
        asked = aggregator.ask_judge()
        if asked is not None:
            shown, items, answers = asked
            judge_check = {"shown": shown, "items": items, "answers": answers,
                           "usage": aggregator.judge_check_usage.to_dict()}
    data = partial_data(shard, selection, settings, models, aggregator, failures_before=failures_before,
                        judge_check=judge_check)
    share = share or {"cases": len(aggregator.records)}
    calls = f", {share['calls']:,} of {share['calls_all']:,} planned calls" if "calls" in share else ""
    lines = [
        f"shard {shard} ({shard.source}): {share['cases']} of the run's {selection['cases']} case(s){calls}",
        f"partial file: {shown_path(settings.partial)} ({len(aggregator.records)} record(s)); no gate is decided "
        "here: `python -m pytest_socialbias combine PARTS...` decides them from every shard's file",
    ]
    try:
        write_partial(settings.partial, data)
    except OSError as exc:
        return lines, f"--socialbias-partial={settings.partial}: not written ({exc.strerror or exc})"
    return lines, None


def _relative(path, root) -> str:
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return Path(path).as_posix()


def write_partial(path: Path, data: dict) -> None:
    from .files import write_atomically

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(data, sort_keys=True, ensure_ascii=False) + "\n")


def read_partial(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such partial file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable partial file ({exc}); write it again with --socialbias-partial") from None
    if not isinstance(data, dict) or data.get("format") != PARTIAL_FORMAT:
        raise ConfigError(f"{path}: not a partial file (one written by --socialbias-partial)")
    if data.get("version") != PARTIAL_VERSION:
        raise ConfigError(f"{path}: partial format {data.get('version')}, this plugin reads {PARTIAL_VERSION}")
    return data
