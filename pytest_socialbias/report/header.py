"""The ``socialbias:`` lines of pytest's report header: the run's models and cache, the
prompts in place of ours, which gates decide the run (or why none does), a selection that
makes the run partial, the servers this process started, where in-process models run and
the guard's classifier head. Read from the run's settings, models and aggregator before
any case runs (plugin.pytest_report_header)."""

from __future__ import annotations


def header_lines(settings, models, aggregator, xdist_workers: int) -> list[str]:
    """The header lines of a run with ``settings`` and ``models`` (modelset.ModelSet);
    ``aggregator`` is None on a process that does not report; ``xdist_workers``: how many
    xdist workers run the cases (0: this process). No lines when the run has no model."""
    if not models.specs:
        return []
    from ..files import shown_path

    specs = ", ".join(f"{role}={spec.resolved}" for role, spec in sorted(models.specs.items()))
    lines = [f"socialbias: {specs}; record={settings.record}, cache={settings.cache_dir}"]
    if settings.prompts is not None:
        from .. import prompts

        lines.append(f"socialbias: prompts from {settings.prompts} in place of ours: {', '.join(prompts.overridden())}")
    if settings.partial is not None:
        shard = settings.shard
        which = f"shard {shard} ({shard.source})" if shard is not None else "the whole run as shard 1/1"
        lines.append(f"socialbias: {which}: records to {shown_path(settings.partial)}; gates, comparison "
                     "and reports come from `python -m pytest_socialbias combine`")
    elif aggregator is not None and aggregator.gates_file is None:
        strict = "the run fails (--socialbias-strict)" if settings.strict else "no gate decides this run"
        lines.append(f"socialbias: NO THRESHOLDS FILE ({shown_path(settings.thresholds_file)} not found): {strict}")
    elif aggregator is not None:
        lines += _gate_lines(aggregator, shown_path)
    if aggregator is not None and aggregator.selection_filters and settings.partial is None:
        given = " ".join(aggregator.selection_filters)
        if settings.allow_partial:
            lines.append(f"socialbias: selection {given}: a run that leaves out cases of its suites is PARTIAL "
                         "(ALLOWED by --socialbias-allow-partial: its exit status is the gates' on the cases selected)")
        else:
            lines.append(f"socialbias: selection {given}: a run that leaves out cases of its suites is PARTIAL and "
                         "never passes (gate a category in the suite or thresholds file; --socialbias-allow-partial "
                         "for local debugging)")
    return lines + _server_lines(settings, models, xdist_workers) + _in_process_lines(settings, models, xdist_workers)


def _gate_lines(aggregator, shown_path) -> list[str]:
    """The gates that decide the run, those declared ungated and those skipped."""
    lines = [f"socialbias: {len(aggregator.gates)} gate(s) from {shown_path(aggregator.gates_file)}"]
    for suite, why in aggregator.declared_ungated.items():
        lines.append(f"socialbias: suite {suite} is UNGATED on purpose ({shown_path(aggregator.gates_file)}): {why}")
    if aggregator.skipped_gates:
        hints = aggregator.skipped_hints
        names = [suite + hints.get(suite, "") for suite in sorted({gate.suite for gate in aggregator.skipped_gates})]
        lines.append(
            f"socialbias: skipped {len(aggregator.skipped_gates)} gate(s) of suites this project does not have "
            f"({', '.join(names)}; --socialbias-gates-for=present)"
        )
    return lines


def _server_lines(settings, models, xdist_workers: int) -> list[str]:
    """The managed servers (models/managed.py) this process started, and those each worker
    starts for itself."""
    from ..models.managed import placement
    from ..models.providers import MANAGED, provider_of

    lines = []
    for server in models.servers.describe() if models.servers is not None else []:
        gpus = f"GPUs {server['gpus']}" if server["gpus"] else "all visible GPUs"
        replica = f"replica {server['replica']}, " if server.get("replica") else ""
        lines.append(
            f"socialbias: {server['provider']} server for {server['model']} at {server['url']} ({replica}{gpus}; one server "
            f"for {', '.join(server['roles'])} on every worker; ready in {server['ready_s']} s; log {server['log']})"
        )
    for role, spec in sorted(models.specs.items()):
        if provider_of(spec).can(MANAGED) and placement(spec) == "worker" and xdist_workers:
            lines.append(
                f"socialbias: {role}: one {spec.provider} server per worker, each on its share of "
                f"{'GPUs ' + settings.gpus if settings.gpus else 'the visible GPUs'} "
                f"(logs .socialbias/servers/*-gwN.log)"
            )
    return lines


def _in_process_lines(settings, models, xdist_workers: int) -> list[str]:
    """Where in-process models (hf:, hfcls:) run, batches the concurrency keeps small, and
    what the guard's classifier head labels mean."""
    lines = []
    in_process = {role: spec for role, spec in models.specs.items() if spec.provider in ("hf", "hfcls")}
    if in_process:
        from ..models.hf_backend import device_plan
        from ..models.providers import get as provider_named

        for role, spec in sorted(in_process.items()):
            lines.append(f"socialbias: {role} ({spec.provider}:) runs in each process that runs cases, "
                         f"{device_plan(spec, settings.gpus, xdist_workers)}")
            batch = spec.runtime.get("max_batch", provider_named(spec.provider).batch_defaults[0])
            if isinstance(batch, int) and batch > settings.concurrency:
                lines.append(f"socialbias: {role}: max_batch={batch}, but at most {settings.concurrency} calls "
                             "are in flight per process, for every role together (--socialbias-concurrency): "
                             "batches stay smaller; raise the concurrency to fill them")
    head = models.classifier
    if head is not None:
        from ..judges.classifier import THREE_CLASS

        labels = ", ".join(f"{label} -> {target}" for label, target in head.mapping.items())
        what = "three-class" if head.output == THREE_CLASS else "binary (cannot tell OB from BB)"
        lines.append(f"socialbias: guard is a {what} classifier head: {labels} ({head.source})")
    return lines
