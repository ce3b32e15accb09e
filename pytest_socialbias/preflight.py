"""Checks before any worker starts or any model is called (controller only).

* Suite files named on the command line (or found under the folders named there) are
  loaded once, so a broken suite file is a usage error (exit status 4) naming the file,
  the line and the fix, with ``-n 0`` and ``-n N`` alike, instead of a collection error
  that only some workers see.
* Every gate in the thresholds file must name a suite defined by some suite file of the
  project (any YAML file under the rootdir marked ``socialbias: 1``), or ``judge-check``:
  a misspelt suite name would otherwise leave its gate silently not evaluated.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError
from .files import looks_like_suite, read_yaml, yaml_line
from .protocols import load_suite
from .vocabulary import JUDGE_CHECK_SUITE

#: Folders never searched for suite files.
SKIPPED_DIRS = {".git", ".hg", ".svn", ".venv", "venv", "env", "node_modules", "__pycache__", ".tox", ".nox",
                ".pytest_cache", ".socialbias", "site-packages", "build", "dist", "__snapshots__"}
SPECIAL_SUITES = (JUDGE_CHECK_SUITE,)
_SUITE_NAME = re.compile(r"^suite\s*:\s*['\"]?([A-Za-z0-9_-]+)['\"]?\s*(#.*)?$", re.MULTILINE)


def suite_files(paths: list[Path], ignored: list[Path]) -> list[Path]:
    """Suite files among ``paths`` (files, or folders searched recursively)."""
    out = []
    for path in paths:
        if path.is_file():
            if looks_like_suite(path):
                out.append(path)
            continue
        if not path.is_dir():
            continue
        for folder, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith(".")
                             and Path(folder, d).resolve() not in ignored)
            for name in sorted(files):
                candidate = Path(folder, name)
                if candidate.resolve() not in ignored and looks_like_suite(candidate):
                    out.append(candidate)
    return out


def project_suite_names(root: Path) -> set[str]:
    """Names of the suites defined anywhere under ``root`` (cheap: the ``suite:`` line)."""
    names = set()
    for path in suite_files([root], []):
        try:
            head = path.read_text(encoding="utf-8", errors="replace")[:65536]
        except OSError:
            continue
        match = _SUITE_NAME.search(head)
        if match:
            names.add(match.group(1))
    return names


#: Top-level keys of the plugin's own YAML files: a file named on the command line with one
#: of them but no ``socialbias:`` marker was meant as a suite (or is a file a suite reads).
_OUR_KEYS = re.compile(r"^(suite|protocol|cases|seeds|conditions|dialogues|styles|turns)\s*:", re.MULTILINE)


def check_named_files(paths: list[Path]) -> None:
    """ConfigError for a YAML file named on the command line that is not a suite but
    holds the plugin's keys (pytest alone would say "not found" of a file that exists)."""
    for path in paths:
        if path.suffix not in (".yaml", ".yml") or not path.is_file() or looks_like_suite(path):
            continue
        try:
            head = path.read_text(encoding="utf-8", errors="replace")[:65536]
        except OSError:
            continue
        keys = {match.group(1) for match in _OUR_KEYS.finditer(head)}
        if not keys:
            continue  # someone else's YAML: pytest (or its plugin) says what it says
        if keys & {"seeds", "conditions", "dialogues"} and not keys & {"suite", "protocol", "cases"}:
            raise ConfigError(
                f"{path}: not a suite file but a file a suite reads (its `{sorted(keys)[0]}:` list); name the suite "
                "file that points at it (e.g. `seeds: seeds.yaml` in suites/dymt/dymt.yaml) instead"
            )
        raise ConfigError(
            f"{path}:1: not collected: a suite file starts with the line `socialbias: 1` (the format version), "
            "then suite:, protocol: and its cases; add that line (docs/suites.md)"
        )


def check_suites(paths: list[Path], ignored: list[Path], overrides) -> list:
    """Load every suite file the run will collect, with the options' overrides (the very
    object collection uses); ConfigError on the first broken one. Returns the suites."""
    return [load_suite(path, overrides) for path in suite_files(paths, ignored)]


def check_gates_reachable(gates, suites, thresholds: Path, settings=None) -> None:
    """GateProblems (gates.py) naming every gate the run's own suites can never give a
    number (``gate_reach_problems``), each at its line."""
    from .gates import GateProblems

    problems = gate_reach_problems(gates, suites, thresholds, settings)
    if problems:
        raise GateProblems(thresholds, problems, gates)


def gate_reach_problems(gates, suites, thresholds: Path, settings=None) -> list[tuple[int, str]]:
    """ConfigError naming the gate's line when the run's own suite can never give its
    gate a number: a turn beyond the suite's turns (after --socialbias-turns), a
    category or style the suite has no case of, a detector variant it does not run, a
    detector the run's models do not make (``settings``: --judge, --guard), or a
    BenevDial role, axis or demographic value none of its dialogues has. ``allow_empty: true`` gates are left
    alone (they are meant for runs that may not measure them). Returns (line, problem)
    for each such gate, at the line of the key that cannot be met."""
    from .metrics.catalogue import turns_needed
    from .vocabulary import CATEGORIES, STYLES, TRACKS

    by_name: dict[str, list] = {}
    for suite in suites:
        by_name.setdefault(suite.name, []).extend(suite.cases)
    node = None
    found = []
    for gate in gates:
        cases = by_name.get(gate.suite)
        if not cases or gate.allow_empty:
            continue
        problem, key = None, None
        turns = max(case.turns for case in cases)
        needed = turns_needed(gate.metric)
        categories = sorted({case.category for case in cases})
        styles = sorted({case.style for case in cases if case.style})
        if needed > turns:
            from .protocols import PROTOCOLS

            protocol = PROTOCOLS.get(cases[0].protocol)
            longer = (f"pass --socialbias-turns={needed}" if protocol is not None and protocol.turns_option
                      else f"write turns: {needed} in the suite file")
            problem, key = (f"{gate.metric} needs {needed} turns, and the suite's dialogues have {turns} in this run; "
                            f"{longer}, gate an earlier turn, or add allow_empty: true"), "metric"
        elif gate.category in CATEGORIES and gate.category not in categories:
            problem, key = (f"the suite has no {gate.category} case (its categories: {', '.join(categories)}); "
                            "fix the category or add allow_empty: true"), "category"
        elif gate.style in STYLES + TRACKS and gate.style not in styles:
            problem, key = (f"the suite has no {gate.style} case (its styles: {', '.join(styles) or 'none'}); "
                            "fix the style or add allow_empty: true"), "style"
        elif cases[0].protocol == "benevdial_detect" and gate.style and gate.style not in styles:
            problem, key = (f"the suite runs no {gate.style} variant (its variants: {', '.join(styles) or 'none'}); "
                            "add it to the suite's variants:, fix the gate's variant, or add allow_empty: true"), "variant"
        elif cases[0].protocol == "benevdial_detect" and gate.category and settings is not None:
            problem, key = _detector_unreachable(gate.category, settings), "detector"
        else:
            problem, key = _benevdial_unreachable(gate, cases)
        if problem:
            if node is None:
                _, node = read_yaml(thresholds, "thresholds file")
            alternates = {"category": ("category", "axis", "value"), "style": ("style", "role", "variant"),
                          "variant": ("variant", "style"), "detector": ("detector", "category")}
            keys = [k for k in alternates.get(key, (key,)) if k is not None and _has_key(node, gate.index, k)]
            line = yaml_line(node, ["gates", gate.index] + keys[:1])
            found.append((line, f"gate {gate.name!r} can never be evaluated on suite {gate.suite!r}: {problem}"))
    return found


def _has_key(node, index: int, key: str) -> bool:
    """Whether the thresholds file's gate ``index`` writes ``key``."""
    try:
        gate = node.value[[k.value for k, _ in node.value].index("gates")][1].value[index]
    except (AttributeError, ValueError, IndexError):
        return False
    return any(k.value == key for k, _ in getattr(gate, "value", []))


def _detector_unreachable(detector: str, settings) -> str | None:
    """Why a detector suite run with ``settings`` never has ``detector``: its detectors
    are ``judge`` (or ``judge-1``.. and ``ensemble`` with several --judge), each judge's
    ``+demographics`` reading, and ``guard`` with --guard."""
    from .protocols.detect import detector_ids
    from .vocabulary import WITH_DEMOGRAPHICS

    judges = len(settings.judges) if settings.judges else 1  # the embedded model judges by default
    ids = detector_ids(judges, settings.guard is not None)
    possible = ids + [i + WITH_DEMOGRAPHICS for i in ids if i.startswith("judge")]
    if detector in possible:
        return None
    hint = ("pass --guard=SPEC" if detector == "guard"
            else "pass more --judge options" if detector == "ensemble" or detector.startswith("judge-")
            else "fix the gate's detector")
    return f"this run has no detector {detector} (its detectors: {', '.join(ids)}); {hint}, or add allow_empty: true"


def _benevdial_unreachable(gate, cases) -> tuple[str | None, str | None]:
    """Why a BenevDial dialogue suite's cases can never fill a gate's ``axis``/``value``
    (its category: ``gender`` or ``gender=female``) or ``role`` (its style); None when
    they can, or when a case does not say (hand-written pairs). Returns (why, the gate's
    key at fault: style or category) or (None, None)."""
    from .vocabulary import AXES

    if cases[0].protocol not in ("benevdial_agent", "benevdial_pairs"):
        return None, None
    roles, values, axes = set(), set(), set()
    for case in cases:
        condition, pair = case.extra.get("condition"), case.extra.get("pair")
        if condition is not None and hasattr(condition, "profile"):
            roles.add(condition.role)
            profiles = [condition.profile]
        elif pair is not None and hasattr(pair, "axis"):
            roles.add(pair.role)
            axes.add(pair.axis)
            profiles = [pair.a, pair.b]
        else:
            return None, None
        for profile in profiles:
            values.update(f"{axis}={profile.value(axis)}" for axis in AXES)
    if gate.style and gate.style not in roles:
        return (f"the suite has no {gate.style} role (its roles: {', '.join(sorted(roles))}); "
                "sample more, fix the gate's role or add allow_empty: true"), "style"
    category = gate.category
    if not category:
        return None, None
    axis, _, value = category.partition("=")
    if axis not in AXES:
        return None, None
    if value and category not in values:
        present = sorted(v.partition("=")[2] for v in values if v.startswith(axis + "="))
        return (f"no {'pair' if axes else 'dialogue'} of the suite has {axis} {value} (its {axis} values: "
                f"{', '.join(present)}); sample more of it, fix the gate's value or add allow_empty: true"), "category"
    if not value and cases[0].protocol == "benevdial_pairs" and axis not in axes:
        return (f"no pair of the suite differs in {axis} (its pairs' axes: {', '.join(sorted(axes))}); "
                "sample more pairs, fix the gate's axis or add allow_empty: true"), "category"
    return None, None


@dataclass
class Thresholds:
    """The gates of a run's thresholds file, as load_thresholds read them."""

    gates: list
    file: Path | None = None  # None: no thresholds file (none given, no thresholds.yaml)
    known: set | None = None  # the project's suite names, when looked up
    pending: object = None  # the file's own problems (gates.GateProblems), kept to be named with more


def load_thresholds(settings, root: Path, option: str = "--socialbias-thresholds", look_up_suites: bool = True,
                    keep_problems: bool = False) -> Thresholds:
    """The gates of the thresholds file ``settings`` name (``--socialbias-thresholds``, else
    thresholds.yaml in ``root`` if present), for a run (plugin.py) and for combine alike.
    ``look_up_suites``: read the project's suite names, so that a gate naming a misspelt
    suite is named with the file's other problems (with --socialbias-gates-for=all they are
    checked here and ``judge-check`` counts as one). A problem of the file is a ConfigError
    (gates.GateProblems), unless ``keep_problems`` and the names were looked up: then it is
    kept in ``pending``, with the gates read, to be named with the problems the run's
    suites add (plugin._preflight)."""
    from .gates import GateProblems, load_gates

    if settings.thresholds is None and not settings.thresholds_file.exists():
        return Thresholds([])
    if not settings.thresholds_file.exists():
        raise ConfigError(f"{option}={settings.thresholds}: file not found; give an existing thresholds.yaml or leave "
                          "the option out")
    every = settings.gates_for != "present"
    known = None
    if look_up_suites:
        known = project_suite_names(root)
        if every:
            known = known | set(SPECIAL_SUITES)
    try:
        gates = load_gates(settings.thresholds_file, known_suites=known if every else None, root=root)
    except GateProblems as exc:
        if not keep_problems or known is None:
            raise
        return Thresholds(exc.gates, settings.thresholds_file, known, exc)
    return Thresholds(gates, settings.thresholds_file, known)


def check_gate_suites(gates, thresholds: Path, root: Path, present_only: bool = False,
                      known: set | None = None) -> tuple[list, list]:
    """``(kept, skipped)``: the gates whose suite a suite file under ``root`` defines, and
    those of suites none defines. Skipped only with ``present_only``
    (``--socialbias-gates-for=present``: a copied thresholds.yaml that names suites this
    project does not have); otherwise GateProblems naming every such gate at the line of
    its suite, with the nearest known suite name. The option is offered only when no
    unknown name is near a known one: it would drop a misspelt gate without a word.
    ``known``: the project's suite names, when already read."""
    from .gates import GateProblems

    if not gates:
        return list(gates), []
    known = (project_suite_names(root) if known is None else set(known)) | set(SPECIAL_SUITES)
    unknown = [gate for gate in gates if gate.suite not in known]
    if present_only or not unknown:
        return [gate for gate in gates if gate.suite in known], unknown
    raise GateProblems(thresholds, unknown_suite_problems(unknown, thresholds, root, known), gates)


def unknown_suite_problems(unknown, thresholds: Path, root: Path, known: set) -> list[tuple[int, str]]:
    """(line of its suite, problem) for each gate naming a suite no suite file defines."""
    from .gates import unknown_suite_text

    _, node = read_yaml(thresholds, "thresholds file")
    return [(yaml_line(node, ["gates", gate.index, "suite"]), f"gate {gate.name!r} " + unknown_suite_text(gate.suite, known, root))
            for gate in unknown]
