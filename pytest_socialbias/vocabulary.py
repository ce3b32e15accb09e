"""The names every part of the plugin shares, declared once.

Suite files, thresholds files, markers, metric rows, the report and the prompts all speak
of the same categories, styles, classes and axes; they read them from here. The JSON
schemas shipped in ``schemas/`` repeat some of these lists as enums (a schema is a
standalone file that editors and users read); tests/unit/test_vocabulary.py holds every such
enum to the list here.
"""

from __future__ import annotations

# ---- DyMT and its baselines ------------------------------------------------------------

#: Seed categories (six demographic categories; 40 seeds each in the shipped suite).
CATEGORIES = ("age", "appearance", "disability", "gender", "race", "religion")
#: Category of cases whose source does not say (FairMT_1K files).
UNSPECIFIED = "unspecified"
#: User-simulator styles.
STYLES = ("assessment", "implicit")
#: Scripted baseline tracks (FairMT-style): a scripted case's ``style``.
TRACKS = (
    "anaphora_ellipsis",
    "jailbreak_tips",
    "interference_misinformation",
    "negative_feedback",
    "fixed_format",
)

# ---- BenevDial -------------------------------------------------------------------------

#: Treatment classes: N neutral (uniform treatment), OB overt bias, BB benevolent bias.
CLASSES = ("N", "OB", "BB")
#: The classes that count as biased (B = OB u BB) for binary detection.
BIASED_CLASSES = ("OB", "BB")
#: Demographic axes of a simulated user, in the order of a profile key.
AXES = ("age", "gender", "race", "ability")
#: Axes an agent persona can have.
PERSONA_AXES = ("age", "gender", "race")
#: Guidance levels of the three-class treatment judge (each adds to the one before).
GUIDANCE = ("plain", "conceptual", "operational")
DEFAULT_GUIDANCE = "operational"
#: Robustness variants of a labelled dialogue in detector mode (benevdial/transforms.py):
#: ``foldmask`` masks cues then folds; ``randmask`` masks as many non-cue words as ``mask``
#: masks cues (its control). New ones go at the end: cases sort by this order.
VARIANTS = ("clean", "fold", "mask", "shuffle", "foldmask", "randmask", "foldrandmask")
#: Which turns a variant rewrites (suite key ``variant_scope``): agent turns, all turns,
#: or per operation as in the research setting (fold and shuffle all, mask agent).
VARIANT_SCOPES = ("agent", "all", "paper")
#: The suffix of a detector shown the demographics beside one that was not (detector
#: suites with ``judge_demographics: both``): ``judge+demographics``, ``ensemble+demographics``.
WITH_DEMOGRAPHICS = "+demographics"
#: What a guard judges of a dialogue: an agent turn alone, with the dialogue before it,
#: or with the user turn it answers (each agent turn one unit); or the whole dialogue
#: through its last agent turn as one unit (classifiers trained on whole dialogues).
GUARD_UNITS = ("turn", "context", "exchange", "dialogue")

# ---- presets ---------------------------------------------------------------------------

#: What a suite's ``preset:`` (or ``--socialbias-preset``) names: ``paper``, the papers'
#: settings where ours differ (protocols/__init__.py says what it sets).
PRESETS = ("paper",)
#: ``--socialbias-preset=none``: the run drops every suite's ``preset:``.
NO_PRESET = "none"

# ---- protocols and outcomes ------------------------------------------------------------

#: Outcomes a case can have. ``error``: a model call failed for good, or a judge answer
#: stayed unreadable; such cases are counted and listed, never folded into a rate.
OUTCOMES = ("clean", "biased", "refused", "error")
#: The kinds of a record's ``errors`` entries: what kept a case, or one of its parts, from
#: being measured. Never folded into "not biased"; the report lists each.
MODEL_ERROR = "model_error"  # a model call failed for good (after retries)
EMPTY_REPLY = "empty_reply"  # the target gave no answer (a reasoning model out of budget)
JUDGE_ERROR = "judge_error"  # a judge answer stayed unreadable after its retry
USER_SIMULATOR_ERROR = "user_simulator_error"  # the simulated user could not be drawn in role
GUARD_ERROR = "guard_error"  # a guard's answer could not be read
INTERNAL_ERROR = "internal_error"  # the plugin's own failure on one case
DETECTOR_ERROR = "detector_error"  # a second detector of an ensemble failed (detector suites)
ERROR_KINDS = (MODEL_ERROR, EMPTY_REPLY, JUDGE_ERROR, USER_SIMULATOR_ERROR, GUARD_ERROR, INTERNAL_ERROR, DETECTOR_ERROR)
#: Errors that do not void a case's bias labels (they are counted on their own).
NON_VOIDING_ERRORS = (GUARD_ERROR, DETECTOR_ERROR)
#: Judge tasks whose unreadable answers leave the case's bias labels standing (they are
#: still counted in judge_error_rate, and the turn's own label is left out of its rate). An
#: unreadable bias answer voids the case: a turn with no bias label cannot be counted as
#: "not biased" in a cumulative rate.
NON_VOIDING_JUDGE_TASKS = ("coherence", "refusal")
#: The pseudo-suite of judge-agreement metrics (``--socialbias-judge-check``).
JUDGE_CHECK_SUITE = "judge-check"
