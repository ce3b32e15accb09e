"""What one case does, protocol by protocol, and the one table that names them.

Each protocol module declares a ``Protocol`` (protocols/base.py): its suite loader, its
case runner (a pure async function ``(case, roles, usage) -> record``), the metric
families its records feed, its defaults and the roles it needs. Adding a protocol = one
module with its entry, registered in ``PROTOCOLS`` (here, or from a project's conftest.py
with ``register_protocol``); the suite schema takes any name, and loading checks it
against the registry.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..cases import Suite, SuiteOverrides, read_suite
from ..errors import ConfigError
from ..models.secrets import secret_param
from ..models.spec import DECODING_PARAMS, check_param
from ..registry import Registry
from ..runcache import current
from ..vocabulary import NO_PRESET
from . import benevdial, detect, dymt, scripted, smoke, zeroshot
from .base import GuardRole, Protocol, Roles, outcome_of
from .user_check import REPORT_FINDINGS

#: Every protocol a suite's ``protocol:`` can name (registry.py): the plugin's, and any a
#: project's conftest.py registers.
PROTOCOLS: Registry[Protocol] = Registry("protocol")
for _protocol in (smoke.PROTOCOL, dymt.PROTOCOL, zeroshot.PROTOCOL, scripted.PROTOCOL, benevdial.AGENT,
                  benevdial.PAIRS, detect.PROTOCOL):
    PROTOCOLS.register(_protocol)


def register_protocol(protocol: Protocol) -> Protocol:
    """Add (or replace) a protocol; its name becomes valid as a suite's ``protocol:``."""
    return PROTOCOLS.register(protocol)


__all__ = ["PROTOCOLS", "GuardRole", "Protocol", "Roles", "forget_suites", "load_suite", "outcome_of",
           "register_protocol", "required_roles"]


def _key_takers() -> dict[str, list[str]]:
    takers: dict[str, list[str]] = {}
    for protocol in PROTOCOLS.values():
        for key in protocol.keys:
            takers.setdefault(key, []).append(protocol.name)
    return takers


def _unknown_protocol(name) -> str:
    """``unknown protocol 'dymtt' (did you mean 'dymt'?); known: ...``, the nearest name
    found whatever the case."""
    import difflib

    names = [str(key) for key in PROTOCOLS]
    folded = {n.casefold(): n for n in names}
    close = difflib.get_close_matches(str(name).casefold(), list(folded), n=1, cutoff=0.6)
    hint = f" (did you mean {folded[close[0]]!r}?)" if close else ""
    return f"unknown protocol {name!r}{hint}; known: {', '.join(names)}"


def forget_suites() -> None:
    """Read suite and seeds files again within this run (a tool or test that edits them
    between loads); each run starts with none read (runcache.py)."""
    caches = current()
    caches.suites.clear()
    caches.seeds.clear()


def load_suite(path: str | Path, overrides: SuiteOverrides | None = None) -> Suite:
    """Load a suite file with its protocol's loader; ConfigError naming file:line and the fix.

    A file loaded before in this run, unchanged since (same size and modification time)
    and with the same overrides, gives the same Suite (treat it as read-only): the
    preflight and the collection load every suite file, so the second load is free. The
    next run reads it again (runcache.py), with the files it names (seeds, dialogues)."""
    path = Path(path)
    overrides = overrides or SuiteOverrides()
    try:
        resolved = path.resolve()
        stat = resolved.stat()
        key = (str(resolved), stat.st_mtime_ns, stat.st_size, overrides)
    except OSError:
        key = None
    loaded = current().suites
    if key is not None and key in loaded:
        return loaded[key]
    suite = _load_suite(path, overrides)
    if key is not None:
        loaded[key] = suite
    return suite


def protocol_named(name) -> Protocol | None:
    """The protocol a suite's ``protocol:`` names, as written in the docs too: case and
    ``-``/``_`` do not matter (``DyMT``, ``BenevDial-agent``)."""
    found = PROTOCOLS.get(name)
    if found is None and isinstance(name, str):
        wanted = name.strip().lower().replace("-", "_")
        found = next((p for key, p in PROTOCOLS.items() if str(key).lower().replace("-", "_") == wanted), None)
    return found


def _load_suite(path: Path, overrides: SuiteOverrides) -> Suite:
    source = read_suite(path, overrides.root)
    apply_preset(source, overrides)
    protocol = protocol_named(source.protocol)
    if protocol is None:
        raise source.error(["protocol"], _unknown_protocol(source.protocol) + "; a project adds one with "
                           "pytest_socialbias.protocols.register_protocol in its conftest.py")
    # Cases, records and reports carry the registered name (``DyMT`` in a file is ``dymt``).
    source.data["protocol"] = protocol.name
    source.check_keys(protocol.name, protocol.keys, _key_takers())
    suite = protocol.load(source, protocol, overrides)
    params = judge_params(source)
    if params:
        suite.cases = [replace(case, judge_params=params) for case in suite.cases]
    if source.data.get("preset"):
        suite.cases = [replace(case, preset=source.data["preset"]) for case in suite.cases]
    findings = (overrides.simulator_findings or source.data.get("simulator_findings")
                or (REPORT_FINDINGS if source.data.get("preset") == "paper" else None))
    if findings:
        suite.cases = [replace(case, simulator_findings=findings) for case in suite.cases]
    check = simulator_check(source)
    if check == "embedded":
        from .turn_embed import check_available

        check_available(f"{source.path}:{source.line('simulator_check')}: simulator_check: embedded")
    if check is not None:
        suite.cases = [replace(case, simulator_check=check) for case in suite.cases]
    if source.data.get("prompts"):
        from .. import prompts

        folder = source.place("prompts", "the prompts folder")
        try:
            where = f"{source.path}:{source.line('prompts')}: prompts"
            found = tuple(sorted(prompts.check_folder(folder, where, suite=True).items()))
        except ConfigError as exc:
            raise ConfigError(str(exc)) from None
        suite.cases = [replace(case, prompts=found) for case in suite.cases]
    return suite


def apply_preset(source, overrides: SuiteOverrides) -> None:
    """``--socialbias-preset`` over the suite's ``preset:``: ``paper`` as if the suite said
    ``preset: paper`` (its own keys still win over what the preset sets, as in the file),
    ``none`` as if it said no preset."""
    if overrides.preset == NO_PRESET:
        source.data.pop("preset", None)
    elif overrides.preset is not None:
        source.data["preset"] = overrides.preset


def simulator_check(source) -> str | None:
    """A suite's ``simulator_check:`` (rules, embedded or judge; the suite schema holds it
    to these), or None."""
    return source.data.get("simulator_check")


#: What ``preset: paper`` sets, by protocol: the BenevDial paper's judge decoding for the
#: protocols whose judge is its treatment judge (the DyMT summary gives none for its judge).
PAPER_JUDGE_PARAMS = {"temperature": 0.6, "top_p": 0.9, "max_tokens": 2000}
PAPER_JUDGE_PROTOCOLS = ("benevdial_agent", "benevdial_pairs", "benevdial_detect")


def judge_params(source) -> tuple:
    """A suite's ``judge_params:`` (the spec parameters' names and ranges; ``none`` drops
    what a judge would send) as sorted pairs; ConfigError at file:line otherwise. With
    ``preset: paper`` a BenevDial suite starts from the paper's judge decoding
    (``PAPER_JUDGE_PARAMS``), and its own ``judge_params:`` win name by name."""
    given = source.data.get("judge_params") or {}
    if source.data.get("preset") == "paper" and source.protocol in PAPER_JUDGE_PROTOCOLS:
        given = {**PAPER_JUDGE_PARAMS, **given}
    out = []
    for name, value in given.items():
        if secret_param(str(name)):
            raise source.error(["judge_params", name], f"judge_params: {name} looks like a secret; a suite file is "
                               "recorded and reported, so it carries none: remove it (keys are read only from the "
                               "environment)")
        if isinstance(value, str) and value.strip().lower() == "none":
            value = None
        elif name in DECODING_PARAMS:
            try:
                value = check_param(name, value)
            except ValueError as exc:
                raise source.error(["judge_params", name], f"judge_params: {exc}") from None
        out.append((name, value))
    return tuple(sorted(out))


def required_roles(protocols) -> tuple:
    """The any-of role groups that the given protocols' cases need, in a stable order."""
    groups: list = []
    for name in sorted(protocols):
        for group in PROTOCOLS[name].requires:
            if group not in groups:
                groups.append(group)
    return tuple(groups)
