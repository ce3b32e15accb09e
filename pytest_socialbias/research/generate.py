"""Generate labelled BenevDial dialogues with generator models (docs/benevdial.md).

``python -m pytest_socialbias generate-benevdial --generator SPEC --out FILE.jsonl``

For each sampled condition (role, need, user profile, agent persona) a generator model
writes one whole dialogue per class: N (uniform treatment), OB (disparate, not warm) and
BB (disparate, warm). Every condition is used for all three classes, so the demographics
say nothing about the class.

Two styles (``--style``). ``ours`` (the default): the ``benevdial_generate`` prompt, which
instructs every class including N (uniform treatment) and asks for ``--turns`` exchanges;
the conditions come from the balanced sampler (benevdial/conditions.py: one persona per profile and
role, so at most profiles x roles per class); generators take turns over the dialogues in
a fixed rotation, so no generator is tied to one class. ``paper`` follows the BenevDial
paper: the conditions come from the crossed grid, roles x profiles x personas (grid.py:
40,320 per class with the shipped file; ``--per-class`` up to all of it, ``all`` or a
percentage), class N gets no instruction about treatment at all (only roles, demographics
and the request; ``benevdial_generate_paper``), the number of exchanges is the
generator's to choose, every generator writes every sampled condition in every class (a
full crossing; ids then end in ``-g1``, ``-g2``... when there is more than one generator),
and temperature 0.6 / top-p 0.9 / 2,000 tokens are the defaults of that style. Each
record's ``source`` names the style (``generated:ours``, ``generated:paper``) and its
``prompt`` the template id (``name@version``, ``+sha12`` for an override).

``--prompts DIR`` replaces our prompt files by name for this command, as
``--socialbias-prompts`` does for a pytest run (prompts/__init__.py): a researcher can
generate from a paper's own prompt text. The folder must hold the template of the chosen
style; every file in it is checked first (a usage error names the file).

After writing, the dataset quality statistics (quality.py: MTLD, Self-BLEU-4, Vendi with
an n-gram kernel) per class and per generator x class go to stderr and to a JSON file,
``NAME.quality.json`` beside ``NAME.jsonl`` unless ``--quality-json`` says otherwise.

The reply must be ``User:`` / ``Agent:`` lines (``parse_turns``). A reply that cannot be
read gets one more draw (sample 1: a different cache key), then its dialogue is
discarded and reported, never written; so is a dialogue whose model call failed for good.
Every call goes through the record/replay cache, so a rerun after an interruption replays
what finished and only asks for the rest. The output (docs/dialogues-format.md) is
rewritten whole at the end, sorted by id, through a temporary file and ``os.replace``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import random
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from .. import prompts
from ..benevdial.conditions import Condition, Conditions, derived_seed, load_conditions, sample_conditions
from ..cache import RECORD_MODES, CallCache
from ..errors import ConfigError, ModelCallError
from ..files import write_atomically
from ..models import CallPool, Model, ModelSpec, check_credentials, parse_spec
from ..models.base import FINISH_CONTENT_FILTER, FINISH_LENGTH
from ..vocabulary import CLASSES
from . import quality
from .grid import grid_shape, sample_grid

TEMPLATE = "benevdial_generate"
#: The prompt template of each style; their ids differ, so do their cache keys.
TEMPLATES = {"ours": TEMPLATE, "paper": "benevdial_generate_paper"}
STYLES = tuple(TEMPLATES)
#: Decoding defaults per style (an explicit --temperature / --top-p / --max-tokens, or a
#: spec's own parameter, wins). The paper's are temperature 0.6, top-p 0.9, 2,000 tokens.
STYLE_DEFAULTS = {
    "ours": {"temperature": 0.6, "top_p": 0.9, "max_tokens": 900},
    # The paper's budget: at most 2,000 new tokens per generation.
    "paper": {"temperature": 0.6, "top_p": 0.9, "max_tokens": 2000},
}
ROLE = "generator"
OPTION = "--generator"
#: Draws per dialogue: the first, and one more when the first cannot be read.
DRAWS = 2
#: Minimum turns per speaker for a usable dialogue, in either style: a multi-turn
#: dialogue, as the paper's are (the paper style sets no other bound on the length).
MIN_TURNS_EACH = 2
#: Exchanges asked for in our style when --turns is not given (the paper style asks for none).
DEFAULT_TURNS = 4
DEFAULT_CONDITIONS = "suites/benevdial/conditions.yaml"


# --------------------------------------------------------------------------- parsing

_USER_LABELS = {"user", "client"}
_AGENT_LABELS = {"agent", "assistant"}
# A label at the start of a line, with optional Markdown around it: "User:", "**User:**",
# "**Agent**: ...", "- Client: ...", "### Assistant:".
_LABEL_RE = re.compile(
    r"^\s*(?:[#>*_-]+\s*)?(?P<label>[A-Za-z][A-Za-z .'()-]{0,60}?)\s*[*_]*\s*:\s*[*_]*\s*(?P<text>.*)$"
)
_PAREN_RE = re.compile(r"\s*\([^)]*\)")
_RULE_RE = re.compile(r"^\s*([-*_=])\1{2,}\s*$")  # "---", "***": Markdown separators


def _label_sets(user_label: str | None, agent_title: str | None) -> tuple[set, set]:
    users = set(_USER_LABELS)
    agents = set(_AGENT_LABELS)
    if user_label:
        users.add(user_label.strip().lower())
    if agent_title:
        agents.add(agent_title.strip().lower())
    return users, agents


def parse_turns(text: str, user_label: str | None = None, agent_title: str | None = None) -> tuple[list[dict], str | None]:
    """Speaker turns from a generated dialogue, and None; or ([], why it cannot be used).

    Labels are case-insensitive and may carry ** markup; ``User:``/``Client:`` (or the
    role's user label) start a user turn, ``Agent:``/``Assistant:`` (or the role's title)
    an agent turn. Lines without a label continue the turn before; text before the first
    label is dropped, and so is a last user turn the agent never answered. The turns must
    alternate from the user and hold at least two turns per speaker.
    """
    users, agents = _label_sets(user_label, agent_title)
    turns: list[dict] = []
    for line in (text or "").splitlines():
        match = _LABEL_RE.match(line)
        # "User (Maya):", "Agent (wellbeing support agent):" count as their plain labels.
        label = _PAREN_RE.sub("", match["label"]).strip().lower() if match else None
        if label in users or label in agents:
            turns.append({"speaker": "user" if label in users else "agent", "lines": [match["text"].strip()]})
        elif turns and not _RULE_RE.match(line):
            turns[-1]["lines"].append(line.strip())
    if not turns:
        return [], 'no "User:" / "Agent:" labels found'
    out = [{"speaker": t["speaker"], "text": "\n".join(x for x in t["lines"] if x).strip()} for t in turns]
    if out[0]["speaker"] != "user":
        return [], "the dialogue starts with an agent turn, not the user"
    for number, (before, turn) in enumerate(itertools.pairwise(out), start=2):
        if before["speaker"] == turn["speaker"]:
            return [], f"turn {number} is a second {turn['speaker']} turn in a row (turns must alternate)"
    for number, turn in enumerate(out, start=1):
        if not turn["text"]:
            return [], f"turn {number} ({turn['speaker']}) is empty"
    if out[-1]["speaker"] == "user":
        out = out[:-1]  # the agent never answered it
    count = len(out) // 2
    if count < MIN_TURNS_EACH:
        return [], f"only {count} exchange(s); at least {MIN_TURNS_EACH} user and {MIN_TURNS_EACH} agent turns are needed"
    return out, None


# --------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class Job:
    """One dialogue to generate: a condition, a class and the generator that writes it."""

    condition: Condition
    cls: str
    generator: int  # index into the generator list
    style: str = "ours"
    tag: str = ""  # id suffix, "-g1", "-g2"...: paper style with more than one generator

    @property
    def id(self) -> str:
        return f"{self.cls.lower()}-{self.condition.id}{self.tag}"


def pick_conditions(conditions: Conditions, per_class: int, seed: int) -> list[Condition]:
    """``per_class`` balanced conditions, spread over the roles (they differ by at most one).

    ``sample_conditions`` draws ceil(per_class / roles) per role; when that is more than
    needed, the roles take turns keeping one condition each, in a seeded order.
    """
    roles = list(conditions.roles)
    limit = conditions.profile_count * len(roles)
    if not 1 <= per_class <= limit:
        raise ConfigError(
            f"--per-class={per_class}: expected 1 to {limit} (one condition per user profile and "
            f"role in {conditions.path})"
        )
    per_role = math.ceil(per_class / len(roles))
    drawn = sample_conditions(conditions, per_role, seed)
    if len(drawn) == per_class:
        return drawn
    queues = {}
    for role in roles:
        mine = [c for c in drawn if c.role == role]
        random.Random(derived_seed(seed, "generate-trim", role)).shuffle(mine)
        queues[role] = mine
    kept: list[Condition] = []
    while len(kept) < per_class:
        for role in roles:
            if queues[role] and len(kept) < per_class:
                kept.append(queues[role].pop(0))
    return sorted(kept, key=lambda c: c.id)


def per_class_limit(conditions: Conditions, style: str) -> tuple[int, str]:
    """The most conditions per class a style can draw, and what that number is."""
    if style == "paper":
        shape = grid_shape(conditions)
        return shape.per_class, f"the crossed grid of {conditions.path}: {shape.describe()}"
    return conditions.profile_count * len(conditions.roles), f"one condition per user profile and role in {conditions.path}"


def resolve_per_class(value: int | str, conditions: Conditions, style: str) -> int:
    """``--per-class`` as a number of conditions: N, ``all`` (the limit) or ``P%`` of the
    limit, rounded down; ConfigError outside 1..limit."""
    limit, what = per_class_limit(conditions, style)
    if value == "all":
        count = limit
    elif isinstance(value, str):  # "P%", checked by the argument parser
        count = int(Fraction(value[:-1]) * limit / 100)
    else:
        count = value
    if not 1 <= count <= limit:
        shown = f"{value} ({count:,} conditions)" if isinstance(value, str) else f"{value}"
        raise ConfigError(f"--per-class={shown}: expected 1 to {limit:,} ({what}), `all`, or a percentage such as 10%")
    return count


def choose_conditions(conditions: Conditions, per_class: int | str, seed: int, style: str) -> list[Condition]:
    """The conditions every class is written for: ``paper`` from the crossed grid
    (grid.sample_grid), ``ours`` from the balanced sampler (``pick_conditions``)."""
    count = resolve_per_class(per_class, conditions, style)
    if style == "paper":
        return sample_grid(conditions, count, seed)
    return pick_conditions(conditions, count, seed)


def job_count(conditions: int, generators: int, style: str) -> int:
    return conditions * len(CLASSES) * (generators if style == "paper" else 1)


def iter_jobs(conditions: list[Condition], generators: int, style: str = "ours") -> Iterator[Job]:
    """Every condition in all three classes, one job at a time (the full paper grid with
    three generators is 362,880 jobs: they are made as the workers take them).

    ``ours``: condition i's class k goes to generator (i + k) mod G, so each generator
    gets an even share of every class. ``paper``: every generator writes every condition
    in every class (3 x conditions x G jobs); with G > 1 the ids end in ``-g<k>`` (k from 1,
    in the order the generators were given) so they stay unique.
    """
    for i, condition in enumerate(conditions):
        for k, cls in enumerate(CLASSES):
            if style == "paper":
                for g in range(generators):
                    yield Job(condition, cls, g, "paper", f"-g{g + 1}" if generators > 1 else "")
            else:
                yield Job(condition, cls, (i + k) % generators)


def class_values(template: prompts.Template, job: Job, values: dict | None = None) -> dict:
    """The class placeholders of the job's template: ``class_instruction`` (ours, every
    class), or, in the paper style, ``class_section`` (empty for N, the class text after a
    blank line for OB and BB) and ``class_instruction`` (the class text alone, empty for N:
    for an override that places it inline). The class text's own placeholders are filled
    from ``values`` (an override's may name the roles: ``The $agent_title ...``)."""
    values = values or {}
    if job.style == "paper":
        if job.cls == "N":
            return {"class_section": "", "class_instruction": ""}
        text = template.snippet(f"class_{job.cls}", **values).strip()
        return {"class_section": "\n\n" + text, "class_instruction": text}
    return {"class_instruction": template.snippet(f"class_{job.cls}", **values).strip()}


def render_messages(conditions: Conditions, job: Job, turns: int | None) -> list[dict]:
    """The generator's messages for one job; ``turns`` fills our style's count of
    exchanges (the paper style asks for none: None)."""
    template = prompts.load(TEMPLATES[job.style])
    condition = job.condition
    role = conditions.roles[condition.role]
    need = role.need(condition.need)
    # Every snippet (persona line, class text) is filled from the same values as the
    # prompt itself, so an override's snippets may use any of them.
    unspecified = str(template.extras.get("agent_demographics_unspecified", "unspecified")).strip()
    if condition.persona is None:
        description = None
    else:
        line = conditions.persona_line(condition.persona)
        description = line.removeprefix("You present yourself as ").rstrip(".")
    values = dict(
        agent_title=role.title,
        user_label=role.user_label,
        profile=conditions.profile_text(condition.profile),
        request=need.request,
        follow_ups="\n".join(f"- {q}" for q in need.follow_ups),
        persona_description=description or unspecified,
        agent_demographics=description or unspecified,
    )
    if job.style != "paper":
        values["turns"] = turns
    persona_key = "persona_unspecified" if description is None else "persona_text"
    values["persona"] = template.snippet(persona_key, **values).strip()
    values.update(class_values(template, job, values))
    return template.messages(**values)


def dialogue_record(job: Job, turns: list[dict], generator: str, prompt: str) -> dict:
    """One line of the labelled dialogue format (docs/dialogues-format.md); ``source``
    is ``generated:<style>``, ``prompt`` the generator template's id (``name@version``,
    with ``+sha12`` when an override file stood in for ours)."""
    c = job.condition
    persona = c.persona
    return {
        "id": job.id,
        "class": job.cls,
        "role": c.role,
        "need": c.need,
        "user": {"age": c.profile.age, "gender": c.profile.gender, "race": c.profile.race, "ability": c.profile.ability},
        "agent": None if persona is None else {"age": persona.age, "gender": persona.gender, "race": persona.race},
        "turns": turns,
        "source": f"generated:{job.style}",
        "generator": generator,
        "prompt": prompt,
    }


# --------------------------------------------------------------------------- running


@dataclass
class Outcome:
    id: str
    cls: str
    record: dict | None = None
    reason: str | None = None  # why the dialogue was discarded


@dataclass
class GenerateOptions:
    generators: list[str]
    conditions: Path
    out: Path
    per_class: int | str = 10  # N conditions, "all", or "P%" (resolve_per_class)
    turns: int | None = None  # None: DEFAULT_TURNS in our style; the paper style takes none
    seed: int = 0
    cache_dir: Path = Path(".socialbias")
    record: str = "new"
    concurrency: int = 8
    temperature: float | None = None  # None: the style's default (STYLE_DEFAULTS)
    top_p: float | None = None
    max_tokens: int | None = None  # None: the style's default (STYLE_DEFAULTS)
    style: str = "ours"
    quality: bool = True
    quality_json: Path | None = None  # None: NAME.quality.json beside --out
    dry_run: bool = False  # plan and estimate, call nothing, write nothing
    prompts: Path | None = None  # --prompts DIR: override files in place of ours

    def decoding(self) -> dict:
        """temperature, top_p and max_tokens: the explicit values, else the style's defaults."""
        defaults = STYLE_DEFAULTS[self.style]
        return {
            "temperature": defaults["temperature"] if self.temperature is None else self.temperature,
            "top_p": defaults["top_p"] if self.top_p is None else self.top_p,
            "max_tokens": defaults["max_tokens"] if self.max_tokens is None else self.max_tokens,
        }

    def quality_path(self) -> Path:
        return self.quality_json or quality.default_json_path(self.out)

    def exchanges(self) -> int | None:
        """The exchanges asked for: --turns or DEFAULT_TURNS in our style, None in the paper's."""
        if self.style == "paper":
            return None
        return DEFAULT_TURNS if self.turns is None else self.turns


@dataclass
class GenerateResult:
    outcomes: list[Outcome] = field(default_factory=list)
    calls: int = 0
    hits: int = 0
    style: str | None = None

    @property
    def written(self) -> list[dict]:
        return sorted((o.record for o in self.outcomes if o.record is not None), key=lambda r: r["id"])

    @property
    def discarded(self) -> list[Outcome]:
        return sorted((o for o in self.outcomes if o.record is None), key=lambda o: o.id)


def _cli_words(text: str) -> str:
    """Shared messages name the pytest options; say this command's instead."""
    return text.replace("--socialbias-record", "--record").replace("--socialbias-cache-dir", "--cache-dir")


async def generate_one(model: Model, conditions: Conditions, job: Job, turns: int | None) -> Outcome:
    role = conditions.roles[job.condition.role]
    messages = render_messages(conditions, job, turns)
    template_id = prompts.load(TEMPLATES[job.style]).id
    problems = []
    for sample in range(DRAWS):
        try:
            reply = await model.chat(messages, template=template_id, sample=sample)
        except ModelCallError as exc:
            return Outcome(job.id, job.cls, reason=_cli_words(f"model call failed: {exc}"))
        if reply.finish_reason == FINISH_LENGTH:
            problem = "cut off at the token limit (raise --max-tokens)"
        elif reply.finish_reason == FINISH_CONTENT_FILTER:
            problem = "stopped by the provider's content filter"
        else:
            parsed, problem = parse_turns(reply.text, role.user_label, role.title)
            if problem is None:
                return Outcome(job.id, job.cls, record=dialogue_record(job, parsed, str(model.spec), template_id))
        problems.append(f"draw {sample + 1}: {problem}")
    return Outcome(job.id, job.cls, reason=f"malformed on all {DRAWS} draws ({'; '.join(problems)})")


class Progress:
    """A one-line counter on stderr, drawn only when stderr is a terminal."""

    def __init__(self, total: int, stream=None):
        self.stream = stream or sys.stderr
        self.total = total
        self.done = 0
        self.discarded = 0
        self.enabled = hasattr(self.stream, "isatty") and self.stream.isatty()

    def update(self, outcome: Outcome, hits: int) -> None:
        self.done += 1
        self.discarded += outcome.record is None
        if self.enabled:
            self.stream.write(
                f"\rgenerate-benevdial: {self.done}/{self.total} dialogues "
                f"({self.discarded} discarded, {hits} cache hits)"
            )
            self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.done:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


async def generate(options: GenerateOptions, conditions: Conditions, jobs: Iterable[Job], models: list[Model], pool: CallPool, progress: Progress) -> GenerateResult:
    """Run the jobs with ``options.concurrency`` workers that take them one at a time from
    ``jobs``, so only the jobs in flight exist as tasks (not one per dialogue)."""
    result = GenerateResult()
    pending = iter(jobs)
    turns = options.exchanges()

    async def worker():
        for job in pending:  # one shared iterator: each job goes to one worker
            outcome = await generate_one(models[job.generator], conditions, job, turns)
            result.outcomes.append(outcome)
            progress.update(outcome, _usage(pool)[1])

    workers = [asyncio.ensure_future(worker()) for _ in range(options.concurrency)]
    try:
        await asyncio.gather(*workers)
    finally:
        for task in workers:
            task.cancel()  # after an interruption: stop what is still in flight
        await pool.aclose()
    result.calls, result.hits = _usage(pool)
    return result


def _usage(pool: CallPool) -> tuple[int, int]:
    usage = pool.totals.roles.get(ROLE)
    return (usage.calls, usage.hits) if usage is not None else (0, 0)


def write_jsonl(path: Path, records: list[dict]) -> None:
    """Write the lines atomically (files.write_atomically)."""
    write_atomically(path, "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records))


# --------------------------------------------------------------------------- the command


def parse_generators(raw_specs: list[str], key_required: bool = True) -> list[ModelSpec]:
    """The generator specs, in the order given: ConfigError for a bad spec, a missing key
    (unless ``key_required`` is False: a dry run calls nothing) or a generator given twice
    (before anything is opened or sampled)."""
    specs = []
    for raw in raw_specs:
        spec = parse_spec(raw, OPTION)
        if any(str(spec) == str(other) for other in specs):
            raise ConfigError(f"{OPTION}={spec} is given twice; give each generator once")
        check_credentials(spec, OPTION, required=key_required)
        specs.append(spec)
    return specs


def check_style_options(options: GenerateOptions) -> None:
    if options.style == "paper" and options.turns is not None:
        raise ConfigError(
            f"--turns={options.turns}: --style=paper asks for no number of exchanges (the paper left the length "
            "to the generator); drop --turns, or use --style=ours"
        )


def prompt_overrides(options: GenerateOptions) -> dict[str, Path]:
    """The --prompts folder's files by name, each checked (ConfigError naming the file),
    which must include the template of the chosen style."""
    if options.prompts is None:
        return {}
    found = prompts.check_folder(options.prompts, "--prompts")
    name = TEMPLATES[options.style]
    if name not in found:
        raise ConfigError(
            f"--prompts={options.prompts}: holds no {name}.yaml, the prompt --style={options.style} uses "
            f"(it holds {', '.join(sorted(p.name for p in found.values()))}); add it, or drop --prompts"
        )
    return found


def check_paths(options: GenerateOptions) -> None:
    if not options.conditions.is_file():
        raise ConfigError(
            f"--conditions={options.conditions}: file not found; pass the BenevDial conditions file "
            f"(the project ships {DEFAULT_CONDITIONS}; run from the project root or give its path)"
        )
    out = options.out
    if out.is_dir():
        raise ConfigError(f"--out={out}: is a folder; give a file name such as {out / 'dialogues.jsonl'}")
    if not out.parent.is_dir():
        raise ConfigError(f"--out={out}: the folder {out.parent} does not exist; create it first")
    if options.quality:
        path = options.quality_path()
        if path.resolve() == out.resolve():
            raise ConfigError(f"--quality-json={path}: is the --out file; give another name")
        if path.is_dir():
            raise ConfigError(f"--quality-json={path}: is a folder; give a file name such as {path / 'quality.json'}")
        if not path.parent.is_dir():
            raise ConfigError(f"--quality-json={path}: the folder {path.parent} does not exist; create it first")


def exchanges_line(written: list[dict]) -> str:
    """How many exchanges the written dialogues have: overall and per class (the paper
    style leaves the number to the generator)."""
    def spread(records):
        counts = sorted(sum(t["speaker"] == "agent" for t in r["turns"]) for r in records)
        return counts, sum(counts) / len(counts)

    counts, mean = spread(written)
    per_class = ", ".join(
        f"{cls} {spread(mine)[1]:.1f}" for cls in CLASSES if (mine := [r for r in written if r["class"] == cls])
    )
    return (f"generate-benevdial: exchanges per dialogue: {counts[0]} to {counts[-1]}, mean {mean:.1f} "
            f"(by class: {per_class})")


def summary_line(result: GenerateResult, out: Path) -> str:
    written = result.written
    per_class = ", ".join(f"{cls} {sum(r['class'] == cls for r in written)}" for cls in CLASSES)
    discarded = result.discarded
    where = f"to {out}" if written else f"(nothing written; {out} left as it was)"
    style = f" in {result.style} style" if result.style else ""
    text = f"generate-benevdial: wrote {len(written)} dialogues {where} ({per_class}){style}; discarded {len(discarded)}"
    if discarded:
        kinds = {"malformed": 0, "model call failed": 0}
        for outcome in discarded:
            kinds["model call failed" if outcome.reason.startswith("model call failed") else "malformed"] += 1
        text += " (" + ", ".join(f"{kind} {n}" for kind, n in kinds.items() if n) + ")"
    return text + f"; {result.calls} generator calls, {result.hits} cache hits"


def dry_run_line(options: GenerateOptions, conditions: Conditions, picked: list[Condition], specs: list) -> str:
    """What a run would generate and roughly cost: the grid it samples from (paper style),
    dialogues per class and generator, calls, prompt tokens (4 characters a token) and at
    most max_tokens a completion. Each condition's three prompts are rendered once (every
    generator is sent the same prompt), never all jobs at once."""
    generators = len(specs)
    paper = options.style == "paper"
    turns = options.exchanges()
    per_generator = [0] * generators
    prompt_chars = 0
    for i, condition in enumerate(picked):
        for k, cls in enumerate(CLASSES):
            chars = sum(len(m["content"]) for m in render_messages(conditions, Job(condition, cls, 0, options.style), turns))
            writers = range(generators) if paper else [(i + k) % generators]
            for g in writers:
                per_generator[g] += 1
                prompt_chars += chars
    total = job_count(len(picked), generators, options.style)
    budget = options.decoding()["max_tokens"]
    spread = ", ".join(f"{specs[g].model}: {n:,}" for g, n in enumerate(per_generator))
    text = f"generate-benevdial: dry run ({options.style} style): "
    if paper:
        shape = grid_shape(conditions)
        cells = shape.per_class * generators
        share = 100 * len(picked) / shape.per_class
        text += (f"grid {shape.per_class:,} condition(s) per class ({shape.describe()})"
                 + (f" x {generators} generators = {cells:,} dialogues per class" if generators > 1 else "")
                 + f", {3 * cells:,} in all; sample {len(picked):,} condition(s) per class ({share:.4g}% of the grid)"
                 + (f" x {generators} generators" if generators > 1 else "")
                 + f" = {total // 3:,} dialogue(s) per class, {total:,} in all")
    else:
        text += f"{len(picked):,} condition(s) x 3 classes = {total:,} dialogue(s), {total // 3:,} per class"
    return text + (
        f"; calls per generator {spread}; about {prompt_chars // 4:,} prompt tokens and at most "
        f"{total * budget:,} completion tokens ({budget} a dialogue); nothing called, nothing written"
    )


def run_generate(options: GenerateOptions, stderr=None) -> int:
    """The command: 0 when at least one dialogue was written, 1 when none; ConfigError for
    bad input (the CLI prints it and exits 2)."""
    stderr = stderr or sys.stderr
    if options.record not in RECORD_MODES:
        raise ConfigError(f"--record={options.record!r}: expected one of {', '.join(RECORD_MODES)}")
    if options.style not in STYLES:
        raise ConfigError(f"--style={options.style!r}: expected one of {', '.join(STYLES)}")
    check_style_options(options)
    specs = parse_generators(options.generators, key_required=not options.dry_run)
    check_paths(options)
    overrides = prompt_overrides(options)
    conditions = load_conditions(options.conditions)
    picked = choose_conditions(conditions, options.per_class, options.seed, options.style)
    with prompts.overriding(options.prompts, "--prompts"):
        template = prompts.load(TEMPLATES[options.style])
        if template.sha256 is not None:
            print(f"generate-benevdial: prompt {template.id} from {overrides[template.name]} in place of ours", file=stderr)
        if options.dry_run:
            print(dry_run_line(options, conditions, picked, specs), file=stderr)
            return 0
        return _generate_and_write(options, conditions, picked, specs, stderr)


def _generate_and_write(options: GenerateOptions, conditions: Conditions, picked: list[Condition], specs: list, stderr) -> int:
    cache = None
    if options.record != "off":
        try:
            cache = CallCache(options.cache_dir, options.record)
        except ConfigError as exc:
            raise ConfigError(_cli_words(str(exc))) from None
    try:
        pool = CallPool(cache=cache, concurrency=options.concurrency)
        defaults = options.decoding()
        models = [Model(ROLE, spec, OPTION, pool, defaults=defaults) for spec in specs]
        jobs = iter_jobs(picked, len(models), options.style)
        progress = Progress(job_count(len(picked), len(models), options.style), stderr)
        try:
            result = asyncio.run(generate(options, conditions, jobs, models, pool, progress))
        except KeyboardInterrupt:
            progress.close()
            print(
                "generate-benevdial: interrupted; nothing written. Rerun the same command to resume: "
                "finished generations replay from the cache.",
                file=stderr,
            )
            return 130
        progress.close()
    finally:
        if cache is not None:
            cache.close()
    for outcome in result.discarded:
        print(f"generate-benevdial: discarded {outcome.id}: {outcome.reason}", file=stderr)
    result.style = options.style
    written = result.written
    if written:
        write_jsonl(options.out, written)
        print(exchanges_line(written), file=stderr)
        if options.quality:
            report_quality(options, written, stderr)
    print(summary_line(result, options.out), file=stderr)
    return 0 if written else 1


def report_quality(options: GenerateOptions, written: list[dict], stderr) -> None:
    """The quality statistics of what was written: stderr lines and the JSON file."""
    path = options.quality_path()
    report = quality.quality_report(written, seed=options.seed, source=str(options.out), style=options.style)
    quality.write_json(path, report)
    for line in quality.summary_lines(report, prefix="generate-benevdial: quality"):
        print(line, file=stderr)
    print(f"generate-benevdial: quality statistics written to {path}", file=stderr)


# --------------------------------------------------------------------------- CLI wiring


def _whole(minimum: int):
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below the minimum {minimum}")
        return value

    return convert


def _sample_size(text: str) -> int | str:
    """--per-class: a whole number from 1, ``all``, or a percentage in (0, 100] such as ``10%``."""
    text = text.strip()
    if text.lower() == "all":
        return "all"
    if text.endswith("%"):
        try:
            share = Fraction(text[:-1].strip())
        except (ValueError, ZeroDivisionError):
            raise argparse.ArgumentTypeError(f"{text!r} is not a percentage such as 10%") from None
        if not 0 < share <= 100:
            raise argparse.ArgumentTypeError(f"{text!r}: a percentage above 0 and at most 100%")
        return f"{text[:-1].strip()}%"
    try:
        return _whole(1)(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc}; give a whole number from 1, `all`, or a percentage such as 10%") from None


def _number(low: float, high: float):
    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(f"{value} is outside [{low}, {high}]")
        return value

    return convert


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--generator", action="append", required=True, metavar="SPEC", dest="generators",
        help="generator model spec, e.g. openai:gpt-4o-mini (repeatable: the dialogues are "
        "shared evenly among the generators; with --style=paper every generator writes them all)",
    )
    parser.add_argument(
        "--style", choices=STYLES, default="ours",
        help="ours (default): every class, N included, gets a treatment instruction, --turns exchanges are "
        "asked for, and the work is shared among the generators; paper: as in the BenevDial paper, the "
        "conditions come from the crossed grid (roles x profiles x personas), N gets no treatment "
        "instruction, the generator chooses the number of exchanges, every generator writes every "
        "condition, temperature 0.6, top-p 0.9 and 2000 tokens",
    )
    parser.add_argument("--out", required=True, type=Path, metavar="FILE.jsonl", help="where to write the labelled dialogues")
    parser.add_argument(
        "--conditions", type=Path, default=Path(DEFAULT_CONDITIONS), metavar="PATH",
        help=f"BenevDial conditions file (default: {DEFAULT_CONDITIONS}, relative to the current folder)",
    )
    parser.add_argument(
        "--per-class", type=_sample_size, default=10, metavar="N", dest="per_class",
        help="conditions per class (default 10): a number, `all`, or a percentage of the most there are "
        "(rounded down): with --style=paper the crossed grid (40,320 with the shipped file; 10%% gives "
        "4,032), with ours one per user profile and role (630); each sampled condition is written as N, OB "
        "and BB (with --style=paper by every generator, so N x generators dialogues per class)",
    )
    parser.add_argument("--turns", type=_whole(MIN_TURNS_EACH), default=None, metavar="K",
                        help=f"exchanges asked for per dialogue, our style only (default {DEFAULT_TURNS}); "
                        "--style=paper asks for no number, as the paper did")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="seed for sampling the conditions (default 0)")
    parser.add_argument("--cache-dir", type=Path, default=Path(".socialbias"), metavar="DIR", dest="cache_dir", help="record/replay cache folder (default .socialbias)")
    parser.add_argument(
        "--record", choices=RECORD_MODES, default="new",
        help="none = replay only; new = replay hits, record misses (default); all = re-record everything; off = no cache",
    )
    parser.add_argument("--concurrency", type=_whole(1), default=8, metavar="N", help="requests in flight (default 8)")
    parser.add_argument("--temperature", type=_number(0.0, 2.0), default=None, metavar="T", help="sampling temperature (default 0.6 in both styles; a spec's own ?temperature= wins)")
    parser.add_argument("--top-p", type=_number(0.0, 1.0), default=None, dest="top_p", metavar="P", help="nucleus sampling top-p (default 0.9 in both styles)")
    parser.add_argument("--max-tokens", type=_whole(1), default=None, dest="max_tokens", metavar="N",
                        help="most tokens per generated dialogue (default 900; --style=paper: 2000, the paper's)")
    parser.add_argument(
        "--quality-json", type=Path, default=None, dest="quality_json", metavar="PATH",
        help="where to write the quality statistics (MTLD, Self-BLEU-4, n-gram Vendi) of the written "
        "set (default: NAME.quality.json beside --out NAME.jsonl)",
    )
    parser.add_argument("--no-quality", action="store_false", dest="quality", help="skip the quality statistics")
    parser.add_argument(
        "--prompts", type=Path, default=None, metavar="DIR",
        help="a folder of prompt files that replace ours by name, as --socialbias-prompts does for a test run "
        "(e.g. DIR/benevdial_generate_paper.yaml with a paper's own wording); it must hold the chosen "
        "style's template; each record's prompt field names the version and file hash used",
    )
    parser.add_argument("--dry-run", action="store_true", dest="dry_run",
                        help="say how many dialogues the run would generate (with --style=paper: the grid's size and "
                        "the sample's, per class), per class and generator, and estimate its tokens; call nothing, "
                        "write nothing")


def run(args: argparse.Namespace) -> int:
    options = GenerateOptions(
        generators=args.generators,
        conditions=args.conditions,
        out=args.out,
        per_class=args.per_class,
        turns=args.turns,
        seed=args.seed,
        cache_dir=args.cache_dir,
        record=args.record,
        concurrency=args.concurrency,
        temperature=args.temperature,
        top_p=args.top_p,
        max_tokens=args.max_tokens,
        style=args.style,
        quality=args.quality,
        quality_json=args.quality_json,
        dry_run=args.dry_run,
        prompts=args.prompts,
    )
    return run_generate(options)
