"""A loopback fake LLM server speaking the OpenAI and Anthropic wire formats.

:class:`FakeServer` is a small, dependency-free HTTP/1.1 server built on
:func:`asyncio.start_server`.  It runs its own event loop in a daemon thread,
so synchronous test code, ``asyncio`` test code and subprocesses (for example
pytest-xdist workers, which only need the URL) can all talk to it over
``127.0.0.1``.  Latency is simulated with :func:`asyncio.sleep`, so hundreds
of concurrent slow requests cost no threads and almost no CPU.

Endpoints (non-streaming only):

* ``POST /v1/chat/completions`` -- OpenAI chat completions.
* ``POST /v1/messages`` -- Anthropic messages.
* ``GET /v1/models`` -- a one-model list (``"fake"``), in the format of the
  API the client speaks (detected from the ``anthropic-version`` header).

The ``/v1`` prefix is optional.  Every answer carries ``Content-Length`` and
``Content-Type: application/json``; connections are kept alive (HTTP/1.1
default) unless the client sends ``Connection: close``.

The answer to each completion request is decided by a *script*::

    def script(req: FakeRequest) -> str | Reply | Fault: ...

which is called on the server thread (it may also be an ``async def``).  See
the package docstring (:mod:`pytest_socialbias.testing`) for a walkthrough.
"""

from __future__ import annotations

import asyncio
import http
import inspect
import json
import random
import re
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

__all__ = [
    "FAULT_KINDS",
    "FakeRequest",
    "FakeServer",
    "Fault",
    "Reply",
    "ScriptResult",
    "Script",
]

FAULT_KINDS: tuple[str, ...] = (
    "rate_limit",
    "server_error",
    "overloaded",
    "malformed_json",
    "empty_choices",
    "drop_connection",
    "slow",
    "bad_request",
)
"""Every fault kind :class:`Fault` understands."""

_MAX_HEADER_BYTES = 1 << 20
_DEFAULT_SLOW_DELAY = 30.0
_ECHO_LIMIT = 200

# OpenAI finish_reason -> Anthropic stop_reason, and back.
_TO_ANTHROPIC_STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "content_filter": "refusal",
}
_TO_OPENAI_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "refusal": "content_filter",
}


# --------------------------------------------------------------------------- #
# Public data types
# --------------------------------------------------------------------------- #


#: Words of the plugin's endpoint-check prompt (prompts/endpoint_check.yaml), by which a
#: script tells the check apart from a suite's calls.
ENDPOINT_CHECK_TEXT = "checks how the endpoint answers before a pytest-socialbias run"


@dataclass
class FakeRequest:
    """One completion request as seen by the server (builtins-only fields).

    Attributes:
        index: 0-based arrival order (reset by :meth:`FakeServer.clear`).
        api: ``"openai"`` or ``"anthropic"``.
        path: The request path, without query string.
        model: The ``model`` field of the body (``""`` when absent).
        messages: ``[{"role": ..., "content": str}, ...]``; content-part lists
            are flattened into one string (text parts joined with ``"\\n"``).
            OpenAI system messages stay in this list.
        system: Anthropic's top-level ``system`` (flattened), else ``None``.
        params: Every other body field (temperature, max_tokens, seed, ...).
        headers: Request headers, names lower-cased.
        body: The whole parsed JSON body.
        fault: The fault kind served for this request (random or scripted),
            else ``None``.
    """

    index: int
    api: str
    path: str
    model: str
    messages: list[dict[str, str]]
    system: str | None
    params: dict[str, Any]
    headers: dict[str, str]
    body: dict[str, Any]
    fault: str | None = None

    @property
    def last_user(self) -> str:
        """Text of the last ``user`` message, ``""`` if there is none."""
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return message.get("content", "")
        return ""

    @property
    def endpoint_check(self) -> bool:
        """Whether this is the plugin's endpoint check: one fixed request per role that a
        run sends an HTTP endpoint before its first call (see :func:`honoured`)."""
        return ENDPOINT_CHECK_TEXT in self.prompt_text

    @property
    def system_text(self) -> str:
        """The system prompt, however the wire format carried it: OpenAI ``system``
        messages and Anthropic's top-level ``system``, joined by newlines."""
        parts = [m.get("content", "") for m in self.messages if m.get("role") == "system"]
        return "\n".join(parts + ([self.system] if self.system else []))

    @property
    def prompt_text(self) -> str:
        """System prompt plus every message text, space-separated."""
        parts = [self.system] if self.system else []
        parts.extend(m.get("content", "") for m in self.messages)
        return " ".join(parts)


# --------------------------------------------------------------------------- constraints


def labels_held_to(req: FakeRequest) -> list | None:
    """The labels a request asks the endpoint to hold its answer to, by whichever
    constraint field it carries (a GBNF ``grammar`` of alternatives, ``guided_choice``, a
    ``response_format`` or forced tool whose schema has an ``answer`` enum), else None."""
    params = req.params
    if isinstance(params.get("guided_choice"), list):
        return list(params["guided_choice"])
    if isinstance(params.get("grammar"), str):
        return re.findall(r'"((?:[^"\\]|\\.)*)"', params["grammar"]) or None
    schema = None
    response_format = params.get("response_format")
    if isinstance(response_format, dict):
        schema = response_format.get("schema") or (response_format.get("json_schema") or {}).get("schema")
    for tool in params.get("tools") or []:
        if isinstance(tool, dict) and "input_schema" in tool:
            schema = tool["input_schema"]
    if isinstance(schema, dict):
        enum = ((schema.get("properties") or {}).get("answer") or {}).get("enum")
        return list(enum) if enum else None
    return None


def honoured(req: FakeRequest, label: str | None = None,
             text: str = "Mild and bright, with dew on the grass.") -> str:
    """The answer of an endpoint that honours whatever constraint ``req`` carries:
    ``label`` (the first label by default) as the method returns it (bare for a grammar or
    ``guided_choice``, ``{"answer": ...}`` for ``response_format``), or ``text`` where the
    request holds the answer to nothing. A script answers the plugin's endpoint check
    (``req.endpoint_check``) with it to play an endpoint that constrains answers."""
    labels = labels_held_to(req)
    if not labels:
        return text
    label = label if label is not None else labels[0]
    if "response_format" in req.params:
        return json.dumps({"answer": label})
    return label


LogprobEntry = Sequence[Any]
"""``(token, logprob)`` or ``(token, logprob, [(alt_token, alt_logprob), ...])``."""


@dataclass
class Reply:
    """A successful answer.

    Attributes:
        text: The assistant text.
        finish_reason: OpenAI name (``stop``, ``length``, ``content_filter``);
            mapped to Anthropic's ``end_turn``/``max_tokens``/``refusal``.
            Anthropic names are accepted too and mapped the other way.
        prompt_tokens: Usage input tokens; default: word count of the prompt
            (at least 1).
        completion_tokens: Usage output tokens; default: word count of
            ``text`` (at least 1).
        latency: Seconds to wait before answering; overrides the server's
            ``latency`` for this request when not ``None``.
        logprobs: Explicit OpenAI logprobs as a list of
            ``(token, logprob, [(alt_token, alt_logprob), ...])`` tuples.  When
            ``None`` and the request asks for ``logprobs``, they are generated
            from the whitespace-split text.  Anthropic never gets logprobs.
        raw_text_bytes: Bytes sent verbatim on the wire as the assistant text
            (inside the JSON string), instead of ``text`` -- e.g. invalid UTF-8
            such as ``b"caf\\xe9"``, which no ``str`` can carry.  ``text`` still
            drives usage and logprobs.  The bytes must not contain ``"``, ``\\``
            or bytes below 0x20, which would end or break the JSON string.
        reasoning: The model's thinking, sent apart from the text: OpenAI's
            ``message.reasoning_content`` (as vLLM and DeepSeek send it), or an
            Anthropic ``thinking`` block before the text.  (Thinking inline in
            the text is just text: ``"<think>...</think>answer"``.)
        reasoning_tokens: ``usage.completion_tokens_details.reasoning_tokens``
            (OpenAI); None leaves the field out.
    """

    text: str
    finish_reason: str = "stop"
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency: float | None = None
    logprobs: list[LogprobEntry] | None = None
    raw_text_bytes: bytes | None = None
    reasoning: str | None = None
    reasoning_tokens: int | None = None

    def __post_init__(self) -> None:
        raw = self.raw_text_bytes
        if raw is not None and (b'"' in raw or b"\\" in raw or any(byte < 0x20 for byte in raw)):
            raise ValueError('raw_text_bytes must not contain \'"\', \'\\\\\' or bytes below 0x20')


@dataclass
class Fault:
    """A failure to serve instead of a reply.

    Kinds (see :data:`FAULT_KINDS`):

    * ``rate_limit`` -- HTTP 429 (``Retry-After`` sent when ``retry_after``
      is not ``None``).
    * ``server_error`` -- HTTP ``status`` (default 500).
    * ``overloaded`` -- HTTP 529 (Anthropic) / 503 (OpenAI).
    * ``malformed_json`` -- HTTP 200 whose body is not valid JSON.
    * ``empty_choices`` -- HTTP 200 with ``choices: []`` / ``content: []``.
    * ``drop_connection`` -- close the TCP connection without answering.
    * ``slow`` -- sleep ``delay`` seconds (default 30), then answer normally.
      Randomly injected ``slow`` faults answer via the script; a ``slow``
      fault returned *by* the script answers with the default echo reply.
    * ``bad_request`` -- HTTP 400 (not retryable).

    ``status`` overrides the HTTP status of the error kinds; ``retry_after``
    (seconds, may be fractional) adds ``Retry-After``/``retry-after-ms``
    headers to any error response.  ``message``, ``param`` and ``code`` fill the
    OpenAI error body (``{"error": {"message", "type", "param", "code"}}``), e.g.
    a reasoning model's ``Fault("bad_request", param="temperature",
    code="unsupported_value", message="...")``.
    """

    kind: str
    status: int | None = None
    retry_after: float | None = None
    delay: float | None = None
    message: str | None = None
    param: str | None = None
    code: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; expected one of {FAULT_KINDS}")


ScriptResult = Union[str, Reply, Fault]
Script = Callable[[FakeRequest], Union[ScriptResult, Awaitable[ScriptResult]]]


# --------------------------------------------------------------------------- #
# Helpers: request normalisation
# --------------------------------------------------------------------------- #


def _flatten_content(content: Any) -> str:
    """Flatten a string or a list of ``{"type": "text", "text": ...}`` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
        return "\n".join(texts)
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        return str(content["text"])
    return str(content)


def _normalise_messages(raw: Any) -> list[dict[str, str]]:
    messages: list[dict[str, str]] = []
    if not isinstance(raw, list):
        return messages
    for item in raw:
        if isinstance(item, dict):
            messages.append(
                {"role": str(item.get("role", "")), "content": _flatten_content(item.get("content"))}
            )
    return messages


def _word_count(text: str) -> int:
    return max(1, len(text.split()))


def _default_reply(req: FakeRequest) -> Reply:
    return Reply(text="echo: " + req.last_user[:_ECHO_LIMIT])


# --------------------------------------------------------------------------- #
# Helpers: response bodies
# --------------------------------------------------------------------------- #


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Overloaded" if status == 529 else "Unknown"


_OPENAI_ERROR_TYPES = {
    400: "invalid_request_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    429: "rate_limit_exceeded",
}
_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    404: "not_found_error",
    405: "invalid_request_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}


# fault kind -> (default HTTP status, message); overloaded is 529 for Anthropic.
_FAULT_STATUS = {
    "rate_limit": (429, "Rate limit exceeded (fake server)"),
    "server_error": (500, "Internal server error (fake server)"),
    "overloaded": (503, "Overloaded (fake server)"),
    "bad_request": (400, "Bad request (fake server)"),
}
# fault kind -> (OpenAI error type, Anthropic error type)
_FAULT_ERROR_TYPES = {
    "rate_limit": ("rate_limit_exceeded", "rate_limit_error"),
    "server_error": ("server_error", "api_error"),
    "overloaded": ("server_error", "overloaded_error"),
    "bad_request": ("invalid_request_error", "invalid_request_error"),
}


def _error_body(
    api: str, status: int, message: str, error_type: str | None = None, param: str | None = None, code: str | None = None
) -> bytes:
    """An error body in the format of ``api``; the type defaults from ``status``."""
    if api == "anthropic":
        etype = error_type or _ANTHROPIC_ERROR_TYPES.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )
        return _dumps({"type": "error", "error": {"type": etype, "message": message}})
    etype = error_type or _OPENAI_ERROR_TYPES.get(
        status, "server_error" if status >= 500 else "invalid_request_error"
    )
    return _dumps({"error": {"message": message, "type": etype, "param": param, "code": code or etype}})


def _logprob_obj(token: str, logprob: float) -> dict[str, Any]:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}


def _openai_logprobs(reply: Reply, req: FakeRequest) -> dict[str, Any] | None:
    entries: list[dict[str, Any]] = []
    if reply.logprobs is not None:
        for entry in reply.logprobs:
            token, logprob = str(entry[0]), float(entry[1])
            alts = entry[2] if len(entry) > 2 and entry[2] is not None else []
            item = _logprob_obj(token, logprob)
            item["top_logprobs"] = [_logprob_obj(str(a[0]), float(a[1])) for a in alts]
            entries.append(item)
        return {"content": entries, "refusal": None}
    if not req.params.get("logprobs"):
        return None
    try:
        top_n = int(req.params.get("top_logprobs") or 0)
    except (TypeError, ValueError):
        top_n = 0
    for token in reply.text.split():
        item = _logprob_obj(token, -0.1)
        top: list[dict[str, Any]] = []
        if top_n > 0:
            top.append(_logprob_obj(token, -0.1))
            top.extend(_logprob_obj(f"alt{i}", -(2.0 + i)) for i in range(1, top_n))
        item["top_logprobs"] = top
        entries.append(item)
    return {"content": entries, "refusal": None}


def _usage(reply: Reply, req: FakeRequest) -> tuple[int, int]:
    prompt = reply.prompt_tokens if reply.prompt_tokens is not None else _word_count(req.prompt_text)
    completion = (
        reply.completion_tokens if reply.completion_tokens is not None else _word_count(reply.text)
    )
    return prompt, completion


# Stands in for Reply.raw_text_bytes while the body is serialised; JSON-safe as is.
_RAW_TEXT_PLACEHOLDER = "@@pytest-socialbias-raw-text@@"


def _success_body(req: FakeRequest, reply: Reply, empty: bool = False) -> bytes:
    model = req.model or "fake"
    prompt, completion = _usage(reply, req)
    raw = reply.raw_text_bytes
    # json.dumps cannot write bytes that are not UTF-8: serialise a placeholder for them,
    # then swap the raw bytes in.
    text = reply.text if raw is None else _RAW_TEXT_PLACEHOLDER
    if req.api == "anthropic":
        stop = _TO_ANTHROPIC_STOP.get(reply.finish_reason, reply.finish_reason)
        body = _dumps(
            {
                "id": f"msg_fake_{req.index}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [] if empty else (
                    ([{"type": "thinking", "thinking": reply.reasoning, "signature": "fake"}] if reply.reasoning else [])
                    + [{"type": "text", "text": text}]
                ),
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {"input_tokens": prompt, "output_tokens": completion},
            }
        )
    else:
        finish = _TO_OPENAI_FINISH.get(reply.finish_reason, reply.finish_reason)
        choices: list[dict[str, Any]] = []
        if not empty:
            choices.append(
                {
                    "index": 0,
                    "message": {
                        "role": "assistant", "content": text, "refusal": None,
                        **({"reasoning_content": reply.reasoning} if reply.reasoning else {}),
                    },
                    "finish_reason": finish,
                    "logprobs": _openai_logprobs(reply, req),
                }
            )
        body = _dumps(
            {
                "id": f"chatcmpl-fake-{req.index}",
                "object": "chat.completion",
                "created": 0,
                "model": model,
                "choices": choices,
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                    **({"completion_tokens_details": {"reasoning_tokens": reply.reasoning_tokens}}
                       if reply.reasoning_tokens is not None else {}),
                },
            }
        )
    if raw is not None and not empty:
        body = body.replace(_RAW_TEXT_PLACEHOLDER.encode("ascii"), raw, 1)
    return body


def _models_body(api: str) -> bytes:
    if api == "anthropic":
        return _dumps(
            {
                "data": [
                    {
                        "type": "model",
                        "id": "fake",
                        "display_name": "Fake",
                        "created_at": "1970-01-01T00:00:00Z",
                    }
                ],
                "has_more": False,
                "first_id": "fake",
                "last_id": "fake",
            }
        )
    return _dumps(
        {
            "object": "list",
            "data": [{"id": "fake", "object": "model", "created": 0, "owned_by": "pytest-socialbias"}],
        }
    )


@dataclass
class _Response:
    status: int
    body: bytes
    headers: list[tuple[str, str]] = field(default_factory=list)
    drop: bool = False


_DROP = _Response(status=0, body=b"", drop=True)


def _format_seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


class _BadRequest(Exception):
    """Malformed HTTP framing; answer 400 and close the connection."""


# --------------------------------------------------------------------------- #
# The server
# --------------------------------------------------------------------------- #


class FakeServer:
    """A fake OpenAI/Anthropic endpoint on loopback, run in a daemon thread.

    Args:
        script: Decides each answer: ``None`` (echo the last user message),
            a constant ``str``, or a callable ``FakeRequest -> str | Reply |
            Fault`` (may be ``async``; called on the server thread).
        latency: Seconds to wait before every answer (``asyncio.sleep``).
        fault_rate: Probability in ``[0, 1]`` that a request gets a random
            fault from ``fault_kinds`` instead of calling the script.
        fault_kinds: Kinds to draw random faults from (uniformly).
        seed: Seed of the ``random.Random`` used for random faults.
        host: Interface to bind (loopback by default).
        port: Port to bind; ``0`` picks a free one.
        endpoint_checks: ``"answer"`` (default): the server answers the plugin's
            endpoint checks (``req.endpoint_check``) itself, as an endpoint that
            honours every constraint method would (:func:`honoured`), so a script
            never sees them; ``"script"``: the script answers them too (to play an
            endpoint that refuses or ignores a method, or rejects a parameter).
            Either way they are logged in ``requests``.

    Use as a context manager, or call :meth:`start` / :meth:`stop`.
    """

    def __init__(
        self,
        script: Script | str | None = None,
        latency: float = 0.0,
        fault_rate: float = 0.0,
        fault_kinds: Iterable[str] = ("rate_limit", "server_error"),
        seed: int = 0,
        host: str = "127.0.0.1",
        port: int = 0,
        endpoint_checks: str = "answer",
    ) -> None:
        if not 0.0 <= fault_rate <= 1.0:
            raise ValueError(f"fault_rate must be in [0, 1], got {fault_rate}")
        if latency < 0:
            raise ValueError(f"latency must be >= 0, got {latency}")
        kinds = tuple(fault_kinds)
        for kind in kinds:
            if kind not in FAULT_KINDS:
                raise ValueError(f"unknown fault kind {kind!r}; expected one of {FAULT_KINDS}")
        if fault_rate > 0 and not kinds:
            raise ValueError("fault_rate > 0 needs at least one fault kind")
        if script is not None and not isinstance(script, str) and not callable(script):
            raise TypeError("script must be None, a str or a callable")
        if endpoint_checks not in ("answer", "script"):
            raise ValueError(f"endpoint_checks must be 'answer' or 'script', got {endpoint_checks!r}")
        self.check_mode = endpoint_checks

        self.script = script
        self.latency = float(latency)
        self.fault_rate = float(fault_rate)
        self.fault_kinds = kinds
        self.seed = seed
        self.host = host
        self._requested_port = port
        self.port: int = port

        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._log: list[FakeRequest] = []
        self._checks: list[FakeRequest] = []
        self._next_index = 0
        self._faults_injected = 0
        self._script_errors: list[str] = []

        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._conn_tasks: set[asyncio.Task[None]] = set()

    # ----------------------------------------------------------------- URLs

    @property
    def url(self) -> str:
        """``http://HOST:PORT``."""
        return f"http://{self.host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """Base URL for ``openai.OpenAI(base_url=...)``: ``http://HOST:PORT/v1``."""
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """Base URL for ``anthropic.Anthropic(base_url=...)``: ``http://HOST:PORT``."""
        return self.url

    @property
    def env(self) -> dict[str, str]:
        """Environment variables pointing both official SDKs at this server.

        Handy for subprocesses (e.g. pytest-xdist workers or a CLI under test).
        """
        return {
            "OPENAI_BASE_URL": self.openai_base_url,
            "OPENAI_API_KEY": "sk-test",
            "ANTHROPIC_BASE_URL": self.anthropic_base_url,
            "ANTHROPIC_API_KEY": "sk-ant-test",
        }

    # ----------------------------------------------------------- request log

    @property
    def requests(self) -> list[FakeRequest]:
        """Snapshot copy of the request log, in arrival order."""
        with self._lock:
            return list(self._log)

    @property
    def request_count(self) -> int:
        """Number of logged completion requests (faulted ones included)."""
        with self._lock:
            return len(self._log)

    @property
    def endpoint_checks(self) -> list[FakeRequest]:
        """The plugin's endpoint checks the server answered itself
        (``endpoint_checks="answer"``), in arrival order; they are not in
        :attr:`requests`."""
        with self._lock:
            return list(self._checks)

    @property
    def faults_injected(self) -> int:
        """Number of random faults injected because of ``fault_rate``."""
        with self._lock:
            return self._faults_injected

    @property
    def script_errors(self) -> list[str]:
        """``"ExcType: message"`` for every exception raised by the script."""
        with self._lock:
            return list(self._script_errors)

    def clear(self) -> None:
        """Forget the request log, the script errors and the fault counter.

        Request indices restart at 0; the random fault sequence continues.
        """
        with self._lock:
            self._log.clear()
            self._checks.clear()
            self._script_errors.clear()
            self._faults_injected = 0
            self._next_index = 0

    # ------------------------------------------------------------- lifecycle

    @property
    def running(self) -> bool:
        """Whether the server thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> FakeServer:
        """Bind the socket and start serving in a daemon thread; returns ``self``."""
        if self.running:
            raise RuntimeError("FakeServer is already running")
        self._ready.clear()
        self._startup_error = None
        self._thread = threading.Thread(
            target=self._thread_main, name="pytest-socialbias-fake-llm-server", daemon=True
        )
        self._thread.start()
        self._ready.wait()
        if self._startup_error is not None:
            self._thread.join()
            self._thread = None
            raise self._startup_error
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Close the listener and every open connection, then join the thread."""
        thread, loop, stop_event = self._thread, self._loop, self._stop_event
        if thread is None:
            return
        if loop is not None and stop_event is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(stop_event.set)
            except RuntimeError:  # loop closed in between
                pass
        thread.join(timeout)
        if thread.is_alive():
            raise RuntimeError("FakeServer thread did not stop in time")
        self._thread = None

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<FakeServer {self.url} {state} requests={self.request_count}>"

    def _thread_main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            if not self._ready.is_set():
                self._startup_error = exc
        finally:
            self._ready.set()
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    async def _serve(self) -> None:
        self._stop_event = asyncio.Event()
        server = await asyncio.start_server(
            self._handle_connection,
            self.host,
            self._requested_port,
            limit=_MAX_HEADER_BYTES,
            backlog=1024,
            reuse_address=True,
        )
        self.port = int(server.sockets[0].getsockname()[1])
        self._ready.set()
        try:
            await self._stop_event.wait()
        finally:
            server.close()
            tasks = list(self._conn_tasks)
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            await server.wait_closed()

    # ------------------------------------------------------------ connection

    async def _handle_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._conn_tasks.add(task)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                except asyncio.LimitOverrunError:
                    await self._write(writer, self._plain_error("openai", 431, "headers too large"), False)
                    return
                try:
                    method, path, headers, keep_alive = self._parse_head(head)
                    body = await self._read_body(reader, writer, headers)
                except _BadRequest as exc:
                    await self._write(writer, self._plain_error("openai", 400, str(exc)), False)
                    return
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                response = await self._dispatch(method, path, headers, body)
                if response.drop:
                    return
                await self._write(writer, response, keep_alive)
                if not keep_alive:
                    return
        except asyncio.CancelledError:
            pass
        except ConnectionError:
            pass
        finally:
            if task is not None:
                self._conn_tasks.discard(task)
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - best-effort cleanup
                pass

    @staticmethod
    def _parse_head(head: bytes) -> tuple[str, str, dict[str, str], bool]:
        lines = head.decode("latin-1").lstrip("\r\n").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise _BadRequest(f"malformed request line {lines[0][:100]!r}")
        method, target, version = parts
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, sep, value = line.partition(":")
            if not sep:
                raise _BadRequest(f"malformed header line {line[:100]!r}")
            key = name.strip().lower()
            value = value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        connection = headers.get("connection", "").lower()
        if version == "HTTP/1.0":
            keep_alive = "keep-alive" in connection
        else:
            keep_alive = "close" not in connection
        path = target.split("?", 1)[0]
        if path.startswith("http://") or path.startswith("https://"):  # absolute-form
            path = "/" + path.split("/", 3)[3] if path.count("/") >= 3 else "/"
        return method.upper(), path, headers, keep_alive

    @staticmethod
    async def _read_body(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, headers: dict[str, str]
    ) -> bytes:
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length_text = headers.get("content-length")
        length = 0
        if not chunked and length_text is not None:
            try:
                length = int(length_text)
            except ValueError:
                raise _BadRequest("invalid Content-Length") from None
            if length < 0:
                raise _BadRequest("invalid Content-Length")
        if headers.get("expect", "").lower() == "100-continue" and (chunked or length > 0):
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await writer.drain()
        if not chunked:
            return await reader.readexactly(length) if length else b""
        chunks: list[bytes] = []
        while True:
            size_line = await reader.readuntil(b"\r\n")
            try:
                size = int(size_line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise _BadRequest("invalid chunk size") from None
            if size == 0:
                # Skip trailers up to the terminating empty line.
                while (await reader.readuntil(b"\r\n")) != b"\r\n":
                    pass
                return b"".join(chunks)
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)

    @staticmethod
    async def _write(writer: asyncio.StreamWriter, response: _Response, keep_alive: bool) -> None:
        head = [
            f"HTTP/1.1 {response.status} {_reason(response.status)}",
            "Content-Type: application/json",
            f"Content-Length: {len(response.body)}",
            "Connection: keep-alive" if keep_alive else "Connection: close",
            "Server: pytest-socialbias-fake",
        ]
        head.extend(f"{name}: {value}" for name, value in response.headers)
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + response.body)
        await writer.drain()

    # -------------------------------------------------------------- dispatch

    @staticmethod
    def _plain_error(api: str, status: int, message: str) -> _Response:
        return _Response(status, _error_body(api, status, message))

    async def _dispatch(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> _Response:
        route = path[3:] if path.startswith("/v1/") else path
        api = "anthropic" if route == "/messages" or "anthropic-version" in headers else "openai"
        if route == "/models":
            if method != "GET":
                return self._plain_error(api, 405, f"method {method} not allowed on {path}")
            return _Response(200, _models_body(api))
        if route not in ("/chat/completions", "/messages"):
            return self._plain_error(api, 404, f"unknown path {path}")
        if method != "POST":
            return self._plain_error(api, 405, f"method {method} not allowed on {path}")
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return self._plain_error(api, 400, "request body is not valid JSON")
        if not isinstance(body, dict):
            return self._plain_error(api, 400, "request body must be a JSON object")
        if body.get("stream"):
            return self._plain_error(api, 400, "streaming is not supported by the fake server")
        return await self._complete(self._make_request(api, path, headers, body))

    def _make_request(self, api: str, path: str, headers: dict[str, str], body: dict[str, Any]) -> FakeRequest:
        model = body.get("model")
        system: str | None = None
        params = {k: v for k, v in body.items() if k not in ("model", "messages")}
        if api == "anthropic":
            if "system" in params:
                raw_system = params.pop("system")
                system = None if raw_system is None else _flatten_content(raw_system)
        req = FakeRequest(
            index=0,
            api=api,
            path=path,
            model=model if isinstance(model, str) else "",
            messages=_normalise_messages(body.get("messages")),
            system=system,
            params=params,
            headers=headers,
            body=body,
        )
        with self._lock:
            if self.check_mode == "answer" and req.endpoint_check:
                # Answered by the server itself: logged apart, no random fault drawn (the
                # script's requests see the same fault sequence with or without checks).
                req.index = len(self._checks)
                self._checks.append(req)
                return req
            if self.fault_rate > 0 and self._rng.random() < self.fault_rate:
                req.fault = self._rng.choice(self.fault_kinds)
                self._faults_injected += 1
            req.index = self._next_index
            self._next_index += 1
            self._log.append(req)
        return req

    async def _run_script(self, req: FakeRequest) -> Reply | Fault:
        script = self.script
        if self.check_mode == "answer" and req.endpoint_check:
            return Reply(text=honoured(req))
        if script is None:
            return _default_reply(req)
        if isinstance(script, str):
            return Reply(text=script)
        result: Any = script(req)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, str):
            return Reply(text=result)
        if isinstance(result, (Reply, Fault)):
            return result
        raise TypeError(f"script returned {type(result).__name__}; expected str, Reply or Fault")

    async def _complete(self, req: FakeRequest) -> _Response:
        if req.fault is not None:  # random fault, drawn in _make_request
            fault = Fault(req.fault, retry_after=0 if req.fault == "rate_limit" else None)
            await self._sleep(self.latency)
            return await self._serve_fault(req, fault, from_script=False)
        try:
            outcome = await self._run_script(req)
        except Exception as exc:  # noqa: BLE001 - reported as HTTP 500
            await self._sleep(self.latency)
            return self._script_failed(req, exc)
        if isinstance(outcome, Fault):
            req.fault = outcome.kind
            await self._sleep(self.latency)
            return await self._serve_fault(req, outcome, from_script=True)
        await self._sleep(self.latency if outcome.latency is None else outcome.latency)
        return _Response(200, _success_body(req, outcome))

    def _script_failed(self, req: FakeRequest, exc: Exception) -> _Response:
        message = f"{type(exc).__name__}: {exc}"
        with self._lock:
            self._script_errors.append(message)
        return self._plain_error(req.api, 500, f"fake server script raised {message}")

    @staticmethod
    async def _sleep(seconds: float) -> None:
        if seconds > 0:
            await asyncio.sleep(seconds)

    async def _serve_fault(self, req: FakeRequest, fault: Fault, from_script: bool) -> _Response:
        kind = fault.kind
        api = req.api
        if kind == "slow":
            await self._sleep(_DEFAULT_SLOW_DELAY if fault.delay is None else fault.delay)
            reply: Reply | Fault = _default_reply(req)
            if not from_script:
                # A random slow fault answers normally via the script afterwards.
                try:
                    reply = await self._run_script(req)
                except Exception as exc:  # noqa: BLE001 - reported as HTTP 500
                    return self._script_failed(req, exc)
                if isinstance(reply, Fault):
                    if reply.kind == "slow":  # never sleep twice
                        reply = _default_reply(req)
                    else:
                        return await self._serve_fault(req, reply, from_script=True)
            return _Response(200, _success_body(req, reply))
        if kind == "drop_connection":
            return _DROP
        if kind == "malformed_json":
            if api == "anthropic":
                return _Response(200, b'{"id": "msg_fake", "type": "message", "content": [')
            return _Response(200, b'{"id": "x", "choices": [')
        if kind == "empty_choices":
            return _Response(200, _success_body(req, Reply(text=""), empty=True))

        status, message = _FAULT_STATUS[kind]
        if kind == "overloaded" and api == "anthropic":
            status = 529
        if fault.status is not None:
            status = fault.status
        openai_type, anthropic_type = _FAULT_ERROR_TYPES[kind]
        body = _error_body(
            api, status, fault.message or message, openai_type if api == "openai" else anthropic_type,
            param=fault.param, code=fault.code,
        )
        headers: list[tuple[str, str]] = []
        if fault.retry_after is not None:
            headers.append(("Retry-After", _format_seconds(fault.retry_after)))
            headers.append(("retry-after-ms", _format_seconds(round(fault.retry_after * 1000, 3))))
        return _Response(status, body, headers)
