"""Cases and suites: the typed form of a suite file, and what every suite loader shares.

A YAML file is a suite when its top level has ``socialbias: 1``. ``read_suite`` parses and
validates it against the suite schema; the protocol it names then loads its cases (one
loader per protocol, see ``protocols.load_suite``). Errors name the file, the line, the
path inside the document and what was expected.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigError
from .files import named_path, read_yaml, relative_file, validate, yaml_line
from .vocabulary import DEFAULT_GUIDANCE

DEFAULT_BATCH_SIZE = 64

#: Keys every suite file may have, whatever its protocol.
COMMON_KEYS = ("socialbias", "suite", "protocol", "description", "turns", "batch_size", "judge_params", "simulator_check",
               "prompts", "preset", "simulator_findings")


@dataclass(frozen=True)
class Case:
    """One case of a suite in one user-simulator style (style None where none applies)."""

    suite: str
    protocol: str
    id: str
    category: str
    group: str
    statement: str
    style: str | None = None  # user-simulator style, scripted track, or detector variant
    turns: int = 1
    user_turns: tuple | None = None  # fixed user turns given by the source (FairMT files)
    suite_sha256: str = ""  # of the suite file (and its seeds file): report metadata
    # Protocol data that is not a seed (BenevDial: the condition or pair, its conditions
    # file, the judge options); left out of equality and hashing.
    extra: dict = field(default_factory=dict, compare=False, hash=False)
    markers: tuple = ()  # extra pytest markers (BenevDial: role and demographic values)
    # The suite's ``judge_params:`` as sorted (name, value) pairs: sent on every judge call
    # of the case, over the judges' own settings (a judge spec's parameters still win).
    judge_params: tuple = ()
    # The suite's ``simulator_check:`` ("judge": the judge also checks every simulated
    # user turn of the case, as --socialbias-simulator-check=judge does for every suite).
    simulator_check: str | None = None
    # The suite's ``prompts:`` folder as sorted (template name, file) pairs: its files replace
    # ours (and the run's --socialbias-prompts) for this case's calls (prompts.SUITE_OVERRIDES).
    prompts: tuple = ()
    # The suite's ``preset:`` ("paper": the papers' settings where ours differ), reported.
    preset: str | None = None
    # What a simulated-user check's finding does in this suite (``simulator_findings:``, or
    # ``report`` under ``preset: paper``): None keeps the run's (redraw).
    simulator_findings: str | None = None

    @property
    def name(self) -> str:
        """The case's name within its suite: ``gender-017`` or ``gender-017[implicit]``.
        It is the pytest item's name, so node ids never depend on batching."""
        return self.id + (f"[{self.style}]" if self.style else "")

    @property
    def key(self) -> str:
        """Unique within a run: suite and name."""
        return f"{self.suite}::{self.name}"

    def to_dict(self) -> dict:
        return {
            "suite": self.suite,
            "protocol": self.protocol,
            "id": self.id,
            "category": self.category,
            "group": self.group,
            "statement": self.statement,
            "style": self.style,
            "turns": self.turns,
            "user_turns": list(self.user_turns) if self.user_turns is not None else None,
            "suite_sha256": self.suite_sha256,
        }


@dataclass
class Suite:
    path: Path
    name: str
    protocol: str
    turns: int
    styles: tuple
    batch_size: int
    cases: list = field(default_factory=list)  # list[Case], sorted
    notes: list = field(default_factory=list)  # e.g. what a lenient loader skipped


@dataclass(frozen=True)
class SuiteOverrides:
    """What options override in suite files; collection and preflight load suites with the
    same object, so they cannot disagree."""

    turns: int | None = None  # --socialbias-turns (protocols that take it)
    fairmt_dir: Path | None = None  # --socialbias-fairmt-dir (suites with source: fairmt)
    fairmt_release: str | None = None  # --socialbias-fairmt-release (scripted suites with source: fairmt)
    sample: int | str | None = None  # --socialbias-sample (BenevDial target mode)
    guidance: str | None = None  # --socialbias-guidance
    judge_demographics: bool | None = None  # --socialbias-judge-demographics
    demographic_flips: bool | None = None  # --socialbias-demographic-flips (detector suites)
    dialogues: Path | None = None  # --socialbias-dialogues (detector suites)
    guard_unit: str | None = None  # --socialbias-guard-unit (detector suites)
    preset: str | None = None  # --socialbias-preset: every suite's preset: (none: dropped)
    simulator_findings: str | None = None  # --socialbias-simulator-findings: over every suite's
    #: The folder the files a suite names must lie in (pytest's rootdir); None: anywhere
    #: (--socialbias-allow-outside-files, or a suite loaded outside a run).
    root: Path | None = None


@dataclass(frozen=True)
class SuiteSource:
    """A suite file read and checked against the suite schema, for its protocol's loader."""

    path: Path
    data: dict
    node: object  # the composed YAML tree, for line numbers
    root: Path | None = None  # where the files it names must lie (SuiteOverrides.root)

    @property
    def name(self) -> str:
        return self.data["suite"]

    @property
    def protocol(self) -> str:
        return self.data["protocol"]

    @property
    def batch_size(self) -> int:
        return self.data.get("batch_size", DEFAULT_BATCH_SIZE)

    def line(self, *where) -> int:
        return yaml_line(self.node, list(where))

    def error(self, where: tuple | list, message: str) -> ConfigError:
        """A ConfigError at ``file:line`` of the key path ``where``."""
        return ConfigError(f"{self.path}:{self.line(*where) if where else 1}: {message}")

    def file(self, key: str, what: str) -> Path:
        """A file the suite names under ``key``, relative to the suite file, checked to
        exist and to lie inside ``root``."""
        return relative_file(self.path, self.node, key, self.data[key], what, self.root)

    def place(self, key: str, what: str) -> Path:
        """A path the suite names under ``key``, relative to the suite file, checked to lie
        inside ``root`` (its loader says what is wrong with what is there)."""
        return named_path(self.path, self.node, key, self.data[key], what, self.root)

    def digest(self, *others: Path) -> str:
        """sha256 over the suite file and the files it draws its cases from."""
        digest = hashlib.sha256(self.path.read_bytes())
        for other in others:
            digest.update(Path(other).read_bytes())
        return digest.hexdigest()

    def check_keys(self, protocol: str, accepted: tuple, takers: dict[str, list[str]]) -> None:
        """Every key must be one this protocol takes; a key of another protocol is named
        with the protocols that take it."""
        for key in self.data:
            if key in COMMON_KEYS or key in accepted:
                continue
            owners = ", ".join(takers.get(key, [])) or "no protocol"
            raise self.error(
                [key],
                f"`{key}:` is not a key of {protocol} suites (it is for {owners}); "
                f"{protocol} suites take: {', '.join(accepted)}",
            )


def read_suite(path: Path, root: Path | None = None) -> SuiteSource:
    """A suite file read and checked; the files it names must lie inside ``root``."""
    data, node = read_yaml(path, "suite file")
    validate(data, "suite", str(path), node)
    return SuiteSource(path, data, node, root)


def marker_name(value: str) -> str:
    """A pytest marker name for a role or demographic value (``non-binary`` -> ``non_binary``)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", value)


def judge_options(source: SuiteSource, overrides: SuiteOverrides) -> dict:
    """The treatment judge's guidance and demographics: the option, else the suite's.
    ``flips``: classify each dialogue both without and with the demographics (detector
    suites: ``judge_demographics: both`` or --socialbias-demographic-flips)."""
    data = source.data
    suite_value = data.get("judge_demographics", False)
    flips = bool(overrides.demographic_flips) or suite_value == "both"
    demographics = overrides.judge_demographics
    if demographics is None:
        demographics = suite_value is True
    return {
        "guidance": overrides.guidance or data.get("guidance", DEFAULT_GUIDANCE),
        "demographics": bool(demographics) and not flips,
        "flips": flips,
    }
