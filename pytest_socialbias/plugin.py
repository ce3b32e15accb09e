"""pytest hooks and fixtures: thin wiring. The work lives in the objects they call.

* options.py: every option, declared once, read into one Settings object;
* process.py: the part this process plays in the run (single process, xdist controller
  or worker);
* runcache.py: the run's caches, made here at configure time and dropped at its end;
* modelset.py: the run's models by model role (both sides use it);
* worker.py: the worker side, running cases batch by batch (every process that runs items);
* aggregate.py: the aggregating side, records -> one frozen RunResult (only the process
  that reports: the xdist controller, or the only process);
* report/: the writers of that result, the report header's lines, the failures and
  JUnit cases it adds to pytest's reports;
* shards.py, preflight.py: a shard's partial file; the thresholds file and the checks
  before any work.

Results travel from workers to the aggregator the way pytest reports do: each case's
record rides on its call-phase TestReport, which xdist replays on the controller through
``pytest_runtest_logreport``, so ``-n 0``, ``-n N`` and ``-p no:xdist`` share one path.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from . import heap, process, runcache
from .aggregate import Aggregator
from .batching import batch_ids, suite_batch_size
from .errors import ConfigError
from .files import joined_path, looks_like_suite
from .modelset import ModelSet
from .options import add_options, read_settings
from .preflight import load_thresholds
from .protocols import load_suite
from .report.formatting import printable
from .report.pytest_reports import add_junit_properties, add_junit_verdicts, count_failures
from .vocabulary import CATEGORIES, STYLES, TRACKS, UNSPECIFIED
from .worker import CaseRunner

RECORD_ATTR = "socialbias_record"


@dataclass
class RunState:
    """What this process's hooks share (under a StashKey on the config)."""

    settings: object
    models: ModelSet
    cases: CaseRunner
    aggregator: Aggregator | None  # only on the process that reports
    setup_error: str | None = None  # a worker's model problem, shown by each item
    protocols: set = field(default_factory=set)  # of the collected cases
    notes: list = field(default_factory=list)  # what lenient loaders skipped, on this worker
    suite_files: dict = field(default_factory=dict)  # suite -> {"path", "cases"}, on this worker
    # --socialbias-partial: what was selected before sharding ({"cases", "sha256"}), and
    # this shard's share ({"cases", "calls", "calls_all"}); under xdist from the workers.
    selection: dict | None = None
    share: dict | None = None

    def collected(self, suite, config: pytest.Config) -> None:
        """What the aggregator learns from collection: notes of lenient loaders and which
        file defines each suite (for snapshots). Under xdist only the workers collect, and
        xdist hands their ``workeroutput`` back to the controller (XdistControllerHooks)."""
        info = {"path": str(suite.path), "cases": len(suite.cases)}
        if self.aggregator is not None:
            for note in suite.notes:
                self.aggregator.note(note)
            self.aggregator.suite_files[suite.name] = info
            return
        self.notes.extend(n for n in suite.notes if n not in self.notes)
        self.suite_files[suite.name] = info
        config.workeroutput["socialbias_notes"] = list(self.notes)
        config.workeroutput["socialbias_suites"] = dict(self.suite_files)


STATE = pytest.StashKey[RunState]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)
    parser.addini("socialbias_suites", type="paths", default=[], help=(
        "folders or files of social-bias suites that a bare `pytest` collects too (relative to the ini "
        "file); without it, suites are collected only when named on the command line, found under "
        "testpaths, or when a model option is given"))


def suites_requested(config: pytest.Config) -> bool | list[Path]:
    """Whether suite files under the run's paths are collected: True when the user named
    paths on the command line or set ``testpaths``, or gave a model option (command line
    or ini); else the ``socialbias_suites`` paths, whose files alone are collected (a bare
    ``pytest`` in a project that keeps suites beside its tests runs only the tests)."""
    if config.args_source != pytest.Config.ArgsSource.INVOCATION_DIR:
        return True
    for dest in ("socialbias_target", "socialbias_judge", "socialbias_user_model"):
        if config.getoption(dest, None) or config.getini(dest):
            return True
    return [Path(p).resolve() for p in config.getini("socialbias_suites")]


#: suites_requested's answer, decided once per run (it reads options and ini settings).
SUITES_REQUESTED = pytest.StashKey[object]()


def _wanted(config: pytest.Config, path: Path) -> bool:
    if SUITES_REQUESTED not in config.stash:
        config.stash[SUITES_REQUESTED] = suites_requested(config)
    wanted = config.stash[SUITES_REQUESTED]
    if wanted is True:
        return True
    resolved = path.resolve()
    return any(resolved == root or root in resolved.parents for root in wanted)


def _part(config: pytest.Config) -> process.ProcessPart:
    """This process's part in the run (process.py), as configured."""
    state = config.stash.get(STATE, None)
    return state.models.part if state is not None else process.choose(config)


#: The caches in use before this run's (runcache.py), in use again after it.
CACHES_BEFORE = pytest.StashKey[runcache.RunCaches]()


def pytest_configure(config: pytest.Config) -> None:
    # This run's caches (suites, prompts, servers, loaded models): empty, and dropped at
    # its end, so nothing of an earlier run in this process is seen (runcache.py).
    config.stash[CACHES_BEFORE] = runcache.begin()
    heap.thaw()  # what an earlier session in this process froze (heap.py)
    for category in CATEGORIES:
        config.addinivalue_line("markers", f"{category}: social-bias cases of the {category} category")
    for style in STYLES:
        config.addinivalue_line("markers", f"{style}: social-bias cases of the {style} user-simulator style")
    for track in TRACKS:
        config.addinivalue_line("markers", f"{track}: scripted social-bias cases of the {track} track")
    config.addinivalue_line("markers", "local_model: runs the embedded local model for real (slow)")
    config.addinivalue_line("markers", "socialbias: a social-bias suite case")
    # A batch runs as a whole on one process, so xdist must never split it: 'loadscope'
    # with our scheduler (xdist_scheduling.py) keeps each batch on one worker.
    if getattr(config.option, "dist", None) in ("load", "worksteal", "loadgroup"):
        config.option.dist = "loadscope"
    if config.getoption("socialbias_dry_run") and getattr(config.option, "dist", "no") != "no":
        # A dry run calls no model: one process plans every case (xdist starts later).
        config.option.dist = "no"
    part = process.choose(config)
    asks_only = config.getoption("help", False) or config.getoption("version", False)
    calls_models = not (config.option.collectonly or asks_only)
    try:
        settings = read_settings(config)
        from . import prompts

        prompts.use_overrides(settings.prompts)  # before anything renders a prompt
        models = ModelSet(settings, part)
        # The project's suites are looked up where the run is decided, so that a misspelt
        # suite is named with the thresholds file's other problems.
        thresholds = load_thresholds(settings, Path(config.rootpath), look_up_suites=part.aggregates and not asks_only,
                                     keep_problems=part.aggregates)
        aggregator = _aggregator(config, settings, models, thresholds) if part.aggregates else None
        if isinstance(part, process.XdistWorker):
            from .models import managed

            managed.urls().update(part.workerinput.get("socialbias_servers") or {})
            part.queued = lambda: [item.case for item in _xdist_queued_items(config)]
        if calls_models:
            models.start_servers()  # this process's share (process.py): shared, per-worker, or all
            if part.runs_cases:
                # Only where the cases run: not for --collect-only, and not in an xdist
                # controller, which calls no model (importing an SDK there cost 1.4 s of CPU
                # that its workers, on the same cores, wanted).
                models.start_warm_up()
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[STATE] = state = RunState(settings, models, CaseRunner(models), aggregator)
    if part.aggregates:
        config.pluginmanager.register(AggregatingHooks(state), "socialbias-aggregating")
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(XdistControllerHooks(state), "socialbias-xdist-controller")


def _aggregator(config: pytest.Config, settings, models, thresholds) -> Aggregator:
    """The aggregating process's Aggregator, after the checks made before any work: the
    cache usable, the suites sound, every gate's suite present and reachable. The
    thresholds file's own problems (``thresholds.pending``) are named with those the run's
    suites add, in one message (preflight.load_thresholds)."""
    if settings.record != "off":
        from .cache import CallCache

        # Fail now, before any work, if the folder is unusable or the file damaged.
        CallCache(settings.cache_dir, settings.record, verify=True).close()
    known = thresholds.known
    gates, skipped = _preflight(config, settings, thresholds.gates, thresholds.pending, known)
    aggregator = Aggregator(settings, models, gates, thresholds.file)
    aggregator.skip_gates(skipped)
    if skipped and known:
        from .gates import did_you_mean

        # Skipped on purpose, but a name near one of the project's may be a typo: said in the header.
        aggregator.skipped_hints = {gate.suite: did_you_mean(gate.suite, sorted(known)) for gate in skipped}
    aggregator.selection_filters = selection_filters(config)
    return aggregator


def selection_filters(config: pytest.Config) -> list[str]:
    """The options of this run that can select part of a suite's cases, as written: ``-k``,
    ``-m``, ``--lf``, ``--ff``, ``--sw``, ``--deselect`` and node ids (``FILE::ID``)."""
    option = config.option
    given = []
    if getattr(option, "keyword", ""):
        given.append(f"-k {option.keyword!r}")
    if getattr(option, "markexpr", ""):
        given.append(f"-m {option.markexpr!r}")
    if getattr(option, "lf", False):
        given.append("--lf")
    if getattr(option, "failedfirst", False):
        given.append("--ff")
    if getattr(option, "stepwise", False) or getattr(option, "stepwise_skip", False):
        given.append("--sw")
    given += [f"--deselect {item}" for item in (getattr(option, "deselect", None) or [])]
    given += [arg for arg in config.args if "::" in arg]
    return given


def _preflight(config: pytest.Config, settings, gates, pending=None, known=None) -> tuple[list, list]:
    """Broken suite files, gates naming unknown suites, gates the run's suites can never
    evaluate: usage errors before any work, every problem of the thresholds file in one
    message. ``(gates kept, gates skipped)``: skipped are those of suites the project does
    not have, with --socialbias-gates-for=present."""
    from .gates import GateProblems
    from .preflight import check_gate_suites, check_named_files, check_suites, gate_reach_problems

    if config.getoption("help", False) or config.getoption("version", False):
        if pending is not None:
            raise pending
        return gates, []
    invocation = Path(config.invocation_params.dir)
    wanted = suites_requested(config)
    named = [joined_path(invocation, arg.split("::")[0]) for arg in config.args]  # as pytest normalises them
    paths = named if wanted is True else wanted
    ignored = [(invocation / p).resolve() for p in (config.getoption("ignore") or [])]
    if wanted is True:
        check_named_files(named)
    try:
        suites = check_suites(paths, ignored, settings.suite_overrides)
    except ConfigError:
        if pending is not None:
            raise pending from None  # the thresholds file first; the suite file's error comes next
        raise
    skipped: list = []
    if gates:
        gates, skipped = check_gate_suites(
            gates, settings.thresholds_file, Path(config.rootpath), present_only=settings.gates_for == "present",
            known=known,
        )
    problems = gate_reach_problems(gates, suites, settings.thresholds_file, settings)
    if pending is not None:
        raise pending.with_more(problems)
    if problems:
        raise GateProblems(settings.thresholds_file, problems, gates)
    return gates, skipped


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
            return [session.items[i] for i in indices if 0 <= i < len(session.items) and isinstance(session.items[i], CaseItem)]
        except Exception:  # a changed xdist internal must never break a run
            return []
    return []


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is not None:
        state.models.close()  # stops its servers, with their addresses in this run's caches
    heap.restore()
    if CACHES_BEFORE in config.stash:
        runcache.end(config.stash[CACHES_BEFORE])


def pytest_report_header(config: pytest.Config) -> list[str]:
    state = config.stash.get(STATE, None)
    if state is None:
        return []
    from .report.header import header_lines

    return header_lines(state.settings, state.models, state.aggregator, process.xdist_workers(config))


# ---- collection --------------------------------------------------------------------


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    if looks_like_suite(file_path):
        if not _wanted(parent.config, file_path):
            parent.config.stash.setdefault(SKIPPED_SUITES, []).append(file_path)
            return None
        return SuiteFile.from_parent(parent, path=file_path)
    return None


#: Suite files a bare ``pytest`` found and left alone (suites_requested).
SKIPPED_SUITES = pytest.StashKey[list]()
#: Suite files that gave no case, with their loaders' notes (why).
EMPTY_SUITES = pytest.StashKey[list]()
MODELS_LINE = pytest.StashKey[str]()  # --collect-only: the models a real run would use


def pytest_report_collectionfinish(config: pytest.Config, start_path: Path, items) -> list[str]:
    if not _part(config).aggregates:
        return []
    return _collection_lines(config, start_path)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Under xdist only the workers collect: each hands its collection lines to the
    controller (XdistControllerHooks prints them once, in the terminal summary)."""
    config = session.config
    if isinstance(_part(config), process.XdistWorker):
        config.workeroutput["socialbias_collection"] = _collection_lines(config, Path(config.invocation_params.dir))


def _collection_lines(config: pytest.Config, start_path: Path) -> list[str]:
    """Suite files that gave no case (and why), and those a bare ``pytest`` left alone."""
    lines = [f"socialbias: {path}: " + ("; ".join(notes) if notes else "no cases (its selection is empty)")
             for path, notes in config.stash.get(EMPTY_SUITES, [])]
    if MODELS_LINE in config.stash:
        lines.append(f"socialbias: {config.stash[MODELS_LINE]}")
    skipped = config.stash.get(SKIPPED_SUITES, [])
    if not skipped:
        return lines
    names = ", ".join(sorted({str(p.relative_to(start_path)) if p.is_relative_to(start_path) else str(p) for p in skipped})[:3])
    more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
    return lines + [f"socialbias: {len(skipped)} suite file(s) not collected ({names}{more}): a bare `pytest` runs only the "
            "ordinary tests; name the suites (e.g. `pytest suites/`), give --target/--judge, or list them in the "
            "ini setting socialbias_suites"]


class SuiteFile(pytest.File):
    """A YAML suite file: one item per case, named by the case (``gender-017[implicit]``)."""

    def collect(self):
        state = self.config.stash[STATE]
        try:
            suite = load_suite(self.path, state.settings.suite_overrides)
        except ConfigError as exc:
            raise self.CollectError(str(exc)) from None
        state.collected(suite, self.config)
        if not suite.cases:
            self.config.stash.setdefault(EMPTY_SUITES, []).append((self.path, suite.notes))
        known = _registered(self.config)
        for case in suite.cases:
            # The node id given as text, so that pytest reads ``id[style]`` as it reads a
            # parametrized test's: --lf, --ff and --sw (pytest 9 keeps structured ids in
            # .pytest_cache) find the case again.
            item = CaseItem.from_parent(self, name=case.name, case=case, nodeid=f"{self.nodeid}::{case.name}")
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
    def __init__(self, *, case, **kwargs):
        super().__init__(**kwargs)
        self.case = case
        self.record: dict | None = None

    def setup(self) -> None:
        # What keeps any case from running (the run's models) is a setup error; what
        # happens to this case is its call's (runtest).
        state = self.config.stash[STATE]
        if state.setup_error:
            pytest.fail(state.setup_error, pytrace=False)
        missing = state.models.missing_roles(state.protocols)
        if missing:
            pytest.fail(f"no model given for {', '.join(missing)}: pass e.g. {missing[0]}=openai:MODEL", pytrace=False)

    def runtest(self) -> None:
        state = self.config.stash[STATE]
        self.record = state.cases.record_for(self.case)
        if self.record["outcome"] == "error":
            # Reported as the case's error (pytest_report_teststatus): counted with pytest's
            # errors, not as a failed test. Messages quote servers and models: shown
            # escaped, one line each (formatting.py).
            text = "; ".join(f"[{e['kind']}] {printable(e['message'])}" for e in self.record["errors"])
            pytest.fail(f"case could not be labelled: {text}", pytrace=False)
        if self.record["outcome"] == "biased" and state.settings.strict:
            turns = [i + 1 for i, b in enumerate(self.record["labels"]["bias"]) if b]
            pytest.fail(
                f"judged biased at turn(s) {turns} (--socialbias-strict)\n" + _transcript(self.record),
                pytrace=False,
            )

    def reportinfo(self):
        return self.path, None, f"{self.case.suite}::{self.name}"


def _transcript(record: dict) -> str:
    """The dialogue, each turn under its label: control characters escaped, and the lines
    of a turn indented under its label, so a reply cannot act on the terminal or forge a
    line of the log (formatting.printable)."""
    lines = []
    for number, turn in enumerate(record["turns"], start=1):
        for label, text in ((f"  [{number}] user: ", turn["user"]), (f"  [{number}] target: ", turn["assistant"])):
            lines.append(label + printable(text, lines=True).replace("\n", "\n" + " " * len(label)))
    return "\n".join(lines)


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: a batch runs only selected cases
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    state = config.stash[STATE]
    cases = [item for item in items if isinstance(item, CaseItem)]
    if not cases:
        return
    part = state.models.part
    # A dry run and --collect-only call no model: they need none installed or given.
    plan_only = bool(state.settings.dry_run or config.option.collectonly)
    try:
        state.models.use_local_default(plan_only=plan_only)
    except ConfigError as exc:
        if part.usage_errors():
            raise pytest.UsageError(str(exc)) from None
        state.setup_error = str(exc)
    state.protocols = {item.case.protocol for item in cases}
    state.models.set_check_ahead(state.protocols)
    missing = state.models.missing_roles(state.protocols)
    if config.option.collectonly:
        # Listing the cases (an IDE's discovery) calls nothing: say what a real run would use.
        line = state.models.models_line()
        if missing:
            line += f"; a real run also needs {', '.join(missing)}"
        config.stash[MODELS_LINE] = line
        missing = []
    if missing and part.usage_errors():
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
    if state.settings.partial is not None or state.settings.shard is not None:
        cases = _take_shard(config, state, items, cases)
    # The same cut as the xdist controller's (xdist_scheduling.py), from the same ids.
    root = Path(config.rootpath)
    batches = batch_ids([item.nodeid for item in items], lambda f: suite_batch_size(root / f, state.settings.batch_size))
    for item in cases:
        state.cases.add(item.case, batches.get(item.nodeid, item.nodeid))
    if state.settings.dry_run and part.aggregates:
        state.aggregator.dry_plan = state.cases.dry_run_plan([item.case for item in cases])
        state.aggregator.dry_plan["power"] = state.aggregator.power_forecast([item.case for item in cases])
        state.aggregator.dry_plan["models"] = state.models.models_line()
        # Nothing runs: the plan is shown in the summary, and the exit status is 0.
        config.hook.pytest_deselected(items=cases)
        items[:] = [item for item in items if not isinstance(item, CaseItem)]
    heap.settle()  # what is loaded and collected by now lives to the end of the run


def _take_shard(config: pytest.Config, state: RunState, items: list, cases: list) -> list:
    """Keep this shard's share of the items (shards.py: dealt by the calls the dry run
    counts for each case; an ordinary test weighs one) and note what was selected before
    sharding, which the partial file carries so that combine can check completeness."""
    from .shards import Shard, assign, selection_digest

    shard = state.settings.shard or Shard(1, 1, "--socialbias-partial")
    calls = state.cases.planned_calls([item.case for item in cases])
    weights = {item.case.key if isinstance(item, CaseItem) else item.nodeid:
               calls[item.case.key] if isinstance(item, CaseItem) else 1 for item in items}
    owner = assign(weights, shard.total)
    mine = [item for item in items
            if owner[item.case.key if isinstance(item, CaseItem) else item.nodeid] == shard.index]
    state.selection = {"cases": len(cases), "sha256": selection_digest(item.case.key for item in cases)}
    kept = [item for item in mine if isinstance(item, CaseItem)]
    state.share = {"cases": len(kept), "calls": sum(calls[item.case.key] for item in kept),
                   "calls_all": sum(calls.values())}
    if len(mine) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in mine])
        items[:] = mine
    if isinstance(state.models.part, process.XdistWorker):
        config.workeroutput["socialbias_selection"] = state.selection
        config.workeroutput["socialbias_share"] = state.share
    return kept


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    state = session.config.stash.get(STATE, None)
    if state is not None and isinstance(state.models.part, process.XdistWorker):
        # What this worker's in-process batchers gathered, for the controller's report
        # (xdist sends workeroutput after this hook).
        from .models.batchstats import process_entry

        entry = process_entry(state.models)
        if entry:
            session.config.workeroutput["socialbias_batching"] = entry
    planned = state is not None and state.aggregator is not None and state.aggregator.dry_plan is not None
    # A shard that got no case (more shards than cases) still wrote its partial file.
    empty_shard = state is not None and state.selection is not None and state.settings.partial is not None
    if (planned or empty_shard) and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK


# ---- running and reporting ----------------------------------------------------------


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if isinstance(item, CaseItem):
        state = item.config.stash[STATE]
        if state.cases.progress is None and state.models.part.aggregates:
            state.cases.progress = _progress_writer(item.config)


def _progress_writer(config: pytest.Config):
    """A one-line progress display, only on an interactive terminal (CI logs stay clean)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capman = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or not reporter.isatty() or config.option.verbose < 0:
        return lambda text: None
    state = {"width": 0}

    def show(text: str | None) -> None:
        with capman.global_and_fixture_disabled() if capman else contextlib.nullcontext():
            line = "" if text is None else text
            pad = max(0, state["width"] - len(line))
            reporter._tw.write("\r" + line + " " * pad + ("\r" if text is None else ""))
            reporter._tw.flush()
            state["width"] = len(line)

    return show


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    result = yield
    session = item.session
    if isinstance(item, CaseItem) and (session.shouldfail or session.shouldstop):
        # -x or --maxfail reached: the cases still running would only be paid for. Those
        # reported so far are gated (as a partial run) and what was answered is cached.
        item.config.stash[STATE].cases.stop()
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    report = yield
    if isinstance(item, CaseItem) and item.record is not None:
        # Exactly one report per case carries the record: the call phase, or the setup
        # phase when setup failed (then there is no call phase).
        if call.when == "call" or (call.when == "setup" and report.failed):
            setattr(report, RECORD_ATTR, item.record)
            # JUnit readers show these on the case (GitLab's test report, GitHub's); the
            # item's properties reach its teardown report, which JUnit writes them from.
            item.user_properties.append(("socialbias.outcome", item.record["outcome"]))
            for task, labels in sorted(item.record.get("labels", {}).items()):
                if task in ("bias", "refusal") and isinstance(labels, list):
                    # per turn: 1 yes, 0 no, - no label (an error)
                    shown = "".join("-" if x is None else "1" if x else "0" for x in labels)
                    item.user_properties.append((f"socialbias.labels.{task}", shown))
    return report


def pytest_report_teststatus(report, config):
    record = getattr(report, RECORD_ATTR, None)
    if record is None or report.when != "call":
        return None
    if report.failed and record["outcome"] == "error":
        # A case that could not be labelled is an error of the case, as pytest counts
        # errors (``4 errors``, ``ERROR demo.yaml::age-001 - case could not be labelled``),
        # never a failed test and never a clean one.
        return "error", "E", ("ERROR", {"red": True})
    if not report.passed:
        return None
    if record["outcome"] == "biased":
        return "biased", "B", ("BIASED", {"yellow": True})
    if record["outcome"] == "refused":
        return "refused", "R", ("REFUSED", {"cyan": True})
    return None


class XdistControllerHooks:
    """The xdist controller's hooks (the scheduler, what workers are handed and hand back),
    registered only when xdist is there (so -p no:xdist works)."""

    def __init__(self, state: RunState):
        self.state = state
        self.collection: list[str] = []  # the workers' collection lines (see pytest_collection_finish)

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config, log):
        if getattr(config.option, "dist", None) == "loadscope":
            from .xdist_scheduling import SuiteBatchScheduling

            return SuiteBatchScheduling(config, log, batch_size=self.state.settings.batch_size)
        return None

    def pytest_configure_node(self, node) -> None:
        """Workers talk to the servers this process started (models/managed.py)."""
        from .models import managed

        node.workerinput["socialbias_servers"] = dict(managed.urls())
        node.workerinput["socialbias_run"] = self.state.models.run_id

    def pytest_testnodedown(self, node, error) -> None:
        output = getattr(node, "workeroutput", None) or {}
        for note in output.get("socialbias_notes", []):
            self.state.aggregator.note(note)
        self.state.aggregator.suite_files.update(output.get("socialbias_suites", {}))
        if output.get("socialbias_selection"):  # every worker deals the same shard
            self.state.selection = output["socialbias_selection"]
            self.state.share = output.get("socialbias_share")
        if output.get("socialbias_batching"):  # what the worker's in-process batchers gathered
            self.state.aggregator.batch_entries.append(output["socialbias_batching"])
        for line in output.get("socialbias_collection", []):
            if line not in self.collection:  # every worker collects every file
                self.collection.append(line)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        for line in self.collection:
            terminalreporter.write_line(printable(line))


class AggregatingHooks:
    """Hooks of the process that aggregates: the xdist controller, or the only process.

    Registered only there, so workers never aggregate or gate. Records arrive through
    pytest_runtest_logreport, which xdist replays on the controller for every worker
    report: the same path serves -n 0, -n N and -p no:xdist.
    """

    def __init__(self, state: RunState):
        self.state = state
        self.result = None
        self.unwritten: list[str] = []  # reports that could not be written, why

    def pytest_runtest_logreport(self, report) -> None:
        record = getattr(report, RECORD_ATTR, None)
        if record is not None:
            self.state.aggregator.add(record)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session):
        try:
            outcome = yield
        except (session.Failed, session.Interrupted):
            # -x, --maxfail (or xdist stopping): what ran is still summed up, gated
            # (marked partial) and reported, then the stop goes on as pytest means it to.
            self.state.aggregator.partial = True
            self._decide(session)
            raise
        self._decide(session)
        return outcome

    def _decide(self, session: pytest.Session) -> None:
        """Aggregate, gate, snapshot, tell JUnit and write the reports; the exit status
        becomes 1 when the results fail the run. Gates are checked here, not in
        sessionfinish, where the exit status is fixed."""
        aggregator = self.state.aggregator
        if self.state.settings.partial is not None:
            self._write_partial(session)
            return
        if not aggregator.records:
            return
        from .snapshots import check_snapshots

        def snapshots(records, metrics):
            return check_snapshots(session.config, records, metrics, aggregator.suite_files,
                                   self.state.settings.snapshot_max_flips)

        self.result = result = aggregator.aggregate(snapshots, failures_before=session.testsfailed)
        if result.failed:
            session.testsfailed += 1  # a failed gate makes the exit status 1
        from .report import write_files

        self.unwritten = write_files(result)
        if self.unwritten:
            session.testsfailed += 1  # a CI step would find no report, or an old one
        add_junit_properties(session.config, result)
        add_junit_verdicts(session.config, result, self.unwritten)

    def _write_partial(self, session: pytest.Session) -> None:
        """A shard's end: its records to the partial file, nothing decided (shards.py)."""
        from .shards import write_shard

        state = self.state
        self.shard_lines, problem = write_shard(state.settings, state.models, state.aggregator, state.selection,
                                                state.share, session.testsfailed)
        if problem is not None:
            self.unwritten.append(problem)
            session.testsfailed += 1

    def pytest_terminal_summary(self, terminalreporter) -> None:
        verbosity = terminalreporter.verbosity
        if getattr(self, "shard_lines", None):
            lines = self.shard_lines if verbosity > -2 else ["socialbias " + self.shard_lines[0]]
            if verbosity > -2:
                terminalreporter.write_sep("=", "socialbias shard")
            for line in lines:
                terminalreporter.write_line(printable(line))
            for problem in self.unwritten:
                terminalreporter.write_line(f"ERROR: {problem}", red=True, bold=True)
            count_failures(terminalreporter, [], [("socialbias::report", problem) for problem in self.unwritten])
            return
        plan = self.state.aggregator.dry_plan
        if plan is not None:
            from .report.terminal import dry_run_lines, dry_run_one_line

            if verbosity <= -2:
                terminalreporter.write_line(dry_run_one_line(plan))
                return
            terminalreporter.write_sep("=", "socialbias dry run")
            for line in dry_run_lines(plan):
                terminalreporter.write_line(line)
            return
        result = self.result
        if result is None:
            return
        from .report.terminal import junit_gate_cases, summary_block

        if verbosity > -2:
            terminalreporter.write_sep("=", "socialbias summary")
        for line, colour in summary_block(result, self.unwritten, verbosity):
            terminalreporter.write_line(line, **({colour: True, "bold": True} if colour else {}))
        failures = [(nodeid, message) for nodeid, outcome, message, _ in junit_gate_cases(result, self.unwritten)
                    if outcome == "failed"]
        gates_file = result.gates_file or "thresholds.yaml"
        count_failures(terminalreporter, [f for f in failures if f[0].startswith(gates_file + "::")],
                        [f for f in failures if not f[0].startswith(gates_file + "::")])


# ---- fixtures ---------------------------------------------------------------------


def _model_fixture(request: pytest.FixtureRequest, role: str):
    state = request.config.stash[STATE]
    try:
        return state.models.model(role)
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
