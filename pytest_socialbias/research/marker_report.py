"""``python -m pytest_socialbias markers FILE``: the surface markers of a dialogue file
(``benevdial/markers.py``: their definitions, and the table a detector run reports) per
class, or overall for an unlabelled file, with Cohen's d against N and its interval, as a
text table and optionally JSON. It describes a data set, with no judge or guard.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from ..benevdial.markers import MARKERS, PROTOCOL_BB_DIRECTION, cohens_d, dialogue_markers, rounded
from ..errors import ConfigError
from ..files import read_jsonl, write_atomically
from ..vocabulary import CLASSES

#: Confidence level of the interval for d.
CONFIDENCE = 0.95
#: How the interval for d is computed (also written into the JSON output).
D_INTERVAL = (
    "d +- z * SE, z = 1.959964 (95%), SE = sqrt((n1 + n2) / (n1 * n2) + d^2 / (2 * (n1 + n2))): "
    "the large-sample normal approximation (Hedges & Olkin 1985)"
)
_Z = statistics.NormalDist().inv_cdf(0.5 + CONFIDENCE / 2)
_FORMAT_FIX = 'each line is one dialogue: {"class": "N"|"OB"|"BB" (optional), "turns": [{"speaker": "user"|"agent", "text": "..."}]} (docs/dialogues-format.md)'


def d_interval(d: float | None, n1: int, n2: int) -> tuple[float, float, float] | None:
    """(SE, low, high) of Cohen's d from groups of n1 and n2 values, or None without a d.

    SE = sqrt((n1 + n2) / (n1 n2) + d^2 / (2 (n1 + n2))), the large-sample normal
    approximation of the standard error of d (Hedges & Olkin 1985; Borenstein et
    al. 2009, *Introduction to Meta-Analysis*, ch. 4); the interval is d +- 1.96 SE. With a handful of dialogues per
    class it is rough (and too narrow for large |d|): read it as a scale, not a test.
    """
    if d is None or n1 < 1 or n2 < 1:
        return None
    se = math.sqrt((n1 + n2) / (n1 * n2) + d * d / (2 * (n1 + n2)))
    return se, d - _Z * se, d + _Z * se


def load_marker_dialogues(path: str | Path) -> list[dict]:
    """The dialogues of a JSONL file for the marker table, labelled or not.

    Lighter than ``load_dialogues``: a line needs ``turns`` (speaker/text objects, at least
    one agent turn) and, when any line has a ``class``, every line needs one of N, OB, BB.
    ConfigError naming ``FILE:LINE`` and the fix; each dialogue gets ``_line``.
    """
    path = Path(path)
    dialogues: list[dict] = []
    labelled_line = unlabelled_line = None
    for place, number, data in read_jsonl(path, "FILE", "give a JSONL file of dialogues (docs/dialogues-format.md)"):
        if not isinstance(data, dict):
            raise ConfigError(f"{place}: not a JSON object; {_FORMAT_FIX}")
        turns = data.get("turns")
        if not isinstance(turns, list) or not turns:
            raise ConfigError(f'{place}: no "turns" list; {_FORMAT_FIX}')
        for i, turn in enumerate(turns):
            if not (isinstance(turn, dict) and turn.get("speaker") in ("user", "agent") and isinstance(turn.get("text"), str)):
                raise ConfigError(f'{place}: turns[{i}] needs "speaker": "user" or "agent" and a "text" string; {_FORMAT_FIX}')
        if not any(turn["speaker"] == "agent" for turn in turns):
            raise ConfigError(f"{place}: no agent turn; the markers describe agent turns, so give each dialogue at least one")
        label = data.get("class")
        if label is None:
            unlabelled_line = unlabelled_line or number
        elif label in CLASSES:
            labelled_line = labelled_line or number
        else:
            raise ConfigError(f"{place}: class {label!r} is not one of {', '.join(CLASSES)}; fix the label, or drop it from every line")
        if labelled_line and unlabelled_line:
            raise ConfigError(
                f"{place}: {'no class' if label is None else 'a class'} but line "
                f"{labelled_line if label is None else unlabelled_line} has "
                f"{'one' if label is None else 'none'}; label every dialogue (N, OB or BB) or none"
            )
        dialogues.append({**data, "_line": number})
    if not dialogues:
        raise ConfigError(f"{path}: no dialogues in the file; {_FORMAT_FIX}")
    return dialogues


def _group_value(dialogue: dict, by: str, source: str):
    value = dialogue
    for part in by.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, (dict, list)):
        raise ConfigError(
            f"{source}:{dialogue.get('_line', '?')}: --by={by} is an object or list there, not a value; "
            "name a field that holds a string, such as role, generator or user.age"
        )
    return None if value is None else str(value)


def _stats(values: list[float]) -> dict:
    return {
        "n": len(values),
        "mean": rounded(statistics.fmean(values)) if values else None,
        "sd": rounded(statistics.stdev(values)) if len(values) > 1 else None,
    }


def _group_rows(group: str | None, measured: list[tuple[str | None, dict]], labelled: bool) -> list[dict]:
    rows = []
    for name in MARKERS:
        per = {c: [m[name] for label, m in measured if label == c] for c in CLASSES}
        classes = [*CLASSES, None] if labelled else [None]
        for label in classes:
            values = per[label] if label is not None else [m[name] for _, m in measured]
            row = {"group": group, "marker": name, "class": label, **_stats(values),
                   "d": None, "d_se": None, "d_low": None, "d_high": None}
            if label is not None and label != "N":
                d = cohens_d(values, per["N"])
                interval = d_interval(d, len(values), len(per["N"]))
                if interval is not None:
                    row.update(d=rounded(d), d_se=rounded(interval[0]), d_low=rounded(interval[1]), d_high=rounded(interval[2]))
            rows.append(row)
    return rows


def marker_summary(dialogues: list[dict], source: str = "", by: str | None = None) -> dict:
    """Per-class (or, unlabelled, overall) marker means and Cohen's d against N, as builtins.

    ``rows``: one per group, marker and class, in that order: ``group`` (None for every
    dialogue, then each ``by`` value sorted; dialogues without it are "(none)"),
    ``marker``, ``class`` (N, OB, BB, then None for every class; only None when the file is
    unlabelled), ``n``, ``mean``, ``sd`` (sample SD), and for OB and BB ``d`` (against N in
    the same group), ``d_se``, ``d_low``, ``d_high`` (see :func:`d_interval`); None where
    undefined. Numbers rounded to 6 digits.
    """
    labelled = any(d.get("class") is not None for d in dialogues)
    measured = [(d.get("class"), dialogue_markers(d)) for d in dialogues]
    groups: list[tuple[str | None, list]] = [(None, measured)]
    if by:
        values = [_group_value(d, by, source) for d in dialogues]
        if all(v is None for v in values):
            raise ConfigError(f"--by={by}: no dialogue in {source or 'the file'} has {by}; name a field the records carry, such as role or generator")
        keys = [v if v is not None else "(none)" for v in values]
        groups += [(key, [m for k, m in zip(keys, measured) if k == key]) for key in sorted(set(keys))]
    rows = [row for group, items in groups for row in _group_rows(group, items, labelled)]
    counts = {c: sum(1 for d in dialogues if d.get("class") == c) for c in CLASSES}
    return {
        "file": source,
        "dialogues": len(dialogues),
        "labelled": labelled,
        "classes": counts if labelled else None,
        "by": by,
        "reference": "N" if labelled else None,
        "confidence": CONFIDENCE,
        "d_interval": D_INTERVAL,
        "markers": list(MARKERS),
        "protocol_bb_direction": dict(PROTOCOL_BB_DIRECTION),
        "rows": rows,
    }


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_summary(summary: dict) -> str:
    """The summary as a plain-text table, one block per group."""
    rows = summary["rows"]
    labelled = summary["labelled"]
    lines = []
    if labelled:
        counts = ", ".join(f"{c} {n}" for c, n in summary["classes"].items())
        lines.append(
            f"{summary['file']}: {summary['dialogues']} dialogues ({counts}); "
            f"d = Cohen's d against N, {summary['confidence']:.0%} CI by the large-sample normal approximation"
        )
    else:
        lines.append(f"{summary['file']}: {summary['dialogues']} dialogues, unlabelled (no class): overall means, no d")
    seen: list = []
    for row in rows:
        if row["group"] not in seen:
            seen.append(row["group"])
    for group in seen:
        mine = [r for r in rows if r["group"] == group]
        if summary["by"]:
            n = next(r["n"] for r in mine if r["class"] is None)
            lines.append("")
            lines.append(f"{summary['by']}={group}: {n} dialogues" if group is not None else f"all: {n} dialogues")
        if labelled:
            header = f"{'marker':<20} {'N mean':>9} {'OB mean':>9} {'BB mean':>9} {'all mean':>9}   {'d OB [95% CI]':<22} d BB [95% CI]"
        else:
            header = f"{'marker':<20} {'mean':>9} {'sd':>9}"
        lines.append(header)
        for name in MARKERS:
            by_class = {r["class"]: r for r in mine if r["marker"] == name}
            if labelled:
                means = " ".join(f"{_num(by_class[c]['mean'], 3):>9}" for c in (*CLASSES, None))
                ds = []
                for c in ("OB", "BB"):
                    r = by_class[c]
                    ds.append("-" if r["d"] is None else f"{r['d']:.2f} [{r['d_low']:.2f}, {r['d_high']:.2f}]")
                lines.append(f"{name:<20} {means}   {ds[0]:<22} {ds[1]}".rstrip())
            else:
                r = by_class[None]
                lines.append(f"{name:<20} {_num(r['mean'], 3):>9} {_num(r['sd'], 3):>9}")
    return "\n".join(lines)


def markers_report(path: str | Path, by: str | None = None, json_path: str | Path | None = None) -> str:
    """Read a dialogue file, summarise its markers, write the JSON (if asked); the text table."""
    summary = marker_summary(load_marker_dialogues(path), source=str(path), by=by)
    if json_path is not None:
        try:
            write_atomically(json_path, json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
        except OSError as exc:
            raise ConfigError(f"--json={json_path}: cannot write it ({exc}); give a writable path") from None
    return format_summary(summary)
