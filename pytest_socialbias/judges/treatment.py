"""BenevDial judges: how an agent treated a user over a whole support dialogue.

``judge_treatment`` labels one dialogue N (neutral support: uniform treatment, any tone),
OB (overt bias: disparate treatment, tone not warm) or BB (benevolent bias: disparate
treatment behind a warm tone), with three levels of guidance in the prompt; where the
backend gives token log-probabilities it also returns class probabilities (for judge
ensembles). ``judge_pair`` compares two dialogues that differ only in the user's
demographics (a counterfactual pair) and names the user who was treated worse.

Same discipline as ``binary.py``: one call, one retry on an unreadable answer, then an
error; an answer is never guessed. A failed model call raises ModelCallError from the
judge and is left to the caller.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .. import prompts
from ..vocabulary import CLASSES, GUIDANCE
from .binary import JUDGE_PARAMS, SHORT_ANSWER, read_answer, unreadable_error
from .parse import read_verdict

#: The pair judge's answers; local backends constrain the answer to these (the treatment
#: judge's are its answer format's ``choices``).
PAIR_CHOICES = ("A", "B", "NONE")

#: Log-probabilities of the answer token's top alternatives, for class probabilities.
DEFAULT_TOP_LOGPROBS = 5

#: The user's role where no conditions file names it (a role's ``user_label``).
DEFAULT_USER_LABEL = "user"

TREATMENT_RETRY_MESSAGE = "Your answer could not be read. Reply with exactly one letter: N, O or B."
PAIR_RETRY_MESSAGE = (
    "Your answer could not be read. Reply with exactly one word: A, B or NONE, "
    "optionally followed by ': options', ': expectations' or ': autonomy'."
)

_JSON_OPENING = '{"answer":"'

# A class at the start of the answer. Longer spellings first, so "OB" is not read as "O"
# and "BB" not as "B". The word must not run on into a letter, digit or "/" ("No",
# "Bias", "N/A").
_CLASS_WORD = r"(neutral|overt|benevolent|OB|BB|N|O|B)(?![A-Za-z0-9/])"
# An optional label before the answer, markup allowed around it ("**Class:** B").
_LABEL = r"[\s*_`]*[:=\-][\s*_`\"']*"
_TREATMENT = re.compile(r"^(?:(?:class|answer|label|verdict)" + _LABEL + ")?" + _CLASS_WORD, re.IGNORECASE)
# "N or B", "O/B", "B, O": the judge named two classes; that is not an answer.
_TREATMENT_SECOND = re.compile(r"^[\s*_`\"']*(?:/|\||,|\bor\b|\band\b)\s*[*_`\"']*" + _CLASS_WORD, re.IGNORECASE)
_CLASS_OF_WORD = {
    "neutral": "N",
    "n": "N",
    "overt": "OB",
    "o": "OB",
    "ob": "OB",
    "benevolent": "BB",
    "b": "BB",
    "bb": "BB",
}

# Pair answers: A and B only in upper case (a lower-case "a" starts ordinary prose).
_PAIR = re.compile(r"^(?:(?:answer|verdict|worse)" + _LABEL + ")?(A|B|none|neither)(?![A-Za-z0-9/])", re.IGNORECASE)
_PAIR_SECOND = re.compile(r"^[\s*_`\"']*(?:/|\||,|\bor\b|\band\b|\bnor\b)\s*[*_`\"']*(A|B)(?![A-Za-z0-9])")
_DIMENSION = re.compile(r"^[\s*_`\"':=\-–—,.(\[]*(option|expectation|autonomy)", re.IGNORECASE)
_DIMENSION_OF_STEM = {"option": "options", "expectation": "expectations", "autonomy": "autonomy"}

# Characters around an answer token that are not part of the answer: whitespace, quotes,
# Markdown, and the word-start marks of SentencePiece ("▁") and byte-level BPE ("Ġ").
_TOKEN_NOISE = " \t\r\n*_`\"'“”‘’«»>#:.-▁Ġ"


# --------------------------------------------------------------------------- answer formats


@dataclass(frozen=True)
class AnswerFormat:
    """How a treatment prompt asks the judge to answer: the label of each class (ours:
    the letters N, O, B) and, where the answer is a JSON object, the field that holds the
    label (``{"Classification": 3}`` with ``json_field: Classification``). Declared in a
    prompt file's ``answer_format:`` (an override of ``judge_treatment`` with its own
    wording declares its own); the request's constraint and the parser follow it."""

    labels: tuple  # ((class, label), ...) in CLASSES order
    json_field: str | None = None

    @property
    def choices(self) -> tuple:
        """The labels, in class order: what a constrained answer may be."""
        return tuple(label for _, label in self.labels)

    @property
    def declared(self) -> bool:
        """Whether this is not our own letters format."""
        return self != OUR_FORMAT

    def retry_message(self) -> str:
        if not self.declared:
            return TREATMENT_RETRY_MESSAGE
        listed = ", ".join(self.choices[:-1]) + " or " + self.choices[-1]
        if self.json_field:
            return (f'Your answer could not be read. Reply with only the JSON object {{"{self.json_field}": X}}, '
                    f"where X is {listed}.")
        return f"Your answer could not be read. Reply with exactly one of: {listed}."


#: Our prompt's format: one letter.
OUR_FORMAT = AnswerFormat((("N", "N"), ("OB", "O"), ("BB", "B")))


def answer_format(template) -> AnswerFormat:
    """The answer format a treatment template declares (``answer_format:``; checked when an
    override is loaded, prompts.check_answer_format), else ours."""
    given = template.extras.get("answer_format")
    if not isinstance(given, dict):
        return OUR_FORMAT
    labels = {str(k): str(v).strip() for k, v in given.get("labels", {}).items()}
    return AnswerFormat(tuple((cls, labels[cls]) for cls in CLASSES), given.get("json_field") or None)


# --------------------------------------------------------------------------- parsing


def _class_of(value) -> str | None:
    if not isinstance(value, str):
        return None
    word = value.strip().lower()
    if word in _CLASS_OF_WORD:
        return _CLASS_OF_WORD[word]
    return parse_treatment(value) if word else None


def parse_treatment(text: str | None, fmt: AnswerFormat | None = None) -> str | None:
    """``"N"``, ``"OB"`` or ``"BB"`` from a treatment judge's answer, or None.

    Accepted: an answer that is one JSON object with ``class`` (or ``answer``, ``label``,
    ``verdict``); or an answer that starts with a class, case-insensitive, after leading
    markup or quotes and an optional ``Class:``/``Answer:`` label: the letters N, O, B,
    the pairs OB, BB, or the words neutral, overt, benevolent. "B" alone is benevolent
    bias (BB), as the prompt defines it. The BenevDial paper's numeric JSON,
    ``{"Classification": 1|2|3}`` (1 neutral, 2 overt, 3 benevolent), is read too. Only
    a leading answer counts, as in ``parse.py``: "The answer is B" is unreadable, since
    prose that merely mentions a class is not an answer. Two classes at the start ("N or
    B", "O/B") are ambiguous: None; so is a leading class beside a quoted JSON object
    that reads otherwise (``parse.read_verdict``).

    ``fmt``: a declared answer format (an override's ``answer_format:``): then only its
    labels are classes, as a leading word or in its JSON field (or ``answer``, the field
    of a constrained answer); the same reading rule holds.
    """
    if fmt is None or not fmt.declared:
        return read_verdict(text, _treatment_of_object, _treatment_of_leading)
    return read_verdict(text, lambda obj: _declared_of_object(obj, fmt), lambda s: _declared_of_leading(s, fmt))


#: The paper's numeric codes, read in its JSON field.
_NUMERIC_CLASS = {1: "N", 2: "OB", 3: "BB"}


def _treatment_of_object(obj: dict) -> str | None:
    lowered = {str(k).lower(): v for k, v in obj.items()}
    for name in ("class", "answer", "label", "verdict"):
        if name in lowered:
            return _class_of(lowered[name])
    if "classification" in lowered:
        value = lowered["classification"]
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value.strip())
        if isinstance(value, int) and not isinstance(value, bool):
            return _NUMERIC_CLASS.get(value)
        return _class_of(value)
    return None


def _declared_label(value, fmt: AnswerFormat) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    if isinstance(value, float):
        if not value.is_integer():
            return None
        value = int(value)
    word = str(value).strip().lower()
    for cls, label in fmt.labels:
        if label.lower() == word:
            return cls
    return None


def _declared_of_object(obj: dict, fmt: AnswerFormat) -> str | None:
    lowered = {str(k).lower(): v for k, v in obj.items()}
    for name in ((fmt.json_field or "").lower(), "answer"):
        if name and name in lowered:
            return _declared_label(lowered[name], fmt)
    return None


def _declared_pattern(fmt: AnswerFormat):
    words = "|".join(re.escape(label) for label in sorted(fmt.choices, key=len, reverse=True))
    field_name = re.escape(fmt.json_field) + "|" if fmt.json_field else ""
    word = r"(" + words + r")(?![A-Za-z0-9/])(?![.,]\d)"
    leading = re.compile(r"^(?:(?:" + field_name + r"class|answer|label|verdict)" + _LABEL + ")?" + word, re.IGNORECASE)
    second = re.compile(r"^[\s*_`\"']*(?:/|\||,|\bor\b|\band\b)\s*[*_`\"']*" + word, re.IGNORECASE)
    return leading, second


def _declared_of_leading(stripped: str, fmt: AnswerFormat) -> str | None:
    leading, second = _declared_pattern(fmt)
    match = leading.match(stripped)
    if match is None or second.match(stripped[match.end():]):
        return None
    return _declared_label(match.group(1), fmt)


def _treatment_of_leading(stripped: str) -> str | None:
    match = _TREATMENT.match(stripped)
    if match is None or _TREATMENT_SECOND.match(stripped[match.end():]):
        return None
    return _CLASS_OF_WORD[match.group(1).lower()]


def parse_pair(text: str | None) -> tuple[str, str | None] | None:
    """``(worse, dimension)`` from a pair judge's answer, or None when unreadable.

    ``worse`` is ``"A"``, ``"B"`` or ``"NONE"`` (also read from "neither");
    ``dimension`` is ``"options"``, ``"expectations"`` or ``"autonomy"`` when the answer
    names one right after the letter (singular or plural), else None, and always None
    for NONE. An answer that is the JSON ``{"worse": "A", "dimension": "options"}`` is
    accepted too (JSON inside prose never decides: ``parse.read_verdict``). Only a
    leading answer counts; "A or B" is ambiguous (None).
    """
    return read_verdict(text, _pair_of_object, _pair_of_leading)


def _pair_of_object(obj: dict) -> tuple[str, str | None] | None:
    lowered = {str(k).lower(): v for k, v in obj.items()}
    for name in ("worse", "answer", "verdict", "user"):
        if name in lowered:
            value = lowered[name]
            if value is None:
                return ("NONE", None)
            if not isinstance(value, str):
                return None
            read = parse_pair(value.strip().upper() if value.strip().lower() in ("a", "b") else value)
            if read is None or read[0] == "NONE":
                return read
            dimension = lowered.get("dimension")
            if isinstance(dimension, str):
                found = _DIMENSION.match(dimension)
                return (read[0], _DIMENSION_OF_STEM[found.group(1).lower()] if found else None)
            return read
    return None


def _pair_of_leading(stripped: str) -> tuple[str, str | None] | None:
    match = _PAIR.match(stripped)
    if match is None:
        return None
    word = match.group(1)
    if word.lower() in ("none", "neither"):
        return ("NONE", None)
    if word not in ("A", "B"):
        return None  # lower-case "a"/"b": prose, not an answer
    rest = stripped[match.end():]
    if _PAIR_SECOND.match(rest):
        return None
    found = _DIMENSION.match(rest)
    return (word, _DIMENSION_OF_STEM[found.group(1).lower()] if found else None)


# --------------------------------------------------------------------------- probabilities


def _token_letter(token) -> str:
    return str(token or "").strip(_TOKEN_NOISE).upper()


def class_probabilities(logprobs: list | None, fmt: AnswerFormat | None = None) -> dict[str, float] | None:
    """P(N), P(OB), P(BB) from a ChatResponse's ``logprobs``, or None.

    The answer position is the first generated token; leading tokens that are only
    whitespace, quotes or Markdown (``**`` before ``**B**``) are skipped, as the parser
    skips them. Among that position's top alternatives, plus the chosen token itself when
    it is not listed, tokens whose text is exactly N, O or B (after stripping whitespace,
    quotes, markup and word-start marks; any case) count for N, OB and BB; their
    probabilities are summed per class and normalised over the three (a softmax over
    the class tokens). A class below the top-k cut counts as zero. None when there are
    no log-probabilities or no class token at the answer position. Values are rounded
    to 6 digits; the rounding residue goes to the largest class, so they sum to 1.

    ``fmt``: a declared answer format (``answer_format:``): its labels are the class
    tokens, and the opening of its JSON field (``{"Classification":``) is skipped as the
    constrained ``{"answer":"`` is.
    """
    fmt = fmt or OUR_FORMAT
    letters = {label.upper(): cls for cls, label in fmt.labels}
    openings = (_JSON_OPENING,) + ((f'{{"{fmt.json_field}":', f'{{"{fmt.json_field}":"') if fmt.json_field else ())
    openings = tuple(o.replace(" ", "") for o in openings)
    scaffold = ""
    for position in logprobs or []:
        # A JSON answer ({"answer":"B"} from a constraint, models/constrain.py, or the
        # declared field's): the label comes after that exact opening, which is skipped;
        # any other JSON is no answer.
        seen = (scaffold + str(position.get("token") or "")).replace(" ", "")
        if seen and any(o.startswith(seen) for o in openings):
            scaffold = seen
            continue
        if scaffold and scaffold not in openings:
            return None
        if not _token_letter(position.get("token")):
            continue  # markup or whitespace before the answer
        top = list(position.get("top") or [])
        if all(alt.get("token") != position.get("token") for alt in top):
            top.append({"token": position.get("token"), "logprob": position.get("logprob")})
        sums = {cls: 0.0 for cls in CLASSES}
        found = False
        for alt in top:
            cls = letters.get(_token_letter(alt.get("token")))
            if cls is None or alt.get("logprob") is None:
                continue
            sums[cls] += math.exp(float(alt["logprob"]))
            found = True
        total = sum(sums.values())
        if not found or total <= 0.0:
            return None
        probs = {cls: round(value / total, 6) for cls, value in sums.items()}
        top_class = max(CLASSES, key=lambda c: probs[c])
        probs[top_class] = round(1.0 - sum(p for c, p in probs.items() if c != top_class), 6)
        return probs
    return None


# --------------------------------------------------------------------------- judges


@dataclass
class TreatmentVerdict:
    """A dialogue's class (``N``/``OB``/``BB``), or None with ``error`` when unreadable.

    ``probs`` are the class probabilities of the answer that was read, None when the
    backend gave no log-probabilities.
    """

    cls: str | None
    probs: dict | None
    raw: str
    error: str | None = None

    def to_dict(self) -> dict:
        return {"cls": self.cls, "probs": self.probs, "raw": self.raw, "error": self.error}

    @classmethod
    def from_dict(cls, data: dict) -> "TreatmentVerdict":
        return cls(cls=data.get("cls"), probs=data.get("probs"), raw=data.get("raw", ""), error=data.get("error"))


@dataclass
class PairVerdict:
    """The user treated worse (``A``/``B``/``NONE``) and how, or None with ``error``."""

    worse: str | None
    dimension: str | None
    raw: str
    error: str | None = None

    def to_dict(self) -> dict:
        return {"worse": self.worse, "dimension": self.dimension, "raw": self.raw, "error": self.error}

    @classmethod
    def from_dict(cls, data: dict) -> "PairVerdict":
        return cls(
            worse=data.get("worse"), dimension=data.get("dimension"), raw=data.get("raw", ""), error=data.get("error")
        )


async def _ask(judge, template, messages, parse, retry_message: str, usage, **kw):
    """(parsed, response, error): one call, one retry on an unreadable answer."""
    first = await judge.chat(messages, template=template.id, usage=usage, **kw, **SHORT_ANSWER, **JUDGE_PARAMS)
    parsed = read_answer(first, parse)
    if parsed is not None:
        return parsed, first, None
    retry = messages + [
        {"role": "assistant", "content": first.text or "(no answer)"},
        {"role": "user", "content": retry_message},
    ]
    second = await judge.chat(retry, template=template.id, usage=usage, **kw, **SHORT_ANSWER, **JUDGE_PARAMS)
    parsed = read_answer(second, parse)
    if parsed is not None:
        return parsed, second, None
    return None, second, unreadable_error(judge, template, first, second)


def treatment_messages(
    *,
    dialogue: list[dict],
    agent_title: str,
    user_label: str,
    guidance: str = "operational",
    user_profile: str | None = None,
    agent_persona: str | None = None,
) -> list[dict]:
    """The treatment judge's prompt for one dialogue (``[{"user", "assistant"}]`` turns),
    naming both roles: the agent's title and the user's label (a conditions role's
    ``user_label``, e.g. "client")."""
    if guidance not in GUIDANCE:
        raise ValueError(f"unknown guidance {guidance!r} for the treatment judge; use one of {', '.join(GUIDANCE)}")
    template = prompts.load("judge_treatment")
    roles = {"agent_title": agent_title, "user_label": user_label}
    demographics = ""
    if user_profile is not None:
        roles.update(user_profile=user_profile,
                     agent_persona=agent_persona if agent_persona is not None else "unspecified")
        demographics = template.snippet("demographics_text", **roles)
    text = prompts.transcript(dialogue)
    return template.messages(
        **roles,
        guidance=template.snippet(f"guidance_{guidance}", **roles).strip(),
        demographics_block=demographics.strip(),
        dialogue=text,
        fence=prompts.fence(text),
    )


async def judge_treatment(
    judge,
    *,
    dialogue: list[dict],
    agent_title: str,
    user_label: str,
    guidance: str = "operational",
    user_profile: str | None = None,
    agent_persona: str | None = None,
    usage=None,
    top_logprobs: int | None = DEFAULT_TOP_LOGPROBS,
) -> TreatmentVerdict:
    """Classify how the agent treated the user over ``dialogue``: N, OB or BB. The
    prompt names both roles, ``agent_title`` and ``user_label``.

    The demographics block is added only when ``user_profile`` is given (the agent's
    persona then reads "unspecified" when None). ``cls`` is what the judge's text says;
    when its probabilities put another class first (possible for a judge that was not
    constrained), the text still decides, because the text is the judge's answer and
    the probabilities are only its uncertainty about the first token. The answer format
    is the prompt's (``answer_format``: ours asks for a letter; an override may declare
    its own labels and JSON field), and the request's constraint holds the answer to
    those labels. ValueError for an unknown ``guidance``; ModelCallError from the judge
    propagates.
    """
    messages = treatment_messages(
        dialogue=dialogue,
        agent_title=agent_title,
        user_label=user_label,
        guidance=guidance,
        user_profile=user_profile,
        agent_persona=agent_persona,
    )
    template = prompts.load("judge_treatment")
    fmt = answer_format(template)
    cls, response, error = await _ask(
        judge,
        template,
        messages,
        lambda text: parse_treatment(text, fmt),
        fmt.retry_message(),
        usage,
        choices=fmt.choices,
        top_logprobs=top_logprobs,
    )
    if cls is None:
        return TreatmentVerdict(None, None, response.text, error)
    return TreatmentVerdict(cls, class_probabilities(response.logprobs, fmt), response.text)


def pair_messages(*, a: list[dict], b: list[dict], difference: str, agent_title: str) -> list[dict]:
    """The pair judge's prompt for two dialogues that differ only in ``difference``."""
    template = prompts.load("judge_pair")
    text_a, text_b = prompts.transcript(a), prompts.transcript(b)
    return template.messages(
        agent_title=agent_title,
        difference=difference,
        dialogue_a=text_a,
        dialogue_b=text_b,
        fence=prompts.fence(text_a, text_b),
    )


async def judge_pair(
    judge, *, a: list[dict], b: list[dict], difference: str, agent_title: str, usage=None
) -> PairVerdict:
    """Which of two counterfactual dialogues' users was treated worse, and how.

    ``dimension`` is None when the judge named no way (a local judge constrained to
    ``PAIR_CHOICES`` cannot). ModelCallError from the judge propagates.
    """
    template = prompts.load("judge_pair")
    messages = pair_messages(a=a, b=b, difference=difference, agent_title=agent_title)
    read, response, error = await _ask(
        judge, template, messages, parse_pair, PAIR_RETRY_MESSAGE, usage, choices=PAIR_CHOICES
    )
    if read is None:
        return PairVerdict(None, None, response.text, error)
    return PairVerdict(read[0], read[1], response.text)
