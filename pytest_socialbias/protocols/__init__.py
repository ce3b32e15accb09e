"""What one case does, protocol by protocol, and the one table that names them.

Each protocol module declares a ``Protocol`` (protocols/base.py): its suite loader, its
case runner (a pure async function ``(case, roles, usage) -> record``), the metric
families its records feed, its defaults and the roles it needs. Adding a protocol = one
module with its entry, listed in ``PROTOCOLS`` (and its name in vocabulary.PROTOCOL_NAMES
and the suite schema).
"""

from __future__ import annotations

from pathlib import Path

from ..cases import Suite, SuiteOverrides, read_suite
from . import benevdial, detect, dymt, scripted, smoke, zeroshot
from .base import GuardRole, Protocol, Roles, outcome_of

PROTOCOLS: dict[str, Protocol] = {
    p.name: p
    for p in (
        smoke.PROTOCOL,
        dymt.PROTOCOL,
        zeroshot.PROTOCOL,
        scripted.PROTOCOL,
        benevdial.AGENT,
        benevdial.PAIRS,
        detect.PROTOCOL,
    )
}

__all__ = ["PROTOCOLS", "GuardRole", "Protocol", "Roles", "load_suite", "outcome_of", "required_roles"]


def _key_takers() -> dict[str, list[str]]:
    takers: dict[str, list[str]] = {}
    for protocol in PROTOCOLS.values():
        for key in protocol.keys:
            takers.setdefault(key, []).append(protocol.name)
    return takers


def load_suite(path: str | Path, overrides: SuiteOverrides | None = None) -> Suite:
    """Load a suite file with its protocol's loader; ConfigError naming file:line and the fix."""
    source = read_suite(Path(path))
    protocol = PROTOCOLS[source.protocol]
    source.check_keys(protocol.name, protocol.keys, _key_takers())
    return protocol.load(source, protocol, overrides or SuiteOverrides())


def required_roles(protocols) -> tuple:
    """The any-of role groups that the given protocols' cases need, in a stable order."""
    groups: list = []
    for name in sorted(protocols):
        for group in PROTOCOLS[name].requires:
            if group not in groups:
                groups.append(group)
    return tuple(groups)
