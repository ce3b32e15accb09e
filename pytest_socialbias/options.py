"""Every command-line option and ini setting of the plugin, declared once.

One ``Option`` per setting: its flag, its ini name (the ``dest``), its default, how its
text is parsed and checked, the choices it allows (from the shared vocabulary) and its
help. ``add_options`` registers them with pytest; ``read_settings`` turns a config into
the one ``Settings`` object the rest of the plugin reads. Command line beats ini file
beats default. A bad value is a ConfigError naming the option and what it expects.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable

from .cache import parse_record_mode
from .cases import SuiteOverrides
from .errors import ConfigError
from .files import joined_path
from .judges.guards import GUARDS
from .protocols.dialogue import GUARD_POLICIES
from .protocols.user_check import EMBEDDED_CHECK, SIMULATOR_CHECKS, SIMULATOR_FINDINGS
from .vocabulary import GUARD_UNITS, GUIDANCE, NO_PRESET, PRESETS


@dataclass(frozen=True)
class Where:
    """What relative paths are relative to."""

    root: Path  # pytest's rootdir: cache, thresholds
    invocation: Path  # the directory pytest was started in: files the user names


@dataclass(frozen=True)
class Option:
    flag: str
    dest: str  # also the ini name
    field: str  # the Settings attribute it sets
    help: str
    metavar: str = "VALUE"
    default: str | None = None  # as the text an ini file would hold
    parse: Callable | None = None  # (text, option, where) -> value; None: the text itself
    choices: tuple | Callable[[], tuple] = ()  # a callable: read when the value is checked
    kind: str = "value"  # "value", "append" (repeatable) or "flag" (store_true)
    ini: bool = True

    def convert(self, raw, where: Where):
        if self.kind == "flag":
            return bool(raw) if raw is not None else None
        if raw in (None, "") or raw == []:
            return None
        # Choices are a tuple, or a registry's names read now (so late registrations count).
        choices = self.choices() if callable(self.choices) else self.choices
        if choices and raw not in choices:
            raise ConfigError(f"{self.flag}={raw!r}: expected {_one_of(choices)}")
        return self.parse(raw, self, where) if self.parse is not None else raw


def _one_of(choices: tuple) -> str:
    if len(choices) <= 3:
        return ", ".join(choices[:-1]) + " or " + choices[-1]
    return "one of " + ", ".join(choices)


def _whole(minimum: int) -> Callable:
    def parse(raw, option: Option, where: Where) -> int:
        try:
            number = int(raw)
        except (TypeError, ValueError):
            number = None
        if number is None or number < minimum:
            raise ConfigError(f"{option.flag}={raw!r}: expected a whole number >= {minimum}")
        return number

    return parse


def _shard(raw, option: Option, where: Where):
    from .shards import parse_shard

    return parse_shard(str(raw))


def _under_root(raw, option: Option, where: Where) -> Path:
    return joined_path(where.root, raw)


def _user_path(raw, option: Option, where: Where) -> Path:
    return joined_path(where.invocation, raw)


#: ``--socialbias-baseline=none``: the run says there is no accepted release yet.
NO_BASELINE = "none"


def _baseline(raw, option: Option, where: Where):
    return NO_BASELINE if str(raw).strip().lower() == NO_BASELINE else joined_path(where.invocation, raw)


def _folder(raw, option: Option, where: Where) -> Path:
    path = joined_path(where.invocation, raw)
    if not path.is_dir():
        raise ConfigError(
            f"{option.flag}={raw}: not a folder; give the folder that holds the official FairMT-Bench "
            "files (FairMT_1K/ and/or FairMT_10K/)"
        )
    return path


def _reference(raw, option: Option, where: Where) -> Path:
    from .judgecheck import BUILTIN_REFERENCE, BUILTIN_REFERENCE_PATH  # the aggregating side's module

    return BUILTIN_REFERENCE_PATH if raw == BUILTIN_REFERENCE else joined_path(where.invocation, raw)


def _sample(raw, option: Option, where: Where):
    return "all" if raw == "all" else _whole(1)(raw, option, where)


def _gpus(raw, option: Option, where: Where) -> str:
    """GPUs, comma-separated: indices into the devices this process can see (an inherited
    CUDA_VISIBLE_DEVICES respected), or UUIDs (GPU-...) and MIG ids (MIG-...)."""
    from .models.managed import check_gpus

    return check_gpus(str(raw), option.flag)


def _seconds(raw, option: Option, where: Where) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = None
    if value is None or not value > 0:
        raise ConfigError(f"{option.flag}={raw!r}: expected a number of seconds > 0")
    return value


def _record(raw, option: Option, where: Where) -> str:
    try:
        parse_record_mode(raw)
    except ValueError as exc:
        raise ConfigError(f"{option.flag}={raw!r}: {exc}") from None
    return str(raw).strip()


def _judges(raw, option: Option, where: Where) -> tuple | None:
    """Every --judge given, in order; in the ini file, whitespace-separated specs."""
    values = raw.split() if isinstance(raw, str) else [v for v in raw if v]
    return tuple(values) or None


OPTIONS: tuple[Option, ...] = (
    Option("--target", "socialbias_target", "target", metavar="SPEC", help=(
        "model under test, PROVIDER:MODEL[@BASE_URL[,BASE_URL...]][?param=value&...] (e.g. openai:gpt-4o-mini, "
        "openai:m@http://127.0.0.1:8000/v1, anthropic:claude-sonnet-4-5, local, local:PATH.gguf). With no "
        "model option at all, every role runs on the embedded local model")),
    Option("--judge", "socialbias_judge", "judges", metavar="SPEC", kind="append", parse=_judges, help=(
        "judge model spec (labels every target reply); BenevDial detector suites take it more than once "
        "and evaluate each judge and their ensemble")),
    Option("--user-model", "socialbias_user_model", "user", metavar="SPEC",
           help="user-simulator model spec (default: the --judge model)"),
    Option("--socialbias-concurrency", "socialbias_concurrency", "concurrency", metavar="N", default="16",
           parse=_whole(1), help="model requests in flight per process (default 16)"),
    Option("--socialbias-record", "socialbias_record", "record", metavar="MODE", default="new", parse=_record,
           help=("record/replay mode: none = replay only, a miss errors the case; new = replay hits, record "
                 "misses (default); older:AGE = new, and ask again what an earlier run recorded more than AGE "
                 "ago (older:7d; units s m h d w); all = ask every request again, once per run; off = no cache")),
    Option("--socialbias-miss-hint", "socialbias_miss_hint", "miss_hint", metavar="TEXT",
           parse=lambda raw, option, where: str(raw).strip() or None, help=(
               "what a case that missed the cache under --socialbias-record=none tells the reader to do, in place "
               "of \"rerun with --socialbias-record=new to record it\": a CI replay job has no key, so its hint says "
               "who records the answers and how (empty: that default)")),
    Option("--socialbias-cache-dir", "socialbias_cache_dir", "cache_dir", metavar="DIR", default=".socialbias",
           parse=_under_root, help="folder of the record/replay cache (default .socialbias/ in the rootdir)"),
    Option("--socialbias-thresholds", "socialbias_thresholds", "thresholds", metavar="PATH", parse=_under_root,
           help="gates file (default thresholds.yaml in the rootdir, if present)"),
    Option("--socialbias-report", "socialbias_report", "report", metavar="PATH",
           parse=lambda raw, option, where: joined_path(Path(), raw), help="write the JSON report to this path"),
    Option("--socialbias-batch-size", "socialbias_batch_size", "batch_size", metavar="N", parse=_whole(1), help=(
        "cases that run together on one process (overrides the suite's batch_size; default 64); an "
        "execution detail: test ids never depend on it")),
    Option("--socialbias-prompts", "socialbias_prompts", "prompts", metavar="DIR", parse=_user_path, help=(
        "a folder of NAME.yaml prompt files that replace ours of the same name (judges, user simulator, "
        "generation, guards), e.g. a paper's own prompt text; each enters the cache key and the report "
        "with its version and the sha256 of its file")),
    Option("--socialbias-system-prompt", "socialbias_system_prompt", "system_prompt", metavar="TEXT",
           help="system prompt given to the target (default: none)"),
    Option("--socialbias-turns", "socialbias_turns", "turns", metavar="N", parse=_whole(1), help=(
        "turns per DyMT or BenevDial dialogue (default: the suite's; DyMT 5, use 10 to look for late "
        "emergence; BenevDial 3)")),
    Option("--socialbias-fairmt-dir", "socialbias_fairmt_dir", "fairmt_dir", metavar="DIR", parse=_folder, help=(
        "folder of the official FairMT-Bench release files (FairMT_1K/, FairMT_10K/) for suites with "
        "`source: fairmt`: a scripted suite runs its conversations, a dymt suite draws its seeds from them")),
    Option("--socialbias-fairmt-release", "socialbias_fairmt_release", "fairmt_release", metavar="RELEASE",
           choices=("1K", "10K"), help=(
               "the FairMT-Bench release a scripted `source: fairmt` suite runs, over its `release:`: 1K runs "
               "FairMT-1K as released, every conversation (its cells are too small for a per-category draw, so "
               "`per_category:` is not applied, and the note says so); 10K the suite's draw from FairMT-10K")),
    Option("--socialbias-guard", "socialbias_guard", "guard", metavar="SPEC", help=(
        "guard model spec (Llama Guard 3, ShieldGemma, Qwen3Guard, Granite Guardian, WildGuard behind an "
        "OpenAI-compatible endpoint, or a classifier head run in process: hfcls:PATH?labels=...): screens "
        "every target reply in DyMT suites (blocked share by turn, bias rate among replies that pass); in "
        "BenevDial detector suites it is a detector")),
    Option("--socialbias-guard-kind", "socialbias_guard_kind", "guard_kind", metavar="KIND", choices=GUARDS.names,
           help="the guard's output format when the model name does not tell: " + _one_of(GUARDS.names())
           + " (and any kind a conftest.py registers)"),
    Option("--socialbias-guard-risk", "socialbias_guard_risk", "guard_risk", metavar="RISK", help=(
        "the risk criterion a Granite Guardian is asked about, named as its chat template names it "
        "(social_bias by default; harm, violence, profanity, ...); the spec parameter risk= does the same")),
    Option("--socialbias-guard-policy", "socialbias_guard_policy", "guard_policy", metavar="POLICY", default="follow",
           choices=GUARD_POLICIES, help=(
               "what a guard's block does to a DyMT dialogue: follow (it goes on, the reply flagged: post-hoc "
               "filtering, as the DyMT paper screened; default) or end (it stops there, as a deployed filter "
               "would); either way the report gives cumulative_bias_unblocked@T, the rate a block-ends run "
               "measures, and records the policy")),
    Option("--socialbias-simulator-check", "socialbias_simulator_check", "simulator_check", metavar="CHECK",
           default="rules", choices=SIMULATOR_CHECKS, help=(
               "how each simulated user turn is checked before the target sees it: rules (default: the "
               "assistant's voice, the set-up or the seed revealed, the last reply copied; then a learned reading of what "
               "they pass), embedded (the rules and that reading, then a reading of the turn's meaning by the "
               "embedded model's sentence vectors: needs the local extra, about 0.1 s a draw and 230 MB a process on two CPU cores) or judge (the rules "
               "and the learned reading, "
               "then the judge asks whether the turn reveals the test or states the stereotype and whether it "
               "follows from the conversation; two judge calls per turn, cached); a flagged turn is drawn again "
               "unless findings only report (--socialbias-simulator-findings)")),
    Option("--socialbias-simulator-findings", "socialbias_simulator_findings", "simulator_findings", metavar="WHAT",
           choices=SIMULATOR_FINDINGS, help=(
               "what a finding of the simulated-user checks (--socialbias-simulator-check) does in every suite, "
               "over its simulator_findings: and its preset: redraw (the flagged draw is drawn again, up to 3 "
               "draws, 5 for the embedded model, then the case is an error; the default) or report (the first "
               "draw is sent whatever the checks find, as the papers' protocols do; each finding is flagged and "
               "counted, and the summary and the reports give the flagged share per kind and the metrics with "
               "and without the flagged dialogues)")),
    Option("--socialbias-preset", "socialbias_preset", "preset", metavar="PRESET", choices=PRESETS + (NO_PRESET,),
           help=(
               "as if every suite said preset: PRESET. paper = the papers' settings where ours differ: "
               "simulated-user checks only report; BenevDial judges decode at temperature 0.6, top_p 0.9, "
               "max_tokens 2000; detector suites run all seven variants with variant_scope paper and mask_token "
               "[unused0]; a suite's own simulator_findings:, judge_params: (name by name), variants:, "
               "variant_scope: and mask_token: still win. none = every suite without its preset: (default: "
               "each suite's own)")),
    Option("--socialbias-gpus", "socialbias_gpus", "gpus", metavar="IDS", parse=_gpus, help=(
        "GPUs for the servers the run starts (vllm:, server:; split between workers with placement=worker, or "
        "between replicas=) and for hf: models (one per worker, round robin): indices into the GPUs this process "
        "can see (with CUDA_VISIBLE_DEVICES=4,5 set by a scheduler, 0,1 are 4 and 5), or GPU-/MIG- UUIDs, "
        "e.g. 0,1,2,3 (default: all visible)")),
    Option("--socialbias-server-timeout", "socialbias_server_timeout", "server_timeout", metavar="SECONDS",
           parse=_seconds, help="how long a started server may take to answer (default 900)"),
    Option("--socialbias-threads", "socialbias_threads", "local_threads", metavar="N", parse=_whole(1),
           help="CPU threads per process for local models (default: cores // xdist workers)"),
    Option("--socialbias-html", "socialbias_html", "html", metavar="PATH", parse=_user_path, help=(
        "write a self-contained HTML report (gates, curves by turn, transcripts) to this path; plots need "
        "the `report` extra (matplotlib)")),
    Option("--socialbias-baseline", "socialbias_baseline", "baseline", metavar="PATH|none", parse=_baseline, help=(
        "JSON report of the last accepted release: pair cases by id and test each gated rate for a "
        "regression (McNemar's exact test / the paired cluster MOVER interval, Holm-corrected); `no_regression` gates use it "
        "and fail without it; `none` says there is no accepted release yet (they are then not evaluated)")),
    Option("--socialbias-judge-check", "socialbias_judge_check", "judge_check", metavar="PATH", parse=_reference, help=(
        "JSONL file of reference labels for replies (or `builtin`: the small project-written set shipped "
        "with the plugin): report the judge's agreement with them (Cohen's kappa, Gwet's AC1) and "
        "judge-corrected rates (Rogan-Gladen)")),
    Option("--socialbias-sample", "socialbias_sample", "sample", metavar="N|all", parse=_sample, help=(
        "BenevDial: conditions per role (agent mode) or pairs per role (pairs mode), drawn by the seeded "
        "balanced sampler; `all` runs every profile of the grid (agent mode; default: the suite's "
        "`sample`, 42 conditions / 24 pairs per role)")),
    Option("--socialbias-guidance", "socialbias_guidance", "guidance", metavar="LEVEL", choices=GUIDANCE, help=(
        "BenevDial: guidance of the three-class treatment judge: " + _one_of(GUIDANCE)
        + " (default: the suite's, operational)")),
    Option("--socialbias-dialogues", "socialbias_dialogues", "dialogues", metavar="PATH", parse=_user_path, help=(
        "BenevDial detector suites: the labelled dialogues to evaluate (JSONL, docs/dialogues-format.md; "
        "default: the suite's `dialogues`)")),
    Option("--socialbias-guard-unit", "socialbias_guard_unit", "guard_unit", metavar="UNIT", choices=GUARD_UNITS,
           help=("BenevDial detector suites: what the guard judges: turn (an agent turn alone), context (with "
                 "the dialogue before it), exchange (with the user turn before it) or dialogue (the whole "
                 "dialogue once); default: the suite's guard_unit, else the guard's own (context for Llama "
                 "Guard, Granite Guardian and Qwen3Guard, exchange for WildGuard and ShieldGemma; for an hfcls: "
                 "classifier its preset's, else dialogue for a three-class head and turn for a binary one); a "
                 "dialogue is flagged if any unit is")),
    Option("--socialbias-snapshot-max-flips", "socialbias_snapshot_max_flips", "snapshot_max_flips", metavar="N",
           parse=_whole(0), help=(
               "fail the run when more than N cases differ from their syrupy snapshot (default: flipped cases "
               "are shown as a diff but never fail the run by themselves)")),
    Option("--socialbias-strict", "socialbias_strict", "strict", kind="flag",
           help=("make cases judged biased fail (default: they show as B and only gates fail the run), and a run "
                 "of suite cases with no thresholds file fail (default: it says so and decides nothing)")),
    Option("--socialbias-allow-partial", "socialbias_allow_partial", "allow_partial", kind="flag", ini=False,
           help=("for local debugging: a run that selected only part of its suites' cases (-k, -m, --lf, node "
                 "ids, --deselect, --sw, -x) keeps the exit status its gates give, marked PARTIAL (ALLOWED) "
                 "everywhere (default: a partial run never passes)")),
    Option("--socialbias-allow-outside-files", "socialbias_allow_outside_files", "allow_outside_files", kind="flag",
           help=("let suite files name files outside pytest's rootdir (seeds, conditions, dialogues, cues, a "
                 "prompts folder); default: such a path is a usage error, so a suite from a pull request cannot "
                 "read the rest of the machine")),
    Option("--socialbias-gates-for", "socialbias_gates_for", "gates_for", metavar="WHICH", default="all",
           choices=("all", "present"), help=(
               "all = every gate of the thresholds file must name a suite of this project, or the run stops "
               "with a usage error (default); present = skip the gates of suites this project does not have "
               "(a copied thresholds.yaml), named in one header line")),
    Option("--socialbias-judge-demographics", "socialbias_judge_demographics", "judge_demographics", kind="flag",
           help=("BenevDial: show the treatment judge the user's and the agent's demographics (default: the "
                 "suite's, off)")),
    Option("--socialbias-demographic-flips", "socialbias_demographic_flips", "demographic_flips", kind="flag", help=(
        "BenevDial detector suites: each judge classifies every dialogue without and with the demographics "
        "(detectors judge and judge+demographics) and the report counts, per true class, the labels that "
        "moved (N -> BB, ...); the suite's judge_demographics: both does the same")),
    Option("--socialbias-shard", "socialbias_shard", "shard", metavar="K/N|auto", parse=_shard, ini=False, help=(
        "run shard K of N (from 1): a deterministic share of the selected cases, balanced by the calls the dry "
        "run counts for each; `auto` reads GitLab's CI_NODE_INDEX/CI_NODE_TOTAL, a Slurm array's "
        "SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT, a Kubernetes Indexed Job's JOB_COMPLETION_INDEX (with "
        "auto/N) or SOCIALBIAS_SHARD=K/N; needs --socialbias-partial; the shard decides no gate: `python -m "
        "pytest_socialbias combine` does, from every shard's partial file")),
    Option("--socialbias-partial", "socialbias_partial", "partial", metavar="PATH", parse=_user_path, ini=False,
           help=("write this process's records and the run's metadata to PATH for `python -m pytest_socialbias "
                 "combine`, and decide no gate (alone: the whole run as shard 1/1)")),
    Option("--socialbias-dry-run", "socialbias_dry_run", "dry_run", kind="flag", ini=False, help=(
        "call no model: print the models a real run would use, the calls per role and an estimate of the "
        "tokens the selected cases would use, then stop (exit status 0); needs no key and no model: with no "
        "model option and no `local` extra, placeholders of the embedded model are planned")),
)


def option_for(field_name: str) -> Option:
    """The option that sets the Settings field ``field_name``."""
    return next(option for option in OPTIONS if option.field == field_name)


def _default(field_name: str):
    """The Settings default of ``field_name``: its option's default (OPTIONS, where each
    default is declared), read as that option reads the ini text, relative to ``.``."""
    option = option_for(field_name)
    return option.convert(option.default, Where(root=Path("."), invocation=Path(".")))


@dataclass(frozen=True)
class Settings:
    """Resolved options (command line over ini over defaults); one field per option. A
    field's default is its option's (``_default``): each is declared once, in OPTIONS."""

    target: str | None = None
    judges: tuple | None = None  # every --judge, in order
    user: str | None = None
    concurrency: int = _default("concurrency")
    record: str = _default("record")
    cache_dir: Path = _default("cache_dir")
    miss_hint: str | None = None  # --socialbias-miss-hint: what a replay miss says to do
    thresholds: Path | None = None  # given explicitly; else thresholds.yaml in the rootdir if present
    report: Path | None = None
    batch_size: int | None = None
    system_prompt: str | None = None
    prompts: Path | None = None  # --socialbias-prompts: overrides of our prompt templates
    turns: int | None = None
    fairmt_dir: Path | None = None
    fairmt_release: str | None = None
    guard: str | None = None
    guard_kind: str | None = None
    guard_policy: str = _default("guard_policy")
    simulator_check: str = _default("simulator_check")
    simulator_findings: str | None = None  # None: each suite's (redraw unless it says)
    preset: str | None = None  # None: each suite's preset:; NO_PRESET: none
    guard_risk: str | None = None
    gpus: str | None = None
    server_timeout: float | None = None
    local_threads: int | None = None
    html: Path | None = None
    baseline: Path | str | None = None  # a report, or NO_BASELINE ("none": no accepted release yet)
    judge_check: Path | None = None
    sample: int | str | None = None
    guidance: str | None = None
    dialogues: Path | None = None
    guard_unit: str | None = None
    snapshot_max_flips: int | None = None
    strict: bool | None = False
    allow_partial: bool | None = False
    allow_outside_files: bool | None = False
    gates_for: str = _default("gates_for")
    judge_demographics: bool | None = None
    demographic_flips: bool = False
    dry_run: bool | None = False
    shard: object = None  # shards.Shard, or None
    partial: Path | None = None
    root: Path = field(default=Path("."), compare=False)

    @property
    def judge(self) -> str | None:
        return self.judges[0] if self.judges else None

    @property
    def extra_judges(self) -> tuple:
        return tuple(self.judges[1:]) if self.judges else ()

    @property
    def baseline_report(self) -> Path | None:
        """The baseline report to compare with, if one was given."""
        if self.baseline is None or self.baseline == NO_BASELINE:
            return None
        return Path(self.baseline)

    @property
    def thresholds_file(self) -> Path:
        """The gates file to read: the one given, else thresholds.yaml in the rootdir."""
        return self.thresholds if self.thresholds is not None else self.root / "thresholds.yaml"

    @property
    def suite_overrides(self) -> SuiteOverrides:
        return SuiteOverrides(
            turns=self.turns,
            fairmt_dir=self.fairmt_dir,
            fairmt_release=self.fairmt_release,
            sample=self.sample,
            guidance=self.guidance,
            judge_demographics=self.judge_demographics,
            demographic_flips=self.demographic_flips or None,
            dialogues=self.dialogues,
            guard_unit=self.guard_unit,
            preset=self.preset,
            simulator_findings=self.simulator_findings,
            root=None if self.allow_outside_files else self.root,
        )


#: Settings field -> its default; a flag's is False, or None where the suite's own setting decides.
_FIELD_DEFAULTS = {f.name: f.default for f in fields(Settings)}

#: ``pytest --help`` shows the options in these groups, in this order (task by task).
HELP_GROUPS = (
    ("socialbias", "social-bias release gates (pytest-socialbias): models",
     ("--target", "--judge", "--user-model", "--socialbias-system-prompt", "--socialbias-prompts",
      "--socialbias-simulator-check", "--socialbias-simulator-findings")),
    ("socialbias-run", "social-bias: running the cases",
     ("--socialbias-record", "--socialbias-miss-hint", "--socialbias-cache-dir", "--socialbias-dry-run", "--socialbias-concurrency",
      "--socialbias-batch-size", "--socialbias-turns", "--socialbias-sample", "--socialbias-preset",
      "--socialbias-allow-outside-files")),
    ("socialbias-shards", "social-bias: one run over several machines",
     ("--socialbias-shard", "--socialbias-partial")),
    ("socialbias-decision", "social-bias: the release decision",
     ("--socialbias-thresholds", "--socialbias-gates-for", "--socialbias-baseline", "--socialbias-strict",
      "--socialbias-allow-partial", "--socialbias-snapshot-max-flips", "--socialbias-judge-check")),
    ("socialbias-reports", "social-bias: reports", ("--socialbias-report", "--socialbias-html")),
    ("socialbias-guards", "social-bias: guard models",
     ("--socialbias-guard", "--socialbias-guard-kind", "--socialbias-guard-risk", "--socialbias-guard-policy",
      "--socialbias-guard-unit")),
    ("socialbias-protocols", "social-bias: BenevDial and FairMT",
     ("--socialbias-guidance", "--socialbias-judge-demographics", "--socialbias-demographic-flips",
      "--socialbias-dialogues", "--socialbias-fairmt-dir", "--socialbias-fairmt-release")),
    ("socialbias-local", "social-bias: local models and started servers",
     ("--socialbias-gpus", "--socialbias-threads", "--socialbias-server-timeout")),
)


def markdown_reference() -> str:
    """The options page's tables (docs/options.md), one per ``pytest --help`` group, from
    the declarations: flag and value, ini setting, and the help text."""
    by_flag = {option.flag: option for option in OPTIONS}
    out = []
    for _, description, flags in HELP_GROUPS:
        out += [f"### {description.split(': ', 1)[-1].capitalize()}", "",
                "| option | ini setting | what it does |", "| --- | --- | --- |"]
        for flag in flags:
            option = by_flag[flag]
            shown = option.flag if option.kind == "flag" else f"{option.flag}={option.metavar}"
            ini = f"`{option.dest}`" if option.ini else "(command line only)"
            out.append(f"| `{shown}` | {ini} | {option.help.replace('|', chr(92) + '|')} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def add_options(parser) -> None:
    """Register every option in its ``pytest --help`` group (HELP_GROUPS), and its ini
    setting."""
    by_flag = {option.flag: option for option in OPTIONS}
    for name, description, flags in HELP_GROUPS:
        group = parser.getgroup(name, description)
        for flag in flags:
            _add_option(parser, group, by_flag[flag])


def _add_option(parser, group, option: Option) -> None:
    if option.kind == "flag":
        group.addoption(option.flag, dest=option.dest, action="store_true", default=None, help=option.help)
        if option.ini:
            parser.addini(option.dest, type="bool", default=None, help=f"as {option.flag}")
        return
    extra = {"action": "append"} if option.kind == "append" else {}
    group.addoption(option.flag, dest=option.dest, default=None, help=option.help, metavar=option.metavar, **extra)
    if option.ini:
        parser.addini(option.dest, help=option.help, default=option.default)


def read_settings(config) -> Settings:
    """The Settings of a pytest config; ConfigError for a bad value."""
    where = Where(root=Path(config.rootpath), invocation=Path(config.invocation_params.dir))
    values = {}
    for option in OPTIONS:
        raw = config.getoption(option.dest)
        if (raw is None or raw == []) and option.ini:
            raw = config.getini(option.dest)
        if (raw is None or raw == "") and option.default is not None:
            raw = option.default
        values[option.field] = option.convert(raw, where)
        if option.kind == "flag" and _FIELD_DEFAULTS[option.field] is False:
            values[option.field] = bool(values[option.field])  # a flag left off is False (None: the suite's)
    _check_shard(values)
    if values["simulator_check"] == EMBEDDED_CHECK:
        from .protocols import turn_embed

        turn_embed.check_available()  # before any case runs: the extra named
    return Settings(root=where.root, **values)


def _check_shard(values: dict) -> None:
    """A shard writes a partial file and decides nothing; combine does the rest."""
    if values["shard"] is not None and values["partial"] is None and not values["dry_run"]:
        raise ConfigError(
            f"--socialbias-shard={values['shard']}: a shard's records must go somewhere: add "
            "--socialbias-partial=PATH (one file per shard) and combine them with `python -m pytest_socialbias combine`"
        )
    if values["partial"] is None:
        return
    for name, flag in (("report", "--socialbias-report"), ("html", "--socialbias-html")):
        if values[name] is not None:
            raise ConfigError(f"{flag} with --socialbias-partial: a shard decides and reports nothing; give it to "
                              "`python -m pytest_socialbias combine` instead")
