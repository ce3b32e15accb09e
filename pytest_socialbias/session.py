"""The run's state: models, batches, records, aggregation and gating.

One ``SocialBiasRun`` per process, kept under a StashKey on the pytest config. Workers
run batches and attach each case's record to its TestReport; the controller (or the
single process with ``-n 0``/``-p no:xdist``) collects the records from
``pytest_runtest_logreport``, computes metrics, checks the gates and writes the report.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from .cache import CallCache
from .errors import ConfigError, ModelCallError
from .gates import FAIL, Gate, evaluate, load_gates
from .metrics import compute_metrics
from .models import Model, ModelSettings, ModelSpec, UsageCounter, check_credentials, parse_spec
from .models.base import RoleUsage
from .judges.guards import GUARD_KINDS, guard_kind_from_model
from .protocols import PROTOCOLS, GuardRole, Roles, outcome_of
from .protocols.dialogue import TARGET_DEFAULTS, USER_DEFAULTS
from .runner import LoopRunner

ROLE_OPTIONS = {"target": "--target", "judge": "--judge", "user": "--user-model", "guard": "--socialbias-guard"}
ROLE_DEFAULTS = {"target": TARGET_DEFAULTS, "user": USER_DEFAULTS, "judge": {}, "guard": {}}


@dataclass
class RunSettings:
    """Resolved options (command line over ini over defaults)."""

    target: str | None = None
    judge: str | None = None
    user: str | None = None
    concurrency: int = 16
    record: str = "new"
    cache_dir: Path = Path(".socialbias")
    thresholds: Path | None = None
    thresholds_explicit: bool = False
    report: Path | None = None
    strict: bool = False
    batch_size: int | None = None
    system_prompt: str | None = None
    local_threads: int | None = None
    turns: int | None = None
    fairmt_dir: Path | None = None
    guard: str | None = None
    guard_kind: str | None = None
    html: Path | None = None
    baseline: Path | None = None
    judge_check: Path | None = None
    snapshot_max_flips: int | None = None
    dry_run: bool = False
    sample: int | str | None = None  # BenevDial --socialbias-sample
    guidance: str | None = None
    judge_demographics: bool | None = None
    extra_judges: list = field(default_factory=list)  # 2nd, 3rd ... --judge
    dialogues: Path | None = None  # --socialbias-dialogues
    guard_unit: str | None = None


#: How long closing waits for the background SDK warm-up (it takes about a second).
WARM_UP_JOIN_S = 10.0

#: Shown in the summary and the reports whenever a judge runs on the embedded model.
EMBEDDED_JUDGE_WARNING = (
    "the judge is the small embedded model (SmolLM2-135M): it is not a reliable judge "
    "(its labels barely depend on the reply), so these rates and gates mean little. "
    "Pass --judge=PROVIDER:MODEL with a capable model for real measurements."
)


class SocialBiasRun:
    def __init__(self, settings: RunSettings, is_worker: bool):
        self.settings = settings
        self.is_worker = is_worker
        self.specs: dict[str, ModelSpec] = {}
        self.gates: list[Gate] = []
        self.runner = LoopRunner()
        self._models: dict[str, Model] | None = None
        self._model_settings: ModelSettings | None = None
        # Batches this process may run: batch id -> selected items, in collection order.
        self.batches: dict[str, list] = {}
        # Cases this process started (case key -> future) and their records.
        self._futures: dict[str, concurrent.futures.Future] = {}
        self._batch_of: dict[str, str] = {}
        self.results: dict[str, dict] = {}
        # Controller side: records collected from reports, metrics, gate verdicts.
        self.records: list[dict] = []
        self.metrics: list[dict] = []
        self.gate_results: list[dict] = []
        self.progress = None  # callable(str | None) set by the plugin when on a terminal
        self.uses_local_default = False
        self.guard_kind: str | None = None
        self._warm_thread: threading.Thread | None = None
        self._settings_lock = threading.Lock()
        self.notes: list[str] = []  # controller-side notes (what a lenient loader skipped)
        self.setup_error: str | None = None  # a worker's model problem, shown by each item
        # Suite name -> {"path": suite file, "cases": cases in it}: for snapshots.
        self.suite_files: dict[str, dict] = {}
        self.baseline: dict | None = None  # --socialbias-baseline report
        self.comparison: dict | None = None
        self.judge_reference: list[dict] | None = None  # --socialbias-judge-check items
        self.judge_check: dict | None = None
        self.judge_check_usage = UsageCounter()
        self.snapshots = None  # snapshots.SnapshotResult, set by the plugin
        self.dry_plan: dict | None = None  # --socialbias-dry-run: calls and tokens per role
        self.protocols: set = set()  # of the collected cases
        # xdist workers: a callable giving the items queued for this worker (see plugin).
        self.queued_items = None
        self.detection: dict | None = None  # BenevDial detector suites: confusion, markers

    # ---- configuration -------------------------------------------------------------

    def validate(self) -> None:
        """Parse specs, check keys, load gates and open the cache: ConfigError if bad."""
        s = self.settings
        # With no model option at all, every role runs on the embedded model; that is
        # decided (and its runtime checked) only once suite cases are collected, so
        # ordinary test runs never need it.
        self.uses_local_default = not (s.target or s.judge or s.user or s.guard)
        if s.guard_kind is not None and s.guard_kind not in GUARD_KINDS:
            raise ConfigError(f"--socialbias-guard-kind={s.guard_kind!r}: expected one of {', '.join(GUARD_KINDS)}")
        self._parse_specs()
        if s.thresholds is not None and (s.thresholds.exists() or s.thresholds_explicit):
            if not s.thresholds.exists():
                raise ConfigError(
                    f"--socialbias-thresholds={s.thresholds}: file not found; give an existing "
                    "thresholds.yaml or leave the option out"
                )
            self.gates = load_gates(s.thresholds)
        if s.record != "off" and not self.is_worker:
            CallCache(s.cache_dir, s.record).close()  # fail now if the folder is unusable
        if not self.is_worker:
            if s.baseline is not None:
                from .compare import load_baseline

                self.baseline = load_baseline(s.baseline)
            if s.judge_check is not None:
                from .judgecheck import load_reference

                self.judge_reference = load_reference(s.judge_check)
                if "judge" not in self.specs and not self.uses_local_default:
                    raise ConfigError("--socialbias-judge-check needs a judge: pass --judge=PROVIDER:MODEL")

    def start_warm_up(self) -> None:
        """Build the API clients in the background (after every check has passed)."""
        s = self.settings
        if s.dry_run or s.record == "none":
            return  # no model is called (a replay needs an SDK only for a spec without @URL)
        self._warm_up()

    def _warm_up(self) -> None:
        """Build the API backends in a background thread while pytest collects: importing
        the openai SDK (~0.75 s) and loading CA certificates for its client (~0.25 s)
        would otherwise stall the first batch's event loop."""
        api_roles = [role for role, spec in self.specs.items() if spec.provider in ("openai", "anthropic")]
        if not api_roles:
            return

        def build() -> None:
            for role in api_roles:
                try:
                    self.model_settings.backend_for(self.specs[role], ROLE_OPTIONS.get(role, "--judge"))
                except Exception:  # the real call reports any problem where it belongs
                    return

        self._warm_thread = threading.Thread(target=build, name="socialbias-warm-up", daemon=True)
        self._warm_thread.start()

    def _parse_specs(self) -> None:
        s = self.settings
        raw = {"target": s.target, "judge": s.judge, "user": s.user or s.judge, "guard": s.guard}
        raw.update({f"judge-{i}": text for i, text in enumerate(s.extra_judges, start=2)})
        for role, text in raw.items():
            if text:
                option = ROLE_OPTIONS.get(role, "--judge") if (role != "user" or s.user) else "--judge"
                spec = parse_spec(text, option)
                check_credentials(spec, option)
                self.specs[role] = spec
        if "guard" in self.specs:
            self.guard_kind = s.guard_kind or guard_kind_from_model(self.specs["guard"].model)
            if self.guard_kind is None:
                raise ConfigError(
                    f"--socialbias-guard={s.guard}: cannot tell the guard's output format from the model "
                    f"name; pass --socialbias-guard-kind (one of {', '.join(GUARD_KINDS)})"
                )

    def use_local_default(self) -> None:
        """Called when cases are collected with no model options: all roles ``local``."""
        if not self.uses_local_default or "target" in self.specs:
            return
        s = self.settings
        s.target = s.judge = s.user = "local"
        try:
            self._parse_specs()
        except ConfigError as exc:
            for role in ("target", "judge", "user"):
                self.specs.pop(role, None)
            raise ConfigError(
                "no model options given, so suite cases run on the embedded local model, "
                f"but it is not available ({exc}); or pass --target/--judge for API models"
            ) from None

    @property
    def warnings(self) -> list[str]:
        out = []
        judge, target = self.specs.get("judge"), self.specs.get("target")
        if judge is not None and judge.provider == "local":
            out.append(EMBEDDED_JUDGE_WARNING)
        if judge is not None and target is not None and (judge.provider, judge.model, judge.base_url) == (
            target.provider, target.model, target.base_url
        ):
            out.append(
                f"the judge is the target model ({judge}): a model grading its own replies is "
                "not an independent judge; pass --judge with another model"
            )
        return out

    def missing_roles(self, protocols=None) -> list[str]:
        """Options that must be given before the collected suites' cases can run:
        a target and a judge; for BenevDial detector suites alone, a judge or a guard."""
        if protocols and set(protocols) == {"benevdial_detect"}:
            return [] if ("judge" in self.specs or "guard" in self.specs) else ["--judge"]
        return [ROLE_OPTIONS[r] for r in ("target", "judge") if r not in self.specs]

    # ---- models ----------------------------------------------------------------------

    @property
    def model_settings(self) -> ModelSettings:
        with self._settings_lock:
            return self._make_model_settings()

    def _make_model_settings(self) -> ModelSettings:
        if self._model_settings is None:
            cache = None
            if self.settings.record != "off":
                cache = CallCache(self.settings.cache_dir, self.settings.record)
            self._model_settings = ModelSettings(
                cache=cache, concurrency=self.settings.concurrency, local_threads=self.settings.local_threads
            )
        return self._model_settings

    def model(self, role: str) -> Model:
        if role not in self.specs:
            raise ConfigError(
                f"no model for the {role} role: pass {ROLE_OPTIONS.get(role, '--judge')}=PROVIDER:MODEL "
                "(or set it in the ini file)"
            )
        if self._models is None:
            self._models = {}
        if role not in self._models:
            self._models[role] = Model(
                role,
                self.specs[role],
                ROLE_OPTIONS.get(role, "--judge"),
                self.model_settings,
                defaults=ROLE_DEFAULTS.get(role, {}),
                runner=self.runner,
            )
        return self._models[role]

    def roles(self) -> Roles:
        """The run's models by role; a role nobody gave is None (detector suites need
        no target or user simulator)."""
        return Roles(
            target=self.model("target") if "target" in self.specs else None,
            judge=self.model("judge") if "judge" in self.specs else None,
            user=self.model("user") if "user" in self.specs else None,
            system_prompt=self.settings.system_prompt,
            guard=GuardRole(self.model("guard"), self.guard_kind) if "guard" in self.specs else None,
            extra_judges=[self.model(role) for role in self.extra_judge_roles],
        )

    @property
    def extra_judge_roles(self) -> list[str]:
        return sorted((r for r in self.specs if r.startswith("judge-")), key=lambda r: int(r.split("-")[1]))

    # ---- running batches --------------------------------------------------------------

    def record_for(self, item) -> dict:
        """The record of ``item``'s case; starts the item's whole batch on first use.

        A single process (no xdist) starts every selected case at once: all requests
        share the concurrency budget, so the run's wall time approaches the longest
        dialogue's chain of calls instead of adding up batch by batch. An xdist worker
        starts its batch and every batch xdist has already queued for it
        (``queued_items``), so its batches overlap too.
        """
        key = item.case.key
        if key not in self._futures:
            self._start(item.batch_id, [item.case])
            if not self.is_worker:
                for batch_id in self.batches:
                    self._start(batch_id, [])
        self._start_queued()
        self._wait(item.batch_id, key)
        return self.results[key]

    def _start_queued(self) -> None:
        """On an xdist worker: start the batches xdist has already queued for it, so they
        run beside the current one (checked again while waiting: they may arrive late)."""
        if not self.is_worker or self.queued_items is None:
            return
        for queued in self.queued_items():
            batch_id = getattr(queued, "batch_id", None)
            if batch_id is not None and queued.case.key not in self._futures:
                self._start(batch_id, [])

    def _start(self, batch_id: str, extra: list) -> None:
        """Submit every not yet started case of the batch (and ``extra``) to the loop."""
        roles = self.roles()
        cases = [i.case for i in self.batches.get(batch_id, [])] + extra
        for case in cases:
            if case.key not in self._futures:
                self._futures[case.key] = self.runner.submit(run_case(case, roles))
                self._batch_of[case.key] = batch_id

    def _wait(self, batch_id: str, key: str) -> None:
        future = self._futures[key]
        started = time.monotonic()
        try:
            while True:
                try:
                    self.results[key] = future.result(timeout=0.25)
                    return
                except concurrent.futures.TimeoutError:
                    self._start_queued()
                    if self.progress is not None:
                        self.progress(self._progress_text(batch_id, started))
        except BaseException:
            # Interrupted (Ctrl-C, -x): stop every dialogue still running.
            for pending in self._futures.values():
                pending.cancel()
            raise
        finally:
            if self.progress is not None:
                self.progress(None)

    def _progress_text(self, batch_id: str, started: float) -> str:
        keys = [k for k, b in self._batch_of.items() if b == batch_id]
        done = sum(1 for k in keys if self._futures[k].done())
        totals = self.model_settings.totals.to_dict()
        calls = sum(r["calls"] for r in totals.values())
        hits = sum(r["hits"] for r in totals.values())
        return (
            f"[socialbias] {batch_id}: {done}/{len(keys)} cases, {calls} calls "
            f"({hits} cached), {time.monotonic() - started:.0f}s"
        )

    def close(self) -> None:
        if self._warm_thread is not None:
            # Let a warm-up still importing the SDK finish: an import cut off at
            # interpreter shutdown fails with confusing errors (e.g. --collect-only).
            self._warm_thread.join(WARM_UP_JOIN_S)

        async def close_models():
            if self._model_settings is not None:
                await self._model_settings.aclose()

        self.runner.close(close_models)
        if self._model_settings is not None and self._model_settings.cache is not None:
            self._model_settings.cache.close()

    # ---- controller: aggregation and gates ---------------------------------------------

    def finish(self) -> bool:
        """Compute metrics and gate verdicts from collected records; True if a gate failed."""
        if self.uses_local_default and "target" not in self.specs:
            # Under xdist only the workers collected, so only they switched to the
            # embedded model; the controller's report and warnings must say so too.
            try:
                self.use_local_default()
            except ConfigError as exc:
                # The workers ran the cases, so the results stand; say why the report
                # cannot name the models instead of leaving it silently blank.
                self.notes.append(f"the report's models are unknown: {exc}")
        self.records.sort(key=lambda r: (r["suite"], r["id"], r.get("style") or ""))
        self.metrics = compute_metrics(self.records)
        if self.judge_reference is not None:
            self._run_judge_check()
        if self.baseline is not None:
            from .compare import compare, rows_for
            from .report.json_report import run_metadata

            self.comparison = {
                "baseline": _shown_path(self.settings.baseline),
                **compare(self.records, self.baseline, rows_for(self.gates, self.records), run_metadata(self)),
            }
        self.detection = detection_summary(self.records)
        self.gate_results = evaluate(self.gates, self.metrics, self.comparison)
        return any(g["verdict"] == FAIL for g in self.gate_results)

    def _run_judge_check(self) -> None:
        """Label the reference replies with this run's judge; add agreement rows."""
        from .judgecheck import judge_items, summarize

        try:
            answers = self.runner.run(judge_items(self.model("judge"), self.judge_reference, self.judge_check_usage))
        except ConfigError as exc:
            self.notes.append(f"judge check not run: {exc}")
            return
        from .judgecheck import BUILTIN, BUILTIN_PATH

        path = self.settings.judge_check
        shown = BUILTIN if path == BUILTIN_PATH else _shown_path(path)
        self.judge_check, rows = summarize(shown, self.judge_reference, answers, self.metrics)
        from .metrics import metric_sort_key

        self.metrics = sorted(self.metrics + rows, key=metric_sort_key)

    # ---- dry run ---------------------------------------------------------------------

    def dry_run_plan(self, items: list) -> None:
        """Run the selected cases' protocols against a stand-in model that answers at
        once and calls nothing: count the calls per role and estimate their tokens."""
        self.model_settings.dry_run = True
        roles = self.roles()
        usage = UsageCounter()

        async def plan_all():
            return await asyncio.gather(*(run_case(item.case, roles) for item in items))

        records = self.runner.run(plan_all())
        for record in records:
            for role, counts in record["usage"].items():
                total = usage.roles.setdefault(role, RoleUsage())
                for key, value in counts.items():
                    setattr(total, key, getattr(total, key) + value)
        problems = sorted({e["kind"] for r in records for e in r["errors"] if e["kind"] != "guard_error"})
        self.dry_plan = {"cases": len(items), "usage": usage.to_dict(), "problems": problems}


def detection_summary(records: list[dict]) -> dict | None:
    """BenevDial detector suites: confusion matrices per detector and variant, how the
    ensemble decided, and the surface markers of the labelled dialogues (clean)."""
    detect = [r for r in records if r.get("protocol") == "benevdial_detect"]
    if not detect:
        return None
    from .benevdial.markers import marker_table
    from .metrics import confusion

    out = {"confusion": [], "ensemble_methods": {}, "markers": {}}
    for suite in sorted({r["suite"] for r in detect}):
        mine = [r for r in detect if r["suite"] == suite]
        detectors = sorted({d for r in mine for d in r.get("detections") or {}})
        for detector in detectors:
            for variant in sorted({r.get("variant") or "clean" for r in mine}):
                items = [
                    (r["truth"], r["detections"][detector].get("class"), r["detections"][detector].get("flagged"))
                    for r in mine
                    if detector in (r.get("detections") or {}) and (r.get("variant") or "clean") == variant
                ]
                out["confusion"].append({"suite": suite, "detector": detector, "variant": variant, "matrix": confusion(items)})
        methods: dict[str, int] = {}
        for r in mine:
            method = (r.get("detections") or {}).get("ensemble", {}).get("method")
            if method:
                methods[method] = methods.get(method, 0) + 1
        if methods:
            out["ensemble_methods"][suite] = methods
        clean = [{"class": r["truth"], "turns": r["dialogue_turns"]} for r in mine if (r.get("variant") or "clean") == "clean"]
        if clean:
            out["markers"][suite] = marker_table(clean)
    return out


def _shown_path(path: Path) -> str:
    """A path as the user would write it: relative to the working directory when inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


async def run_case(case, roles: Roles) -> dict:
    """Run one case with its protocol; always returns a record (errors inside it)."""
    usage = UsageCounter()
    identity = {
        "id": case.id,
        "suite": case.suite,
        "protocol": case.protocol,
        "category": case.category,
        "group": case.group,
        "style": case.style,
        "turns_planned": case.turns,
        "suite_sha256": case.suite_sha256,
    }
    try:
        result = await PROTOCOLS[case.protocol](case, roles, usage)
    except ModelCallError as exc:
        result = {
            "labels": {"bias": [], "refusal": []},
            "turns": [],
            "errors": [{"kind": "model_error", "role": exc.role, "message": str(exc)}],
            "templates": [],
        }
    except Exception as exc:  # a bug must show as this case's error, not kill the batch
        where = traceback.extract_tb(exc.__traceback__)[-1]
        result = {
            "labels": {"bias": [], "refusal": []},
            "turns": [],
            "errors": [
                {
                    "kind": "internal_error",
                    "role": None,
                    "message": f"{type(exc).__name__}: {exc} ({Path(where.filename).name}:{where.lineno})",
                }
            ],
            "templates": [],
        }
    record = {**identity, **result}
    record["outcome"] = outcome_of(record["labels"], record["errors"])
    record["usage"] = usage.to_dict()
    return record
