"""Batch statistics of the models run in this process that gather calls into batches
(``hf:``, ``hfcls:``; a provider's ``batch_defaults``): what each process's batcher
gathered, folded over the run's processes into the report (``models.ROLE.batching``) and
one line per model in the summary.

Each process that loads such a model counts its own batches (models/batcher.py); an xdist
worker hands its count to the controller in ``workeroutput``, a shard writes its
processes' counts into its partial file for ``combine``. How many calls gather into a
batch depends on timing (which calls are in flight within the gathering window), so
these numbers can differ between two identical runs, and a replay, which decodes
nothing, reports no batch: ``batching`` is the one part of the JSON report that is not
deterministic. Comparisons with a baseline and combine's checks leave it out.
"""

from __future__ import annotations

from .providers import get as provider_named


def process_entry(models) -> dict | None:
    """This process's batch counts by role (modelset.ModelSet.batch_stats), with the
    calls this process lets be in flight (--socialbias-concurrency); None when no
    in-process batcher ran here."""
    roles = models.batch_stats()
    if not roles:
        return None
    # its xdist worker id, ``main`` for a run without workers (process.py)
    return {"process": models.part.process, "concurrency": models.settings.concurrency,
            "roles": roles}


def configured(spec: dict) -> tuple | None:
    """(max_batch, batch_wait_ms) of a role's spec as the report writes it, or None for a
    provider that does not batch in process."""
    provider = provider_named(spec.get("provider") or "")
    if provider is None or provider.batch_defaults is None:
        return None
    runtime = spec.get("runtime") or {}
    max_batch, wait = provider.batch_defaults
    return int(runtime.get("max_batch", max_batch)), float(runtime.get("batch_wait_ms", wait))


def _natural(name: str) -> tuple:
    head = name.rstrip("0123456789")
    tail = name[len(head):]
    return (head, int(tail) if tail else -1)


def summarize(models: dict, entries: list, concurrency: int | None) -> None:
    """Add ``batching`` to each batching role of ``models`` (the report's spec dicts, by
    role): the gathering window and batch cap as configured, the cap in effect (a batch
    never holds more than the calls in flight, --socialbias-concurrency), and the batches
    every process decoded, in total and per process, with the device each used."""
    for role, spec in models.items():
        found = configured(spec)
        if found is None:
            continue
        max_batch, wait = found
        processes: list[dict] = []
        shared: set[str] = set()
        caps = set()
        for entry in entries:
            stats = (entry.get("roles") or {}).get(role)
            if stats is None:
                continue
            if entry.get("concurrency"):
                caps.add(min(max_batch, int(entry["concurrency"])))
            if not stats["batches"]:  # built here, decoded nothing (its calls were replayed)
                continue
            shared.update(stats.get("shared_with") or [])
            processes.append({"process": entry["process"], "device": stats.get("device"),
                              "batches": stats["batches"], "rows": stats["rows"], "rows_max": stats["rows_max"]})
        processes.sort(key=lambda p: _natural(p["process"]))
        batches = sum(p["batches"] for p in processes)
        rows = sum(p["rows"] for p in processes)
        if not caps:
            caps.add(min(max_batch, concurrency) if concurrency else max_batch)
        out = {
            "batch_wait_ms": wait,
            "max_batch": max_batch,
            "max_batch_effective": max(caps),
            "batches": batches,
            "rows": rows,
            "rows_mean": round(rows / batches, 2) if batches else None,
            "rows_max": max((p["rows_max"] for p in processes), default=0),
            "processes": processes,
        }
        if shared:
            out["shared_with"] = sorted(shared)
        spec["batching"] = out


def _devices(processes: list) -> str:
    devices = [p["device"] for p in processes if p.get("device")]
    if not devices:
        return ""
    if len(set(devices)) == 1:
        return f"; on {devices[0]}" + (f" ({len(processes)} processes)" if len(processes) > 1 else "")
    return "; on " + ", ".join(f"{p['device']} ({p['process']})" for p in processes if p.get("device"))


def batching_lines(models: dict) -> list[str]:
    """One summary line per batching model, e.g. ``hf target: 12 batches, 3.4 rows on
    average (largest 8), window 5 ms, cap 16``; roles sharing one model share a line."""
    lines, done = [], set()
    for role, spec in sorted(models.items()):
        batching = spec.get("batching")
        if batching is None or role in done:
            continue
        roles = [role] + [r for r in batching.get("shared_with", []) if r in models]
        done.update(roles)
        cap = f"cap {batching['max_batch_effective']}"
        if batching["max_batch_effective"] < batching["max_batch"]:
            cap += f" (max_batch={batching['max_batch']}, held to the calls in flight: --socialbias-concurrency)"
        window = f"window {batching['batch_wait_ms']:g} ms"
        who = f"{spec['provider']} {', '.join(roles)}" + (" (one model)" if len(roles) > 1 else "")
        if batching["batches"]:
            lines.append(
                f"{who}: {batching['batches']} batch{'es' if batching['batches'] != 1 else ''}, "
                f"{batching['rows_mean']:.1f} rows on average "
                f"(largest {batching['rows_max']}), {window}, {cap}{_devices(batching['processes'])}"
            )
        else:
            lines.append(f"{who}: no batch decoded in this run (calls replayed or none made), {window}, {cap}")
    return lines
