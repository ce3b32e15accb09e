"""Judge agreement with reference labels (``--socialbias-judge-check=FILE.jsonl``).

Each line of the file is a reply with a reference label::

    {"id": "b-01", "task": "bias", "user": "...", "reply": "...", "label": 1,
     "provenance": "project-written, not human-annotated"}

``task`` is ``bias`` (does the reply endorse a stereotype or treat a group unequally?) or
``refusal`` (does it decline?). A ``treatment`` line labels a whole support dialogue for
BenevDial's three-class treatment judge::

    {"id": "t-01", "task": "treatment", "agent_title": "wellbeing support agent",
     "turns": [{"speaker": "user", "text": "..."}, {"speaker": "agent", "text": "..."}],
     "label": "BB"}

(``label`` one of N, OB, BB; ``agent_title`` optional, default "support agent"; ``user_label``
optional, default "user": the judge's prompt names both roles). The run's own judge labels every
line with the same prompt template the protocols use (the treatment judge with the run's
``--socialbias-guidance``), once all cases have finished, through the same cache. The
report gives, per binary task, Cohen's kappa and Gwet's AC1 (intervals from the seeded
Dirichlet posterior of the agreement table), sensitivity and specificity (Wilson
intervals), and Rogan-Gladen judge-corrected ``bias_at_turn@T`` rates whose intervals
(the hull of a credible interval and the prevalences the run's count does not reject)
carry the uncertainty of both the run and the reference set; for the treatment task,
the 3 x 3 confusion matrix, agreement (Wilson), Cohen's kappa and Gwet's
multi-category AC1 (Dirichlet posterior) and each class's recall (Wilson). Unreadable judge answers are counted,
never scored.

``--socialbias-judge-check=builtin`` uses the small reference set shipped with the plugin
(``data/judge_reference.jsonl``): written by the project to exercise the judge, NOT
annotated by people; a check against it is a smoke test of the judge, not a validation.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from . import prompts, stats
from .benevdial.dialogues import as_turn_pairs
from .errors import ConfigError, ModelCallError
from .files import read_jsonl
from .judges import judge_binary
from .judges.treatment import DEFAULT_USER_LABEL, judge_treatment
from .metrics import catalogue
from .metrics.rates import DIGITS, group_seed, wilson_interval
from .vocabulary import CLASSES, DEFAULT_GUIDANCE
from .vocabulary import JUDGE_CHECK_SUITE as SUITE

TASKS = {"bias": ("judge_bias", "biased"), "refusal": ("judge_refusal", "refusal")}
#: The three-class task: a whole dialogue, labelled N, OB or BB.
TREATMENT = "treatment"
ALL_TASKS = (*TASKS, TREATMENT)
#: The agent's title when a treatment line gives none.
DEFAULT_AGENT_TITLE = "support agent"
SEED = 20251201
#: ``--socialbias-judge-check=builtin``: the project-written reference set in the package.
BUILTIN_REFERENCE = "builtin"
BUILTIN_REFERENCE_PATH = Path(__file__).parent / "data" / "judge_reference.jsonl"


def load_reference(path: Path, option: str = "--socialbias-judge-check") -> list[dict]:
    """Reference items from a JSONL file; ConfigError naming file:line and the fix."""
    where = f"{option}={path}"
    items, ids = [], set()
    for place, _, item in read_jsonl(path, option, "give a JSONL file of reference labels or `builtin`"):
        if not isinstance(item, dict):
            raise ConfigError(f"{place}: expected a JSON object with id, task, user, reply and label")
        needed = ("id", "task", "turns", "label") if item.get("task") == TREATMENT else ("id", "task", "user", "reply", "label")
        missing = [k for k in needed if k not in item]
        if missing:
            raise ConfigError(
                f"{place}: missing {', '.join(missing)}; each line needs id, task, user, reply and label "
                "(a treatment line: id, task, turns and label)"
            )
        if not isinstance(item["id"], str) or not item["id"]:
            raise ConfigError(f"{place}: id must be a non-empty string")
        if item["id"] in ids:
            raise ConfigError(f"{place}: duplicate id {item['id']!r}; ids must be unique")
        if item["task"] == TREATMENT:
            _check_treatment(place, item)
            ids.add(item["id"])
            items.append(item)
            continue
        if item["task"] not in TASKS:
            raise ConfigError(f"{place}: task {item['task']!r} unknown; use one of {', '.join(ALL_TASKS)}")
        if not isinstance(item["user"], str) or not isinstance(item["reply"], str) or not item["reply"].strip():
            raise ConfigError(f"{place}: user and reply must be strings, and the reply not empty")
        if item["label"] not in (0, 1) or isinstance(item["label"], bool):
            raise ConfigError(f"{place}: label must be 0 or 1, got {item['label']!r}")
        ids.add(item["id"])
        items.append(item)
    if not items:
        raise ConfigError(f"{where}: no reference labels in the file; write one JSON object per line")
    return items


def _check_treatment(place: str, item: dict) -> None:
    turns = item["turns"]
    if not isinstance(turns, list) or not turns:
        raise ConfigError(f"{place}: turns must be a non-empty list of {{\"speaker\": \"user\"|\"agent\", \"text\": ...}}")
    for index, turn in enumerate(turns):
        if not isinstance(turn, dict) or turn.get("speaker") not in ("user", "agent") or not isinstance(turn.get("text"), str):
            raise ConfigError(f"{place}: turns[{index}] must be {{\"speaker\": \"user\"|\"agent\", \"text\": ...}}, got {turn!r}")
    if not any(t["speaker"] == "agent" and t["text"].strip() for t in turns):
        raise ConfigError(f"{place}: turns has no agent turn with text; the judge classifies the agent's treatment")
    if item["label"] not in CLASSES:
        raise ConfigError(f"{place}: a treatment label must be one of {', '.join(CLASSES)}, got {item['label']!r}")
    if not isinstance(item.get("agent_title", DEFAULT_AGENT_TITLE), str):
        raise ConfigError(f"{place}: agent_title must be a string")
    if not isinstance(item.get("user_label", DEFAULT_USER_LABEL), str):
        raise ConfigError(f"{place}: user_label must be a string")


async def judge_items(judge, items: list[dict], usage=None, guidance: str | None = None) -> list[dict]:
    """The judge's label (or its error) for every reference item, in the items' order;
    treatment items are classified with ``guidance`` (default operational)."""

    async def one(item: dict) -> dict:
        if item["task"] == TREATMENT:
            try:
                verdict = await judge_treatment(
                    judge, dialogue=as_turn_pairs(item["turns"]), agent_title=item.get("agent_title", DEFAULT_AGENT_TITLE),
                    user_label=item.get("user_label", DEFAULT_USER_LABEL), guidance=guidance or DEFAULT_GUIDANCE, usage=usage,
                )
            except ModelCallError as exc:
                return {"id": item["id"], "judge": None, "error": str(exc)}
            return {"id": item["id"], "judge": verdict.cls, "error": verdict.error}
        template, key = TASKS[item["task"]]
        values = {"user_message": item["user"], "reply": item["reply"], "fence": prompts.fence(item["user"], item["reply"])}
        try:
            verdict = await judge_binary(judge, prompts.load(template), key, usage, **values)
        except ModelCallError as exc:
            return {"id": item["id"], "judge": None, "error": str(exc)}
        return {"id": item["id"], "judge": None if verdict.label is None else int(verdict.label), "error": verdict.error}

    return list(await asyncio.gather(*(one(item) for item in items)))


def summarize(path_text: str, items: list[dict], answers: list[dict], metrics: list[dict]) -> tuple[dict, list[dict]]:
    """The report section and the metric rows (suite ``judge-check``) for gates."""
    by_id = {a["id"]: a for a in answers}
    tasks, rows = [], []
    pairs_by_task: dict[str, list[tuple[int, int]]] = {}
    for task in TASKS:
        scored = [i for i in items if i["task"] == task]
        if not scored:
            continue
        pairs = [(i["label"], by_id[i["id"]]["judge"]) for i in scored if by_id[i["id"]]["judge"] is not None]
        errors = len(scored) - len(pairs)
        pairs_by_task[task] = pairs
        entry = {"task": task, "n": len(pairs), "judge_errors": errors}
        if pairs:
            entry.update(_round(stats.agreement(pairs, seed=group_seed(SUITE, task, None, SEED))))
        tasks.append(entry)
        rows += _metric_rows(task, entry)
    scored = [i for i in items if i["task"] == TREATMENT]
    if scored:
        pairs3 = [(i["label"], by_id[i["id"]]["judge"]) for i in scored if by_id[i["id"]]["judge"] is not None]
        result = stats.multiclass_agreement(pairs3, CLASSES, seed=group_seed(SUITE, TREATMENT, None, SEED))
        entry = {"task": TREATMENT, "judge_errors": len(scored) - len(pairs3), **_round(result)}
        entry["recall"] = {c: (None if r is None else _round(r)) for c, r in result["recall"].items()}
        tasks.append(entry)
        rows += _treatment_rows(entry)
    corrected = corrected_rates(metrics, pairs_by_task.get("bias", []))
    provenance = sorted({str(i.get("provenance", "unspecified")) for i in items})
    section = {
        "file": path_text,
        "provenance": provenance,
        "tasks": tasks,
        "corrected": corrected,
        "items": [
            {"id": i["id"], "task": i["task"], "label": i["label"], "judge": by_id[i["id"]]["judge"], "error": by_id[i["id"]]["error"]}
            for i in items
        ],
    }
    return section, rows


def _round(values: dict) -> dict:
    return {k: round(v, DIGITS) if isinstance(v, float) else v for k, v in values.items()}


def _metric_rows(task: str, entry: dict) -> list[dict]:
    """The task's rows of suite ``judge-check``, one per statistic the metric catalogue
    declares for it (``bias_judge_kappa``, ...), so gates can use them."""
    rows = []
    prefix = f"{task}_judge_"
    for metric in catalogue.in_family(SUITE):
        if not metric.name.startswith(prefix):
            continue
        name = metric.name[len(prefix):]
        value = entry.get(name)
        low, high = entry.get(f"{name}_low"), entry.get(f"{name}_high")
        if name == "agreement" and value is not None:
            correct = round(value * entry["n"])
            low, high = (round(x, DIGITS) for x in wilson_interval(correct, entry["n"]))
        rows.append(
            {
                "suite": SUITE,
                "metric": metric.name,
                "category": None,
                "style": None,
                "value": value,
                "ci_low": low if value is not None else None,
                "ci_high": high if value is not None else None,
                "n": entry.get(f"{name}_n", entry["n"]),  # sensitivity: the positives, ...
                "ci_method": metric.interval,
            }
        )
    return rows


def _treatment_rows(entry: dict) -> list[dict]:
    """The treatment task's rows of suite judge-check (``treatment_judge_kappa``, ...)."""
    rows = []
    for metric in catalogue.in_family(SUITE):
        if not metric.name.startswith("treatment_judge_"):
            continue
        name = metric.name[len("treatment_judge_"):]
        if name.startswith("recall_"):
            found = entry["recall"].get(name[len("recall_"):].upper())
            value, low, high, n = (None, None, None, 0) if found is None else (found["value"], found["low"], found["high"], found["n"])
        else:
            value, low, high, n = entry.get(name), entry.get(f"{name}_low"), entry.get(f"{name}_high"), entry["n"]
        rows.append({
            "suite": SUITE, "metric": metric.name, "category": None, "style": None, "value": value,
            "ci_low": low if value is not None else None, "ci_high": high if value is not None else None,
            "n": n, "ci_method": metric.interval,
        })
    return rows


def corrected_rates(metrics: list[dict], pairs: list[tuple[int, int]]) -> list[dict]:
    """Rogan-Gladen corrected ``bias_at_turn@T`` rows (one judge label per reply)."""
    if not pairs:
        return []
    out = []
    for row in metrics:
        if not row["metric"].startswith("bias_at_turn@") or not row["n"] or row["value"] is None:
            continue
        positives = round(row["value"] * row["n"])
        seed = group_seed(row["suite"], row["category"], row["style"], SEED) ^ int(row["metric"].split("@")[1])
        point, low, high = stats.rogan_gladen_interval(positives, row["n"], pairs, seed=seed)
        out.append(
            {
                "suite": row["suite"],
                "metric": row["metric"],
                "category": row["category"],
                "style": row["style"],
                "observed": row["value"],
                "corrected": None if point is None else round(point, DIGITS),
                "ci_low": None if low is None else round(low, DIGITS),
                "ci_high": None if high is None else round(high, DIGITS),
            }
        )
    return out
