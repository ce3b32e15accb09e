"""Error types. Each message says what was wrong, where, and what to do."""

from __future__ import annotations


class SocialBiasError(Exception):
    """Base class for errors raised by pytest-socialbias."""


class ConfigError(SocialBiasError):
    """Bad user input (option, model spec, suite file, thresholds file).

    The plugin turns it into a pytest usage error (exit code 4) before any item runs.
    """


class CacheError(SocialBiasError):
    """The record/replay cache failed during the run (a full disk, a damaged file); the
    message says what to do. A call whose answer cannot be read or recorded is an error
    of its case, never a label."""


class CaseError(SocialBiasError):
    """What ends a case's dialogue as an error of that case (never a label): a model call
    that failed for good, an empty reply, a simulated user that broke role on every draw.
    ``record.error_from`` turns each into its error entry; any other exception inside a
    case is the plugin's own failure (an internal error)."""


class ModelCallError(CaseError):
    """A model call that still failed after bounded retries.

    Makes the case error with this reason; it is counted, never turned into a label.
    """

    def __init__(self, role: str, spec: str, reason: str):
        self.role = role
        self.spec = spec
        self.reason = reason
        super().__init__(f"{role} model {spec!r}: {reason}")


class CacheMiss(ModelCallError):
    """Replay-only mode (--socialbias-record=none) found no recorded answer."""

    #: What the message tells the reader to do unless --socialbias-miss-hint says otherwise.
    DEFAULT_HINT = "rerun with --socialbias-record=new to record it"

    def __init__(self, role: str, spec: str, key: str, legacy: bool = False, hint: str | None = None):
        why = (
            "; the cache was recorded by an earlier version of pytest-socialbias, whose judge "
            "calls on HTTP endpoints were keyed another way" if legacy else ""
        )
        super().__init__(
            role,
            spec,
            f"no recorded answer in the cache (key {key[:16]}) and --socialbias-record=none{why}; "
            f"{hint or self.DEFAULT_HINT}",
        )
        self.key = key


class EmptyReply(CaseError):
    """The target's reply has no answer to label (empty, or its thinking was cut before
    any answer): an error of the case with its reason, never a clean reply."""


class UserSimulatorFailure(CaseError):
    """The user simulator broke role on every draw for this turn; ``rejected`` lists the
    draws (kind, reason, text)."""

    def __init__(self, message: str, rejected: list | None = None):
        super().__init__(message)
        self.rejected = rejected or []
