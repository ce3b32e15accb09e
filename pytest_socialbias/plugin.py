"""pytest hooks, options and fixtures. Thin: the work lives in session.py and below."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .cache import RECORD_MODES
from .cases import CATEGORIES, STYLES, TRACKS, UNSPECIFIED, looks_like_suite, load_suite
from .errors import ConfigError
from .session import RunSettings, SocialBiasRun, _shown_path

RUN_KEY = pytest.StashKey[SocialBiasRun]()
RECORD_ATTR = "socialbias_record"

# (option, dest / ini name, help, default)
_OPTIONS = [
    ("--target", "socialbias_target",
     "model under test, PROVIDER:MODEL[@BASE_URL][?param=value&...] "
     "(e.g. openai:gpt-4o-mini, openai:m@http://127.0.0.1:8000/v1, anthropic:claude-sonnet-4-5, "
     "local, local:PATH.gguf). With no model option at all, every role runs on the embedded "
     "local model", None),
    ("--judge", "socialbias_judge",
     "judge model spec (labels every target reply); BenevDial detector suites take it more "
     "than once and evaluate each judge and their ensemble", None),
    ("--user-model", "socialbias_user_model",
     "user-simulator model spec (default: the --judge model)", None),
    ("--socialbias-concurrency", "socialbias_concurrency",
     "model requests in flight per process (default 16)", "16"),
    ("--socialbias-record", "socialbias_record",
     "record/replay mode: none = replay only, a miss errors the case; new = replay hits, "
     "record misses (default); all = re-record everything; off = no cache", "new"),
    ("--socialbias-cache-dir", "socialbias_cache_dir",
     "folder of the record/replay cache (default .socialbias/ in the rootdir)", ".socialbias"),
    ("--socialbias-thresholds", "socialbias_thresholds",
     "gates file (default thresholds.yaml in the rootdir, if present)", None),
    ("--socialbias-report", "socialbias_report", "write the JSON report to this path", None),
    ("--socialbias-batch-size", "socialbias_batch_size",
     "cases per batch (overrides the suite's batch_size; default 64)", None),
    ("--socialbias-system-prompt", "socialbias_system_prompt",
     "system prompt given to the target (default: none)", None),
    ("--socialbias-turns", "socialbias_turns",
     "turns per DyMT or BenevDial dialogue (default: the suite's; DyMT 5, use 10 to look for late "
     "emergence; BenevDial 3)", None),
    ("--socialbias-fairmt-dir", "socialbias_fairmt_dir",
     "folder of the official FairMT-Bench release files (FairMT_1K/, FairMT_10K/) for "
     "suites with `source: fairmt`", None),
    ("--socialbias-guard", "socialbias_guard",
     "guard model spec (Llama Guard 3, ShieldGemma, Qwen3Guard, Granite Guardian, WildGuard "
     "behind an OpenAI-compatible endpoint): screens every target reply in DyMT suites (blocked "
     "share by turn, bias rate among replies that pass); in BenevDial detector suites it is "
     "a detector", None),
    ("--socialbias-guard-kind", "socialbias_guard_kind",
     "the guard's output format when the model name does not tell: llama-guard-3, shieldgemma, "
     "qwen3guard, granite-guardian or wildguard", None),
    ("--socialbias-threads", "socialbias_threads",
     "CPU threads per process for local models (default: cores // xdist workers)", None),
    ("--socialbias-html", "socialbias_html",
     "write a self-contained HTML report (gates, curves by turn, transcripts) to this path; "
     "plots need the `report` extra (matplotlib)", None),
    ("--socialbias-baseline", "socialbias_baseline",
     "JSON report of the last accepted release: pair cases by id and test each gated rate "
     "for a regression (McNemar's exact test / paired bootstrap, Holm-corrected); "
     "`no_regression` gates use it", None),
    ("--socialbias-judge-check", "socialbias_judge_check",
     "JSONL file of reference labels for replies (or `builtin`: the small project-written set "
     "shipped with the plugin): report the judge's agreement with them (Cohen's kappa, "
     "Gwet's AC1) and judge-corrected rates (Rogan-Gladen)", None),
    ("--socialbias-sample", "socialbias_sample",
     "BenevDial: conditions per role (agent mode) or pairs per role (pairs mode), drawn by the "
     "seeded balanced sampler; `all` runs every profile of the grid (agent mode; default: the "
     "suite's `sample`, 42 conditions / 24 pairs per role)", None),
    ("--socialbias-guidance", "socialbias_guidance",
     "BenevDial: guidance of the three-class treatment judge: plain, conceptual or operational "
     "(default: the suite's, operational)", None),
    ("--socialbias-dialogues", "socialbias_dialogues",
     "BenevDial detector suites: the labelled dialogues to evaluate (JSONL, "
     "docs/dialogues-format.md; default: the suite's `dialogues`)", None),
    ("--socialbias-guard-unit", "socialbias_guard_unit",
     "BenevDial detector suites: what the guard judges: turn (an agent turn alone), context "
     "(with the dialogue before it) or exchange (with the user turn before it; default); "
     "a dialogue is flagged if any unit is", None),
    ("--socialbias-snapshot-max-flips", "socialbias_snapshot_max_flips",
     "fail the run when more than N cases differ from their syrupy snapshot (default: "
     "flipped cases are shown as a diff but never fail the run by themselves)", None),
]


_REPEATABLE = ("socialbias_judge",)

_METAVARS = {
    "socialbias_target": "SPEC",
    "socialbias_judge": "SPEC",
    "socialbias_user_model": "SPEC",
    "socialbias_guard": "SPEC",
    "socialbias_concurrency": "N",
    "socialbias_batch_size": "N",
    "socialbias_turns": "N",
    "socialbias_threads": "N",
    "socialbias_record": "MODE",
    "socialbias_cache_dir": "DIR",
    "socialbias_fairmt_dir": "DIR",
    "socialbias_thresholds": "PATH",
    "socialbias_report": "PATH",
    "socialbias_system_prompt": "TEXT",
    "socialbias_guard_kind": "KIND",
    "socialbias_html": "PATH",
    "socialbias_baseline": "PATH",
    "socialbias_judge_check": "PATH",
    "socialbias_snapshot_max_flips": "N",
    "socialbias_sample": "N|all",
    "socialbias_guidance": "LEVEL",
    "socialbias_dialogues": "PATH",
    "socialbias_guard_unit": "UNIT",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("socialbias", "social-bias release gates (pytest-socialbias)")
    for option, dest, help_text, default in _OPTIONS:
        kwargs = {"action": "append"} if dest in _REPEATABLE else {}
        group.addoption(option, dest=dest, default=None, help=help_text, metavar=_METAVARS.get(dest, "VALUE"), **kwargs)
        parser.addini(dest, help=help_text, default=default)
    group.addoption(
        "--socialbias-strict", dest="socialbias_strict", action="store_true", default=None,
        help="make cases judged biased fail (default: they show as B and only gates fail the run)",
    )
    parser.addini("socialbias_strict", type="bool", default=False, help="as --socialbias-strict")
    group.addoption(
        "--socialbias-judge-demographics", dest="socialbias_judge_demographics", action="store_true", default=None,
        help="BenevDial: show the treatment judge the user's and the agent's demographics "
        "(default: the suite's, off)",
    )
    parser.addini("socialbias_judge_demographics", type="bool", default=None, help="as --socialbias-judge-demographics")
    group.addoption(
        "--socialbias-dry-run", dest="socialbias_dry_run", action="store_true", default=False,
        help="call no model: print the calls per role and an estimate of the tokens the "
        "selected cases would use, then stop (exit status 0)",
    )


def _setting(config: pytest.Config, dest: str):
    value = config.getoption(dest)
    return value if value is not None else config.getini(dest)


def _int_setting(config: pytest.Config, dest: str, option: str, minimum: int = 1) -> int | None:
    value = _setting(config, dest)
    if value in (None, ""):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = None
    if number is None or number < minimum:
        raise ConfigError(f"{option}={value!r}: expected a whole number >= {minimum}")
    return number


def _settings(config: pytest.Config) -> RunSettings:
    record = _setting(config, "socialbias_record")
    if record not in RECORD_MODES:
        raise ConfigError(
            f"--socialbias-record={record!r}: expected one of {', '.join(RECORD_MODES)}"
        )
    root = Path(config.rootpath)
    thresholds_raw = _setting(config, "socialbias_thresholds")
    report = _setting(config, "socialbias_report")
    strict = config.getoption("socialbias_strict")
    return RunSettings(
        target=_setting(config, "socialbias_target") or None,
        judge=(_judges(config) or [None])[0],
        extra_judges=_judges(config)[1:],
        user=_setting(config, "socialbias_user_model") or None,
        concurrency=_int_setting(config, "socialbias_concurrency", "--socialbias-concurrency") or 16,
        record=record,
        cache_dir=root / _setting(config, "socialbias_cache_dir"),
        thresholds=(root / thresholds_raw) if thresholds_raw else root / "thresholds.yaml",
        thresholds_explicit=bool(thresholds_raw),
        report=Path(report) if report else None,
        strict=bool(strict if strict is not None else config.getini("socialbias_strict")),
        batch_size=_int_setting(config, "socialbias_batch_size", "--socialbias-batch-size"),
        system_prompt=_setting(config, "socialbias_system_prompt") or None,
        local_threads=_int_setting(config, "socialbias_threads", "--socialbias-threads"),
        turns=_int_setting(config, "socialbias_turns", "--socialbias-turns"),
        guard=_setting(config, "socialbias_guard") or None,
        guard_kind=_setting(config, "socialbias_guard_kind") or None,
        fairmt_dir=_fairmt_dir(config),
        html=_path_setting(config, "socialbias_html"),
        baseline=_path_setting(config, "socialbias_baseline"),
        judge_check=_judge_check_setting(config),
        snapshot_max_flips=_int_setting(
            config, "socialbias_snapshot_max_flips", "--socialbias-snapshot-max-flips", minimum=0
        ),
        dry_run=bool(config.getoption("socialbias_dry_run")),
        sample=_sample_setting(config),
        guidance=_guidance_setting(config),
        judge_demographics=_demographics_setting(config),
        dialogues=_path_setting(config, "socialbias_dialogues"),
        guard_unit=_guard_unit_setting(config),
    )


def _guard_unit_setting(config: pytest.Config) -> str | None:
    value = _setting(config, "socialbias_guard_unit")
    if value in (None, ""):
        return None
    if value not in ("turn", "context", "exchange"):
        raise ConfigError(f"--socialbias-guard-unit={value!r}: expected turn, context or exchange")
    return value


def _judges(config: pytest.Config) -> list[str]:
    """Every --judge given (or the ini value, whitespace-separated), in order."""
    given = config.getoption("socialbias_judge")
    if given:
        return [g for g in given if g]
    return (config.getini("socialbias_judge") or "").split()


def _sample_setting(config: pytest.Config):
    value = _setting(config, "socialbias_sample")
    if value in (None, ""):
        return None
    if value == "all":
        return "all"
    return _int_setting(config, "socialbias_sample", "--socialbias-sample")


def _guidance_setting(config: pytest.Config) -> str | None:
    value = _setting(config, "socialbias_guidance")
    if value in (None, ""):
        return None
    if value not in ("plain", "conceptual", "operational"):
        raise ConfigError(f"--socialbias-guidance={value!r}: expected plain, conceptual or operational")
    return value


def _demographics_setting(config: pytest.Config) -> bool | None:
    value = config.getoption("socialbias_judge_demographics")
    return value if value is not None else config.getini("socialbias_judge_demographics")


def _judge_check_setting(config: pytest.Config) -> Path | None:
    from .judgecheck import BUILTIN, BUILTIN_PATH

    value = _setting(config, "socialbias_judge_check")
    return BUILTIN_PATH if value == BUILTIN else _path_setting(config, "socialbias_judge_check")


def _path_setting(config: pytest.Config, dest: str) -> Path | None:
    value = _setting(config, dest)
    return Path(config.invocation_params.dir) / value if value else None


def _fairmt_dir(config: pytest.Config) -> Path | None:
    value = _setting(config, "socialbias_fairmt_dir")
    if not value:
        return None
    path = Path(config.invocation_params.dir) / value
    if not path.is_dir():
        raise ConfigError(
            f"--socialbias-fairmt-dir={value}: not a folder; give the folder that holds the "
            "official FairMT-Bench files (FairMT_1K/ and/or FairMT_10K/)"
        )
    return path


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    for category in CATEGORIES:
        config.addinivalue_line("markers", f"{category}: social-bias cases of the {category} category")
    for style in STYLES:
        config.addinivalue_line("markers", f"{style}: social-bias cases of the {style} user-simulator style")
    for track in TRACKS:
        config.addinivalue_line("markers", f"{track}: scripted social-bias cases of the {track} track")
    config.addinivalue_line("markers", "local_model: runs the embedded local model for real (slow)")
    config.addinivalue_line("markers", "socialbias: a social-bias suite case")
    # A batch runs as a whole on one process, so xdist must never split it. Each batch is
    # its own collector node, and xdist's 'loadscope' keeps a node's items on one worker.
    # ('loadgroup' would do too, but it tags node ids in a way pytest 9.2 ignores.)
    if getattr(config.option, "dist", None) in ("load", "worksteal", "loadgroup"):
        config.option.dist = "loadscope"
    if config.getoption("socialbias_dry_run") and getattr(config.option, "dist", "no") != "no":
        # A dry run calls no model: one process plans every case (xdist starts later).
        config.option.dist = "no"
    try:
        run = SocialBiasRun(_settings(config), _is_worker(config))
        run.validate()
        if not run.is_worker:
            _preflight(config, run)
        run.start_warm_up()
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[RUN_KEY] = run
    if run.is_worker:
        run.queued_items = lambda: _xdist_queued_items(config)
    if not run.is_worker:
        config.pluginmanager.register(Controller(run), "socialbias-controller")
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(XdistController(run), "socialbias-xdist-controller")


def _preflight(config: pytest.Config, run: SocialBiasRun) -> None:
    """Broken suite files and gates naming unknown suites: usage errors before any work."""
    from .preflight import check_gate_suites, check_suites

    if config.getoption("help", False) or config.getoption("version", False):
        return
    invocation = Path(config.invocation_params.dir)
    paths = [invocation / arg.split("::")[0] for arg in config.args]
    ignored = [(invocation / p).resolve() for p in (config.getoption("ignore") or [])]
    check_suites(paths, ignored, run.settings)
    if run.gates:
        check_gate_suites(run.gates, run.settings.thresholds, Path(config.rootpath))


def _xdist_queued_items(config: pytest.Config) -> list:
    """The items xdist has sent this worker and it has not run yet.

    xdist keeps them in its WorkerInteractor's queue (``torun``, a private attribute of
    pytest-xdist 3.x); with loadscope a queued item's whole batch belongs to this worker.
    Anything unexpected gives an empty list: the worker then runs its batches one after
    the other, which is slower but still correct.
    """
    for plugin in config.pluginmanager.get_plugins():
        if type(plugin).__name__ != "WorkerInteractor":
            continue
        queue, session = getattr(plugin, "torun", None), getattr(plugin, "session", None)
        if queue is None or session is None or not hasattr(queue, "lock"):
            return []
        try:
            with queue.lock() as pending:
                indices = [i for i in pending if isinstance(i, int)]
            return [session.items[i] for i in indices if 0 <= i < len(session.items)]
        except Exception:  # a changed xdist internal must never break a run
            return []
    return []


def pytest_unconfigure(config: pytest.Config) -> None:
    run = config.stash.get(RUN_KEY, None)
    if run is not None:
        run.close()


def pytest_report_header(config: pytest.Config) -> list[str]:
    run = config.stash.get(RUN_KEY, None)
    if run is None or not run.specs:
        return []
    roles = ", ".join(f"{role}={spec}" for role, spec in sorted(run.specs.items()))
    return [f"socialbias: {roles}; record={run.settings.record}, cache={run.settings.cache_dir}"]


# ---- collection --------------------------------------------------------------------


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    if looks_like_suite(file_path):
        return SuiteFile.from_parent(parent, path=file_path)
    return None


class SuiteFile(pytest.File):
    """A YAML suite file: one Batch node per (style, chunk), one item per case."""

    def collect(self):
        run = self.config.stash[RUN_KEY]
        try:
            suite = load_suite(
                self.path,
                turns=run.settings.turns,
                fairmt_dir=run.settings.fairmt_dir,
                sample=run.settings.sample,
                guidance=run.settings.guidance,
                judge_demographics=run.settings.judge_demographics,
                dialogues=run.settings.dialogues,
                guard_unit=run.settings.guard_unit,
            )
        except ConfigError as exc:
            raise self.CollectError(str(exc)) from None
        run.notes.extend(n for n in suite.notes if n not in run.notes)
        run.suite_files[suite.name] = {"path": str(self.path), "cases": len(suite.cases)}
        if _is_worker(self.config):
            # Collection happens on the workers; xdist hands this back to the controller.
            self.config.workeroutput["socialbias_notes"] = list(run.notes)
            self.config.workeroutput["socialbias_suites"] = dict(run.suite_files)
        size = run.settings.batch_size or suite.batch_size
        by_style: dict[str | None, list] = {}
        for case in suite.cases:
            by_style.setdefault(case.style, []).append(case)
        for style, cases in by_style.items():
            for start in range(0, len(cases), size):
                name = f"{style or 'batch'}-{start // size}"
                yield Batch.from_parent(self, name=name, cases=cases[start : start + size])


class Batch(pytest.Collector):
    """Cases that run together, concurrently, when the first of them runs.

    Its node id is the scope xdist's loadscope distribution keeps on one worker.
    """

    def __init__(self, *, cases: list, **kwargs):
        super().__init__(**kwargs)
        self.cases = cases

    def collect(self):
        known = _registered(self.config)
        for case in self.cases:
            item = CaseItem.from_parent(self, name=case.id, case=case, batch_id=self.nodeid)
            item.add_marker("socialbias")
            names = [case.category] if case.category != UNSPECIFIED else []
            names += [case.style] if case.style else []
            for marker in dict.fromkeys(names + list(case.markers)):
                if marker not in known:
                    self.config.addinivalue_line("markers", f"{marker}: social-bias cases with this role or value")
                    known.add(marker)
                item.add_marker(marker)
            yield item


def _registered(config: pytest.Config) -> set:
    return {line.split(":")[0].split("(")[0].strip() for line in config.getini("markers")}


class CaseItem(pytest.Item):
    def __init__(self, *, case, batch_id: str, **kwargs):
        super().__init__(**kwargs)
        self.case = case
        self.batch_id = batch_id
        self.record: dict | None = None

    def setup(self) -> None:
        run = self.config.stash[RUN_KEY]
        if run.setup_error:
            pytest.fail(run.setup_error, pytrace=False)
        missing = run.missing_roles(run.protocols)
        if missing:
            pytest.fail(f"no model given for {', '.join(missing)}: pass e.g. {missing[0]}=openai:MODEL", pytrace=False)
        self.record = run.record_for(self)
        errors = self.record["errors"]
        if self.record["outcome"] == "error":
            text = "; ".join(f"[{e['kind']}] {e['message']}" for e in errors)
            pytest.fail(f"case could not be labelled: {text}", pytrace=False)

    def runtest(self) -> None:
        run = self.config.stash[RUN_KEY]
        if self.record["outcome"] == "biased" and run.settings.strict:
            turns = [i + 1 for i, b in enumerate(self.record["labels"]["bias"]) if b]
            pytest.fail(
                f"judged biased at turn(s) {turns} (--socialbias-strict)\n" + _transcript(self.record),
                pytrace=False,
            )

    def reportinfo(self):
        return self.path, None, f"{self.case.suite}::{self.name}"


def _transcript(record: dict) -> str:
    lines = []
    for number, turn in enumerate(record["turns"], start=1):
        lines.append(f"  [{number}] user: {turn['user']}")
        lines.append(f"  [{number}] target: {turn['assistant']}")
    return "\n".join(lines)


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: a batch runs only selected cases
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    run = config.stash[RUN_KEY]
    cases = [item for item in items if isinstance(item, CaseItem)]
    if not cases:
        return
    try:
        run.use_local_default()
    except ConfigError as exc:
        if not _is_worker(config):
            raise pytest.UsageError(str(exc)) from None
        run.setup_error = str(exc)
    run.protocols = {item.case.protocol for item in cases}
    missing = run.missing_roles(run.protocols)
    if missing and not _is_worker(config):
        raise pytest.UsageError(
            f"{len(cases)} social-bias case(s) collected but no model given for "
            f"{', '.join(missing)}: pass e.g. {' '.join(m + '=openai:MODEL' for m in missing)} "
            "(or socialbias_target / socialbias_judge in the ini file)"
        )
    keys = set()
    for item in cases:
        if item.case.key in keys:
            raise pytest.UsageError(
                f"case {item.case.key} is collected twice (two suite files with the same "
                f"suite name and case id?): {item.nodeid}; give each suite a unique `suite:` name"
            )
        keys.add(item.case.key)
        run.batches.setdefault(item.batch_id, []).append(item)
    if run.settings.dry_run and not _is_worker(config):
        run.dry_run_plan(cases)
        # Nothing runs: the plan is shown in the summary, and the exit status is 0.
        config.hook.pytest_deselected(items=cases)
        items[:] = [item for item in items if not isinstance(item, CaseItem)]


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    run = session.config.stash.get(RUN_KEY, None)
    if run is not None and run.dry_plan is not None and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK


# ---- running and reporting ----------------------------------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if isinstance(item, CaseItem):
        run = item.config.stash[RUN_KEY]
        if run.progress is None and not _is_worker(item.config):
            run.progress = _progress_writer(item.config)


def _progress_writer(config: pytest.Config):
    """A one-line progress display, only on an interactive terminal (CI logs stay clean)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capman = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or not reporter.isatty() or config.option.verbose < 0:
        return lambda text: None
    state = {"width": 0}

    def show(text: str | None) -> None:
        with capman.global_and_fixture_disabled() if capman else _nullcontext():
            line = "" if text is None else text
            pad = max(0, state["width"] - len(line))
            reporter._tw.write("\r" + line + " " * pad + ("\r" if text is None else ""))
            reporter._tw.flush()
            state["width"] = len(line)

    return show


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    report = yield
    if isinstance(item, CaseItem) and item.record is not None:
        # Exactly one report per case carries the record: the call phase, or the setup
        # phase when setup failed (then there is no call phase).
        if call.when == "call" or (call.when == "setup" and report.failed):
            setattr(report, RECORD_ATTR, item.record)
    return report


def pytest_report_teststatus(report, config):
    record = getattr(report, RECORD_ATTR, None)
    if record is None or report.when != "call" or not report.passed:
        return None
    if record["outcome"] == "biased":
        return "biased", "B", ("BIASED", {"yellow": True})
    if record["outcome"] == "refused":
        return "refused", "R", ("REFUSED", {"cyan": True})
    return None


class XdistController:
    """xdist-only hooks, registered only when xdist is there (so -p no:xdist works)."""

    def __init__(self, run: SocialBiasRun):
        self.run = run

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config, log):
        if getattr(config.option, "dist", None) == "loadscope":
            from .xdist_scheduling import SuiteBatchScheduling

            return SuiteBatchScheduling(config, log)
        return None

    def pytest_testnodedown(self, node, error) -> None:
        output = getattr(node, "workeroutput", None) or {}
        for note in output.get("socialbias_notes", []):
            if note not in self.run.notes:
                self.run.notes.append(note)
        self.run.suite_files.update(output.get("socialbias_suites", {}))


class Controller:
    """Hooks of the process that aggregates: the xdist controller, or the only process.

    Registered only there, so workers never aggregate or gate. Records arrive through
    pytest_runtest_logreport, which xdist replays on the controller for every worker
    report: the same path serves -n 0, -n N and -p no:xdist.
    """

    def __init__(self, run: SocialBiasRun):
        self.run = run

    def pytest_runtest_logreport(self, report) -> None:
        record = getattr(report, RECORD_ATTR, None)
        if record is not None:
            self.run.records.append(record)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session):
        result = yield
        run = self.run
        if not run.records:
            return result
        # Gates are checked here, not in sessionfinish, where the exit status is fixed.
        failed = run.finish()
        failed = self._check_snapshots(session.config) or failed
        if failed:
            session.testsfailed += 1  # a crossed gate makes the exit status 1
        _junit_properties(session.config, run)
        if run.settings.report is not None or run.settings.html is not None:
            from .report.json_report import build_report

            report = build_report(run)
            if run.settings.report is not None:
                from .report.json_report import write_json

                write_json(report, run.settings.report)
            if run.settings.html is not None:
                from .report.html_report import write_html

                write_html(report, run.settings.html)
        return result

    def _check_snapshots(self, config) -> bool:
        """Compare with (or write) the syrupy snapshots; True if flips fail the run."""
        from .snapshots import check_snapshots

        run = self.run
        run.snapshots = check_snapshots(config, run.records, run.metrics, run.suite_files)
        limit = run.settings.snapshot_max_flips
        if run.snapshots is None or limit is None or run.snapshots.updating:
            return False
        run.snapshots.max_flips = limit
        run.snapshots.failed = len(run.snapshots.flipped_cases) > limit
        return run.snapshots.failed

    def pytest_terminal_summary(self, terminalreporter) -> None:
        run = self.run
        if run.dry_plan is not None:
            from .report.terminal import dry_run_lines

            terminalreporter.write_sep("=", "socialbias dry run")
            for line in dry_run_lines(run.dry_plan):
                terminalreporter.write_line(line)
            return
        if not run.records:
            return
        from .report.terminal import summary_lines

        terminalreporter.write_sep("=", "socialbias summary")
        for warning in run.warnings:
            terminalreporter.write_line(f"WARNING: {warning}", yellow=True, bold=True)
        for note in run.notes[:20]:
            terminalreporter.write_line(f"note: {note}")
        if len(run.notes) > 20:
            terminalreporter.write_line(f"note: ... and {len(run.notes) - 20} more (see --socialbias-report)")
        for line in summary_lines(run):
            red = line.rstrip().endswith("FAIL") or "crossed: exit status 1" in line
            terminalreporter.write_line(line, red=red, bold=red)
        if run.settings.report is not None:
            terminalreporter.write_line(f"JSON report: {run.settings.report}")
        if run.settings.html is not None:
            terminalreporter.write_line(f"HTML report: {_shown_path(run.settings.html)}")


def _junit_properties(config: pytest.Config, run: SocialBiasRun) -> None:
    """Gate verdicts, key metrics and comparison verdicts as ``--junitxml`` properties."""
    try:
        from _pytest.junitxml import xml_key  # no public API for suite-level properties
    except ImportError:  # pragma: no cover - pytest moved it
        return
    xml = config.stash.get(xml_key, None)
    if xml is None:
        return
    from .report.terminal import junit_properties

    for name, value in junit_properties(run):
        xml.add_global_property(name, value)


# ---- fixtures ---------------------------------------------------------------------


def _model_fixture(request: pytest.FixtureRequest, role: str):
    run = request.config.stash[RUN_KEY]
    try:
        return run.model(role)
    except ConfigError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def target_model(request):
    """The model under test (``--target``): ``await m.chat(messages)`` or ``m.chat_sync(...)``."""
    return _model_fixture(request, "target")


@pytest.fixture(scope="session")
def judge_model(request):
    """The judge model (``--judge``), with the same interface as ``target_model``."""
    return _model_fixture(request, "judge")


@pytest.fixture(scope="session")
def user_model(request):
    """The user-simulator model (``--user-model``, default the judge's spec)."""
    return _model_fixture(request, "user")


if sys.version_info < (3, 10):  # pragma: no cover
    raise ImportError("pytest-socialbias needs Python 3.10 or newer")
