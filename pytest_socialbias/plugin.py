"""pytest hooks and fixtures: thin wiring. The work lives in the objects they call.

* options.py: every option, declared once, read into one Settings object;
* modelset.py: the run's models by role (both sides use it);
* worker.py: the worker side, running cases batch by batch (every process that runs items);
* aggregate.py: the aggregating side, records -> one frozen RunResult (only the process
  that reports: the xdist controller, or the only process);
* report/: the writers of that result.

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

from . import heap, roles
from .aggregate import Aggregator, shown_path
from .batching import batch_ids, suite_batch_size
from .errors import ConfigError
from .files import joined_path, looks_like_suite
from .gates import GateProblems, load_gates
from .modelset import ModelSet
from .options import add_options, read_settings
from .preflight import SPECIAL_SUITES, project_suite_names
from .protocols import load_suite
from .report.formatting import printable
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
        xdist hands their ``workeroutput`` back to the controller (XdistController)."""
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


def _role(config: pytest.Config) -> roles.ProcessRole:
    """This process's role (roles.py), as configured."""
    state = config.stash.get(STATE, None)
    return state.models.role if state is not None else roles.choose(config)


def pytest_configure(config: pytest.Config) -> None:
    from .protocols import forget_suites

    forget_suites()  # suites are read once per session (preflight, then collection)
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
    role = roles.choose(config)
    calls_models = not (config.option.collectonly or config.getoption("help", False) or config.getoption("version", False))
    try:
        settings = read_settings(config)
        from . import prompts

        prompts.use_overrides(settings.prompts)  # before anything renders a prompt
        models = ModelSet(settings, role)
        gates, gates_file, pending, known = [], None, None, None
        if settings.thresholds is not None or settings.thresholds_file.exists():
            if not settings.thresholds_file.exists():
                raise ConfigError(
                    f"--socialbias-thresholds={settings.thresholds}: file not found; give an existing "
                    "thresholds.yaml or leave the option out"
                )
            gates_file = settings.thresholds_file
            known = None
            if role.aggregates and not (config.getoption("help", False) or config.getoption("version", False)):
                # The project's suites, so that a misspelt suite is named with the file's other problems.
                known = project_suite_names(Path(config.rootpath))
                if settings.gates_for != "present":
                    known = known | set(SPECIAL_SUITES)
            try:
                gates = load_gates(gates_file, known_suites=known if settings.gates_for != "present" else None,
                                   root=Path(config.rootpath))
            except GateProblems as exc:
                if not role.aggregates or known is None:
                    raise
                # Named with what the run's suites add (gates they can never evaluate).
                gates, pending = exc.gates, exc
        aggregator = _aggregator(config, settings, models, gates, gates_file, pending, known) if role.aggregates else None
        if isinstance(role, roles.Worker):
            from .models import managed

            managed.URLS.update(role.workerinput.get("socialbias_servers") or {})
            role.queued = lambda: [item.case for item in _xdist_queued_items(config)]
        if calls_models:
            models.start_servers()  # this role's share (roles.py): shared, per-worker, or all
            if role.runs_cases:
                # Only where the cases run: not for --collect-only, and not in an xdist
                # controller, which calls no model (importing an SDK there cost 1.4 s of CPU
                # that its workers, on the same cores, wanted).
                models.start_warm_up()
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[STATE] = state = RunState(settings, models, CaseRunner(models), aggregator)
    if role.aggregates:
        config.pluginmanager.register(Controller(state), "socialbias-controller")
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(XdistController(state), "socialbias-xdist-controller")


def _aggregator(config: pytest.Config, settings, models, gates, gates_file, pending=None, known=None) -> Aggregator:
    """The aggregating process's Aggregator, after the checks made before any work: the
    cache usable, the suites sound, every gate's suite present and reachable. ``pending``:
    the thresholds file's own problems (gates.GateProblems), named with those the run's
    suites add, in one message; ``known``: the project's suite names."""
    if settings.record != "off":
        from .cache import CallCache

        # Fail now, before any work, if the folder is unusable or the file damaged.
        CallCache(settings.cache_dir, settings.record, verify=True).close()
    gates, skipped = _preflight(config, settings, gates, pending, known)
    aggregator = Aggregator(settings, models, gates, gates_file)
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
    from . import prompts

    prompts.use_overrides(None)  # ours again for whatever runs next in this process
    state = config.stash.get(STATE, None)
    if state is not None:
        state.models.close()
    heap.restore()


def pytest_report_header(config: pytest.Config) -> list[str]:
    state = config.stash.get(STATE, None)
    if state is None or not state.models.specs:
        return []
    specs = ", ".join(f"{role}={spec.resolved}" for role, spec in sorted(state.models.specs.items()))
    lines = [f"socialbias: {specs}; record={state.settings.record}, cache={state.settings.cache_dir}"]
    if state.settings.prompts is not None:
        from . import prompts

        lines.append(f"socialbias: prompts from {state.settings.prompts} in place of ours: {', '.join(prompts.overridden())}")
    aggregator = state.aggregator
    if state.settings.partial is not None:
        shard = state.settings.shard
        which = f"shard {shard} ({shard.source})" if shard is not None else "the whole run as shard 1/1"
        lines.append(f"socialbias: {which}: records to {shown_path(state.settings.partial)}; gates, comparison "
                     "and reports come from `python -m pytest_socialbias combine`")
    elif aggregator is not None and aggregator.gates_file is None:
        strict = "the run fails (--socialbias-strict)" if state.settings.strict else "no gate decides this run"
        lines.append(f"socialbias: NO THRESHOLDS FILE ({shown_path(state.settings.thresholds_file)} not found): {strict}")
    elif aggregator is not None:
        lines.append(f"socialbias: {len(aggregator.gates)} gate(s) from {shown_path(aggregator.gates_file)}")
        for suite, why in aggregator.declared_ungated.items():
            lines.append(f"socialbias: suite {suite} is UNGATED on purpose ({shown_path(aggregator.gates_file)}): {why}")
        if aggregator.skipped_gates:
            hints = aggregator.skipped_hints
            names = [suite + hints.get(suite, "") for suite in sorted({gate.suite for gate in aggregator.skipped_gates})]
            lines.append(
                f"socialbias: skipped {len(aggregator.skipped_gates)} gate(s) of suites this project does not have "
                f"({', '.join(names)}; --socialbias-gates-for=present)"
            )
    if aggregator is not None and aggregator.selection_filters and state.settings.partial is None:
        given = " ".join(aggregator.selection_filters)
        if state.settings.allow_partial:
            lines.append(f"socialbias: selection {given}: a run that leaves out cases of its suites is PARTIAL "
                         "(ALLOWED by --socialbias-allow-partial: its exit status is the gates' on the cases selected)")
        else:
            lines.append(f"socialbias: selection {given}: a run that leaves out cases of its suites is PARTIAL and "
                         "never passes (gate a category in the suite or thresholds file; --socialbias-allow-partial "
                         "for local debugging)")
    servers = state.models.servers.describe() if state.models.servers is not None else []
    for server in servers:
        gpus = f"GPUs {server['gpus']}" if server["gpus"] else "all visible GPUs"
        replica = f"replica {server['replica']}, " if server.get("replica") else ""
        lines.append(
            f"socialbias: {server['provider']} server for {server['model']} at {server['url']} ({replica}{gpus}; one server "
            f"for {', '.join(server['roles'])} on every worker; ready in {server['ready_s']} s; log {server['log']})"
        )
    from .models.managed import placement
    from .models.providers import MANAGED, provider_of

    for role, spec in sorted(state.models.specs.items()):
        if provider_of(spec).can(MANAGED) and placement(spec) == "worker" and roles.xdist_workers(config):
            lines.append(
                f"socialbias: {role}: one {spec.provider} server per worker, each on its share of "
                f"{'GPUs ' + state.settings.gpus if state.settings.gpus else 'the visible GPUs'} "
                f"(logs .socialbias/servers/*-gwN.log)"
            )
    in_process = {role: spec for role, spec in state.models.specs.items() if spec.provider in ("hf", "hfcls")}
    if in_process:
        from .models.hf_backend import device_plan
        from .models.providers import get as provider_named

        for role, spec in sorted(in_process.items()):
            lines.append(f"socialbias: {role} ({spec.provider}:) runs in each process that runs cases, "
                         f"{device_plan(spec, state.settings.gpus, roles.xdist_workers(config))}")
            batch = spec.runtime.get("max_batch", provider_named(spec.provider).batch_defaults[0])
            if isinstance(batch, int) and batch > state.settings.concurrency:
                lines.append(f"socialbias: {role}: max_batch={batch}, but at most {state.settings.concurrency} calls "
                             "are in flight per process, for every role together (--socialbias-concurrency): "
                             "batches stay smaller; raise the concurrency to fill them")
    head = state.models.classifier
    if head is not None:
        from .judges.classifier import THREE_CLASS

        labels = ", ".join(f"{label} -> {target}" for label, target in head.mapping.items())
        what = "three-class" if head.output == THREE_CLASS else "binary (cannot tell OB from BB)"
        lines.append(f"socialbias: guard is a {what} classifier head: {labels} ({head.source})")
    return lines


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
    if not _role(config).aggregates:
        return []
    return _collection_lines(config, start_path)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Under xdist only the workers collect: each hands its collection lines to the
    controller (XdistController prints them once, in the terminal summary)."""
    config = session.config
    if isinstance(_role(config), roles.Worker):
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
    role = state.models.role
    # A dry run and --collect-only call no model: they need none installed or given.
    plan_only = bool(state.settings.dry_run or config.option.collectonly)
    try:
        state.models.use_local_default(plan_only=plan_only)
    except ConfigError as exc:
        if role.usage_errors():
            raise pytest.UsageError(str(exc)) from None
        state.setup_error = str(exc)
    state.protocols = {item.case.protocol for item in cases}
    missing = state.models.missing_roles(state.protocols)
    if config.option.collectonly:
        # Listing the cases (an IDE's discovery) calls nothing: say what a real run would use.
        line = state.models.models_line()
        if missing:
            line += f"; a real run also needs {', '.join(missing)}"
        config.stash[MODELS_LINE] = line
        missing = []
    if missing and role.usage_errors():
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
    if state.settings.dry_run and role.aggregates:
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
    if isinstance(state.models.role, roles.Worker):
        config.workeroutput["socialbias_selection"] = state.selection
        config.workeroutput["socialbias_share"] = state.share
    return kept


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    state = session.config.stash.get(STATE, None)
    if state is not None and isinstance(state.models.role, roles.Worker):
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
        if state.cases.progress is None and state.models.role.aggregates:
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


class XdistController:
    """xdist-only hooks, registered only when xdist is there (so -p no:xdist works)."""

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

        node.workerinput["socialbias_servers"] = dict(managed.URLS)
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


class Controller:
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
        _junit_properties(session.config, result)
        _junit_verdicts(session.config, result, self.unwritten)

    def _write_partial(self, session: pytest.Session) -> None:
        """A shard's end: its records and the run's metadata to the partial file; no gate,
        no comparison, no report (combine makes them from every shard's file)."""
        from .shards import Shard, partial_data, record_key, selection_digest, write_partial

        state, aggregator = self.state, self.state.aggregator
        settings, models = state.settings, state.models
        aggregator.name_local_models()
        shard = settings.shard or Shard(1, 1, "--socialbias-partial")
        selection = state.selection or {
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
        data = partial_data(shard, selection, settings, models, aggregator, failures_before=session.testsfailed,
                            judge_check=judge_check)
        share = state.share or {"cases": len(aggregator.records)}
        calls = f", {share['calls']:,} of {share['calls_all']:,} planned calls" if "calls" in share else ""
        self.shard_lines = [
            f"shard {shard} ({shard.source}): {share['cases']} of the run's {selection['cases']} case(s){calls}",
            f"partial file: {shown_path(settings.partial)} ({len(aggregator.records)} record(s)); no gate is decided "
            "here: `python -m pytest_socialbias combine PARTS...` decides them from every shard's file",
        ]
        try:
            write_partial(settings.partial, data)
        except OSError as exc:
            self.unwritten.append(f"--socialbias-partial={settings.partial}: not written ({exc.strerror or exc})")
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
            _count_failures(terminalreporter, [], [("socialbias::report", problem) for problem in self.unwritten])
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
        _count_failures(terminalreporter, [f for f in failures if f[0].startswith(gates_file + "::")],
                        [f for f in failures if not f[0].startswith(gates_file + "::")])


class _UncountedReport(pytest.TestReport):
    """A failed report that pytest's last line does not count (_count_failures)."""

    count_towards_summary = False


def _count_failures(terminalreporter, gates: list[tuple[str, str]], others: list[tuple[str, str]]) -> None:
    """What fails the run, on pytest's last line and in its colour: ``1 failed gate``
    (a gate that failed or cannot decide) and ``1 socialbias failure`` (an ungated suite,
    a partial run, flipped snapshots, a report not written), in red.

    pytest builds that line from ``terminalreporter.stats``: one part per key, counting
    its reports; the line is red when a ``failed`` key is there. So each failure goes in
    twice: under our key, counted, and under ``failed``, not counted
    (``count_towards_summary``), which makes the line red and lists the failure in the
    short test summary (``FAILED thresholds.yaml::bias - ...``) without calling it a
    failed test. A part's own colour comes from a table private to pytest: set for our
    keys when it is there (without it the part is yellow, the line still red). pytest
    also keeps the list of keys it shows from its last progress line when the run stopped
    early (-x): that list is dropped so it is made again with ours."""
    if gates or others:
        if getattr(terminalreporter, "_known_types", None) is not None:
            terminalreporter._known_types = None
    for key, failures in (("failed gate", gates), ("socialbias failure", others)):
        if not failures:
            continue
        key = key if len(failures) == 1 else key + "s"
        try:
            from _pytest import terminal

            terminal._color_for_type.setdefault(key, "red")
        except (ImportError, AttributeError):  # pragma: no cover - pytest moved it
            pass
        for nodeid, message in failures:
            location = (nodeid.split("::")[0], None, nodeid)
            counted = pytest.TestReport(nodeid=nodeid, location=location, keywords={}, outcome="failed",
                                        longrepr=message, when="call")
            red = _UncountedReport(nodeid=nodeid, location=location, keywords={}, outcome="failed",
                                   longrepr=message, when="call")
            terminalreporter.stats.setdefault(key, []).append(counted)
            terminalreporter.stats.setdefault("failed", []).append(red)


def _junit_verdicts(config: pytest.Config, result, unwritten: list[str]) -> None:
    """What decides the run, as JUnit test cases, so that a CI test view (GitLab's merge
    request widget, GitHub's test reporters) says what the exit status says: one case per
    gate (``thresholds.yaml::NAME``: failed with its numbers and reason, skipped when not
    evaluated), plus a failed case for a run that fails without any gate failing (no
    thresholds file under --socialbias-strict, flipped snapshots, a report not written)."""
    try:
        from _pytest.junitxml import xml_key
    except ImportError:  # pragma: no cover - pytest moved it
        return
    xml = config.stash.get(xml_key, None)
    if xml is None:
        return
    from .report.terminal import junit_gate_cases

    for nodeid, outcome, message, properties in junit_gate_cases(result, unwritten):
        location = (nodeid.split("::")[0], None, nodeid)
        longrepr = (location[0], 0, message) if outcome == "skipped" else message
        for when, phase_outcome in (("call", outcome), ("teardown", "passed")):
            report = pytest.TestReport(
                nodeid=nodeid, location=location, keywords={}, outcome=phase_outcome,
                longrepr=longrepr if when == "call" else None, when=when, user_properties=list(properties),
            )
            xml.pytest_runtest_logreport(report)


def _junit_properties(config: pytest.Config, result) -> None:
    """Gate verdicts, key metrics and comparison verdicts as ``--junitxml`` properties."""
    try:
        from _pytest.junitxml import xml_key  # no public API for suite-level properties
    except ImportError:  # pragma: no cover - pytest moved it
        return
    xml = config.stash.get(xml_key, None)
    if xml is None:
        return
    from .report.terminal import junit_properties

    for name, value in junit_properties(result):
        xml.add_global_property(name, value)


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
